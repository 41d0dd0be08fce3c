/* A stand-in for libstrata_cuda.so (src/backend/cuda_module.h) for
 * tests/test_gpu_devices.sh: it answers cudaGetDeviceCount with
 * $STRATA_FAKE_GPUS (default 0; "fail" = an error), claims the interface
 * number $STRATA_FAKE_ABI when set, and has no backend table,
 * so the loader's checks after the driver (no device, index out of range,
 * logical GPUs) run on machines without a GPU. With fake_libcuda.c (an empty
 * libcuda.so.1) on LD_LIBRARY_PATH. Test fixture: never installed. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_module.h"

static st__cuda_host g_host;

static st_status fake_count(int *count) {
  const char *v = getenv("STRATA_FAKE_GPUS");
  if (v && !strcmp(v, "fail"))
    return g_host.error(ST_ERR_INVALID, "no usable CUDA device: cudaGetDeviceCount failed: "
                        "fake failure (cudaErrorUnknown)");
  *count = v ? atoi(v) : 0;
  return ST_OK;
}

__attribute__((visibility("default"))) st_status st__cuda_module_open(
    unsigned abi, const st__cuda_host *host, st__cuda_module *out) {
  g_host = *host;
  memset(out, 0, sizeof *out);
  const char *fake_abi = getenv("STRATA_FAKE_ABI"); /* a module of another interface */
  out->abi = fake_abi ? (unsigned)atoi(fake_abi) : abi;
  out->device_count = fake_count;
  return ST_OK;
}
