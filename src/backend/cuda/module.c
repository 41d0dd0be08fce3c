/* The CUDA backend module's entry point and its backend table: contexts (one
 * per replica: device, stream, cuBLASLt handle, 32 MiB workspace), memory
 * from the caching allocator (alloc.c), host<->device copies on the context's
 * stream, gemm through cuBLASLt (fp32, TF32 opt-in), every other slot a
 * kernel of kernels.cu / train.cu. Built into libstrata_cuda.so only (CMake,
 * src/backend/cuda/CMakeLists.txt), loaded by src/backend/cuda_load.c.
 *
 * Slots return nothing: a failing CUDA call is recorded as the context's first
 * error (st__cuda_ctx_fail: logged once, naming the device and the call);
 * alloc returns NULL with ST_ERR_NOMEM naming the device and the size. All
 * kernels of a context run in order on its stream; to_host waits for them.
 * A context belongs to one thread at a time (backend/impl.h). */
#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

#define WORKSPACE_BYTES (32u << 20)

st__cuda_host st__cuda_host_fns;
static bool g_tf32; /* set before any context (st__cuda_module.set_tf32) */

void st__cuda_ctx_fail(st__cuda_ctx *c, const char *call, const char *what) {
  if (c->error[0]) return;
  snprintf(c->error, sizeof c->error, "gpu:%d: %s failed: %s", c->device, call, what);
  st__cuda_host_fns.log(ST_LOG_ERROR, "%s", c->error);
}

bool st__cuda_ok(st__cuda_ctx *c, cudaError_t e, const char *call) {
  if (e == cudaSuccess) return true;
  st__cuda_ctx_fail(c, call, cudaGetErrorString(e));
  return false;
}

/* A launcher's error (bad configuration) shows at once; faults inside a
 * kernel show at the next synchronizing call (to_host, synchronize). */
static void check_launch(st__cuda_ctx *c, const char *kernel) {
  st__cuda_ok(c, cudaGetLastError(), kernel);
}

#define CTX(ctx) ((st__cuda_ctx *)(ctx)->impl)

/* The context's state, with its device made current for this thread (a
 * thread may drive contexts of several devices in turn; cudaSetDevice is
 * cheap when the device is already current). */
static st__cuda_ctx *use(st_backend_ctx *ctx) {
  st__cuda_ctx *c = CTX(ctx);
  st__cuda_ok(c, cudaSetDevice(c->device), "cudaSetDevice");
  return c;
}

/* Out of device memory: the device, the size, what is free, what to lower. */
static st_status out_of_memory(int device, size_t bytes, cudaError_t e) {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return st__cuda_host_fns.error(ST_ERR_NOMEM, "gpu:%d: out of device memory: %.1f MiB asked "
                                 "for, %.1f of %.1f MiB free (%s); lower the batch size, split "
                                 "the model (pipeline) or use more GPUs", device,
                                 (double)bytes / 1048576.0, (double)free_b / 1048576.0,
                                 (double)total_b / 1048576.0, cudaGetErrorString(e));
}

/* ---- contexts ------------------------------------------------------------- */

static void cuda_ctx_destroy(void *impl) {
  st__cuda_ctx *c = impl;
  if (!c) return;
  cudaSetDevice(c->device);
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->workspace) st__cuda_cache_free(c->cache, c->workspace);
  if (c->lt) cublasLtDestroy((cublasLtHandle_t)c->lt);
  if (c->stream) cudaStreamDestroy(c->stream);
  free(c);
}

