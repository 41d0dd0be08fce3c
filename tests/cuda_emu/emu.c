/* The emulated CUDA runtime and cuBLASLt of tests/cuda_emu/ (declared in its
 * include/): host memory, synchronous copies, $STRATA_EMU_GPUS devices
 * (default 1; a thread's current device is thread-local, as CUDA's), and a
 * column-major matmul loop that follows cuBLASLt's documented layout and
 * transpose rules. Built as build/cuda_emu/libcudart_emu.so, which the CUDA
 * module's own sources (build/cuda_emu/libstrata_cuda_emu.so) and the
 * emulated NCCL (nccl_emu.c, build/cuda_emu/nccl/libnccl.so.2) share;
 * tests/test_cuda_emulated.sh runs tests/test_cuda_backend.c against the
 * module: the module's logic (table, contexts,
 * allocator, gemm mapping, every kernel's per-element code) is checked on
 * machines without a GPU. Real CUDA behaviour (asynchrony, device memory,
 * launch limits, cuBLASLt's kernels) is not. Test fixture only. */
#include <stdlib.h>
#include <string.h>

#include "cublasLt.h"
#include "cuda_runtime_api.h"

static _Thread_local int t_device; /* cudaSetDevice of this thread */

static int emu_devices(void) {
  const char *env = getenv("STRATA_EMU_GPUS");
  int n = env ? atoi(env) : 1;
  return n >= 1 && n <= 64 ? n : 1;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= emu_devices()) return cudaErrorInvalidDevice;
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *count) {
  *count = emu_devices();
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
  if (device < 0 || device >= emu_devices()) return cudaErrorInvalidDevice;
  memset(p, 0, sizeof *p);
  strcpy(p->name, "emulated GPU (host memory)");
  p->totalGlobalMem = (size_t)1 << 30;
  p->major = 9;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
  *p = malloc(bytes);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
  (void)kind, (void)s;
  memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  *s = (cudaStream_t)malloc(1);
  return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  free(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return s ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated"; }
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  *v = 0;
  return cudaSuccess;
}

/* ---- cuBLASLt ------------------------------------------------------------- */

struct emu_lt { int unused; };
struct emu_op { cublasOperation_t ta, tb; };
struct emu_layout { uint64_t rows, cols; int64_t ld; };
struct emu_pref { int unused; };

size_t cublasLtGetVersion(void) { return 0; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = calloc(1, sizeof **h);
  return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct,
                                        cudaDataType scale) {
  (void)ct, (void)scale;
  *d = calloc(1, sizeof **d);
  return *d ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *v,
                                              size_t n) {
  if (n != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (a == CUBLASLT_MATMUL_DESC_TRANSA) memcpy(&d->ta, v, n);
  else if (a == CUBLASLT_MATMUL_DESC_TRANSB) memcpy(&d->tb, v, n);
  else return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  free(d);
  return CUBLAS_STATUS_SUCCESS;
}
/* cuBLASLt: ld >= rows (column-major). */
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  (void)t;
  *l = NULL;
  if (ld < (int64_t)rows || ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *l = malloc(sizeof **l);
  if (!*l) return CUBLAS_STATUS_ALLOC_FAILED;
  (*l)->rows = rows, (*l)->cols = cols, (*l)->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  free(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = calloc(1, sizeof **p);
  return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *v, size_t n) {
  (void)p, (void)a, (void)v, (void)n;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  free(p);
  return CUBLAS_STATUS_SUCCESS;
}

/* op(X)'s [rows, cols] for a layout and transpose. */
static void op_shape(const struct emu_layout *l, cublasOperation_t t, uint64_t *r, uint64_t *c) {
  *r = t == CUBLAS_OP_N ? l->rows : l->cols;
  *c = t == CUBLAS_OP_N ? l->cols : l->rows;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *results,
                                              int *found) {
  (void)h, (void)pref;
  uint64_t ar, ac, br, bc;
  op_shape(a, op->ta, &ar, &ac);
  op_shape(b, op->tb, &br, &bc);
  if (ac != br || ar != c->rows || bc != c->cols || c->rows != d->rows || c->cols != d->cols)
    return CUBLAS_STATUS_INVALID_VALUE; /* the shapes do not chain */
  memset(results, 0, sizeof *results);
  *found = requested > 0;
  return CUBLAS_STATUS_SUCCESS;
}

/* Element (i, j) of op(X), X column-major with leading dimension ld. */
static float at(const float *x, const struct emu_layout *l, cublasOperation_t t, uint64_t i,
                uint64_t j) {
  return t == CUBLAS_OP_N ? x[i + j * (uint64_t)l->ld] : x[j + i * (uint64_t)l->ld];
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t la, const void *B,
                              cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                              cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t s) {
  (void)h, (void)algo, (void)ws, (void)ws_bytes, (void)s;
  uint64_t m, k, k2, n;
  op_shape(la, op->ta, &m, &k);
  op_shape(lb, op->tb, &k2, &n);
  if (k != k2 || m != lc->rows || n != lc->cols || m != ld->rows || n != ld->cols)
    return CUBLAS_STATUS_INVALID_VALUE;
  float al = *(const float *)alpha, be = *(const float *)beta;
  const float *a = A, *b = B, *c = C;
  float *d = D;
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t i = 0; i < m; i++) {
      float acc = 0.0f;
      for (uint64_t p = 0; p < k; p++) acc += at(a, la, op->ta, i, p) * at(b, lb, op->tb, p, j);
      float old = be == 0.0f ? 0.0f : be * c[i + j * (uint64_t)lc->ld];
      d[i + j * (uint64_t)ld->ld] = al * acc + old;
    }
  return CUBLAS_STATUS_SUCCESS;
}
