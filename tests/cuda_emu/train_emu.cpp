/* The CUDA module's training kernels compiled as C++ host code for the
 * emulated module (tests/cuda_emu/emu.c says what is emulated). Test fixture
 * only. */
#include "backend/cuda/train.cu"