static st_status cuda_ctx_create(int device_index, int threads, void **impl) {
  st__cuda_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return st__cuda_host_fns.error(ST_ERR_NOMEM, "gpu:%d: out of host memory for a context",
                                   device_index);
  c->device = device_index;
  c->tf32 = g_tf32;
  c->ws_bytes = WORKSPACE_BYTES;
  const char *call = "cudaSetDevice";
  cudaError_t e = cudaSetDevice(device_index);
  if (e == cudaSuccess && (call = "cudaStreamCreateWithFlags", 1))
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  cublasLtHandle_t lt = NULL;
  if (e == cudaSuccess && cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    cuda_ctx_destroy(c);
    return st__cuda_host_fns.error(ST_ERR_INTERNAL, "gpu:%d: cublasLtCreate failed",
                                   device_index);
  }
  c->lt = lt;
  c->cache = st__cuda_cache_get(device_index);
  if (e == cudaSuccess && (call = "cudaMalloc (cuBLASLt workspace)", 1) && c->cache)
    c->workspace = st__cuda_cache_alloc(c->cache, c->ws_bytes, &e);
  if (e == cudaErrorMemoryAllocation) {
    cuda_ctx_destroy(c);
    return out_of_memory(device_index, WORKSPACE_BYTES, e);
  }
  if (e != cudaSuccess || !c->cache) {
    cuda_ctx_destroy(c);
    return st__cuda_host_fns.error(e == cudaErrorMemoryAllocation ? ST_ERR_NOMEM
                                                                  : ST_ERR_INTERNAL,
                                   "gpu:%d: %s failed: %s", device_index, call,
                                   cudaGetErrorString(e));
  }
  *impl = c;
  return ST_OK;
}

/* ---- memory and transfers ------------------------------------------------- */

static void *cuda_alloc(st_backend_ctx *ctx, size_t bytes) {
  st__cuda_ctx *c = CTX(ctx);
  cudaError_t e;
  void *p = st__cuda_cache_alloc(c->cache, bytes, &e);
  if (!p) out_of_memory(c->device, bytes, e);
  return p;
}

/* Waits for the context's work first, so that the block is idle before
 * another stream can be given it. */
static void cuda_free(st_backend_ctx *ctx, void *p) {
  if (!p) return;
  st__cuda_ctx *c = use(ctx);
  st__cuda_ok(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize (free)");
  st__cuda_cache_free(c->cache, p);
}

static void cuda_to_device(st_backend_ctx *ctx, void *dst, const void *src, size_t bytes) {
  st__cuda_ctx *c = use(ctx);
  if (!bytes) return;
  /* From pageable memory the copy is staged by the driver and returns once
   * src may be reused, as the slot's contract needs. */
  st__cuda_ok(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream),
              "cudaMemcpyAsync (to device)");
}

