/* The reference backend: every kernel of st_backend in plain, obviously-correct
 * C, accumulating in double where it helps. These are the ground truth that
 * tests/test_kernels.c compares the fast backends against and that
 * tests/test_gradcheck.c differentiates numerically; speed is not a goal.
 * Host memory only. Stateless (its contexts carry nothing), so any thread may
 * call any kernel at once on disjoint buffers. */
#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "backend/impl.h"

/* Keras backend epsilon: probabilities are clipped to [EPS, 1-EPS]. */
#define PROB_EPS 1e-7

/* ---- memory --------------------------------------------------------------- */

static void *ref_alloc(st_backend_ctx *ctx, size_t bytes) { return st_alloc(bytes); }
static void ref_free(st_backend_ctx *ctx, void *p) { st_free(p); }

/* ---- BLAS-like ------------------------------------------------------------ */

/* C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C. A is [m,lda] (or [k,lda]
 * when trans_a), B is [k,ldb] (or [n,ldb] when trans_b). beta == 0 does not
 * read C (BLAS convention: C may hold garbage). */
static void ref_gemm(st_backend_ctx *ctx, bool trans_a, bool trans_b, int m, int n, int k,
                     float alpha, const float *a, int lda, const float *b,
                     int ldb, float beta, float *c, int ldc) {
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      double acc = 0.0;
      for (int p = 0; p < k; p++) {
        double av = trans_a ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        double bv = trans_b ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        acc += av * bv;
      }
      float *cij = &c[(size_t)i * ldc + j];
      double old = beta == 0.0f ? 0.0 : (double)beta * *cij;
      *cij = (float)(alpha * acc + old);
    }
  }
}

static void ref_axpy(st_backend_ctx *ctx, size_t n, float alpha, const float *x, float *y) {
  for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

static void ref_scale(st_backend_ctx *ctx, size_t n, float alpha, float *x) {
  for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

static void ref_fill(st_backend_ctx *ctx, size_t n, float value, float *x) {
  for (size_t i = 0; i < n; i++) x[i] = value;
}

/* ---- bias and activations ------------------------------------------------- */

static void ref_bias_add(st_backend_ctx *ctx, int rows, int cols, const float *bias, float *y) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) y[(size_t)r * cols + j] += bias[j];
}

static void ref_bias_grad(st_backend_ctx *ctx, int rows, int cols, const float *dy, float *db) {
  for (int j = 0; j < cols; j++) {
    double acc = 0.0;
    for (int r = 0; r < rows; r++) acc += dy[(size_t)r * cols + j];
    db[j] = (float)acc;
  }
}

/* Numerically stable softmax of one row x[cols] into y[cols] (x == y ok). */
static void softmax_row(int cols, const float *x, float *y) {
  double mx = -INFINITY, sum = 0.0;
  for (int j = 0; j < cols; j++) mx = fmax(mx, x[j]);
  for (int j = 0; j < cols; j++) sum += exp((double)x[j] - mx);
  for (int j = 0; j < cols; j++) y[j] = (float)(exp((double)x[j] - mx) / sum);
}

static double act_scalar(st_activation act, double x) {
  switch (act) {
    case ST_ACT_RELU: return x < 0.0 ? 0.0 : x; /* NaN propagates */
    case ST_ACT_SIGMOID:
      return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case ST_ACT_TANH: return tanh(x);
    case ST_ACT_ELU: return x > 0.0 ? x : expm1(x);
    case ST_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case ST_ACT_RELU6: return x < 0.0 ? 0.0 : x > 6.0 ? 6.0 : x;
    case ST_ACT_LEAKY_RELU: return x < 0.0 ? 0.2 * x : x;
    case ST_ACT_GELU_TANH: /* sqrt(2/pi) = 0.79788... */
      return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    default: return x; /* linear (softmax is handled row-wise) */
  }
}

/* y[rows,cols] = act(x[rows,cols]); x == y allowed. */
static void ref_act_forward(st_backend_ctx *ctx, st_activation act, int rows, int cols,
                            const float *x, float *y) {
  if (act == ST_ACT_SOFTMAX) {
    for (int r = 0; r < rows; r++)
      softmax_row(cols, x + (size_t)r * cols, y + (size_t)r * cols);
    return;
  }
  size_t n = (size_t)rows * cols;
  for (size_t i = 0; i < n; i++) y[i] = (float)act_scalar(act, x[i]);
}

