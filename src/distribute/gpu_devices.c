/* GPU entries of a strategy's device list and the logical_gpus option
 * (TensorFlow's set_logical_device_configuration: each physical GPU split into
 * N devices). The device is looked up through the CUDA module loader
 * (backend/cuda_load.c), so every missing piece has its own message: module
 * not built, no driver, no device, index out of range. */
#include "distribute/gpu_devices.h"

#include <stdio.h>
#include <string.h>

#include "backend/cuda.h"

st_status st__gpu_device_check(const char *dev, int len, int logical_gpus, bool *is_gpu) {
  int index = 0;
  int kind = st__gpu_device_parse(dev, len, &index);
  *is_gpu = kind != 0;
  if (kind == 0) return ST_OK;
  char name[64];
  snprintf(name, sizeof name, "%.*s%s", len > 48 ? 48 : len, dev, len > 48 ? "..." : "");
  if (kind < 0)
    return st_error(ST_ERR_INVALID, "device '%s': expected gpu:N, /gpu:N or /device:GPU:N "
                    "with N a GPU index (0, 1, ...)", name);
  return st__cuda_check_device(name, index, logical_gpus);
}

st_status st__logical_gpus_check(const st_strategy_options *o) {
  if (o->logical_gpus == 0) return ST_OK;
  if (o->logical_gpus < 0 || o->logical_gpus > ST_MAX_REPLICAS)
    return st_error(ST_ERR_INVALID, "logical_gpus: %d, expected 1..%d (logical GPUs per "
                    "physical GPU)", o->logical_gpus, ST_MAX_REPLICAS);
  int count = 0;
  st_status s = st__cuda_device_count(&count);
  if (s != ST_OK)
    return st_error_prefix(s, "logical_gpus %d needs a GPU: ", o->logical_gpus);
  return ST_OK;
}