static void cuda_to_host(st_backend_ctx *ctx, void *dst, const void *src, size_t bytes) {
  st__cuda_ctx *c = use(ctx);
  if (!bytes) return;
  if (st__cuda_ok(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
                  "cudaMemcpyAsync (to host)"))
    st__cuda_ok(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize (to host)");
}

static void cuda_synchronize(st_backend_ctx *ctx) {
  st__cuda_ctx *c = use(ctx);
  st__cuda_ok(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
}

/* Device to device (any device: unified addressing), ordered on ctx. */
static void cuda_copy(st_backend_ctx *ctx, void *dst, const void *src, size_t bytes) {
  st__cuda_ctx *c = use(ctx);
  if (!bytes || dst == src) return;
  st__cuda_ok(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
              "cudaMemcpyAsync (device to device)");
}

/* The context's first error (sticky), after its work has finished. */
static st_status cuda_status(st_backend_ctx *ctx) {
  st__cuda_ctx *c = use(ctx);
  st__cuda_ok(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
  if (!c->error[0]) return ST_OK;
  return st__cuda_host_fns.error(strstr(c->error, "out of memory") ? ST_ERR_NOMEM
                                                                    : ST_ERR_INTERNAL,
                                 "%s", c->error);
}

/* cuBLAS status names (cublasGetStatusString is in libcublas, not linked). */
static const char *lt_status(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED (no algorithm)";
    default: return "cuBLAS error";
  }
}

/* ---- gemm through cuBLASLt ------------------------------------------------ */

/* The alignment cuBLASLt may assume for a matrix at p with leading
 * dimension ld floats: the largest power of two up to 256 dividing both the
 * address and the row stride (views into flat buffers are often only 4-byte
 * aligned; the default preference, 256, would pick kernels that need more). */
static uint32_t align_of(const void *p, int ld) {
  uintptr_t v = (uintptr_t)p | ((uintptr_t)ld * sizeof(float));
  uint32_t a = 256;
  while (a > 4 && (v & (a - 1))) a >>= 1;
  return a;
}

/* Row-major C[m,n] = alpha op(A) op(B) + beta C is column-major
 * C^T[n,m] = alpha op(B)^T op(A)^T + beta C^T: cuBLASLt's A is our B and its
 * B our A, with the same transposes, each a column-major view of the
 * row-major buffer. */
static void lt_gemm(st__cuda_ctx *c, bool ta, bool tb, int m, int n, int k, float alpha,
                    const float *a, int lda, const float *b, int ldb, float beta, float *cm,
                    int ldc) {
  cublasLtHandle_t lt = (cublasLtHandle_t)c->lt;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasComputeType_t ct = c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const char *call = "cublasLtMatmulDescCreate";
  cublasStatus_t s = cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  if (s == CUBLAS_STATUS_SUCCESS && (call = "cublasLtMatrixLayoutCreate", 1))
    s = cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, tb ? k : n, tb ? n : k, ldb);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, ta ? m : k, ta ? k : m, lda);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, ldc);
  if (s == CUBLAS_STATUS_SUCCESS && (call = "cublasLtMatmulPreferenceCreate", 1))
    s = cublasLtMatmulPreferenceCreate(&pref);
  uint64_t ws = c->ws_bytes;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws, sizeof ws);
  uint32_t al[4] = {align_of(b, ldb), align_of(a, lda), align_of(cm, ldc), align_of(cm, ldc)};
  static const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
    s = cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof al[i]);
  cublasLtMatmulHeuristicResult_t h;
  int found = 0, key[12] = {ta, tb, m, n, k, lda, ldb, ldc, (int)al[0], (int)al[1], (int)al[2],
                            c->tf32};
  _Static_assert(sizeof h.algo == sizeof c->algos[0].algo, "cublasLtMatmulAlgo_t's size");
  int hit = -1;
  for (int i = 0; i < (int)(sizeof c->algos / sizeof c->algos[0]) && hit < 0; i++)
    if (c->algos[i].used && !memcmp(c->algos[i].key, key, sizeof key)) hit = i;
  if (hit >= 0) {
    memcpy(&h.algo, c->algos[hit].algo, sizeof h.algo);
  } else {
    if (s == CUBLAS_STATUS_SUCCESS && (call = "cublasLtMatmulAlgoGetHeuristic", 1))
      s = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &h, &found);
    if (s == CUBLAS_STATUS_SUCCESS && found < 1) s = CUBLAS_STATUS_NOT_SUPPORTED;
    if (s == CUBLAS_STATUS_SUCCESS) {
      int i = c->next_algo;
      c->next_algo = (i + 1) % (int)(sizeof c->algos / sizeof c->algos[0]);
      c->algos[i].used = true;
      memcpy(c->algos[i].key, key, sizeof key);
      memcpy(c->algos[i].algo, &h.algo, sizeof h.algo);
    }
  }
  if (s == CUBLAS_STATUS_SUCCESS && (call = "cublasLtMatmul", 1))
    s = cublasLtMatmul(lt, op, &alpha, b, la, a, lb, &beta, cm, lc, cm, lc, &h.algo,
                       c->workspace, c->ws_bytes, c->stream);
  if (s != CUBLAS_STATUS_SUCCESS) st__cuda_ctx_fail(c, call, lt_status(s));
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
}

static void cuda_gemm(st_backend_ctx *ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *cm,
                      int ldc) {
  st__cuda_ctx *c = use(ctx);
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) { /* C = beta C, as the reference */
    st__cuda_scale_matrix(c->stream, m, n, beta, cm, ldc);
    check_launch(c, "scale_matrix");
    return;
  }
  lt_gemm(c, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cm, ldc);
}

