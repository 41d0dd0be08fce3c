/* The CUDA backend's training kernels: batch normalization, dropout (the same
 * Philox4x32-10 stream as src/base/rng.c, so GPU and CPU drop the same
 * elements), the losses and the optimizer updates; GPU forms of the reference
 * kernels (src/backend/reference.c), in double where the reference is. Batch
 * statistics: column sums in a fixed order (st__cuda_colsum, kernels.cu);
 * loss rows: one thread per row; no atomics. */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/launch.h"

#define PROB_EPS 1e-7

/* ---- batch normalization -------------------------------------------------- */

/* Training forward, after the sums S = sum x and SS = sum (x - S/rows)^2
 * (st__cuda_colsum): the reference's formulas in double. */
__global__ void k_bn_train_stats(int rows, int c, const double *sums, const double *sqdev,
                                 float eps, float *mean, float *invstd) {
  GRID_STRIDE(j, (size_t)c) {
    double mu = rows ? sums[j] / rows : 0.0, var = rows ? sqdev[j] / rows : 0.0;
    mean[j] = (float)mu;
    invstd[j] = (float)(1.0 / sqrt(var + eps));
  }
}
__global__ void k_bn_train_apply(int rows, int c, const float *x, const float *gamma,
                                 const float *beta, float eps, const double *sums,
                                 const double *sqdev, float *y) {
  GRID_STRIDE(i, (size_t)rows * c) {
    size_t j = i % c;
    double mu = sums[j] / rows, is = 1.0 / sqrt(sqdev[j] / rows + eps);
    y[i] = (float)(gamma[j] * ((x[i] - mu) * is) + beta[j]);
  }
}
__global__ void k_bn_infer(int rows, int c, const float *x, const float *gamma,
                           const float *beta, const float *mm, const float *mv, float eps,
                           float *y) {
  GRID_STRIDE(i, (size_t)rows * c) {
    size_t j = i % c;
    double is = 1.0 / sqrt((double)mv[j] + eps);
    y[i] = (float)(gamma[j] * ((x[i] - (double)mm[j]) * is) + beta[j]);
  }
}
/* Backward, after sdy = sum dy and sdyx = sum dy * xhat (st__cuda_colsum). */
__global__ void k_bn_backward_params(int c, const double *sdy, const double *sdyx,
                                     float *dgamma, float *dbeta) {
  GRID_STRIDE(j, (size_t)c) {
    dbeta[j] = (float)sdy[j];
    dgamma[j] = (float)sdyx[j];
  }
}
__global__ void k_bn_backward_dx(int rows, int c, const float *x, const float *gamma,
                                 const float *mean, const float *invstd, const float *dy,
                                 const double *sdy, const double *sdyx, float *dx) {
  GRID_STRIDE(i, (size_t)rows * c) {
    size_t j = i % c;
    double k = (double)gamma[j] * invstd[j] / rows;
    double xhat = (x[i] - (double)mean[j]) * invstd[j];
    dx[i] = (float)(k * ((double)rows * dy[i] - sdy[j] - xhat * sdyx[j]));
  }
}

/* ws: two [c] double rows for the sums, the rest scratch for st__cuda_colsum. */
extern "C" void st__cuda_bn_train(cudaStream_t s, int rows, int c, const float *x,
                                  const float *gamma, const float *beta, float eps, float *mean,
                                  float *invstd, float *y, double *ws, size_t ws_doubles) {
  double *sums = ws, *sqdev = ws + c, *scratch = ws + 2 * (size_t)c;
  size_t left = ws_doubles - 2 * (size_t)c;
  st__cuda_colsum(s, ST_CUDA_SUM_A, rows, c, x, NULL, NULL, NULL, NULL, sums, NULL, scratch, left);
  st__cuda_colsum(s, ST_CUDA_SUM_SQDEV, rows, c, x, NULL, sums, NULL, NULL, sqdev, NULL, scratch,
                  left);
  LAUNCH(k_bn_train_stats, (size_t)c, s, rows, c, sums, sqdev, eps, mean, invstd);
  LAUNCH(k_bn_train_apply, (size_t)rows * c, s, rows, c, x, gamma, beta, eps, sums, sqdev, y);
}
extern "C" void st__cuda_bn_infer(cudaStream_t s, int rows, int c, const float *x,
                                  const float *gamma, const float *beta, const float *mm,
                                  const float *mv, float eps, float *y) {
  LAUNCH(k_bn_infer, (size_t)rows * c, s, rows, c, x, gamma, beta, mm, mv, eps, y);
}
extern "C" void st__cuda_bn_backward(cudaStream_t s, int rows, int c, const float *x,
                                     const float *gamma, const float *mean, const float *invstd,
                                     const float *dy, float *dx, float *dgamma, float *dbeta,
                                     double *ws, size_t ws_doubles) {
  double *sdy = ws, *sdyx = ws + c, *scratch = ws + 2 * (size_t)c;
  size_t left = ws_doubles - 2 * (size_t)c;
  st__cuda_colsum(s, ST_CUDA_SUM_A, rows, c, dy, NULL, NULL, NULL, NULL, sdy, NULL, scratch, left);
  st__cuda_colsum(s, ST_CUDA_SUM_B_XHAT, rows, c, x, dy, NULL, mean, invstd, sdyx, NULL, scratch,
                  left);
  LAUNCH(k_bn_backward_params, (size_t)c, s, c, sdy, sdyx, dgamma, dbeta);
  LAUNCH(k_bn_backward_dx, (size_t)rows * c, s, rows, c, x, gamma, mean, invstd, dy, sdy, sdyx,
         dx);
}

