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
#include "base/fpenv.h"

/* ---- memory --------------------------------------------------------------- */

/* A context's state: the kernel choices and the kernel threads
 * (st__cpu_state). The OpenBLAS thread count is not here: OpenBLAS has one per
 * process (st_blas_set_threads), and its loading (blas.c) is process-wide by
 * nature. */
static st_status make_pool(st__cpu_state *cs, int device_index, int threads) {
  st__cpu_pool_destroy(cs->pool);
  cs->pool = NULL;
  if (threads <= 1) return ST_OK;
  (void)device_index; /* st__cpu_pool_create's message names the pool's size */
  return st__cpu_pool_create(threads - 1, &cs->pool);
}

static st_status cpu_ctx_create(int device_index, int threads, void **impl) {
  st__cpu_state *cs = calloc(1, sizeof *cs);
  if (!cs)
    return st_error(ST_ERR_NOMEM, "cpu:%d: out of memory for a backend context", device_index);
  atomic_flag_clear(&cs->busy);
  st_status s = make_pool(cs, device_index, threads);
  if (s != ST_OK) {
    free(cs);
    return s;
  }
  *impl = cs;
  return ST_OK;
}
static void cpu_ctx_destroy(void *impl) {
  st__cpu_state *cs = impl;
  if (cs) st__cpu_pool_destroy(cs->pool);
  free(impl);
}
static st_status cpu_ctx_set_threads(st_backend_ctx *ctx, int threads) {
  return make_pool(ctx->impl, ctx->device_index, threads);
}

void st__cpu_parallel(st_backend_ctx *ctx, int ntasks, void (*fn)(void *arg, int task),
                      void *arg) {
  st__cpu_state *cs = ctx ? ctx->impl : NULL;
  if (ntasks > 1 && cs && cs->pool &&
      !atomic_flag_test_and_set_explicit(&cs->busy, memory_order_acquire)) {
    unsigned fp = st__ftz_enter();
    st__cpu_pool_run(cs->pool, ntasks, fn, arg);
    st__ftz_leave(fp);
    atomic_flag_clear_explicit(&cs->busy, memory_order_release);
    return;
  }
  for (int t = 0; t < ntasks; t++) fn(arg, t);
}

int st__cpu_threads(const st_backend_ctx *ctx) {
  const st__cpu_state *cs = ctx ? ctx->impl : NULL;
  return cs && cs->pool ? 1 + st__cpu_pool_workers(cs->pool) : 1;
}

static void *cpu_alloc(st_backend_ctx *ctx, size_t bytes) { return st_alloc(bytes); }
static void cpu_free(st_backend_ctx *ctx, void *p) { st_free(p); }

/* ---- BLAS-like ------------------------------------------------------------ */

/* On a context with kernel threads (one_device's replica: OpenBLAS is then
 * single-threaded, so that its idle threads do not spin beside the pool's) a
 * large gemm is split into blocks of GEMM_ROWS rows of C, one task each (a
 * fixed split: the same blocks for any thread count). */
#define GEMM_ROWS 256
#define GEMM_SPLIT_MIN ((double)(1 << 22)) /* m*n*k */
typedef struct gemm_job {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc;
  float alpha, beta;
  const float *a, *b;
  float *c;
} gemm_job;

static void gemm_task(void *arg, int t) {
  const gemm_job *j = arg;
  int r0 = t * GEMM_ROWS, rows = j->m - r0 < GEMM_ROWS ? j->m - r0 : GEMM_ROWS;
  const float *a = j->ta ? j->a + r0 : j->a + (size_t)r0 * j->lda; /* rows r0.. of op(A) */
  st__sgemm(j->ta, j->tb, rows, j->n, j->k, j->alpha, a, j->lda, j->b, j->ldb, j->beta,
            j->c + (size_t)r0 * j->ldc, j->ldc);
}