/* act'(.) from the output y for every activation but the GELUs, which need x
 * (so this works whatever st_activation_needs_input says for the others). */
static double act_deriv(st_activation act, double x, double y) {
  switch (act) {
    case ST_ACT_RELU: return y > 0.0 ? 1.0 : 0.0;
    case ST_ACT_SIGMOID: return y * (1.0 - y);
    case ST_ACT_TANH: return 1.0 - y * y;
    case ST_ACT_ELU: return y > 0.0 ? 1.0 : y + 1.0;
    case ST_ACT_GELU:
      return 0.5 * (1.0 + erf(x / sqrt(2.0))) +
             x * exp(-0.5 * x * x) * 0.39894228040143267794; /* 1/sqrt(2 pi) */
    case ST_ACT_RELU6: return y > 0.0 && y < 6.0 ? 1.0 : 0.0;
    case ST_ACT_LEAKY_RELU: return y > 0.0 ? 1.0 : 0.2;
    case ST_ACT_GELU_TANH: {
      double k = 0.79788456080286535588, t = tanh(k * (x + 0.044715 * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
    }
    default: return 1.0;
  }
}

/* dx = dy * act'(.) (softmax: full Jacobian per row); dx == dy allowed. */
static void ref_act_backward(st_backend_ctx *ctx, st_activation act, int rows, int cols,
                             const float *x, const float *y, const float *dy,
                             float *dx) {
  if (act == ST_ACT_SOFTMAX) {
    for (int r = 0; r < rows; r++) {
      const float *yr = y + (size_t)r * cols, *dyr = dy + (size_t)r * cols;
      float *dxr = dx + (size_t)r * cols;
      double dot = 0.0;
      for (int j = 0; j < cols; j++) dot += (double)dyr[j] * yr[j];
      for (int j = 0; j < cols; j++)
        dxr[j] = (float)((double)yr[j] * ((double)dyr[j] - dot));
    }
    return;
  }
  size_t n = (size_t)rows * cols;
  for (size_t i = 0; i < n; i++) {
    double xi = x ? x[i] : 0.0, yi = y ? y[i] : 0.0;
    dx[i] = (float)((double)dy[i] * act_deriv(act, xi, yi));
  }
}

/* ---- convolution helpers -------------------------------------------------- */

/* Offset in x[h,w,c] of pixel (iy, ix) read by output cell (oy, ox) at kernel
 * tap (ky, kx), or -1 when that tap falls in the zero padding. */
static long conv_src(const st_conv_geom *g, int oy, int ox, int ky, int kx) {
  int iy = oy * g->sh - g->pad_top + ky, ix = ox * g->sw - g->pad_left + kx;
  if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) return -1;
  return ((long)iy * g->w + ix) * g->c;
}

/* col[oh*ow, kh*kw*c] from x[h,w,c]; padding cells are 0. Row (oy*ow + ox),
 * column (ky*kw + kx)*c + ci. */
static void ref_im2col(st_backend_ctx *ctx, const st_conv_geom *g, const float *x, float *col) {
  for (int oy = 0; oy < g->oh; oy++)
    for (int ox = 0; ox < g->ow; ox++)
      for (int ky = 0; ky < g->kh; ky++)
        for (int kx = 0; kx < g->kw; kx++) {
          long src = conv_src(g, oy, ox, ky, kx);
          for (int ci = 0; ci < g->c; ci++)
            *col++ = src < 0 ? 0.0f : x[src + ci];
        }
}

/* dx[h,w,c] += adjoint scatter of col[oh*ow, kh*kw*c] (same order as above). */
static void ref_col2im(st_backend_ctx *ctx, const st_conv_geom *g, const float *col, float *dx) {
  for (int oy = 0; oy < g->oh; oy++)
    for (int ox = 0; ox < g->ow; ox++)
      for (int ky = 0; ky < g->kh; ky++)
        for (int kx = 0; kx < g->kw; kx++) {
          long src = conv_src(g, oy, ox, ky, kx);
          for (int ci = 0; ci < g->c; ci++, col++)
            if (src >= 0) dx[src + ci] += *col;
        }
}

/* ---- pooling -------------------------------------------------------------- */

/* Index into x[n,h,w,c]. */
static size_t pidx(const st_pool_geom *g, int n, int y, int x, int c) {
  return (((size_t)n * g->h + y) * g->w + x) * g->c + c;
}

/* Valid window bounds [y0,y1) x [x0,x1) of output cell (oy, ox). */
static void pool_window(const st_pool_geom *g, int oy, int ox, int *y0,
                        int *y1, int *x0, int *x1) {
  int sy = oy * g->sh - g->pad_top, sx = ox * g->sw - g->pad_left;
  *y0 = sy < 0 ? 0 : sy;
  *x0 = sx < 0 ? 0 : sx;
  *y1 = sy + g->ph > g->h ? g->h : sy + g->ph;
  *x1 = sx + g->pw > g->w ? g->w : sx + g->pw;
}

/* Index in x of the first (row-major scan) max of one window and channel; a
 * NaN is the max of any window holding one (the first NaN: NaN propagates). */
static size_t pool_argmax(const st_pool_geom *g, const float *x, int n, int oy,
                          int ox, int c) {
  int y0, y1, x0, x1;
  pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
  size_t best = pidx(g, n, y0, x0, c);
  for (int y = y0; y < y1; y++)
    for (int xx = x0; xx < x1; xx++) {
      size_t i = pidx(g, n, y, xx, c);
      if (x[i] > x[best] || (isnan(x[i]) && !isnan(x[best]))) best = i;
    }
  return best;
}

/* y[n,oh,ow,c] = max over each window of x[n,h,w,c]. */
static void ref_maxpool_forward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                                float *y) {
  size_t o = 0;
  for (int n = 0; n < g->n; n++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (int c = 0; c < g->c; c++) y[o++] = x[pool_argmax(g, x, n, oy, ox, c)];
}

static void ref_maxpool_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                                 const float *y, const float *dy, float *dx) {
  memset(dx, 0, sizeof(float) * (size_t)g->n * g->h * g->w * g->c);
  size_t o = 0;
  for (int n = 0; n < g->n; n++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (int c = 0; c < g->c; c++, o++) {
          size_t i = pool_argmax(g, x, n, oy, ox, c);
          /* x a ReLU output: ReLU's derivative too (1 where x > 0) */
          if (!g->relu_input || x[i] > 0.0f) dx[i] += dy[o];
        }
}

/* Mean over the in-image cells of each window (padding excluded). */
static void ref_avgpool_forward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                                float *y) {
  size_t o = 0;
  for (int n = 0; n < g->n; n++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++) {
        int y0, y1, x0, x1;
        pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
        double cnt = (double)(y1 - y0) * (x1 - x0);
        for (int c = 0; c < g->c; c++) {
          double acc = 0.0;
          for (int yy = y0; yy < y1; yy++)
            for (int xx = x0; xx < x1; xx++) acc += x[pidx(g, n, yy, xx, c)];
          y[o++] = (float)(acc / cnt);
        }
      }
}

