/* Emulated kernel launches (tests/cuda_emu/): replaces src/backend/cuda/
 * launch.h in the emulated build, so that the module's kernels compile as
 * C++ host code: __global__ / __device__ vanish, one "thread" (block 0,
 * thread 0 of a grid of 1) walks every element of GRID_STRIDE in order, and
 * LAUNCH calls the kernel directly. The kernels have no shared memory, no
 * barriers and no atomics, so this runs exactly their per-element code.
 * Test fixture only. */
#ifndef STRATA_SRC_BACKEND_CUDA_LAUNCH_H
#define STRATA_SRC_BACKEND_CUDA_LAUNCH_H

#include <stddef.h>

#define __global__
#define __device__ static inline
struct emu_dim3 {
  unsigned x;
};
static const struct emu_dim3 blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
#define GRID_STRIDE(i, n)                                                 \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (size_t)gridDim.x * blockDim.x)
/* emu.c: the guarded device arena is accessible while a kernel runs. */
extern "C" void st__emu_device_enter(void);
extern "C" void st__emu_device_leave(void);
#define LAUNCH(kernel, n, s, ...)  \
  do {                             \
    (void)(s);                     \
    if ((n) > 0) {                 \
      st__emu_device_enter();      \
      kernel(__VA_ARGS__);         \
      st__emu_device_leave();      \
    }                              \
  } while (0)

#include "backend/cuda/launch_index.h" /* GRID_STRIDE_T, LAUNCH_INDEX over the above */

#endif