/* st__sgemm loads OpenBLAS on first use (st_blas_init's pthread_once). */
static void cpu_gemm(st_backend_ctx *ctx, bool trans_a, bool trans_b, int m, int n, int k,
                     float alpha, const float *a, int lda, const float *b,
                     int ldb, float beta, float *c, int ldc) {
  if (m >= 2 * GEMM_ROWS && (double)m * n * k >= GEMM_SPLIT_MIN && st__cpu_threads(ctx) > 1) {
    gemm_job j = {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
    st__cpu_parallel(ctx, (m + GEMM_ROWS - 1) / GEMM_ROWS, gemm_task, &j);
    return;
  }
  st__sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

ST__SIMD_CLONES
static void axpy_range(size_t n, float alpha, const float *restrict x, float *restrict y) {
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

/* dx = dy * act'(.) over n floats from y (the GELUs from x), not softmax;
 * dx == dy allowed. */
ST__SIMD_CLONES
static void act_backward_ew(st_activation act, size_t n, const float *x, const float *y,
                            const float *dy, float *dx) {
  switch (act) {
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

/* ---- elementwise kernels over the context's threads ---------------------- */

/* Split into ranges of EW_CHUNK floats (a multiple of 16: whole vectors) when
 * the context has threads and there are at least two ranges; every element
 * is computed as on one thread, so the bytes are the same. */
#define EW_CHUNK ((size_t)1 << 15)
typedef enum { EW_AXPY, EW_ACT, EW_ACT_BACKWARD } ew_kind;
typedef struct ew_job {
  ew_kind kind;
  st_activation act;
  float alpha;
  size_t n;
  const float *x, *y, *dy; /* inputs (x, y may be NULL: act backward) */
  float *out;
} ew_job;

static void ew_range(const ew_job *j, size_t off, size_t n) {
  const float *x = j->x ? j->x + off : NULL;
  switch (j->kind) {
    case EW_AXPY: axpy_range(n, j->alpha, x, j->out + off); break;
    case EW_ACT: act_elementwise(j->act, n, x, j->out + off); break;
    default:
      act_backward_ew(j->act, n, x, j->y ? j->y + off : NULL, j->dy + off, j->out + off);
      break;
  }
}

static void ew_task(void *arg, int t) {
  const ew_job *j = arg;
  size_t off = (size_t)t * EW_CHUNK;
  ew_range(j, off, j->n - off < EW_CHUNK ? j->n - off : EW_CHUNK);
}

static void ew_run(st_backend_ctx *ctx, const ew_job *j) {
  size_t tasks = (j->n + EW_CHUNK - 1) / EW_CHUNK;
  if (tasks < 2 || tasks > (size_t)1 << 30 || st__cpu_threads(ctx) < 2)
    ew_range(j, 0, j->n);
  else
    st__cpu_parallel(ctx, (int)tasks, ew_task, (void *)j);
}

static void cpu_axpy(st_backend_ctx *ctx, size_t n, float alpha, const float *x, float *y) {
  ew_run(ctx, &(ew_job){.kind = EW_AXPY, .alpha = alpha, .n = n, .x = x, .out = y});
}

static void cpu_act_forward(st_backend_ctx *ctx, st_activation act, int rows, int cols,
                            const float *x, float *y) {
  if (act == ST_ACT_SOFTMAX)
    softmax_rows(rows, cols, x, y);
  else
    ew_run(ctx, &(ew_job){.kind = EW_ACT, .act = act, .n = (size_t)rows * cols, .x = x, .out = y});
}

static void cpu_act_backward(st_backend_ctx *ctx, st_activation act, int rows, int cols,
                             const float *x, const float *y, const float *dy, float *dx) {
  if (act == ST_ACT_SOFTMAX)
    softmax_backward(rows, cols, y, dy, dx);
  else
    ew_run(ctx, &(ew_job){.kind = EW_ACT_BACKWARD, .act = act, .n = (size_t)rows * cols,
                          .x = x, .y = y, .dy = dy, .out = dx});
}

/* ---- the table ------------------------------------------------------------ */

static const st_backend cpu_backend = {
    .name = "cpu",
    .ctx_create = cpu_ctx_create,
    .ctx_destroy = cpu_ctx_destroy,
    .ctx_set_threads = cpu_ctx_set_threads,
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