/* ---- dropout: Philox4x32-10 exactly as st_philox4x32 ---------------------- */

__device__ void philox4x32(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]) {
  uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), (uint32_t)stream,
                   (uint32_t)(stream >> 32)};
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = (uint32_t)p1;
    c[2] = n2;
    c[3] = (uint32_t)p0;
  }
  for (int i = 0; i < 4; i++) out[i] = c[i];
}
__global__ void k_dropout(size_t n, float rate, uint64_t seed, uint64_t stream, const float *x,
                          float *y) {
  float keep_scale = 1.0f / (1.0f - rate);
  GRID_STRIDE(i, n) {
    uint32_t w[4];
    philox4x32(seed, stream, (uint64_t)(i / 4), w);
    float u = (float)(w[i % 4] >> 8) * (1.0f / 16777216.0f);
    y[i] = u >= rate ? x[i] * keep_scale : 0.0f;
  }
}
extern "C" void st__cuda_dropout(cudaStream_t s, size_t n, float rate, uint64_t seed,
                                 uint64_t stream, const float *x, float *y) {
  LAUNCH(k_dropout, n, s, n, rate, seed, stream, x, y);
}

/* ---- losses: one thread per row, the reference's formulas ----------------- */

__device__ double clip_prob(double p) {
  return p < PROB_EPS ? PROB_EPS : (p > 1.0 - PROB_EPS ? 1.0 - PROB_EPS : p);
}
__device__ double clip_grad(double p) { return p >= PROB_EPS && p <= 1.0 - PROB_EPS ? 1.0 : 0.0; }
__device__ double target(const float *yrow, int label, bool sparse, int j) {
  return sparse ? (j == label ? 1.0 : 0.0) : (double)yrow[j];
}
__device__ double sigmoid(double x) {
  return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}