static void ref_avgpool_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *dy,
                                 float *dx) {
  memset(dx, 0, sizeof(float) * (size_t)g->n * g->h * g->w * g->c);
  size_t o = 0;
  for (int n = 0; n < g->n; n++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++) {
        int y0, y1, x0, x1;
        pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
        float inv = (float)(1.0 / ((double)(y1 - y0) * (x1 - x0)));
        for (int c = 0; c < g->c; c++, o++)
          for (int yy = y0; yy < y1; yy++)
            for (int xx = x0; xx < x1; xx++)
              dx[pidx(g, n, yy, xx, c)] += dy[o] * inv;
      }
}

/* ---- batch normalization -------------------------------------------------- */

/* mean[c], invstd[c] = 1/sqrt(biased var + eps) over rows of x[rows,c]; then
 * y = gamma * (x - mean) * invstd + beta. rows == 0 gives mean 0, var 0. */
static void ref_bn_train(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                         const float *beta, float eps, float *mean,
                         float *invstd, float *y) {
  for (int j = 0; j < c; j++) {
    double s = 0.0, ss = 0.0;
    for (int r = 0; r < rows; r++) s += x[(size_t)r * c + j];
    double mu = rows ? s / rows : 0.0;
    for (int r = 0; r < rows; r++) {
      double d = x[(size_t)r * c + j] - mu;
      ss += d * d;
    }
    double var = rows ? ss / rows : 0.0, is = 1.0 / sqrt(var + eps);
    mean[j] = (float)mu;
    invstd[j] = (float)is;
    for (int r = 0; r < rows; r++) {
      size_t i = (size_t)r * c + j;
      y[i] = (float)(gamma[j] * ((x[i] - mu) * is) + beta[j]);
    }
  }
}

