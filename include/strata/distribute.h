/* Strata distribute layer: distribution strategies. A strategy decides where
 * variables live, how a global batch is split into per-replica slices and how
 * gradients become updates. Switching strategy is one line: pass another
 * strategy in st_model_options (NULL means the default one-device strategy). */
#ifndef STRATA_DISTRIBUTE_H
#define STRATA_DISTRIBUTE_H

#include "strata/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_strategy_kind {
  ST_STRATEGY_ONE_DEVICE = 0,
  ST_STRATEGY_MIRRORED,
  ST_STRATEGY_CENTRAL_STORAGE,
  ST_STRATEGY_MULTI_WORKER_MIRRORED,
  ST_STRATEGY_PARAMETER_SERVER,
  ST_STRATEGY_COUNT
} st_strategy_kind;
const char *st_strategy_kind_name(st_strategy_kind k); /* "one_device", ... */
st_status st_strategy_kind_parse(const char *name, st_strategy_kind *out);

typedef struct st_strategy_options {
  st_strategy_kind kind;
  const char *device;   /* one_device: "cpu:0" (default) */
  /* mirrored / central_storage: the devices, e.g. "cpu:0,cpu:1" (one replica
   * each); NULL = `replicas` replicas; both unset = one replica per CPU core
   * (every GPU, once a GPU backend exists). */
  const char *devices;
  int replicas;
  int threads;          /* one_device: compute threads; 0 = one per core */
  /* mirrored: how gradients are all-reduced: "all_reduce" (default; chunked
   * reduce-scatter + all-gather) or "reduction_to_one_device". */
  const char *cross_device_ops;
  /* mirrored: gradients are all-reduced in packs of about this many bytes
   * (whole layers; 0 = one pack), each started as soon as backward has
   * produced it, overlapping the rest of backward unless no_overlap. */
  size_t bytes_per_pack; /* default 4 MiB */
  bool no_overlap;
} st_strategy_options;
st_strategy_options st_strategy_default_options(st_strategy_kind kind);

typedef struct st_strategy st_strategy;
/* ST_ERR_NOT_BUILT names the strategy when it is not available in this build. */
st_status st_strategy_create(const st_strategy_options *o, st_strategy **out);
void st_strategy_destroy(st_strategy *s); /* accepts NULL */
st_strategy_kind st_strategy_kind_of(const st_strategy *s);
int st_strategy_num_replicas_in_sync(const st_strategy *s);

#ifdef __cplusplus
}
#endif
#endif