/* ---- the other slots: one kernel each ------------------------------------- */

static void cuda_axpy(st_backend_ctx *ctx, size_t n, float alpha, const float *x, float *y) {
  st__cuda_axpy(use(ctx)->stream, n, alpha, x, y);
  check_launch(CTX(ctx), "axpy");
}
static void cuda_scale(st_backend_ctx *ctx, size_t n, float alpha, float *x) {
  st__cuda_scale(use(ctx)->stream, n, alpha, x);
  check_launch(CTX(ctx), "scale");
}
static void cuda_fill(st_backend_ctx *ctx, size_t n, float value, float *x) {
  st__cuda_fill(use(ctx)->stream, n, value, x);
  check_launch(CTX(ctx), "fill");
}
static void cuda_bias_add(st_backend_ctx *ctx, int rows, int cols, const float *bias, float *y) {
  st__cuda_bias_add(use(ctx)->stream, rows, cols, bias, y);
  check_launch(CTX(ctx), "bias_add");
}
static void cuda_bias_grad(st_backend_ctx *ctx, int rows, int cols, const float *dy, float *db) {
  st__cuda_ctx *c = use(ctx);
  st__cuda_colsum(c->stream, ST_CUDA_SUM_A, rows, cols, dy, NULL, NULL, NULL, NULL, NULL, db,
                  (double *)c->workspace, c->ws_bytes / sizeof(double));
  check_launch(CTX(ctx), "bias_grad");
}
static void cuda_act_forward(st_backend_ctx *ctx, st_activation act, int rows, int cols,
                             const float *x, float *y) {
  st__cuda_act_forward(use(ctx)->stream, (int)act, rows, cols, x, y);
  check_launch(CTX(ctx), "act_forward");
}
static void cuda_act_backward(st_backend_ctx *ctx, st_activation act, int rows, int cols,
                              const float *x, const float *y, const float *dy, float *dx) {
  st__cuda_act_backward(use(ctx)->stream, (int)act, rows, cols, x, y, dy, dx);
  check_launch(CTX(ctx), "act_backward");
}
static void cuda_im2col(st_backend_ctx *ctx, const st_conv_geom *g, const float *x, float *col) {
  st__cuda_im2col(use(ctx)->stream, *g, x, col);
  check_launch(CTX(ctx), "im2col");
}
static void cuda_col2im(st_backend_ctx *ctx, const st_conv_geom *g, const float *col, float *dx) {
  st__cuda_col2im(use(ctx)->stream, *g, col, dx);
  check_launch(CTX(ctx), "col2im");
}
static void cuda_im2col_n(st_backend_ctx *ctx, const st_conv_geom *g, int n, const float *x,
                          float *col) {
  st__cuda_ctx *c = use(ctx);
  st__cuda_im2col_n(c->stream, *g, n, x, col);
  check_launch(c, "im2col_n");
}
static void cuda_col2im_n(st_backend_ctx *ctx, const st_conv_geom *g, int n, const float *col,
                          float *dx) {
  st__cuda_ctx *c = use(ctx);
  st__cuda_col2im_n(c->stream, *g, n, col, dx);
  check_launch(c, "col2im_n");
}
static void cuda_maxpool_forward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                                 float *y) {
  st__cuda_maxpool_forward(use(ctx)->stream, *g, x, y);
  check_launch(CTX(ctx), "maxpool_forward");
}
static void cuda_maxpool_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                                  const float *y, const float *dy, float *dx) {
  st__cuda_maxpool_backward(use(ctx)->stream, *g, x, dy, dx);
  check_launch(CTX(ctx), "maxpool_backward");
}
static void cuda_avgpool_forward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                                 float *y) {
  st__cuda_avgpool_forward(use(ctx)->stream, *g, x, y);
  check_launch(CTX(ctx), "avgpool_forward");
}
static void cuda_avgpool_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *dy,
                                  float *dx) {
  st__cuda_avgpool_backward(use(ctx)->stream, *g, dy, dx);
  check_launch(CTX(ctx), "avgpool_backward");
}
static void cuda_bn_train(st_backend_ctx *ctx, int rows, int c, const float *x,
                          const float *gamma, const float *beta, float eps, float *mean,
                          float *invstd, float *y) {
  st__cuda_ctx *cc = use(ctx);
  st__cuda_bn_train(cc->stream, rows, c, x, gamma, beta, eps, mean, invstd, y,
                    (double *)cc->workspace, cc->ws_bytes / sizeof(double));
  check_launch(CTX(ctx), "batchnorm_forward_train");
}
static void cuda_bn_infer(st_backend_ctx *ctx, int rows, int c, const float *x,
                          const float *gamma, const float *beta, const float *mm,
                          const float *mv, float eps, float *y) {
  st__cuda_bn_infer(use(ctx)->stream, rows, c, x, gamma, beta, mm, mv, eps, y);
  check_launch(CTX(ctx), "batchnorm_forward_infer");
}
static void cuda_bn_backward(st_backend_ctx *ctx, int rows, int c, const float *x,
                             const float *gamma, const float *mean, const float *invstd,
                             const float *dy, float *dx, float *dgamma, float *dbeta) {
  st__cuda_ctx *cc = use(ctx);
  st__cuda_bn_backward(cc->stream, rows, c, x, gamma, mean, invstd, dy, dx, dgamma, dbeta,
                       (double *)cc->workspace, cc->ws_bytes / sizeof(double));
  check_launch(CTX(ctx), "batchnorm_backward");
}
static void cuda_dropout_forward(st_backend_ctx *ctx, size_t n, float rate, uint64_t seed,
                                 uint64_t stream, const float *x, float *y) {
  st__cuda_dropout(use(ctx)->stream, n, rate, seed, stream, x, y);
  check_launch(CTX(ctx), "dropout_forward");
}
static void cuda_dropout_backward(st_backend_ctx *ctx, size_t n, float rate, uint64_t seed,
                                  uint64_t stream, const float *dy, float *dx) {
  st__cuda_dropout(use(ctx)->stream, n, rate, seed, stream, dy, dx);
  check_launch(CTX(ctx), "dropout_backward");
}
static void cuda_loss(st_backend_ctx *ctx, st_loss_kind kind, int rows, int cols,
                      const float *pred, const float *y, float scale, float *loss,
                      float *dpred) {
  st__cuda_loss(use(ctx)->stream, (int)kind, rows, cols, pred, y, scale, loss, dpred);
  check_launch(CTX(ctx), "loss");
}
static void cuda_sgd(st_backend_ctx *ctx, size_t n, float lr, float momentum, bool nesterov,
                     float *p, const float *g, float *v) {
  st__cuda_sgd(use(ctx)->stream, n, lr, momentum, nesterov, p, g, v);
  check_launch(CTX(ctx), "sgd_update");
}
/* alpha (the bias-corrected rate) in double on the host, as the reference. */
static void cuda_adam(st_backend_ctx *ctx, size_t n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, int64_t t, float *p, const float *g,
                      float *m, float *v) {
  double alpha = lr * sqrt(1.0 - pow(beta2, (double)t)) / (1.0 - pow(beta1, (double)t));
  st__cuda_adam(use(ctx)->stream, n, alpha, lr, beta1, beta2, eps, weight_decay, p, g, m, v);
  check_launch(CTX(ctx), "adam_update");
}
static void cuda_rmsprop(st_backend_ctx *ctx, size_t n, float lr, float rho, float momentum,
                         float eps, float *p, const float *g, float *ms, float *mom) {
  st__cuda_rmsprop(use(ctx)->stream, n, lr, rho, momentum, eps, p, g, ms, mom);
  check_launch(CTX(ctx), "rmsprop_update");
}

