/* Internal: the device lists of the strategy options and the replica counts
 * they give (devices.c), for each strategy's check function. */
#ifndef STRATA_DISTRIBUTE_DEVICES_H
#define STRATA_DISTRIBUTE_DEVICES_H

#include "strata/distribute.h"

/* "cpu", "cpu:N" -> ST_OK; a GPU -> checked by gpu_devices.c (logical: GPUs
 * per physical GPU; *gpu set when it exists); anything else invalid. dev is
 * len bytes (not terminated). */
st_status st__check_device(const char *dev, int len, int logical, bool *gpu);
/* Local replicas from o->devices (distinct devices) or o->replicas (0: one
 * per core), at most ST_MAX_REPLICAS; both given is an error. */
st_status st__replica_count(const st_strategy_options *o, int *n);
/* st__replica_count, then o->cross_device_ops parsed into *cross (kept when
 * not given). */
st_status st__check_replicas(const st_strategy_options *o, int *n, int *cross);

/* Where the replicas run: on_gpus when the device list (o->devices, or
 * one_device's o->device) names GPUs, replica i then on physical GPU
 * gpu_of[i] (logical GPUs: gpu:N is physical N / logical_gpus). A list
 * mixing CPUs and GPUs is ST_ERR_INVALID. The list was checked before. */
typedef struct st__device_plan_t {
  bool on_gpus;
  int gpus;                       /* GPU entries in the list */
  int gpu_of[ST_MAX_REPLICAS];
} st__device_plan_t;
st_status st__device_plan(const st_strategy_options *o, int n, st__device_plan_t *out);

#endif