__device__ double ce_logits_row(int cols, const float *z, const float *yrow, int label,
                                bool sparse, float scale, float *d) {
  double mx = -INFINITY, se = 0.0, st = 0.0, stz = 0.0;
  for (int j = 0; j < cols; j++) mx = fmax(mx, (double)z[j]);
  for (int j = 0; j < cols; j++) se += exp((double)z[j] - mx);
  double lse = mx + log(se);
  for (int j = 0; j < cols; j++) {
    double t = target(yrow, label, sparse, j);
    st += t;
    stz += t * z[j];
  }
  if (d)
    for (int j = 0; j < cols; j++)
      d[j] = (float)(scale * (exp((double)z[j] - lse) * st - target(yrow, label, sparse, j)));
  return lse * st - stz;
}
__device__ double ce_probs_row(int cols, const float *p, const float *yrow, int label,
                               bool sparse, float scale, float *d) {
  double s = 0.0, loss = 0.0, gq = 0.0;
  for (int j = 0; j < cols; j++) s += p[j];
  for (int j = 0; j < cols; j++) {
    double q = p[j] / s, t = target(yrow, label, sparse, j);
    loss -= t == 0.0 ? 0.0 : t * log(clip_prob(q));
    gq += -t / clip_prob(q) * clip_grad(q) * q;
  }
  if (d)
    for (int j = 0; j < cols; j++) {
      double q = p[j] / s, t = target(yrow, label, sparse, j);
      double g = -t / clip_prob(q) * clip_grad(q);
      d[j] = (float)(scale * (g - gq) / s);
    }
  return loss;
}
__device__ double bce_row(int cols, const float *p, const float *t, float scale, float *d,
                          bool logits) {
  double loss = 0.0;
  for (int j = 0; j < cols; j++) {
    double pj = p[j], tj = t[j];
    if (logits) {
      loss += fmax(pj, 0.0) - pj * tj + log1p(exp(-fabs(pj)));
      if (d) d[j] = (float)(scale * (sigmoid(pj) - tj) / cols);
    } else {
      double pc = clip_prob(pj);
      loss -= tj * log(pc) + (1.0 - tj) * log(1.0 - pc);
      if (d) d[j] = (float)(scale * clip_grad(pj) * (-tj / pc + (1.0 - tj) / (1.0 - pc)) / cols);
    }
  }
  return loss / cols;
}
__device__ double mse_row(int cols, const float *p, const float *t, float scale, float *d) {
  double loss = 0.0;
  for (int j = 0; j < cols; j++) {
    double e = (double)p[j] - t[j];
    loss += e * e;
    if (d) d[j] = (float)(scale * 2.0 * e / cols);
  }
  return loss / cols;
}
__global__ void k_loss(int kind, int rows, int cols, const float *pred, const float *y,
                       float scale, float *loss, float *dpred) {
  bool sparse = kind == ST_LOSS_SPARSE_CE_LOGITS || kind == ST_LOSS_SPARSE_CE;
  GRID_STRIDE(r, (size_t)rows) {
    const float *yrow = sparse ? y + r : y + r * cols, *p = pred + r * cols;
    float *d = dpred ? dpred + r * cols : NULL;
    int label = 0;
    if (sparse) {
      float v = yrow[0];
      label = (!(v >= 0.0f) || v >= (float)cols || v != floorf(v)) ? -1 : (int)v;
    }
    double l;
    if (sparse && label < 0) {
      if (d)
        for (int j = 0; j < cols; j++) d[j] = 0.0f;
      l = NAN;
    } else if (kind == ST_LOSS_SPARSE_CE_LOGITS || kind == ST_LOSS_CE_LOGITS) {
      l = ce_logits_row(cols, p, yrow, label, sparse, scale, d);
    } else if (kind == ST_LOSS_SPARSE_CE || kind == ST_LOSS_CE) {
      l = ce_probs_row(cols, p, yrow, label, sparse, scale, d);
    } else if (kind == ST_LOSS_BCE || kind == ST_LOSS_BCE_LOGITS) {
      l = bce_row(cols, p, yrow, scale, d, kind == ST_LOSS_BCE_LOGITS);
    } else {
      l = mse_row(cols, p, yrow, scale, d);
    }
    loss[r] = (float)l;
  }
}
extern "C" void st__cuda_loss(cudaStream_t s, int kind, int rows, int cols, const float *pred,
                              const float *y, float scale, float *loss, float *dpred) {
  LAUNCH(k_loss, (size_t)rows, s, kind, rows, cols, pred, y, scale, loss, dpred);
}

/* ---- optimizers (Keras 3 forms, as the reference) ------------------------- */

__global__ void k_sgd(size_t n, float lr, float momentum, bool nesterov, float *p,
                      const float *g, float *v) {
  GRID_STRIDE(i, n) {
    if (!v) {
      p[i] -= lr * g[i];
      continue;
    }
    v[i] = momentum * v[i] - lr * g[i];
    p[i] += nesterov ? momentum * v[i] - lr * g[i] : v[i];
  }
}
__global__ void k_adam(size_t n, double alpha, float lr, float beta1, float beta2, float eps,
                       float wd, float *p, const float *g, float *m, float *v) {
  GRID_STRIDE(i, n) {
    if (wd > 0.0f) p[i] -= lr * wd * p[i];
    m[i] += (g[i] - m[i]) * (1.0f - beta1);
    v[i] += (g[i] * g[i] - v[i]) * (1.0f - beta2);
    p[i] = (float)(p[i] - alpha * m[i] / (sqrt((double)v[i]) + eps));
  }
}
__global__ void k_rmsprop(size_t n, float lr, float rho, float momentum, float eps, float *p,
                          const float *g, float *ms, float *mom) {
  GRID_STRIDE(i, n) {
    ms[i] = rho * ms[i] + (1.0f - rho) * g[i] * g[i];
    float inc = (float)(lr * g[i] / sqrt((double)ms[i] + eps));
    if (momentum > 0.0f && mom) {
      mom[i] = momentum * mom[i] + inc;
      p[i] -= mom[i];
    } else {
      p[i] -= inc;
    }
  }
}
extern "C" void st__cuda_sgd(cudaStream_t s, size_t n, float lr, float momentum, bool nesterov,
                             float *p, const float *g, float *v) {
  LAUNCH(k_sgd, n, s, n, lr, momentum, nesterov, p, g, v);
}
extern "C" void st__cuda_adam(cudaStream_t s, size_t n, double alpha, float lr, float beta1,
                              float beta2, float eps, float weight_decay, float *p,
                              const float *g, float *m, float *v) {
  LAUNCH(k_adam, n, s, n, alpha, lr, beta1, beta2, eps, weight_decay, p, g, m, v);
}
extern "C" void st__cuda_rmsprop(cudaStream_t s, size_t n, float lr, float rho, float momentum,
                                 float eps, float *p, const float *g, float *ms, float *mom) {
  LAUNCH(k_rmsprop, n, s, n, lr, rho, momentum, eps, p, g, ms, mom);
}