/* ---- the table ------------------------------------------------------------ */

static const st_backend cuda_backend = {
    .name = "cuda",
    .ctx_create = cuda_ctx_create,
    .ctx_destroy = cuda_ctx_destroy,
    .to_device = cuda_to_device,
    .to_host = cuda_to_host,
    .synchronize = cuda_synchronize,
    .copy = cuda_copy,
    .im2col_n = cuda_im2col_n,
    .col2im_n = cuda_col2im_n,
    .status = cuda_status,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .gemm = cuda_gemm,
    .axpy = cuda_axpy,
    .scale = cuda_scale,
    .fill = cuda_fill,
    .bias_add = cuda_bias_add,
    .bias_grad = cuda_bias_grad,
    .act_forward = cuda_act_forward,
    .act_backward = cuda_act_backward,
    .im2col = cuda_im2col,
    .col2im = cuda_col2im,
    .maxpool_forward = cuda_maxpool_forward,
    .maxpool_backward = cuda_maxpool_backward,
    .avgpool_forward = cuda_avgpool_forward,
    .avgpool_backward = cuda_avgpool_backward,
    .batchnorm_forward_train = cuda_bn_train,
    .batchnorm_forward_infer = cuda_bn_infer,
    .batchnorm_backward = cuda_bn_backward,
    .dropout_forward = cuda_dropout_forward,
    .dropout_backward = cuda_dropout_backward,
    .loss = cuda_loss,
    .sgd_update = cuda_sgd,
    .adam_update = cuda_adam,
    .rmsprop_update = cuda_rmsprop,
};

