/* Fast CPU kernels for training: batch normalization (per-channel sums in
 * double over 16 fixed parts of the rows, added in part order, vectorised
 * over channel chunks with AVX-512/AVX2 clones; the parts are the tasks
 * split over the context's threads: the same bytes for any thread count),
 * dropout (one Philox block per 4
 * elements), the fused softmax + sparse cross-entropy loss (other loss kinds
 * use the reference kernels: they are rare and cheap) and one-pass optimizer
 * updates. Any thread, disjoint buffers. */
#include <math.h>
#include <string.h>

#include "backend/cpu.h"

/* ---- batch normalization -------------------------------------------------- */

/* Groups of 16 channels keep their double sums in registers (a runtime
 * channel count leaves them in memory: a load and a store per row); the sums
 * and their order are those of the plain loops below, so the bits are too. */
#define BN_G 16
#define BN_AI static inline __attribute__((always_inline))

/* out[j] = sum over rows of x[r*c + j], j < 16 (x at the group's channel). */
BN_AI void bn_sum_g(int rows, int c, const float *x, double *out) {
  double a[BN_G] = {0};
  for (int r = 0; r < rows; r++) {
    const float *restrict xr = x + (size_t)r * c;
    for (int j = 0; j < BN_G; j++) a[j] += xr[j];
  }
  for (int j = 0; j < BN_G; j++) out[j] = a[j];
}

/* out[j] = sum over rows of (x - m[j])^2 in double. */
BN_AI void bn_ssd_g(int rows, int c, const float *x, const double *m, double *out) {
  double a[BN_G] = {0}, mm[BN_G];
  for (int j = 0; j < BN_G; j++) mm[j] = m[j];
  for (int r = 0; r < rows; r++) {
    const float *restrict xr = x + (size_t)r * c;
    for (int j = 0; j < BN_G; j++) {
      double d = xr[j] - mm[j];
      a[j] += d * d;
    }
  }
  for (int j = 0; j < BN_G; j++) out[j] = a[j];
}

/* Channels [c0, c0+nc) of y = (x - mean) * scl + beta over x[rows, c]. */
static inline __attribute__((always_inline)) void bn_apply(int rows, int c, int c0, int nc, const float *x,
                     const float *restrict mean, const float *restrict scl,
                     const float *restrict beta, float *y) {
  for (int r = 0; r < rows; r++) {
    const float *restrict xr = x + (size_t)r * c + c0;
    float *restrict yr = y + (size_t)r * c + c0;
    for (int j = 0; j < nc; j++) yr[j] = (xr[j] - mean[j]) * scl[j] + beta[j];
  }
}

/* The rows are summed in BN_PARTS fixed parts, whose double sums are then
 * added in part order: the parts are the tasks that run on the context's
 * threads (st__cpu_parallel), and the result does not depend on how many
 * there are. Below BN_SPLIT_MIN floats the parts run on the calling thread. */
#define BN_PARTS 16
#define BN_SPLIT_MIN 32768

/* One call's channel chunk [c0, c0+nc), shared read-only by its tasks. */
typedef struct bn_job {
  int rows, c, c0, nc;
  const float *x, *dy;            /* [rows, c] */
  const double *m;                /* bn_sum_task: NULL (sums) or the means [nc] (squares) */
  const float *mean, *scl, *beta; /* apply: [nc] at c0 */
  const float *is, *k, *sb, *sg;  /* backward: [nc] at c0 */
  float *y, *dx;                  /* [rows, c] */
  double (*p1)[ST__CPU_CHUNK], (*p2)[ST__CPU_CHUNK]; /* [BN_PARTS] partial sums */
} bn_job;

static inline int bn_part_row(int rows, int p) { return (int)((int64_t)rows * p / BN_PARTS); }

