/* The CUDA backend's kernels (all but gemm, which is cuBLASLt in module.c),
 * each the GPU form of the reference kernel of the same name
 * (src/backend/reference.c), with the launchers cuda_internal.h declares.
 * Determinism: no atomics anywhere; every reduction is done in a fixed
 * order, gather-style, so results do not depend on scheduling: column sums
 * over many rows (bias and batch-norm gradients and statistics) by levels of
 * fixed chunks (st__cuda_colsum below), softmax and loss rows, col2im and
 * pooling backward by one thread each. Row-wise math (softmax, losses,
 * optimizer steps) is in double as in the reference. Every kernel is
 * per-element code (no shared memory, barriers or warp shuffles), which the
 * emulated runtime of tests/cuda_emu runs as plain loops; fused kernels and
 * block reductions are open points of docs/GPU.md. */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/launch.h"

/* ---- BLAS-like ------------------------------------------------------------ */

__global__ void k_axpy(size_t n, float a, const float *x, float *y) { GRID_STRIDE(i, n) y[i] += a * x[i]; }
__global__ void k_scale(size_t n, float a, float *x) { GRID_STRIDE(i, n) x[i] *= a; }
__global__ void k_fill(size_t n, float v, float *x) { GRID_STRIDE(i, n) x[i] = v; }
/* C[i, 0:n] *= beta; beta == 0 overwrites with 0 (NaNs vanish, BLAS rule). */
__global__ void k_scale_matrix(int m, int n, float beta, float *c, int ldc) {
  GRID_STRIDE(i, (size_t)m * n) {
    float *p = c + (i / n) * (size_t)ldc + i % n;
    *p = beta == 0.0f ? 0.0f : *p * beta;
  }
}

extern "C" void st__cuda_axpy(cudaStream_t s, size_t n, float alpha, const float *x, float *y) {
  LAUNCH(k_axpy, n, s, n, alpha, x, y);
}
extern "C" void st__cuda_scale(cudaStream_t s, size_t n, float alpha, float *x) {
  LAUNCH(k_scale, n, s, n, alpha, x);
}
extern "C" void st__cuda_fill(cudaStream_t s, size_t n, float value, float *x) {
  LAUNCH(k_fill, n, s, n, value, x);
}
extern "C" void st__cuda_scale_matrix(cudaStream_t s, int m, int n, float beta, float *c, int ldc) {
  if (beta != 1.0f) LAUNCH(k_scale_matrix, (size_t)m * n, s, m, n, beta, c, ldc);
}

/* ---- bias and activations ------------------------------------------------- */

template <typename I> __global__ void k_bias_add(int rows, int cols, const float *bias, float *y) {
  GRID_STRIDE_T(I, i, (I)rows * cols) y[i] += bias[i % (I)cols];
}
__device__ double act_scalar(int act, double x) {
  switch (act) {
    case ST_ACT_RELU: return x < 0.0 ? 0.0 : x;
    case ST_ACT_SIGMOID: return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case ST_ACT_TANH: return tanh(x);
    case ST_ACT_ELU: return x > 0.0 ? x : expm1(x);
    case ST_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case ST_ACT_RELU6: return x < 0.0 ? 0.0 : x > 6.0 ? 6.0 : x;
    case ST_ACT_LEAKY_RELU: return x < 0.0 ? 0.2 * x : x;
    case ST_ACT_GELU_TANH:
      return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    default: return x;
  }
}
__device__ double act_deriv(int act, double x, double y) {
  switch (act) {
    case ST_ACT_RELU: return y > 0.0 ? 1.0 : 0.0;
    case ST_ACT_SIGMOID: return y * (1.0 - y);
    case ST_ACT_TANH: return 1.0 - y * y;
    case ST_ACT_ELU: return y > 0.0 ? 1.0 : y + 1.0;
    case ST_ACT_GELU:
      return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) * 0.39894228040143267794;
    case ST_ACT_RELU6: return y > 0.0 && y < 6.0 ? 1.0 : 0.0;
    case ST_ACT_LEAKY_RELU: return y > 0.0 ? 1.0 : 0.2;
    case ST_ACT_GELU_TANH: {
      double k = 0.79788456080286535588, t = tanh(k * (x + 0.044715 * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
    }
    default: return 1.0;
  }
}
__global__ void k_act_forward(int act, size_t n, const float *x, float *y) {
  GRID_STRIDE(i, n) y[i] = (float)act_scalar(act, x[i]);
}
__global__ void k_softmax_forward(int rows, int cols, const float *x, float *y) {
  GRID_STRIDE(r, (size_t)rows) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < cols; j++) mx = fmax(mx, (double)xr[j]);
    for (int j = 0; j < cols; j++) sum += exp((double)xr[j] - mx);
    for (int j = 0; j < cols; j++) yr[j] = (float)(exp((double)xr[j] - mx) / sum);
  }
}
__global__ void k_act_backward(int act, size_t n, const float *x, const float *y,
                               const float *dy, float *dx) {
  GRID_STRIDE(i, n) {
    double xi = x ? x[i] : 0.0, yi = y ? y[i] : 0.0;
    dx[i] = (float)((double)dy[i] * act_deriv(act, xi, yi));
  }
}
__global__ void k_softmax_backward(int rows, int cols, const float *y, const float *dy,
                                   float *dx) {
  GRID_STRIDE(r, (size_t)rows) {
    const float *yr = y + r * cols, *dyr = dy + r * cols;
    float *dxr = dx + r * cols;
    double dot = 0.0;
    for (int j = 0; j < cols; j++) dot += (double)dyr[j] * yr[j];
    for (int j = 0; j < cols; j++) dxr[j] = (float)((double)yr[j] * ((double)dyr[j] - dot));
  }
}

