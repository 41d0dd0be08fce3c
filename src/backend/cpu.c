/* The fast CPU backend: gemm through OpenBLAS (loaded at run time by blas.c),
 * the other kernels as simple restrict-pointer loops that GCC vectorises. This
 * file holds memory, BLAS-like, bias and activation kernels and the table;
 * cpu_conv.c and cpu_train.c hold the rest. Results match the reference backend
 * up to float rounding (the reference accumulates in double). A context holds
 * only the kernel choices, read-only once created: any thread may call any
 * kernel at once on disjoint buffers. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/blas.h"
#include "backend/cpu.h"

/* ---- memory --------------------------------------------------------------- */

/* A context's state: the kernel choices (st__cpu_state). The OpenBLAS thread
 * count is not here: OpenBLAS has one per process (st_blas_set_threads), and
 * its loading (blas.c) is process-wide by nature. */
static st_status cpu_ctx_create(int device_index, int threads, void **impl) {
  st__cpu_state *cs = calloc(1, sizeof *cs);
  if (!cs)
    return st_error(ST_ERR_NOMEM, "cpu:%d: out of memory for a backend context", device_index);
  *impl = cs;
  return ST_OK;
}
static void cpu_ctx_destroy(void *impl) { free(impl); }

static void *cpu_alloc(st_backend_ctx *ctx, size_t bytes) { return st_alloc(bytes); }
static void cpu_free(st_backend_ctx *ctx, void *p) { st_free(p); }

/* ---- BLAS-like ------------------------------------------------------------ */