/* Part p: p1[p][j] = sum over its rows of x (m NULL) or of (x - m[j])^2. */
ST__SIMD_CLONES
static void bn_sum_task(void *arg, int p) {
  const bn_job *j = arg;
  int r0 = bn_part_row(j->rows, p), n = bn_part_row(j->rows, p + 1) - r0, nc = j->nc;
  const float *x = j->x + (size_t)r0 * j->c + j->c0;
  double *restrict out = j->p1[p];
  if (nc % BN_G == 0) {
    for (int g = 0; g < nc; g += BN_G)
      if (j->m)
        bn_ssd_g(n, j->c, x + g, j->m + g, out + g);
      else
        bn_sum_g(n, j->c, x + g, out + g);
    return;
  }
  for (int i = 0; i < nc; i++) out[i] = 0.0;
  for (int r = 0; r < n; r++) {
    const float *restrict xr = x + (size_t)r * j->c;
    if (j->m)
      for (int i = 0; i < nc; i++) {
        double d = xr[i] - j->m[i];
        out[i] += d * d;
      }
    else
      for (int i = 0; i < nc; i++) out[i] += xr[i];
  }
}

/* Part p: y = (x - mean) * scl + beta over its rows. */
ST__SIMD_CLONES
static void bn_apply_task(void *arg, int p) {
  const bn_job *j = arg;
  int r0 = bn_part_row(j->rows, p), n = bn_part_row(j->rows, p + 1) - r0;
  size_t o = (size_t)r0 * j->c;
  bn_apply(n, j->c, j->c0, j->nc, j->x + o, j->mean, j->scl, j->beta, j->y + o);
}

static void bn_run(st_backend_ctx *ctx, bn_job *j, void (*task)(void *, int)) {
  if ((size_t)j->rows * (size_t)j->nc < BN_SPLIT_MIN)
    for (int p = 0; p < BN_PARTS; p++) task(j, p);
  else
    st__cpu_parallel(ctx, BN_PARTS, task, j);
}

/* out[i] = sum over the parts of part[p][i], in part order. */
static void bn_combine(int nc, double (*part)[ST__CPU_CHUNK], double *out) {
  for (int i = 0; i < nc; i++) {
    double s = 0.0;
    for (int p = 0; p < BN_PARTS; p++) s += part[p][i];
    out[i] = s;
  }
}

void st__cpu_bn_train(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                      const float *beta, float eps, float *mean, float *invstd,
                      float *y) {
  double part[BN_PARTS][ST__CPU_CHUNK], s[ST__CPU_CHUNK], ss[ST__CPU_CHUNK];
  float scl[ST__CPU_CHUNK];
  bn_job j = {.rows = rows, .c = c, .x = x, .y = y, .p1 = part, .scl = scl};
  for (int c0 = 0; c0 < c; c0 += ST__CPU_CHUNK) {
    int nc = c - c0 < ST__CPU_CHUNK ? c - c0 : ST__CPU_CHUNK;
    j.c0 = c0, j.nc = nc, j.m = NULL;
    bn_run(ctx, &j, bn_sum_task);
    bn_combine(nc, part, s);
    for (int i = 0; i < nc; i++) s[i] = rows ? s[i] / rows : 0.0;
    j.m = s;
    bn_run(ctx, &j, bn_sum_task);
    bn_combine(nc, part, ss);
    for (int i = 0; i < nc; i++) {
      double var = rows ? ss[i] / rows : 0.0;
      mean[c0 + i] = (float)s[i];
      invstd[c0 + i] = (float)(1.0 / sqrt(var + eps));
      scl[i] = gamma[c0 + i] * invstd[c0 + i];
    }
    j.mean = mean + c0, j.beta = beta + c0;
    bn_run(ctx, &j, bn_apply_task);
  }
}

ST__SIMD_CLONES
void st__cpu_bn_infer(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                      const float *beta, const float *moving_mean,
                      const float *moving_var, float eps, float *y) {
  float scl[ST__CPU_CHUNK];
  for (int c0 = 0; c0 < c; c0 += ST__CPU_CHUNK) {
    int nc = c - c0 < ST__CPU_CHUNK ? c - c0 : ST__CPU_CHUNK;
    for (int j = 0; j < nc; j++)
      scl[j] = (float)(gamma[c0 + j] / sqrt((double)moving_var[c0 + j] + eps));
    bn_apply(rows, c, c0, nc, x, moving_mean + c0, scl, beta + c0, y);
  }
}