extern "C" void st__cuda_bias_add(cudaStream_t s, int rows, int cols, const float *bias, float *y) {
  LAUNCH_INDEX(k_bias_add, (size_t)rows * cols, (size_t)rows * cols, s, rows, cols, bias, y);
}
extern "C" void st__cuda_act_forward(cudaStream_t s, int act, int rows, int cols, const float *x,
                                     float *y) {
  if (act == ST_ACT_SOFTMAX) LAUNCH(k_softmax_forward, (size_t)rows, s, rows, cols, x, y);
  else LAUNCH(k_act_forward, (size_t)rows * cols, s, act, (size_t)rows * cols, x, y);
}
extern "C" void st__cuda_act_backward(cudaStream_t s, int act, int rows, int cols, const float *x,
                                      const float *y, const float *dy, float *dx) {
  if (act == ST_ACT_SOFTMAX) LAUNCH(k_softmax_backward, (size_t)rows, s, rows, cols, y, dy, dx);
  else LAUNCH(k_act_backward, (size_t)rows * cols, s, act, (size_t)rows * cols, x, y, dy, dx);
}

/* ---- column sums in a fixed order ---------------------------------------- */

/* Sums over the rows of a [rows, cols] term, in double, by levels: level 1
 * sums chunks of `chunk` consecutive rows of the term (one thread per chunk
 * and column, rows in order), each next level chunks of COLSUM_CHUNK
 * partials of the one before, until one row is left. Many threads, each a
 * short loop (one thread per column over 100,000 rows took milliseconds);
 * the order depends only on the shape, so runs repeat bit for bit, and the
 * sums differ from the reference's one-pass double sums by double rounding
 * only. */
#define COLSUM_CHUNK 64

