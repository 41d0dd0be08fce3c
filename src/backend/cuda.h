/* Internal: GPU devices as the strategies see them. Names of GPU devices
 * (TensorFlow's spellings too), and the run-time loading of the CUDA backend
 * module (src/backend/cuda_load.c) with the checks a `gpu:N` request goes
 * through, in order: module built and loadable, NVIDIA driver present
 * (libcuda.so.1), at least one device (cudaGetDeviceCount), N in range. Each
 * failure is one message naming what is missing. All functions: any thread. */
#ifndef STRATA_SRC_BACKEND_CUDA_H
#define STRATA_SRC_BACKEND_CUDA_H

#include "backend/cuda_module.h"

/* dev[0..len) as a GPU device: "gpu:N", "/gpu:N", "/device:GPU:N",
 * "/device:gpu:N", "cuda:N" (bare "gpu" is gpu:0). 1 and *index when it
 * names a GPU; 0 when it is not a GPU name at all; -1 when it starts like one
 * but the index is malformed (e.g. "gpu:x", "gpu:-1"). */
int st__gpu_device_parse(const char *dev, int len, int *index);

/* Loads the module once per process (later calls return the first result and
 * set the same message again). ST_ERR_NOT_BUILT naming what is missing: the
 * module (not built, or not found), the driver (libcuda.so.1), or the CUDA
 * libraries the module needs. */
st_status st__cuda_load(const st__cuda_module **out);

/* Physical GPUs (>= 1), after st__cuda_load; ST_ERR_INVALID "no CUDA device"
 * with cudaGetDeviceCount's answer otherwise. */
st_status st__cuda_device_count(int *count);

/* The request `name` (for messages) for logical device `index`, with
 * `logical` logical GPUs per physical GPU (>= 1): ST_OK when the device
 * exists; else the first failing check above, or ST_ERR_INVALID "index N out
 * of range (K GPUs ...)". */
st_status st__cuda_check_device(const char *name, int index, int logical);

#endif