static void ref_bn_infer(st_backend_ctx *ctx, int rows, int c, const float *x, const float *gamma,
                         const float *beta, const float *moving_mean,
                         const float *moving_var, float eps, float *y) {
  for (int j = 0; j < c; j++) {
    double is = 1.0 / sqrt((double)moving_var[j] + eps);
    for (int r = 0; r < rows; r++) {
      size_t i = (size_t)r * c + j;
      y[i] = (float)(gamma[j] * ((x[i] - (double)moving_mean[j]) * is) + beta[j]);
    }
  }
}

/* With xhat = (x - mean) * invstd over N = rows:
 * dbeta = sum dy, dgamma = sum dy*xhat,
 * dx = gamma*invstd/N * (N*dy - dbeta - xhat*dgamma). */
static void ref_bn_backward(st_backend_ctx *ctx, int rows, int c, const float *x,
                            const float *gamma, const float *mean,
                            const float *invstd, const float *dy, float *dx,
                            float *dgamma, float *dbeta) {
  for (int j = 0; j < c; j++) {
    double sdy = 0.0, sdyx = 0.0;
    for (int r = 0; r < rows; r++) {
      size_t i = (size_t)r * c + j;
      sdy += dy[i];
      sdyx += (double)dy[i] * ((x[i] - (double)mean[j]) * invstd[j]);
    }
    dbeta[j] = (float)sdy;
    dgamma[j] = (float)sdyx;
    double k = (double)gamma[j] * invstd[j] / (rows ? rows : 1);
    for (int r = 0; r < rows; r++) {
      size_t i = (size_t)r * c + j;
      double xhat = (x[i] - (double)mean[j]) * invstd[j];
      dx[i] = (float)(k * ((double)rows * dy[i] - sdy - xhat * sdyx));
    }
  }
}

/* ---- dropout -------------------------------------------------------------- */

static bool dropout_kept(uint64_t seed, uint64_t stream, size_t i, float rate) {
  uint32_t w[4];
  st_philox4x32(seed, stream, (uint64_t)(i / 4), w);
  return st_u32_to_unit(w[i % 4]) >= rate;
}

/* y = x * mask / (1 - rate); the same function serves backward (dy -> dx). */
static void ref_dropout_forward(st_backend_ctx *ctx, size_t n, float rate, uint64_t seed,
                                uint64_t stream, const float *x, float *y) {
  float keep_scale = 1.0f / (1.0f - rate);
  for (size_t i = 0; i < n; i++)
    y[i] = dropout_kept(seed, stream, i, rate) ? x[i] * keep_scale : 0.0f;
}

static void ref_dropout_backward(st_backend_ctx *ctx, size_t n, float rate, uint64_t seed,
                                 uint64_t stream, const float *dy, float *dx) {
  ref_dropout_forward(ctx, n, rate, seed, stream, dy, dx);
}

/* ---- losses --------------------------------------------------------------- */

static double clip_prob(double p) {
  return p < PROB_EPS ? PROB_EPS : (p > 1.0 - PROB_EPS ? 1.0 - PROB_EPS : p);
}
/* d clip(p)/dp: 1 inside [EPS, 1-EPS] (inclusive, as tf.clip_by_value), else 0. */
static double clip_grad(double p) {
  return p >= PROB_EPS && p <= 1.0 - PROB_EPS ? 1.0 : 0.0;
}

/* Label of row r as a class index, or -1 when not an integer in [0, cols). */
static int sparse_label(float v, int cols) {
  if (!(v >= 0.0f) || v >= (float)cols || v != floorf(v)) return -1;
  return (int)v;
}

/* Target t_j of one row: one-hot of a sparse label, or the dense row. */
static double target(const float *yrow, int label, bool sparse, int j) {
  return sparse ? (j == label ? 1.0 : 0.0) : (double)yrow[j];
}

/* Cross-entropy from logits z[cols] (sparse or one-hot target):
 * loss = sum_j t_j (lse - z_j); d/dz_i = softmax_i * sum(t) - t_i. */
