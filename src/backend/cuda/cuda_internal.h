/* Internal to the CUDA backend module (src/backend/cuda/): the per-context
 * state (one per replica: device, stream, cuBLASLt handle and workspace), the
 * caching allocator, the sticky error of a context, and the kernel launchers
 * of kernels.cu (C linkage; each enqueues on the given stream and returns at
 * once). Pointers given to launchers are device pointers. */
#ifndef STRATA_SRC_BACKEND_CUDA_CUDA_INTERNAL_H
#define STRATA_SRC_BACKEND_CUDA_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "backend/cuda_module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What libstrata lent at open (module.c); read-only afterwards. */
extern st__cuda_host st__cuda_host_fns;
/* The NCCL table (nccl.c), handed out by the module's entry point. */
extern const st__cuda_nccl st__cuda_nccl_table;

typedef struct st__cuda_cache st__cuda_cache;

/* One user of one device (st_backend_ctx.impl). */
typedef struct st__cuda_ctx {
  int device;               /* physical device index */
  cudaStream_t stream;      /* every kernel and copy of this context, in order */
  void *lt;                 /* cublasLtHandle_t */
  void *workspace;          /* [ws_bytes] device memory for cuBLASLt, and the
                               column sums' scratch (same stream) */
  size_t ws_bytes;
  bool tf32;                /* gemm in TF32 (opt-in) */
  /* cuBLASLt's heuristic answers for the last shapes seen (module.c:
   * lt_gemm): asking it per call cost more than the small gemms themselves.
   * key: transposes, m, n, k, leading dimensions, alignments; algo: a
   * cublasLtMatmulAlgo_t. Round-robin replacement. */
  struct { bool used; int key[12]; uint64_t algo[8]; } algos[32];
  int next_algo;
  st__cuda_cache *cache;    /* the device's caching allocator (shared) */
  char error[256];          /* first CUDA error seen by a void slot ("" none) */
} st__cuda_ctx;

/* Records the first error of a context (call and CUDA's text) and logs it
 * once; later kernels still run (their results are then meaningless). */
void st__cuda_ctx_fail(st__cuda_ctx *c, const char *call, const char *what);
/* Checks a runtime call's result; false after recording a failure. */
bool st__cuda_ok(st__cuda_ctx *c, cudaError_t e, const char *call);

/* The caching allocator of device `device` (created at first use, never
 * freed): blocks come from cudaMalloc (never managed memory) and go back to
 * a free list on free, reused best-fit for requests of up to twice smaller
 * size. Thread-safe (one mutex per device). */
st__cuda_cache *st__cuda_cache_get(int device);
void *st__cuda_cache_alloc(st__cuda_cache *c, size_t bytes, cudaError_t *err);
void st__cuda_cache_free(st__cuda_cache *c, void *p);

/* Geometry structs are passed by value to the launchers. */
void st__cuda_axpy(cudaStream_t s, size_t n, float alpha, const float *x, float *y);
void st__cuda_scale(cudaStream_t s, size_t n, float alpha, float *x);
void st__cuda_fill(cudaStream_t s, size_t n, float value, float *x);
void st__cuda_scale_matrix(cudaStream_t s, int m, int n, float beta, float *c, int ldc);
void st__cuda_bias_add(cudaStream_t s, int rows, int cols, const float *bias, float *y);
/* Column sums of a [rows, cols] term in double, in a fixed order (levels
 * of fixed chunks, kernels.cu): ST_CUDA_SUM_A sums a; ST_CUDA_SUM_SQDEV
 * (a - d/rows)^2, d being a's column sums; ST_CUDA_SUM_B_XHAT
 * b * (a - mean) * invstd (batch norm's backward). Writes out[cols]
 * (double) or, when out_f is not NULL, out_f[cols] (float); ws[ws_doubles]
 * is scratch on the same stream (the cuBLASLt workspace). The bias gradient
 * is ST_CUDA_SUM_A of dy into out_f. */
enum { ST_CUDA_SUM_A, ST_CUDA_SUM_SQDEV, ST_CUDA_SUM_B_XHAT };
void st__cuda_colsum(cudaStream_t s, int term, int rows, int cols, const float *a,
                     const float *b, const double *d, const float *mean, const float *invstd,
                     double *out, float *out_f, double *ws, size_t ws_doubles);
void st__cuda_act_forward(cudaStream_t s, int act, int rows, int cols, const float *x, float *y);
void st__cuda_act_backward(cudaStream_t s, int act, int rows, int cols, const float *x,
                           const float *y, const float *dy, float *dx);
void st__cuda_im2col(cudaStream_t s, st_conv_geom g, const float *x, float *col);
void st__cuda_col2im(cudaStream_t s, st_conv_geom g, const float *col, float *dx);
void st__cuda_im2col_n(cudaStream_t s, st_conv_geom g, int n, const float *x, float *col);
void st__cuda_col2im_n(cudaStream_t s, st_conv_geom g, int n, const float *col, float *dx);
void st__cuda_maxpool_forward(cudaStream_t s, st_pool_geom g, const float *x, float *y);
void st__cuda_maxpool_backward(cudaStream_t s, st_pool_geom g, const float *x,
                               const float *dy, float *dx);
void st__cuda_avgpool_forward(cudaStream_t s, st_pool_geom g, const float *x, float *y);
void st__cuda_avgpool_backward(cudaStream_t s, st_pool_geom g, const float *dy, float *dx);
/* Batch norm's statistics and gradients use st__cuda_colsum with ws (as
 * there; two [c] double rows of it hold the sums). */
void st__cuda_bn_train(cudaStream_t s, int rows, int c, const float *x, const float *gamma,
                       const float *beta, float eps, float *mean, float *invstd, float *y,
                       double *ws, size_t ws_doubles);
void st__cuda_bn_infer(cudaStream_t s, int rows, int c, const float *x, const float *gamma,
                       const float *beta, const float *mm, const float *mv, float eps,
                       float *y);
void st__cuda_bn_backward(cudaStream_t s, int rows, int c, const float *x,
                          const float *gamma, const float *mean, const float *invstd,
                          const float *dy, float *dx, float *dgamma, float *dbeta,
                          double *ws, size_t ws_doubles);
void st__cuda_dropout(cudaStream_t s, size_t n, float rate, uint64_t seed, uint64_t stream,
                      const float *x, float *y);
void st__cuda_loss(cudaStream_t s, int kind, int rows, int cols, const float *pred,
                   const float *y, float scale, float *loss, float *dpred);
void st__cuda_sgd(cudaStream_t s, size_t n, float lr, float momentum, bool nesterov,
                  float *p, const float *g, float *v);
void st__cuda_adam(cudaStream_t s, size_t n, double alpha, float lr, float beta1, float beta2,
                   float eps, float weight_decay, float *p, const float *g, float *m,
                   float *v);
void st__cuda_rmsprop(cudaStream_t s, size_t n, float lr, float rho, float momentum,
                      float eps, float *p, const float *g, float *ms, float *mom);

#ifdef __cplusplus
}
#endif
#endif
