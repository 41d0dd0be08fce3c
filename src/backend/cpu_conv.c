/* Fast CPU convolution helpers and pooling, NHWC. im2col/col2im move whole
 * runs: for one output cell and kernel row, the kw taps read kw*c contiguous
 * floats of x (the in-image part), so each run is one copy or one vector add.
 * Pooling vectorises over channels; 2x2 stride-2 'valid' max pooling has its
 * own path. Any thread, disjoint buffers. */
#include <string.h>

#include "backend/cpu.h"

/* ---- im2col / col2im ------------------------------------------------------ */

/* In-image tap range [*k0, *k1) of a kernel row or column starting at input
 * coordinate `start` (may be negative) with `k` taps over an axis of size n. */
static void tap_range(int start, int k, int n, int *k0, int *k1) {
  *k0 = start < 0 ? -start : 0;
  *k1 = start + k > n ? n - start : k;
  if (*k1 < *k0) *k1 = *k0;
}

static void zero_floats(float *restrict p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = 0.0f;
}

static void copy_floats(float *restrict dst, const float *restrict src,
                        size_t n) {
  if (n >= 16) {
    memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

/* One output cell whose window lies inside the image: kh runs of kw*c floats.
 * Small runs (c = 1 or 3 with a 3-wide kernel) get fixed-size copies. */
static void im2col_inside(const st_conv_geom *g, const float *x, int y0,
                          int x0, float *restrict col) {
  const size_t run = (size_t)g->kw * g->c, row = (size_t)g->w * g->c;
  const float *restrict src = x + ((size_t)y0 * g->w + x0) * g->c;
  for (int ky = 0; ky < g->kh; ky++, col += run, src += row) {
    if (run == 3)
      memcpy(col, src, 3 * sizeof(float));
    else if (run == 9)
      memcpy(col, src, 9 * sizeof(float));
    else
      copy_floats(col, src, run);
  }
}

/* col[oh*ow, kh*kw*c] from x[h,w,c]; row (oy*ow+ox), column (ky*kw+kx)*c+ci. */
void st__cpu_im2col(st_backend_ctx *ctx, const st_conv_geom *g, const float *x, float *col) {
  const size_t c = (size_t)g->c, run = (size_t)g->kw * c;
  for (int oy = 0; oy < g->oh; oy++) {
    int y0 = oy * g->sh - g->pad_top;
    bool rows_in = y0 >= 0 && y0 + g->kh <= g->h;
    for (int ox = 0; ox < g->ow; ox++) {
      int x0 = ox * g->sw - g->pad_left, kx0, kx1;
      tap_range(x0, g->kw, g->w, &kx0, &kx1);
      if (rows_in && kx0 == 0 && kx1 == g->kw) {
        im2col_inside(g, x, y0, x0, col);
        col += run * g->kh;
        continue;
      }
      for (int ky = 0; ky < g->kh; ky++, col += run) {
        int iy = y0 + ky;
        if (iy < 0 || iy >= g->h || kx0 == kx1) {
          zero_floats(col, run);
          continue;
        }
        const float *src = x + ((size_t)iy * g->w + (x0 + kx0)) * c;
        zero_floats(col, kx0 * c);
        copy_floats(col + kx0 * c, src, (size_t)(kx1 - kx0) * c);
        zero_floats(col + kx1 * c, (size_t)(g->kw - kx1) * c);
      }
    }
  }
}

/* dx[h,w,c] += the adjoint scatter of col (same order as im2col). */
void st__cpu_col2im(st_backend_ctx *ctx, const st_conv_geom *g, const float *col, float *dx) {
  const size_t c = (size_t)g->c, run = (size_t)g->kw * c;
  for (int oy = 0; oy < g->oh; oy++) {
    int y0 = oy * g->sh - g->pad_top;
    for (int ox = 0; ox < g->ow; ox++) {
      int x0 = ox * g->sw - g->pad_left, kx0, kx1;
      tap_range(x0, g->kw, g->w, &kx0, &kx1);
      for (int ky = 0; ky < g->kh; ky++, col += run) {
        int iy = y0 + ky;
        if (iy < 0 || iy >= g->h || kx0 == kx1) continue;
        float *restrict dst = dx + ((size_t)iy * g->w + (x0 + kx0)) * c;
        const float *restrict src = col + kx0 * c;
        size_t len = (size_t)(kx1 - kx0) * c;
        for (size_t i = 0; i < len; i++) dst[i] += src[i];
      }
    }
  }
}

/* ---- pooling -------------------------------------------------------------- */

/* In-image window [*y0,*y1) x [*x0,*x1) of output cell (oy, ox). */
static void pool_window(const st_pool_geom *g, int oy, int ox, int *y0,
                        int *y1, int *x0, int *x1) {
  int sy = oy * g->sh - g->pad_top, sx = ox * g->sw - g->pad_left;
  *y0 = sy < 0 ? 0 : sy;
  *x0 = sx < 0 ? 0 : sx;
  *y1 = sy + g->ph > g->h ? g->h : sy + g->ph;
  *x1 = sx + g->pw > g->w ? g->w : sx + g->pw;
}

static size_t image_floats(const st_pool_geom *g) {
  return (size_t)g->h * g->w * g->c;
}

static bool is_2x2_s2_valid(const st_pool_geom *g) {
  return g->ph == 2 && g->pw == 2 && g->sh == 2 && g->sw == 2 &&
         g->pad_top == 0 && g->pad_left == 0 && 2 * g->oh <= g->h &&
         2 * g->ow <= g->w;
}

/* Does v replace m as the running max? When v > m, or v is the first NaN:
 * NaN propagates, as in TF (and it is what the reference backend does). */
static inline bool max_takes(float v, float m) { return !(v <= m) && m == m; }

/* Vectors with GCC/Clang vector extensions: the 2x2 pooling kernels below
 * select with bit masks, which GCC does not derive itself from the scalar
 * code (its branches mispredict on data). One window's channels go 16 at a
 * time (one AVX-512 register in the x86-64-v4 build of the kernels, four SSE
 * ones in the baseline's), then 4 at a time, then one by one. */
typedef float v4f __attribute__((vector_size(16)));
typedef int v4i __attribute__((vector_size(16)));
typedef float v16f __attribute__((vector_size(64)));
typedef int v16i __attribute__((vector_size(64)));
/* Macros, not inline functions: GCC lowers a baseline inline function's
 * 16-lane operations (to scalar code) before inlining it into an AVX-512
 * function, while operations written in that function's body get its ISA. */
#define VLOAD(VF, p) ({ VF v_; memcpy(&v_, (p), sizeof v_); v_; })
#define VSTORE(p, v) do { __typeof__(v) v_ = (v); memcpy((p), &v_, sizeof v_); } while (0)
#define VTAKES(v, m) (~((v) <= (m)) & ((m) == (m))) /* max_takes, lane-wise */
#define VSEL(VF, VI, mask, a, b) ((VF)(((VI)(a) & (mask)) | ((VI)(b) & ~(mask))))
#define VAND(VF, VI, a, mask) ((VF)((VI)(a) & (mask)))

/* y[k..k+N) = first max of (a, b; c, d) at channels k..k+N. */
#define MAXPOOL_FWD_STEP(VF, VI)                                                      \
  {                                                                                  \
    VF vb = VLOAD(VF, b + k), vc = VLOAD(VF, cc + k), vd = VLOAD(VF, d + k);         \
    VF m = VLOAD(VF, a + k);                                                         \
    m = VSEL(VF, VI, VTAKES(vb, m), vb, m);                                          \
    m = VSEL(VF, VI, VTAKES(vc, m), vc, m);                                          \
    VSTORE(yo + k, VSEL(VF, VI, VTAKES(vd, m), vd, m));                              \
  }

/* dy[k..k+N) to the first max of its window in (da, db; dc, dd), zeros to
 * the other three (times ReLU's derivative when x is a ReLU output). */
#define MAXPOOL_BWD_STEP(VF, VI)                                                      \
  {                                                                                  \
    const VF zero = {0};                                                             \
    const VI all = zero == zero;                                                     \
    VF vb = VLOAD(VF, b + k), vc = VLOAD(VF, cc + k), vd = VLOAD(VF, d + k);         \
    VF m = VLOAD(VF, a + k);                                                         \
    VI tb = VTAKES(vb, m);                                                           \
    m = VSEL(VF, VI, tb, vb, m);                                                     \
    VI tc = VTAKES(vc, m);                                                           \
    m = VSEL(VF, VI, tc, vc, m);                                                     \
    VI td = VTAKES(vd, m);                                                           \
    m = VSEL(VF, VI, td, vd, m);                                                     \
    VF gk = VAND(VF, VI, VLOAD(VF, g0 + k), relu ? (m > zero) : all);                \
    VSTORE(dd + k, VAND(VF, VI, gk, td));                                            \
    VSTORE(dc + k, VAND(VF, VI, gk, tc & ~td));                                      \
    VSTORE(db + k, VAND(VF, VI, gk, tb & ~tc & ~td));                                \
    VSTORE(da + k, VAND(VF, VI, gk, ~tb & ~tc & ~td));                               \
  }

#define POOL2X2_SUFFIX _base
#define POOL2X2_TARGET
#include "backend/cpu_pool2x2.inc"
#undef POOL2X2_SUFFIX
#undef POOL2X2_TARGET
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define POOL2X2_V4 1
#define POOL2X2_SUFFIX _v4
#define POOL2X2_TARGET __attribute__((target("arch=x86-64-v4")))
#include "backend/cpu_pool2x2.inc"
#undef POOL2X2_SUFFIX
#undef POOL2X2_TARGET
#endif

#ifdef POOL2X2_V4
static bool pool2x2_v4(st_backend_ctx *ctx) {
  const st__cpu_state *cs = ctx->impl;
  return !cs->baseline_kernels && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
#endif

static void maxpool_2x2_image(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                              float *y) {
#ifdef POOL2X2_V4
  if (pool2x2_v4(ctx)) {
    maxpool_2x2_image_v4(g, x, y);
    return;
  }
#endif
  maxpool_2x2_image_base(g, x, y);
}

static void maxpool_2x2_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                                 const float *dy, float *dx) {
#ifdef POOL2X2_V4
  if (pool2x2_v4(ctx)) {
    maxpool_2x2_backward_v4(g, x, dy, dx);
    return;
  }
#endif
  maxpool_2x2_backward_base(g, x, dy, dx);
}

/* Max of one window, channels [c0, c0+nc), into out[nc] (first max kept). */
static void window_max(const st_pool_geom *g, const float *img, int oy, int ox,
                       size_t c0, size_t nc, float *restrict out,
                       int *restrict arg) {
  int y0, y1, x0, x1;
  pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
  const size_t c = (size_t)g->c;
  for (int yy = y0; yy < y1; yy++)
    for (int xx = x0; xx < x1; xx++) {
      int cell = yy * g->w + xx;
      const float *restrict v = img + (size_t)cell * c + c0;
      bool first = yy == y0 && xx == x0;
      for (size_t k = 0; k < nc; k++) {
        bool take = first || max_takes(v[k], out[k]);
        out[k] = take ? v[k] : out[k];
        arg[k] = take ? cell : arg[k];
      }
    }
}

void st__cpu_maxpool_forward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x, float *y) {
  const size_t c = (size_t)g->c, in = image_floats(g),
               out = (size_t)g->oh * g->ow * c;
  int arg[ST__CPU_CHUNK];
  for (int n = 0; n < g->n; n++, x += in, y += out) {
    if (is_2x2_s2_valid(g)) {
      maxpool_2x2_image(ctx, g, x, y);
      continue;
    }
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (size_t c0 = 0; c0 < c; c0 += ST__CPU_CHUNK) {
          size_t nc = c - c0 < ST__CPU_CHUNK ? c - c0 : ST__CPU_CHUNK;
          float *yo = y + ((size_t)oy * g->ow + ox) * c + c0;
          window_max(g, x, oy, ox, c0, nc, yo, arg);
        }
  }
}

/* General backward of one image: recompute each window's first argmax from x
 * (as the reference does) and add dy there (times ReLU's derivative when x
 * is a ReLU output); windows may overlap. */
static void maxpool_backward_image(const st_pool_geom *g, const float *x,
                                   const float *dy, float *dx) {
  float best[ST__CPU_CHUNK];
  int arg[ST__CPU_CHUNK];
  const size_t c = (size_t)g->c;
  for (int oy = 0; oy < g->oh; oy++)
    for (int ox = 0; ox < g->ow; ox++)
      for (size_t c0 = 0; c0 < c; c0 += ST__CPU_CHUNK) {
        size_t nc = c - c0 < ST__CPU_CHUNK ? c - c0 : ST__CPU_CHUNK;
        const float *go = dy + ((size_t)oy * g->ow + ox) * c + c0;
        window_max(g, x, oy, ox, c0, nc, best, arg);
        for (size_t k = 0; k < nc; k++)
          if (!g->relu_input || best[k] > 0.0f)
            dx[(size_t)arg[k] * c + c0 + k] += go[k];
      }
}

void st__cpu_maxpool_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x,
                              const float *y, const float *dy, float *dx) {
  const size_t in = image_floats(g), out = (size_t)g->oh * g->ow * g->c;
  (void)y;
  if (!is_2x2_s2_valid(g)) {
    memset(dx, 0, sizeof(float) * in * g->n);
    for (int n = 0; n < g->n; n++, x += in, dy += out, dx += in)
      maxpool_backward_image(g, x, dy, dx);
    return;
  }
  /* 2x2/2 windows tile the image: every covered cell is written once; only
   * an odd last row/column (outside every window) needs zeros. */
  const size_t c = (size_t)g->c, row = (size_t)g->w * c;
  for (int n = 0; n < g->n; n++, x += in, dy += out, dx += in) {
    maxpool_2x2_backward(ctx, g, x, dy, dx);
    for (int yy = 0; yy < 2 * g->oh && g->w > 2 * g->ow; yy++)
      memset(dx + yy * row + (size_t)2 * g->ow * c, 0, sizeof(float) * (g->w - 2 * g->ow) * c);
    if (g->h > 2 * g->oh)
      memset(dx + (size_t)2 * g->oh * row, 0, sizeof(float) * (g->h - 2 * g->oh) * row);
  }
}