/* Part p: p1[p][j] = sum dy, p2[p][j] = sum dy * xhat over its rows. */
ST__SIMD_CLONES
static void bn_dsum_task(void *arg, int p) {
  const bn_job *j = arg;
  int r0 = bn_part_row(j->rows, p), n = bn_part_row(j->rows, p + 1) - r0, nc = j->nc;
  size_t o = (size_t)r0 * j->c + j->c0;
  const float *x = j->x + o, *dy = j->dy + o, *restrict mu = j->mean, *restrict is = j->is;
  double *restrict sdy = j->p1[p], *restrict sdyx = j->p2[p];
  for (int i = 0; i < nc; i++) sdy[i] = sdyx[i] = 0.0;
  for (int r = 0; r < n; r++) {
    const float *restrict xr = x + (size_t)r * j->c, *restrict d = dy + (size_t)r * j->c;
    for (int i = 0; i < nc; i++) {
      sdy[i] += d[i];
      sdyx[i] += (double)d[i] * ((xr[i] - mu[i]) * is[i]);
    }
  }
}

/* Part p: dx = k * (N*dy - dbeta - xhat*dgamma) over its rows. */
ST__SIMD_CLONES
static void bn_dx_task(void *arg, int p) {
  const bn_job *j = arg;
  int r0 = bn_part_row(j->rows, p), n = bn_part_row(j->rows, p + 1) - r0, nc = j->nc;
  const float *restrict mu = j->mean, *restrict is = j->is, *restrict k = j->k;
  const float *restrict sb = j->sb, *restrict sg = j->sg;
  const float rows = (float)j->rows;
  for (int r = r0; r < r0 + n; r++) {
    size_t o = (size_t)r * j->c + j->c0;
    const float *restrict xr = j->x + o, *restrict d = j->dy + o;
    float *restrict dx = j->dx + o;
    for (int i = 0; i < nc; i++) {
      float xhat = (xr[i] - mu[i]) * is[i];
      dx[i] = k[i] * (rows * d[i] - sb[i] - xhat * sg[i]);
    }
  }
}

/* Per channel chunk: dbeta = sum dy, dgamma = sum dy*xhat, then
 * dx = gamma*invstd/N * (N*dy - dbeta - xhat*dgamma). */
void st__cpu_bn_backward(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                         const float *mean, const float *invstd,
                         const float *dy, float *dx, float *dgamma,
                         float *dbeta) {
  double p1[BN_PARTS][ST__CPU_CHUNK], p2[BN_PARTS][ST__CPU_CHUNK];
  double sdy[ST__CPU_CHUNK], sdyx[ST__CPU_CHUNK];
  float k[ST__CPU_CHUNK], sb[ST__CPU_CHUNK], sg[ST__CPU_CHUNK];
  bn_job j = {.rows = rows, .c = c, .x = x, .dy = dy, .dx = dx, .p1 = p1, .p2 = p2,
              .k = k, .sb = sb, .sg = sg};
  for (int c0 = 0; c0 < c; c0 += ST__CPU_CHUNK) {
    int nc = c - c0 < ST__CPU_CHUNK ? c - c0 : ST__CPU_CHUNK;
    j.c0 = c0, j.nc = nc, j.mean = mean + c0, j.is = invstd + c0;
    bn_run(ctx, &j, bn_dsum_task);
    bn_combine(nc, p1, sdy);
    bn_combine(nc, p2, sdyx);
    for (int i = 0; i < nc; i++) {
      dbeta[c0 + i] = sb[i] = (float)sdy[i];
      dgamma[c0 + i] = sg[i] = (float)sdyx[i];
      k[i] = gamma[c0 + i] * invstd[c0 + i] / (float)(rows ? rows : 1);
    }
    bn_run(ctx, &j, bn_dx_task);
  }
}

/* ---- dropout -------------------------------------------------------------- */