/* st__sgemm loads OpenBLAS on first use (st_blas_init's pthread_once). */
static void cpu_gemm(st_backend_ctx *ctx, bool trans_a, bool trans_b, int m, int n, int k,
                     float alpha, const float *a, int lda, const float *b,
                     int ldb, float beta, float *c, int ldc) {
  st__sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

ST__SIMD_CLONES
static void cpu_axpy(st_backend_ctx *ctx, size_t n, float alpha, const float *restrict x,
                     float *restrict y) {
  for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

ST__SIMD_CLONES
static void cpu_scale(st_backend_ctx *ctx, size_t n, float alpha, float *restrict x) {
  for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

static void cpu_fill(st_backend_ctx *ctx, size_t n, float value, float *restrict x) {
  for (size_t i = 0; i < n; i++) x[i] = value;
}

/* ---- bias ----------------------------------------------------------------- */

ST__SIMD_CLONES
static void cpu_bias_add(st_backend_ctx *ctx, int rows, int cols, const float *restrict bias,
                         float *restrict y) {
  for (int r = 0; r < rows; r++) {
    float *restrict yr = y + (size_t)r * cols;
    for (int j = 0; j < cols; j++) yr[j] += bias[j];
  }
}

/* db[cols] = column sums of dy[rows, cols]: float sums of 16 rows (full-width
 * vector adds), added in double per chunk of columns, so the result stays
 * within a few float roundings of the reference's all-double sum. */
ST__SIMD_CLONES
static void cpu_bias_grad(st_backend_ctx *ctx, int rows, int cols, const float *restrict dy,
                          float *restrict db) {
  double acc[ST__CPU_CHUNK];
  float part[ST__CPU_CHUNK];
  for (int j0 = 0; j0 < cols; j0 += ST__CPU_CHUNK) {
    int nj = cols - j0 < ST__CPU_CHUNK ? cols - j0 : ST__CPU_CHUNK;
    for (int j = 0; j < nj; j++) acc[j] = 0.0;
    for (int r0 = 0; r0 < rows; r0 += 16) {
      int r1 = rows - r0 < 16 ? rows : r0 + 16;
      for (int j = 0; j < nj; j++) part[j] = 0.0f;
      for (int r = r0; r < r1; r++) {
        const float *restrict d = dy + (size_t)r * cols + j0;
        for (int j = 0; j < nj; j++) part[j] += d[j];
      }
      for (int j = 0; j < nj; j++) acc[j] += part[j];
    }
    for (int j = 0; j < nj; j++) db[j0 + j] = (float)acc[j];
  }
}

/* ---- activations ---------------------------------------------------------- */

#define SQRT_2_OVER_PI 0.79788456080286535588f

/* Softmax of each row of x[rows, cols] into y (x == y allowed). */
static void softmax_rows(int rows, int cols, const float *x, float *y) {
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * cols;
    float *yr = y + (size_t)r * cols;
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < cols; j++) mx = xr[j] > mx ? xr[j] : mx;
    for (int j = 0; j < cols; j++) {
      yr[j] = expf(xr[j] - mx);
      sum += yr[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < cols; j++) yr[j] *= inv;
  }
}

static float sigmoidf(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}

/* y = act(x) elementwise over n floats (not softmax); x == y allowed. */
ST__SIMD_CLONES
static void act_elementwise(st_activation act, size_t n, const float *x,
                            float *y) {
  switch (act) {
    case ST_ACT_RELU: /* NaN propagates (x < 0 is false), as in TF and PyTorch */
      for (size_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
      break;
    case ST_ACT_SIGMOID:
      for (size_t i = 0; i < n; i++) y[i] = sigmoidf(x[i]);
      break;
    case ST_ACT_TANH:
      for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
      break;
    case ST_ACT_ELU:
      for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
      break;
    case ST_ACT_GELU: /* vectorised erfc and exp (cpu_gelu.c) */
      st__cpu_gelu_forward(n, x, y);
      break;
    case ST_ACT_RELU6: /* NaN propagates: both comparisons are false */
      for (size_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i] > 6.0f ? 6.0f : x[i];
      break;
    case ST_ACT_LEAKY_RELU:
      for (size_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.2f * x[i] : x[i];
      break;
    case ST_ACT_GELU_TANH: /* (1 + tanh(u)) / 2 = sigmoid(2u): no cancellation */
      for (size_t i = 0; i < n; i++) {
        float v = x[i], u = SQRT_2_OVER_PI * (v + 0.044715f * v * v * v);
        y[i] = v / (1.0f + expf(-2.0f * u));
      }
      break;
    default: /* linear */
      if (x != y) memcpy(y, x, n * sizeof(float));
      break;
  }
}

static void cpu_act_forward(st_backend_ctx *ctx, st_activation act, int rows, int cols,
                            const float *x, float *y) {
  if (act == ST_ACT_SOFTMAX)
    softmax_rows(rows, cols, x, y);
  else
    act_elementwise(act, (size_t)rows * cols, x, y);
}

/* dx = y * (dy - sum(dy*y)) per row (dx == dy allowed). */
static void softmax_backward(int rows, int cols, const float *y,
                             const float *dy, float *dx) {
  for (int r = 0; r < rows; r++) {
    const float *yr = y + (size_t)r * cols, *dyr = dy + (size_t)r * cols;
    float *dxr = dx + (size_t)r * cols;
    float dot = 0.0f;
    for (int j = 0; j < cols; j++) dot += dyr[j] * yr[j];
    for (int j = 0; j < cols; j++) dxr[j] = yr[j] * (dyr[j] - dot);
  }
}

/* gelu_tanh'(x) = (1 + t)/2 + x (1 - t^2) u'/2 with t = tanh(u), u = k (x + a x^3),
 * written with s = (1 + t)/2 = sigmoid(2u): s + 2 x s (1 - s) u' (no cancellation
 * of 1 + t for negative x). */
static void gelu_tanh_backward(size_t n, const float *x, const float *dy, float *dx) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i], u = SQRT_2_OVER_PI * (v + 0.044715f * v * v * v);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    float du = SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
  }
}

/* dx = dy * act'(.) from y (the GELUs from x); dx == dy allowed. */
ST__SIMD_CLONES
static void cpu_act_backward(st_backend_ctx *ctx, st_activation act, int rows, int cols,
                             const float *x, const float *y, const float *dy,
                             float *dx) {
  size_t n = (size_t)rows * cols;
  switch (act) {
    case ST_ACT_SOFTMAX: softmax_backward(rows, cols, y, dy, dx); break;
    case ST_ACT_GELU: st__cpu_gelu_backward(n, x, dy, dx); break; /* cpu_gelu.c */
    case ST_ACT_GELU_TANH: gelu_tanh_backward(n, x, dy, dx); break;
    case ST_ACT_RELU6:
      for (size_t i = 0; i < n; i++) {
        float d = dy[i];
        dx[i] = y[i] > 0.0f && y[i] < 6.0f ? d : 0.0f;
      }
      break;
    case ST_ACT_LEAKY_RELU:
      for (size_t i = 0; i < n; i++) {
        float d = dy[i];
        dx[i] = y[i] > 0.0f ? d : 0.2f * d;
      }
      break;
    case ST_ACT_RELU: /* a select, not dy * {0,1}: it vectorises */
      for (size_t i = 0; i < n; i++) {
        float d = dy[i];
        dx[i] = y[i] > 0.0f ? d : 0.0f;
      }
      break;
    case ST_ACT_SIGMOID:
      for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (y[i] * (1.0f - y[i]));
      break;
    case ST_ACT_TANH:
      for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
      break;
    case ST_ACT_ELU:
      for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * (y[i] > 0.0f ? 1.0f : y[i] + 1.0f);
      break;
    default:
      if (dx != dy) memcpy(dx, dy, n * sizeof(float));
      break;
  }
}

/* ---- the table ------------------------------------------------------------ */

static const st_backend cpu_backend = {
    .name = "cpu",
    .ctx_create = cpu_ctx_create,
    .ctx_destroy = cpu_ctx_destroy,
    /* to_device, to_host, synchronize: NULL (host memory, memcpy; kernels
     * are synchronous). */
    .conv_direct_forward = st__cpu_conv_direct_forward,
    .conv_direct_dw = st__cpu_conv_direct_dw,
    .conv_direct_dx = st__cpu_conv_direct_dx,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .gemm = cpu_gemm,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .fill = cpu_fill,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .act_forward = cpu_act_forward,
    .act_backward = cpu_act_backward,
    .im2col = st__cpu_im2col,
    .col2im = st__cpu_col2im,
    .maxpool_forward = st__cpu_maxpool_forward,
    .maxpool_backward = st__cpu_maxpool_backward,
    .avgpool_forward = st__cpu_avgpool_forward,
    .avgpool_backward = st__cpu_avgpool_backward,
    .batchnorm_forward_train = st__cpu_bn_train,
    .batchnorm_forward_infer = st__cpu_bn_infer,
    .batchnorm_backward = st__cpu_bn_backward,
    .dropout_forward = st__cpu_dropout_forward,
    .dropout_backward = st__cpu_dropout_backward,
    .loss = st__cpu_loss,
    .sgd_update = st__cpu_sgd,
    .adam_update = st__cpu_adam,
    .rmsprop_update = st__cpu_rmsprop,
};

/* Completeness (backend/impl.h): 25 required slots filled above; update the count
 * after filling a new slot. */
_Static_assert(ST__BACKEND_SLOTS == 25, "st_backend changed: fill the new slot here");

/* Any thread. The table is immutable; OpenBLAS loads on the first gemm. */
const st_backend *st_backend_cpu(void) {
  ST_ASSERT(st__backend_table_complete(&cpu_backend));
  return &cpu_backend;
}