__device__ double colsum_term(int term, size_t i, size_t j, const float *a, const float *b,
                              const double *d, int rows, const float *mean,
                              const float *invstd) {
  switch (term) {
    case ST_CUDA_SUM_SQDEV: { /* d = the column sums of a: the mean is d / rows */
      double v = a[i] - (rows ? d[j] / rows : 0.0);
      return v * v;
    }
    case ST_CUDA_SUM_B_XHAT: return (double)b[i] * ((a[i] - (double)mean[j]) * invstd[j]);
    default: return a[i];
  }
}
__global__ void k_colsum_first(int term, int rows, int cols, int chunk, const float *a,
                               const float *b, const double *d, const float *mean,
                               const float *invstd, double *out, float *out_f) {
  size_t nch = ((size_t)rows + chunk - 1) / chunk;
  GRID_STRIDE(t, nch * (size_t)cols) {
    size_t j = t % cols, r0 = t / cols * (size_t)chunk,
           r1 = r0 + chunk < (size_t)rows ? r0 + chunk : (size_t)rows;
    double acc = 0.0;
    for (size_t r = r0; r < r1; r++) acc += colsum_term(term, r * cols + j, j, a, b, d, rows, mean, invstd);
    if (out_f) out_f[t] = (float)acc;
    else out[t] = acc;
  }
}
__global__ void k_colsum_next(size_t rows, int cols, const double *in, double *out,
                              float *out_f) {
  size_t nch = (rows + COLSUM_CHUNK - 1) / COLSUM_CHUNK;
  GRID_STRIDE(t, nch * (size_t)cols) {
    size_t j = t % cols, r0 = t / cols * COLSUM_CHUNK,
           r1 = r0 + COLSUM_CHUNK < rows ? r0 + COLSUM_CHUNK : rows;
    double acc = 0.0;
    for (size_t r = r0; r < r1; r++) acc += in[r * cols + j];
    if (out_f) out_f[t] = (float)acc;
    else out[t] = acc;
  }
}
__global__ void k_zero_cols(int cols, double *out, float *out_f) {
  GRID_STRIDE(j, (size_t)cols) {
    if (out_f) out_f[j] = 0.0f;
    else out[j] = 0.0;
  }
}
extern "C" void st__cuda_colsum(cudaStream_t s, int term, int rows, int cols, const float *a,
                                const float *b, const double *d, const float *mean,
                                const float *invstd, double *out, float *out_f, double *ws,
                                size_t ws_doubles) {
  if (cols <= 0) return;
  if (rows <= 0) { /* empty sums are 0 */
    LAUNCH(k_zero_cols, (size_t)cols, s, cols, out, out_f);
    return;
  }
  /* level 1's partials in ws[0, n1*cols), level 2's after them; the later
   * levels alternate between the two (each smaller than the last) */
  size_t chunk = COLSUM_CHUNK, n1 = ((size_t)rows + chunk - 1) / chunk;
  while (n1 > 1 && (n1 + (n1 + COLSUM_CHUNK - 1) / COLSUM_CHUNK) * (size_t)cols > ws_doubles) {
    chunk *= 2;
    n1 = ((size_t)rows + chunk - 1) / chunk;
  }
  double *bufs[2] = {ws, ws + n1 * (size_t)cols};
  bool last = n1 == 1;
  LAUNCH(k_colsum_first, n1 * (size_t)cols, s, term, rows, cols, (int)chunk, a, b, d, mean,
         invstd, last ? out : bufs[0], last ? out_f : NULL);
  for (int lv = 0; !last; lv ^= 1) {
    size_t next = (n1 + COLSUM_CHUNK - 1) / COLSUM_CHUNK;
    last = next == 1;
    LAUNCH(k_colsum_next, next * (size_t)cols, s, n1, cols, bufs[lv],
           last ? out : bufs[lv ^ 1], last ? out_f : NULL);
    n1 = next;
  }
}

/* ---- convolution helpers -------------------------------------------------- */

/* im2col of n images: col[img][oh*ow, kh*kw*c], one thread per element of
 * every image. col2im: dx[img][h,w,c] += the col entries that im2col read
 * from it, one thread per dx element gathering them in (oy, ox) order (no
 * scatter, no atomics). */