/* Philox4x32-10 exactly as st_philox4x32 (base/rng.c) for nb <= PHILOX_LANES
 * consecutive counters; each lane runs its 10 rounds in registers, so the
 * lane loop vectorises. words[4*j + w] = word w of block (counter + j). */
#define PHILOX_LANES 16
static void philox_lanes(uint64_t seed, uint64_t stream, uint64_t counter,
                         int nb, uint32_t *restrict words) {
  const uint32_t s0 = (uint32_t)stream, s1 = (uint32_t)(stream >> 32);
  const uint32_t lo = (uint32_t)counter, hi = (uint32_t)(counter >> 32);
  for (int j = 0; j < nb; j++) {
    uint32_t c0 = lo + (uint32_t)j, c1 = hi + (c0 < lo), c2 = s0, c3 = s1;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
      uint64_t p0 = (uint64_t)0xD2511F53u * c0;
      uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
      c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
      c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
      c1 = (uint32_t)p1;
      c3 = (uint32_t)p0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    words[4 * j] = c0;
    words[4 * j + 1] = c1;
    words[4 * j + 2] = c2;
    words[4 * j + 3] = c3;
  }
}

/* unit(w) >= rate  <=>  (w >> 8) >= dropout_threshold(rate): unit(w) is
 * (w >> 8) * 2^-24 exactly and rate * 2^24 is exact, so the float test becomes
 * an integer one (which vectorises without branches). NaN keeps nothing. */
static uint32_t dropout_threshold(float rate) {
  if (isnan(rate) || rate > 1.0f) return 1u << 25;
  if (rate <= 0.0f) return 0;
  return (uint32_t)ceilf(rate * 16777216.0f);
}

/* y = x * mask / (1 - rate), element i kept iff
 * unit(philox(seed, stream, i/4)[i%4]) >= rate. x == y allowed. */
void st__cpu_dropout_forward(st_backend_ctx *ctx, size_t n, float rate, uint64_t seed,
                             uint64_t stream, const float *x, float *y) {
  enum { SPAN = 4 * PHILOX_LANES };
  const float keep_scale = 1.0f / (1.0f - rate);
  const uint32_t thr = dropout_threshold(rate);
  uint32_t w[SPAN];
  for (size_t i0 = 0; i0 < n; i0 += SPAN) {
    size_t len = n - i0 < SPAN ? n - i0 : SPAN;
    philox_lanes(seed, stream, (uint64_t)(i0 / 4), (int)(len + 3) / 4, w);
    const float *xs = x + i0;
    float *ys = y + i0;
    for (size_t k = 0; k < len; k++) { /* y = keep ? x*scale : +0.0f */
      float v = xs[k] * keep_scale;
      uint32_t bits;
      memcpy(&bits, &v, sizeof bits);
      bits &= 0u - (uint32_t)((w[k] >> 8) >= thr); /* a mask, not a branch */
      memcpy(&ys[k], &bits, sizeof bits);
    }
  }
}

void st__cpu_dropout_backward(st_backend_ctx *ctx, size_t n, float rate, uint64_t seed,
                              uint64_t stream, const float *dy, float *dx) {
  st__cpu_dropout_forward(ctx, n, rate, seed, stream, dy, dx);
}

/* ---- losses --------------------------------------------------------------- */

/* One row of softmax cross-entropy from logits z[cols] with class `label`:
 * loss = lse(z) - z[label]; d = scale * (softmax(z) - onehot) (d may be NULL).
 * A label that is not an integer in [0, cols) gives NaN and a zero row. */
static float sparse_ce_logits_row(int cols, const float *restrict z,
                                  float label_f, float scale,
                                  float *restrict d) {
  if (!(label_f >= 0.0f) || label_f >= (float)cols || label_f != floorf(label_f)) {
    if (d) memset(d, 0, sizeof(float) * (size_t)cols);
    return NAN;
  }
  int label = (int)label_f;
  if (cols >= ST__CPU_WIDE_ROW) return st__cpu_sparse_ce_wide_row(cols, z, label, scale, d);
  float mx = -INFINITY, se = 0.0f;
  for (int j = 0; j < cols; j++) mx = z[j] > mx ? z[j] : mx;
  for (int j = 0; j < cols; j++) {
    float e = expf(z[j] - mx);
    se += e;
    if (d) d[j] = e;
  }
  if (d) {
    float k = scale / se;
    for (int j = 0; j < cols; j++) d[j] *= k;
    d[label] -= scale;
  }
  return mx + logf(se) - z[label];
}