static double ce_logits_row(int cols, const float *z, const float *yrow,
                            int label, bool sparse, float scale, float *d) {
  double mx = -INFINITY, se = 0.0, st = 0.0, stz = 0.0;
  for (int j = 0; j < cols; j++) mx = fmax(mx, z[j]);
  for (int j = 0; j < cols; j++) se += exp((double)z[j] - mx);
  double lse = mx + log(se);
  for (int j = 0; j < cols; j++) {
    double t = target(yrow, label, sparse, j);
    st += t;
    stz += t * z[j];
  }
  if (d)
    for (int j = 0; j < cols; j++)
      d[j] = (float)(scale * (exp((double)z[j] - lse) * st -
                              target(yrow, label, sparse, j)));
  return lse * st - stz;
}

/* Cross-entropy on probabilities p[cols], as Keras: q = p / sum(p),
 * qc = clip(q), loss = -sum_j t_j log(qc_j). With g_j = dloss/dq_j =
 * -t_j/qc_j * clip'(q_j): dloss/dp_i = (g_i - sum_j g_j q_j) / sum(p). */
static double ce_probs_row(int cols, const float *p, const float *yrow,
                           int label, bool sparse, float scale, float *d) {
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

/* Binary CE on probabilities, mean over cols:
 * -(t log pc + (1-t) log(1-pc)), pc = clip(p). */
static double bce_row(int cols, const float *p, const float *t, float scale,
                      float *d) {
  double loss = 0.0;
  for (int j = 0; j < cols; j++) {
    double pc = clip_prob(p[j]), tj = t[j];
    loss -= tj * log(pc) + (1.0 - tj) * log(1.0 - pc);
    if (d)
      d[j] = (float)(scale * clip_grad(p[j]) *
                     (-tj / pc + (1.0 - tj) / (1.0 - pc)) / cols);
  }
  return loss / cols;
}

/* Binary CE from logits, mean over cols (stable form as TF):
 * max(z,0) - z t + log(1 + exp(-|z|)); d/dz = sigmoid(z) - t. */
static double bce_logits_row(int cols, const float *z, const float *t,
                             float scale, float *d) {
  double loss = 0.0;
  for (int j = 0; j < cols; j++) {
    double zj = z[j], tj = t[j];
    loss += fmax(zj, 0.0) - zj * tj + log1p(exp(-fabs(zj)));
    if (d) d[j] = (float)(scale * (act_scalar(ST_ACT_SIGMOID, zj) - tj) / cols);
  }
  return loss / cols;
}

/* Mean squared error over cols; d/dp = 2 (p - t) / cols. */
static double mse_row(int cols, const float *p, const float *t, float scale,
                      float *d) {
  double loss = 0.0;
  for (int j = 0; j < cols; j++) {
    double e = (double)p[j] - t[j];
    loss += e * e;
    if (d) d[j] = (float)(scale * 2.0 * e / cols);
  }
  return loss / cols;
}

/* One row of any loss kind; d (dpred row) may be NULL. */
static double loss_row(st_loss_kind kind, int cols, const float *pred,
                       const float *yrow, float scale, float *d) {
  bool sparse = kind == ST_LOSS_SPARSE_CE_LOGITS || kind == ST_LOSS_SPARSE_CE;
  int label = sparse ? sparse_label(yrow[0], cols) : 0;
  if (sparse && label < 0) { /* bad label: NaN loss, no gradient */
    if (d) memset(d, 0, sizeof(float) * (size_t)cols);
    return NAN;
  }
  switch (kind) {
    case ST_LOSS_SPARSE_CE_LOGITS:
    case ST_LOSS_CE_LOGITS:
      return ce_logits_row(cols, pred, yrow, label, sparse, scale, d);
    case ST_LOSS_SPARSE_CE:
    case ST_LOSS_CE:
      return ce_probs_row(cols, pred, yrow, label, sparse, scale, d);
    case ST_LOSS_BCE: return bce_row(cols, pred, yrow, scale, d);
    case ST_LOSS_BCE_LOGITS: return bce_logits_row(cols, pred, yrow, scale, d);
    default: return mse_row(cols, pred, yrow, scale, d);
  }
}

/* loss[rows] per example; dpred[rows,cols] = scale * dloss/dpred (or NULL).
 * A sparse label that is not an integer in [0, cols) gives loss NaN and a zero
 * gradient row (callers validate labels; this keeps the kernel total). */
static void ref_loss(st_backend_ctx *ctx, st_loss_kind kind, int rows, int cols, const float *pred,
                     const float *y, float scale, float *loss, float *dpred) {
  bool sparse = kind == ST_LOSS_SPARSE_CE_LOGITS || kind == ST_LOSS_SPARSE_CE;
  for (int r = 0; r < rows; r++) {
    const float *yrow = sparse ? y + r : y + (size_t)r * cols;
    float *d = dpred ? dpred + (size_t)r * cols : NULL;
    loss[r] = (float)loss_row(kind, cols, pred + (size_t)r * cols, yrow, scale, d);
  }
}

/* ---- optimizers (Keras 3 forms) ------------------------------------------- */

/* v = momentum*v - lr*g; p += v, or nesterov p += momentum*v - lr*g.
 * v == NULL (no momentum slot): p -= lr*g. */
static void ref_sgd(st_backend_ctx *ctx, size_t n, float lr, float momentum, bool nesterov,
                    float *p, const float *g, float *v) {
  for (size_t i = 0; i < n; i++) {
    if (!v) {
      p[i] -= lr * g[i];
      continue;
    }
    v[i] = momentum * v[i] - lr * g[i];
    p[i] += nesterov ? momentum * v[i] - lr * g[i] : v[i];
  }
}

/* Keras Adam: alpha = lr*sqrt(1-b2^t)/(1-b1^t); m += (g-m)(1-b1);
 * v += (g^2-v)(1-b2); p -= alpha*m/(sqrt(v)+eps) — eps is added to sqrt(v),
 * not to sqrt(v_hat). AdamW first does p -= lr*wd*p. */
static void ref_adam(st_backend_ctx *ctx, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int64_t t, float *p, const float *g,
                     float *m, float *v) {
  double alpha = lr * sqrt(1.0 - pow(beta2, (double)t)) /
                 (1.0 - pow(beta1, (double)t));
  for (size_t i = 0; i < n; i++) {
    if (weight_decay > 0.0f) p[i] -= lr * weight_decay * p[i];
    m[i] += (g[i] - m[i]) * (1.0f - beta1);
    v[i] += (g[i] * g[i] - v[i]) * (1.0f - beta2);
    p[i] = (float)(p[i] - alpha * m[i] / (sqrt((double)v[i]) + eps));
  }
}

/* Keras RMSprop: ms = rho*ms + (1-rho) g^2; inc = lr*g/sqrt(ms + eps) (Keras
 * puts eps INSIDE the sqrt); momentum > 0: mom = momentum*mom + inc, p -= mom;
 * else p -= inc (mom unused, may be NULL). */
static void ref_rmsprop(st_backend_ctx *ctx, size_t n, float lr, float rho, float momentum,
                        float eps, float *p, const float *g, float *ms,
                        float *mom) {
  for (size_t i = 0; i < n; i++) {
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

/* ---- the table ------------------------------------------------------------ */

static const st_backend reference_backend = {
    .name = "reference",
    /* ctx_create, ctx_destroy, to_device, to_host, synchronize: NULL (no
     * per-context state, host memory, synchronous kernels). */
    .alloc = ref_alloc,
    .free = ref_free,
    .gemm = ref_gemm,
    .axpy = ref_axpy,
    .scale = ref_scale,
    .fill = ref_fill,
    .bias_add = ref_bias_add,
    .bias_grad = ref_bias_grad,
    .act_forward = ref_act_forward,
    .act_backward = ref_act_backward,
    .im2col = ref_im2col,
    .col2im = ref_col2im,
    .maxpool_forward = ref_maxpool_forward,
    .maxpool_backward = ref_maxpool_backward,
    .avgpool_forward = ref_avgpool_forward,
    .avgpool_backward = ref_avgpool_backward,
    .batchnorm_forward_train = ref_bn_train,
    .batchnorm_forward_infer = ref_bn_infer,
    .batchnorm_backward = ref_bn_backward,
    .dropout_forward = ref_dropout_forward,
    .dropout_backward = ref_dropout_backward,
    .loss = ref_loss,
    .sgd_update = ref_sgd,
    .adam_update = ref_adam,
    .rmsprop_update = ref_rmsprop,
};

/* Completeness (backend/impl.h): 25 required slots filled above; update the count
 * after filling a new slot. */
_Static_assert(ST__BACKEND_SLOTS == 25, "st_backend changed: fill the new slot here");

/* Any thread. The table is immutable. */
const st_backend *st_backend_reference(void) {
  ST_ASSERT(st__backend_table_complete(&reference_backend));
  return &reference_backend;
}
