/* Fast CPU kernels for training: batch normalization (per-channel sums in
 * double, vectorised over channel chunks; AVX-512/AVX2 clones, the same
 * sums in the same order as the baseline's), dropout (one Philox block per 4
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

/* Channels [c0, c0+nc) of x[rows, c]: mean and 1/sqrt(biased var + eps). */
static inline __attribute__((always_inline)) void bn_stats(int rows, int c, int c0, int nc, const float *x,
                     float eps, float *mean, float *invstd) {
  double s[ST__CPU_CHUNK], ss[ST__CPU_CHUNK];
  for (int j = 0; j < nc; j++) s[j] = ss[j] = 0.0;
  if (nc % BN_G == 0) {
    for (int g = 0; g < nc; g += BN_G) bn_sum_g(rows, c, x + c0 + g, s + g);
  } else {
    for (int r = 0; r < rows; r++) {
      const float *restrict xr = x + (size_t)r * c + c0;
      for (int j = 0; j < nc; j++) s[j] += xr[j];
    }
  }
  for (int j = 0; j < nc; j++) s[j] = rows ? s[j] / rows : 0.0;
  if (nc % BN_G == 0) {
    for (int g = 0; g < nc; g += BN_G) bn_ssd_g(rows, c, x + c0 + g, s + g, ss + g);
  } else {
    for (int r = 0; r < rows; r++) {
      const float *restrict xr = x + (size_t)r * c + c0;
      for (int j = 0; j < nc; j++) {
        double d = xr[j] - s[j];
        ss[j] += d * d;
      }
    }
  }
  for (int j = 0; j < nc; j++) {
    double var = rows ? ss[j] / rows : 0.0;
    mean[j] = (float)s[j];
    invstd[j] = (float)(1.0 / sqrt(var + eps));
  }
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

ST__SIMD_CLONES
void st__cpu_bn_train(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                      const float *beta, float eps, float *mean, float *invstd,
                      float *y) {
  float scl[ST__CPU_CHUNK];
  for (int c0 = 0; c0 < c; c0 += ST__CPU_CHUNK) {
    int nc = c - c0 < ST__CPU_CHUNK ? c - c0 : ST__CPU_CHUNK;
    bn_stats(rows, c, c0, nc, x, eps, mean + c0, invstd + c0);
    for (int j = 0; j < nc; j++) scl[j] = gamma[c0 + j] * invstd[c0 + j];
    bn_apply(rows, c, c0, nc, x, mean + c0, scl, beta + c0, y);
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

/* Channels [c0, c0+nc): dbeta = sum dy, dgamma = sum dy*xhat, then
 * dx = gamma*invstd/N * (N*dy - dbeta - xhat*dgamma). */
static inline __attribute__((always_inline)) void bn_backward_chunk(int rows, int c, int c0, int nc,
                              const float *x, const float *gamma,
                              const float *mean, const float *invstd,
                              const float *dy, float *dx, float *dgamma,
                              float *dbeta) {
  double sdy[ST__CPU_CHUNK], sdyx[ST__CPU_CHUNK];
  float k[ST__CPU_CHUNK], sb[ST__CPU_CHUNK], sg[ST__CPU_CHUNK];
  const float *restrict mu = mean + c0, *restrict is = invstd + c0;
  for (int j = 0; j < nc; j++) sdy[j] = sdyx[j] = 0.0;
  for (int r = 0; r < rows; r++) {
    const float *restrict xr = x + (size_t)r * c + c0, *restrict d = dy + (size_t)r * c + c0;
    for (int j = 0; j < nc; j++) {
      sdy[j] += d[j];
      sdyx[j] += (double)d[j] * ((xr[j] - mu[j]) * is[j]);
    }
  }
  for (int j = 0; j < nc; j++) {
    dbeta[c0 + j] = sb[j] = (float)sdy[j];
    dgamma[c0 + j] = sg[j] = (float)sdyx[j];
    k[j] = gamma[c0 + j] * is[j] / (float)(rows ? rows : 1);
  }
  const float n = (float)rows;
  for (int r = 0; r < rows; r++) {
    const float *restrict xr = x + (size_t)r * c + c0, *restrict d = dy + (size_t)r * c + c0;
    float *restrict o = dx + (size_t)r * c + c0;
    for (int j = 0; j < nc; j++) {
      float xhat = (xr[j] - mu[j]) * is[j];
      o[j] = k[j] * (n * d[j] - sb[j] - xhat * sg[j]);
    }
  }
}

ST__SIMD_CLONES
void st__cpu_bn_backward(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                         const float *mean, const float *invstd,
                         const float *dy, float *dx, float *dgamma,
                         float *dbeta) {
  for (int c0 = 0; c0 < c; c0 += ST__CPU_CHUNK) {
    int nc = c - c0 < ST__CPU_CHUNK ? c - c0 : ST__CPU_CHUNK;
    bn_backward_chunk(rows, c, c0, nc, x, gamma, mean, invstd, dy, dx, dgamma,
                      dbeta);
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