void st__cpu_loss(st_backend_ctx *ctx, st_loss_kind kind, int rows, int cols, const float *pred,
                  const float *y, float scale, float *loss, float *dpred) {
  if (kind != ST_LOSS_SPARSE_CE_LOGITS) {
    /* the reference reads nothing from its context: ours will do */
    st_backend_reference()->loss(ctx, kind, rows, cols, pred, y, scale, loss, dpred);
    return;
  }
  for (int r = 0; r < rows; r++) {
    float *d = dpred ? dpred + (size_t)r * cols : NULL;
    loss[r] = sparse_ce_logits_row(cols, pred + (size_t)r * cols, y[r], scale, d);
  }
}

/* ---- optimizers (Keras 3 forms, as reference.c) --------------------------- */

/* v = momentum*v - lr*g; p += v (nesterov: p += momentum*v - lr*g);
 * v == NULL: p -= lr*g. */
ST__SIMD_CLONES
void st__cpu_sgd(st_backend_ctx *ctx, size_t n, float lr, float momentum, bool nesterov,
                 float *restrict p, const float *restrict g,
                 float *restrict v) {
  if (!v) {
    for (size_t i = 0; i < n; i++) p[i] -= lr * g[i];
  } else if (nesterov) {
    for (size_t i = 0; i < n; i++) {
      v[i] = momentum * v[i] - lr * g[i];
      p[i] += momentum * v[i] - lr * g[i];
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      v[i] = momentum * v[i] - lr * g[i];
      p[i] += v[i];
    }
  }
}

/* Adam/AdamW in one pass with alpha = lr*sqrt(1-b2^t)/(1-b1^t) precomputed;
 * eps is added to sqrt(v) (Keras), weight decay first (p -= lr*wd*p). */
ST__SIMD_CLONES
void st__cpu_adam(st_backend_ctx *ctx, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t t, float *restrict p,
                  const float *restrict g, float *restrict m,
                  float *restrict v) {
  const float alpha = (float)(lr * sqrt(1.0 - pow(beta2, (double)t)) /
                              (1.0 - pow(beta1, (double)t)));
  const float wd = weight_decay > 0.0f ? lr * weight_decay : 0.0f;
  const float c1 = 1.0f - beta1, c2 = 1.0f - beta2;
  for (size_t i = 0; i < n; i++) {
    float pi = wd > 0.0f ? p[i] - wd * p[i] : p[i];
    float mi = m[i] + (g[i] - m[i]) * c1;
    float vi = v[i] + (g[i] * g[i] - v[i]) * c2;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - alpha * mi / (sqrtf(vi) + eps);
  }
}

/* RMSprop (Keras): ms = rho*ms + (1-rho) g^2; inc = lr*g/sqrt(ms + eps);
 * momentum > 0 (and mom given): mom = momentum*mom + inc, p -= mom; else
 * p -= inc. */
ST__SIMD_CLONES
void st__cpu_rmsprop(st_backend_ctx *ctx, size_t n, float lr, float rho, float momentum, float eps,
                     float *restrict p, const float *restrict g,
                     float *restrict ms, float *restrict mom) {
  const float c = 1.0f - rho;
  if (momentum > 0.0f && mom) {
    for (size_t i = 0; i < n; i++) {
      float s = rho * ms[i] + c * g[i] * g[i];
      ms[i] = s;
      mom[i] = momentum * mom[i] + lr * g[i] / sqrtf(s + eps);
      p[i] -= mom[i];
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      float s = rho * ms[i] + c * g[i] * g[i];
      ms[i] = s;
      p[i] -= lr * g[i] / sqrtf(s + eps);
    }
  }
}