template <typename I>
__global__ void k_im2col_n(st_conv_geom g, int n, I per_col, I per_x, const float *x, float *col) {
  I kc = (I)g.kh * g.kw * g.c;
  GRID_STRIDE_T(I, j, per_col * (I)n) {
    I img = j / per_col, i = j % per_col;
    I row = i / kc, rest = i % kc;
    int oy = (int)(row / g.ow), ox = (int)(row % g.ow);
    int ky = (int)(rest / ((I)g.kw * g.c)), kx = (int)(rest / g.c % g.kw), ci = (int)(rest % g.c);
    int iy = oy * g.sh - g.pad_top + ky, ix = ox * g.sw - g.pad_left + kx;
    bool in = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
    col[j] = in ? x[img * per_x + ((I)iy * g.w + ix) * g.c + ci] : 0.0f;
  }
}
template <typename I>
__global__ void k_col2im_n(st_conv_geom g, int n, I per_col, I per_x, const float *col, float *dx) {
  I kc = (I)g.kh * g.kw * g.c;
  GRID_STRIDE_T(I, j, per_x * (I)n) {
    I img = j / per_x, i = j % per_x;
    const float *cimg = col + (size_t)img * per_col;
    int ci = (int)(i % g.c), ix = (int)(i / g.c % g.w), iy = (int)(i / g.c / g.w);
    float acc = 0.0f;
    for (int ky = g.kh - 1; ky >= 0; ky--) {
      int ty = iy + g.pad_top - ky;
      if (ty < 0 || ty % g.sh || ty / g.sh >= g.oh) continue;
      for (int kx = g.kw - 1; kx >= 0; kx--) {
        int tx = ix + g.pad_left - kx;
        if (tx < 0 || tx % g.sw || tx / g.sw >= g.ow) continue;
        I row = (I)(ty / g.sh) * g.ow + tx / g.sw;
        acc += cimg[row * kc + ((I)ky * g.kw + kx) * g.c + ci];
      }
    }
    dx[j] += acc;
  }
}
extern "C" void st__cuda_im2col_n(cudaStream_t s, st_conv_geom g, int n, const float *x,
                                  float *col) {
  size_t per_col = (size_t)g.oh * g.ow * g.kh * g.kw * g.c, per_x = (size_t)g.h * g.w * g.c;
  size_t most = (per_col > per_x ? per_col : per_x) * (size_t)n;
  LAUNCH_INDEX(k_im2col_n, per_col * (size_t)n, most, s, g, n, per_col, per_x, x, col);
}
extern "C" void st__cuda_col2im_n(cudaStream_t s, st_conv_geom g, int n, const float *col,
                                  float *dx) {
  size_t per_col = (size_t)g.oh * g.ow * g.kh * g.kw * g.c, per_x = (size_t)g.h * g.w * g.c;
  size_t most = (per_col > per_x ? per_col : per_x) * (size_t)n;
  LAUNCH_INDEX(k_col2im_n, per_x * (size_t)n, most, s, g, n, per_col, per_x, col, dx);
}
extern "C" void st__cuda_im2col(cudaStream_t s, st_conv_geom g, const float *x, float *col) {
  st__cuda_im2col_n(s, g, 1, x, col);
}
extern "C" void st__cuda_col2im(cudaStream_t s, st_conv_geom g, const float *col, float *dx) {
  st__cuda_col2im_n(s, g, 1, col, dx);
}

/* ---- pooling -------------------------------------------------------------- */

template <typename I = size_t>
__device__ I pidx(const st_pool_geom &g, int n, int y, int x, int c) {
  return (((I)n * g.h + y) * g.w + x) * g.c + c;
}
__device__ void pool_window(const st_pool_geom &g, int oy, int ox, int *y0, int *y1, int *x0,
                            int *x1) {
  int sy = oy * g.sh - g.pad_top, sx = ox * g.sw - g.pad_left;
  *y0 = sy < 0 ? 0 : sy;
  *x0 = sx < 0 ? 0 : sx;
  *y1 = sy + g.ph > g.h ? g.h : sy + g.ph;
  *x1 = sx + g.pw > g.w ? g.w : sx + g.pw;
}
/* First max of a window in row-major order; the first NaN wins. */
template <typename I>
__device__ I pool_argmax(const st_pool_geom &g, const float *x, int n, int oy, int ox, int c) {
  int y0, y1, x0, x1;
  pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
  I best = pidx<I>(g, n, y0, x0, c);
  for (int y = y0; y < y1; y++)
    for (int xx = x0; xx < x1; xx++) {
      I i = pidx<I>(g, n, y, xx, c);
      if (x[i] > x[best] || (isnan(x[i]) && !isnan(x[best]))) best = i;
    }
  return best;
}
/* Output cells (oy in [*oy0, *oy1), ox in [*ox0, *ox1)) whose window may hold
 * input row iy / column ix. */