/* Mean over the in-image cells of each window (padding excluded). */
void st__cpu_avgpool_forward(st_backend_ctx *ctx, const st_pool_geom *g, const float *x, float *y) {
  const size_t c = (size_t)g->c, in = image_floats(g);
  for (int n = 0; n < g->n; n++, x += in)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++, y += c) {
        int y0, y1, x0, x1;
        pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
        zero_floats(y, c);
        for (int yy = y0; yy < y1; yy++)
          for (int xx = x0; xx < x1; xx++) {
            const float *restrict v = x + ((size_t)yy * g->w + xx) * c;
            float *restrict yo = y;
            for (size_t k = 0; k < c; k++) yo[k] += v[k];
          }
        float inv = (float)(1.0 / ((double)(y1 - y0) * (x1 - x0)));
        for (size_t k = 0; k < c; k++) y[k] *= inv;
      }
}

void st__cpu_avgpool_backward(st_backend_ctx *ctx, const st_pool_geom *g, const float *dy,
                              float *dx) {
  const size_t c = (size_t)g->c, in = image_floats(g);
  memset(dx, 0, sizeof(float) * in * g->n);
  for (int n = 0; n < g->n; n++, dx += in)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++, dy += c) {
        int y0, y1, x0, x1;
        pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
        float inv = (float)(1.0 / ((double)(y1 - y0) * (x1 - x0)));
        for (int yy = y0; yy < y1; yy++)
          for (int xx = x0; xx < x1; xx++) {
            float *restrict d = dx + ((size_t)yy * g->w + xx) * c;
            const float *restrict gv = dy;
            for (size_t k = 0; k < c; k++) d[k] += gv[k] * inv;
          }
      }
}
