/* Internal: GPU entries of a strategy's device list (gpu:N, /gpu:N,
 * /device:GPU:N) and the logical_gpus option, checked against the machine
 * through the CUDA module loader (backend/cuda.h). Any thread. */
#ifndef STRATA_SRC_DISTRIBUTE_GPU_DEVICES_H
#define STRATA_SRC_DISTRIBUTE_GPU_DEVICES_H

#include "strata/distribute.h"

/* dev[0..len) when it names a GPU: ST_OK when the device exists;
 * ST_ERR_INVALID for a malformed GPU name or an index out of range; the
 * loader's message when the module, the driver or any device is missing.
 * *is_gpu is false (and ST_OK returned) when dev is not a GPU name. */
st_status st__gpu_device_check(const char *dev, int len, int logical_gpus, bool *is_gpu);

/* o->logical_gpus: 0 (unset) is fine; < 0 or > ST_MAX_REPLICAS is
 * ST_ERR_INVALID; >= 1 needs a GPU (the loader's message otherwise). */
st_status st__logical_gpus_check(const st_strategy_options *o);

#endif
