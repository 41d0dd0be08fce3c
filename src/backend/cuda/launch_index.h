/* Internal to the CUDA module, included by launch.h (and by the emulated
 * build's launch.h, tests/cuda_emu/) after its GRID_STRIDE and LAUNCH: the
 * index-type forms, the same for both. */
#ifndef STRATA_SRC_BACKEND_CUDA_LAUNCH_INDEX_H
#define STRATA_SRC_BACKEND_CUDA_LAUNCH_INDEX_H

/* GRID_STRIDE with an index of type I, and LAUNCH_INDEX: a kernel template
 * over its index type, instantiated with 32-bit indices when every index it
 * forms stays below 2^31 (`most`: the largest buffer it indexes), else
 * size_t. 64-bit division and remainder cost tens of instructions on a GPU:
 * the pooling and im2col kernels do several per element. */
#define GRID_STRIDE_T(I, i, n)                                   \
  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (I)gridDim.x * blockDim.x)
#define LAUNCH_INDEX(kernel, n, most, s, ...)                                   \
  do {                                                                          \
    if ((size_t)(most) < ((size_t)1 << 31)) LAUNCH(kernel<unsigned>, n, s, __VA_ARGS__); \
    else LAUNCH(kernel<size_t>, n, s, __VA_ARGS__);                                 \
  } while (0)

#endif