/* Completeness (backend/impl.h): 25 required slots filled above; a new slot
 * fails this until it is filled here (and ST__CUDA_MODULE_ABI is bumped). */
_Static_assert(ST__BACKEND_SLOTS == 25, "st_backend changed: fill the new slot here");

/* ---- the module's interface (cuda_module.h) ------------------------------- */

static st_status device_count(int *count) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaErrorNoDevice) {
    *count = 0;
    return ST_OK;
  }
  if (e != cudaSuccess)
    return st__cuda_host_fns.error(ST_ERR_INVALID, "no usable CUDA device: cudaGetDeviceCount "
                                   "failed: %s (%s)", cudaGetErrorString(e),
                                   cudaGetErrorName(e));
  return ST_OK;
}

static st_status device_name(int index, char *buf, size_t cap) {
  struct cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, index);
  if (e != cudaSuccess)
    return st__cuda_host_fns.error(ST_ERR_INVALID, "gpu:%d: cudaGetDeviceProperties failed: %s",
                                   index, cudaGetErrorString(e));
  snprintf(buf, cap, "%s, sm_%d%d, %.1f GiB", p.name, p.major, p.minor,
           (double)p.totalGlobalMem / (1u << 30));
  return ST_OK;
}

static void versions(char *buf, size_t cap) {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  snprintf(buf, cap, "CUDA runtime %d, driver %d, cuBLASLt %zu", rt, drv, cublasLtGetVersion());
}

static void set_tf32(bool on) { g_tf32 = on; }

/* The one exported symbol (ST__CUDA_MODULE_ENTRY). */
__attribute__((visibility("default"))) st_status st__cuda_module_open(
    unsigned abi, const st__cuda_host *host, st__cuda_module *out) {
  if (!host || !host->error || !host->log || !out) return ST_ERR_INVALID;
  st__cuda_host_fns = *host;
  if (abi != ST__CUDA_MODULE_ABI)
    return host->error(ST_ERR_NOT_BUILT, "module built for interface %u, this Strata has %u",
                       ST__CUDA_MODULE_ABI, abi);
  memset(out, 0, sizeof *out);
  out->abi = ST__CUDA_MODULE_ABI;
  out->backend = &cuda_backend;
  out->device_count = device_count;
  out->device_name = device_name;
  out->versions = versions;
  out->set_tf32 = set_tf32;
  out->nccl = &st__cuda_nccl_table;
  return ST_OK;
}
