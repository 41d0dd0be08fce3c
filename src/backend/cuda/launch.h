/* Internal to the CUDA module: how kernels.cu and train.cu launch their
 * kernels, in one place: THREADS per block, blocks_for(n) (capped; the
 * kernels loop grid-stride), GRID_STRIDE (the loop over a kernel's elements)
 * and LAUNCH (an enqueue on a stream; nothing for n == 0). The emulated build
 * of tests/cuda_emu/ replaces this header (its own backend/cuda/launch.h comes
 * first on the include path) to run the same kernels as plain host loops. */
#ifndef STRATA_SRC_BACKEND_CUDA_LAUNCH_H
#define STRATA_SRC_BACKEND_CUDA_LAUNCH_H

#include <stddef.h>

#define THREADS 256

static inline unsigned blocks_for(size_t n) {
  size_t b = (n + THREADS - 1) / THREADS;
  return (unsigned)(b > 65535u * 8u ? 65535u * 8u : (b ? b : 1));
}
#define GRID_STRIDE(i, n)                                                 \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (size_t)gridDim.x * blockDim.x)
#define LAUNCH(kernel, n, s, ...)                                              \
  do {                                                                         \
    if ((n) > 0) kernel<<<blocks_for(n), THREADS, 0, (s)>>>(__VA_ARGS__);     \
  } while (0)

#include "backend/cuda/launch_index.h" /* GRID_STRIDE_T, LAUNCH_INDEX over the above */

#endif