__device__ void covering(int i, int pad, int p, int s, int o, int *lo, int *hi) {
  int t = i + pad; /* window start sy = oy*s - pad <= i < sy + p */
  int a = t - p + 1;
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  *hi = t / s + 1;
  if (*hi > o) *hi = o;
}
template <typename I> __global__ void k_maxpool_forward(st_pool_geom g, const float *x, float *y) {
  GRID_STRIDE_T(I, o, (I)g.n * g.oh * g.ow * g.c) {
    int c = (int)(o % g.c), ox = (int)(o / g.c % g.ow), oy = (int)(o / g.c / g.ow % g.oh),
        n = (int)(o / g.c / g.ow / g.oh);
    y[o] = x[pool_argmax<I>(g, x, n, oy, ox, c)];
  }
}
template <typename I>
__global__ void k_maxpool_backward(st_pool_geom g, const float *x, const float *dy, float *dx) {
  GRID_STRIDE_T(I, i, (I)g.n * g.h * g.w * g.c) {
    int c = (int)(i % g.c), ix = (int)(i / g.c % g.w), iy = (int)(i / g.c / g.w % g.h),
        n = (int)(i / g.c / g.w / g.h);
    int oy0, oy1, ox0, ox1;
    covering(iy, g.pad_top, g.ph, g.sh, g.oh, &oy0, &oy1);
    covering(ix, g.pad_left, g.pw, g.sw, g.ow, &ox0, &ox1);
    float acc = 0.0f;
    if (!g.relu_input || x[i] > 0.0f)
      for (int oy = oy0; oy < oy1; oy++)
        for (int ox = ox0; ox < ox1; ox++)
          if (pool_argmax<I>(g, x, n, oy, ox, c) == i)
            acc += dy[(((I)n * g.oh + oy) * g.ow + ox) * g.c + c];
    dx[i] = acc;
  }
}
__global__ void k_avgpool_forward(st_pool_geom g, const float *x, float *y) {
  GRID_STRIDE(o, (size_t)g.n * g.oh * g.ow * g.c) {
    int c = (int)(o % g.c), ox = (int)(o / g.c % g.ow), oy = (int)(o / g.c / g.ow % g.oh),
        n = (int)(o / g.c / g.ow / g.oh);
    int y0, y1, x0, x1;
    pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
    double acc = 0.0;
    for (int yy = y0; yy < y1; yy++)
      for (int xx = x0; xx < x1; xx++) acc += x[pidx(g, n, yy, xx, c)];
    y[o] = (float)(acc / ((double)(y1 - y0) * (x1 - x0)));
  }
}
__global__ void k_avgpool_backward(st_pool_geom g, const float *dy, float *dx) {
  GRID_STRIDE(i, (size_t)g.n * g.h * g.w * g.c) {
    int c = (int)(i % g.c), ix = (int)(i / g.c % g.w), iy = (int)(i / g.c / g.w % g.h),
        n = (int)(i / g.c / g.w / g.h);
    int oy0, oy1, ox0, ox1;
    covering(iy, g.pad_top, g.ph, g.sh, g.oh, &oy0, &oy1);
    covering(ix, g.pad_left, g.pw, g.sw, g.ow, &ox0, &ox1);
    float acc = 0.0f;
    for (int oy = oy0; oy < oy1; oy++)
      for (int ox = ox0; ox < ox1; ox++) {
        int y0, y1, x0, x1;
        pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
        float inv = (float)(1.0 / ((double)(y1 - y0) * (x1 - x0)));
        acc += dy[(((size_t)n * g.oh + oy) * g.ow + ox) * g.c + c] * inv;
      }
    dx[i] = acc;
  }
}

extern "C" void st__cuda_maxpool_forward(cudaStream_t s, st_pool_geom g, const float *x, float *y) {
  size_t nx = (size_t)g.n * g.h * g.w * g.c, ny = (size_t)g.n * g.oh * g.ow * g.c;
  LAUNCH_INDEX(k_maxpool_forward, ny, nx > ny ? nx : ny, s, g, x, y);
}
extern "C" void st__cuda_maxpool_backward(cudaStream_t s, st_pool_geom g, const float *x,
                                          const float *dy, float *dx) {
  size_t nx = (size_t)g.n * g.h * g.w * g.c, ny = (size_t)g.n * g.oh * g.ow * g.c;
  LAUNCH_INDEX(k_maxpool_backward, nx, nx > ny ? nx : ny, s, g, x, dy, dx);
}
extern "C" void st__cuda_avgpool_forward(cudaStream_t s, st_pool_geom g, const float *x, float *y) {
  LAUNCH(k_avgpool_forward, (size_t)g.n * g.oh * g.ow * g.c, s, g, x, y);
}
extern "C" void st__cuda_avgpool_backward(cudaStream_t s, st_pool_geom g, const float *dy,
                                          float *dx) {
  LAUNCH(k_avgpool_backward, (size_t)g.n * g.h * g.w * g.c, s, g, dy, dx);
}
