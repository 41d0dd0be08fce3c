/* Direct NHWC convolution for the cpu backend (the optional conv_direct_*
 * slots of backend/impl.h): no im2col buffer and no gemm packing. The input
 * is copied once into a zero-padded block (st__conv_padded_rows/cols), then
 * register-tiled AVX-512 kernels run over it:
 *   forward  a tile of T output cells x f filters (f/16 vectors each) in
 *            registers; for every kernel tap and input channel one broadcast
 *            of the cell's input times the kernel row w[tap, c, 0..f).
 *   dw       a tile of CI input channels of one tap x f filters in
 *            registers, summed over every output cell of the block in order.
 *   dx       stride 1 only: the forward kernel on the padded dy with the
 *            flipped, transposed kernel (st__conv_transposed_geom).
 * Handled: f in {16, 32, 64} (dx also needs c in {16, 32, 64}) on a CPU with
 * AVX-512F, and not when the context asks for baseline kernels; otherwise the
 * slots return false and the layer uses im2col + gemm (the reference's
 * lowering, and the only one the cnn's biased convolutions use). The sums run
 * in a fixed order (tap, channel; cells in order for dw): the same bytes for
 * any thread count. On a context with threads (st__cpu_parallel) forward and
 * dx split the block by image (each task pads its image and computes its
 * cells), dw by (tap, channel tile) after the images are padded. Any thread,
 * disjoint buffers. */
#include <string.h>

#include "backend/cpu.h"

/* x[n, h, w, c] -> xp[n, hp, wp, c]: the image at (pad_top, pad_left), zeros
 * around it. */
static void pad_block(const st_conv_geom *g, int n, const float *x, float *xp) {
  const int hp = st__conv_padded_rows(g), wp = st__conv_padded_cols(g);
  const size_t c = (size_t)g->c, row = (size_t)wp * c, img = (size_t)hp * row;
  for (int i = 0; i < n; i++, x += (size_t)g->h * g->w * c, xp += img) {
    memset(xp, 0, sizeof(float) * row * g->pad_top);
    for (int y = 0; y < g->h; y++) {
      float *r = xp + (size_t)(g->pad_top + y) * row;
      memset(r, 0, sizeof(float) * c * g->pad_left);
      memcpy(r + c * g->pad_left, x + (size_t)y * g->w * c, sizeof(float) * c * g->w);
      memset(r + c * (g->pad_left + g->w), 0, sizeof(float) * c * (wp - g->pad_left - g->w));
    }
    memset(xp + (size_t)(g->pad_top + g->h) * row, 0, sizeof(float) * row * (hp - g->pad_top - g->h));
  }
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#include <immintrin.h>

#define DIRECT_TARGET __attribute__((target("avx512f,fma"), always_inline)) inline

bool st__cpu_conv_direct_built(void) {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

static bool direct_usable(st_backend_ctx *ctx, const st_conv_geom *g, int f) {
  const st__cpu_state *cs = ctx->impl;
  return g->kh * g->kw <= 64 && (f == 16 || f == 32 || f == 64) && !(cs && cs->baseline_kernels) &&
         st__cpu_conv_direct_built();
}

/* Start of output cell p's window in the padded block (tap (0, 0), channel 0). */
static const float *cell_base(const st_conv_geom *g, const float *xp, int hp, int wp, size_t p) {
  size_t P = (size_t)g->oh * g->ow, img = p / P, r = p % P;
  int oy = (int)(r / (size_t)g->ow), ox = (int)(r % (size_t)g->ow);
  return xp + ((img * hp + (size_t)oy * g->sh) * wp + (size_t)ox * g->sw) * g->c;
}

/* y[T cells, NV*16] = sum over taps q and channels ci of a[t][off[q] + ci] *
 * w[q*c + ci, 0..NV*16). */
static DIRECT_TARGET void fwd_tile(const int T, const int NV, const float *const *a,
                                   const int *off, int taps, int c, const float *w, float *y) {
  __m512 acc[8][4]; /* [T][NV] used */
  for (int t = 0; t < T; t++)
    for (int v = 0; v < NV; v++) acc[t][v] = _mm512_setzero_ps();
  for (int q = 0; q < taps; q++) {
    const float *wq = w + (size_t)q * c * NV * 16;
    const int o = off[q];
    for (int ci = 0; ci < c; ci++, wq += NV * 16) {
      __m512 b[4];
      for (int v = 0; v < NV; v++) b[v] = _mm512_loadu_ps(wq + 16 * v);
      for (int t = 0; t < T; t++) {
        __m512 s = _mm512_set1_ps(a[t][o + ci]);
        for (int v = 0; v < NV; v++) acc[t][v] = _mm512_fmadd_ps(s, b[v], acc[t][v]);
      }
    }
  }
  for (int t = 0; t < T; t++)
    for (int v = 0; v < NV; v++) _mm512_storeu_ps(y + (size_t)t * NV * 16 + 16 * v, acc[t][v]);
}

/* Output cells p .. p+T-1 of the padded block xp (T a constant). */
static DIRECT_TARGET void fwd_at(const int T, const int NV, const st_conv_geom *g,
                                 const float *xp, int hp, int wp, const int *off, int taps,
                                 const float *w, float *y, size_t p) {
  const float *a[8];
  for (int t = 0; t < T; t++) a[t] = cell_base(g, xp, hp, wp, p + t);
  fwd_tile(T, NV, a, off, taps, g->c, w, y + p * NV * 16);
}

/* Every output cell of the padded block xp, T at a time, the rest in tiles
 * of 4, 2 and 1 (a cell's sums run in the same order in any tile). */
static DIRECT_TARGET void fwd_cells(const int T, const int NV, const st_conv_geom *g, int n,
                                    const float *xp, const float *w, float *y) {
  const int hp = st__conv_padded_rows(g), wp = st__conv_padded_cols(g), taps = g->kh * g->kw;
  int off[64]; /* taps <= 64: direct_usable */
  for (int q = 0; q < taps; q++) off[q] = ((q / g->kw) * wp + q % g->kw) * g->c;
  const size_t cells = (size_t)n * g->oh * g->ow;
  size_t p = 0;
  for (; p + T <= cells; p += T) fwd_at(T, NV, g, xp, hp, wp, off, taps, w, y, p);
  if (p + 4 <= cells) fwd_at(4, NV, g, xp, hp, wp, off, taps, w, y, p), p += 4;
  if (p + 2 <= cells) fwd_at(2, NV, g, xp, hp, wp, off, taps, w, y, p), p += 2;
  for (; p < cells; p++) fwd_at(1, NV, g, xp, hp, wp, off, taps, w, y, p);
}

__attribute__((target("avx512f,fma"))) static void direct_forward(const st_conv_geom *g, int n,
                                                                   int f, const float *xp,
                                                                   const float *w, float *y) {
  if (f == 16)
    fwd_cells(8, 1, g, n, xp, w, y);
  else if (f == 32)
    fwd_cells(6, 2, g, n, xp, w, y);
  else
    fwd_cells(6, 4, g, n, xp, w, y);
}

/* dw[q*c + ci0 .. + CI, 0..NV*16) (+)= sum over the block's cells of
 * x(cell, tap q, channel ci) * dy[cell]; CI channels from ci0. */
static DIRECT_TARGET void dw_tile(const int CI, const int NV, const st_conv_geom *g, int n,
                                  const float *xp, int o, const float *dy, bool accumulate,
                                  float *dw) {
  const int hp = st__conv_padded_rows(g), wp = st__conv_padded_cols(g);
  __m512 acc[16][4]; /* [CI][NV] used */
  for (int j = 0; j < CI; j++)
    for (int v = 0; v < NV; v++) acc[j][v] = _mm512_setzero_ps();
  const size_t step = (size_t)g->sw * g->c;
  for (int i = 0; i < n; i++)
    for (int oy = 0; oy < g->oh; oy++) {
      const float *a = xp + (((size_t)i * hp + (size_t)oy * g->sh) * wp) * g->c + o;
      for (int ox = 0; ox < g->ow; ox++, a += step, dy += NV * 16) {
        __m512 b[4];
        for (int v = 0; v < NV; v++) b[v] = _mm512_loadu_ps(dy + 16 * v);
        for (int j = 0; j < CI; j++) {
          __m512 s = _mm512_set1_ps(a[j]);
          for (int v = 0; v < NV; v++) acc[j][v] = _mm512_fmadd_ps(s, b[v], acc[j][v]);
        }
      }
    }
  for (int j = 0; j < CI; j++)
    for (int v = 0; v < NV; v++) {
      float *d = dw + (size_t)j * NV * 16 + 16 * v;
      __m512 r = accumulate ? _mm512_add_ps(_mm512_loadu_ps(d), acc[j][v]) : acc[j][v];
      _mm512_storeu_ps(d, r);
    }
}

/* Channels of a kernel-gradient tile: CI(f) channels, or 1 (the tail). Every
 * dw float is one sum over the cells in order whatever the tile: the tile
 * sizes may follow the thread count without changing a bit. */
static int dw_wide(int f, int threads) { return f == 16 ? (threads > 1 ? 8 : 16) : f == 32 ? 8 : 4; }

/* One tile of `ci_n` (dw_wide(f) or 1) channels at tap offset o. */
__attribute__((target("avx512f,fma"))) static void direct_dw_tile(
    const st_conv_geom *g, int n, int f, int ci_n, const float *xp, int o, const float *dy,
    bool accumulate, float *dw) {
  if (f == 16 && ci_n == 16)
    dw_tile(16, 1, g, n, xp, o, dy, accumulate, dw);
  else if (f == 16 && ci_n == 8)
    dw_tile(8, 1, g, n, xp, o, dy, accumulate, dw);
  else if (f == 16)
    dw_tile(1, 1, g, n, xp, o, dy, accumulate, dw);
  else if (f == 32 && ci_n == 8)
    dw_tile(8, 2, g, n, xp, o, dy, accumulate, dw);
  else if (f == 32)
    dw_tile(1, 2, g, n, xp, o, dy, accumulate, dw);
  else if (ci_n == 4)
    dw_tile(4, 4, g, n, xp, o, dy, accumulate, dw);
  else
    dw_tile(1, 4, g, n, xp, o, dy, accumulate, dw);
}

#else /* no AVX-512 build: the slots decline */

bool st__cpu_conv_direct_built(void) { return false; }

static bool direct_usable(st_backend_ctx *ctx, const st_conv_geom *g, int f) {
  (void)ctx, (void)g, (void)f;
  return false;
}
static void direct_forward(const st_conv_geom *g, int n, int f, const float *xp, const float *w,
                           float *y) {
  (void)g, (void)n, (void)f, (void)xp, (void)w, (void)y;
}
static int dw_wide(int f, int threads) {
  (void)f, (void)threads;
  return 1;
}
static void direct_dw_tile(const st_conv_geom *g, int n, int f, int ci_n, const float *xp, int o,
                           const float *dy, bool accumulate, float *dw) {
  (void)g, (void)n, (void)f, (void)ci_n, (void)xp, (void)o, (void)dy, (void)accumulate, (void)dw;
}

#endif

/* Floats of padded input and dy per sub-block of the kernel gradient. */
#define DW_BUDGET_FLOATS ((size_t)64 << 10)

/* One call's work, shared read-only by its tasks (st__cpu_parallel). */
typedef struct conv_job {
  const st_conv_geom *g; /* the convolution run (dx: the transposed one) */
  int n, f;              /* images, filters (dx: the input's channels) */
  const float *x;        /* [n, h, w, c] images (dx: dy) */
  const float *w;        /* [taps*c, f] kernel (dx: flipped and transposed) */
  float *xp;             /* [n, hp, wp, c] the padded images (the workspace) */
  float *y;              /* forward: [n*oh*ow, f] */
  const float *dy;       /* dw: [n*oh*ow, f] */
  bool accumulate;       /* dw: add to dw */
  float *dw;             /* dw: [taps*c, f] */
  int wide, per_tap;     /* dw: channels per tile, tiles per tap */
} conv_job;

static size_t image_floats(const st_conv_geom *g) { return (size_t)g->h * g->w * g->c; }
static size_t padded_floats(const st_conv_geom *g) {
  return (size_t)st__conv_padded_rows(g) * st__conv_padded_cols(g) * g->c;
}

/* Task i: pad image i. */
static void pad_task(void *arg, int i) {
  const conv_job *j = arg;
  pad_block(j->g, 1, j->x + (size_t)i * image_floats(j->g), j->xp + (size_t)i * padded_floats(j->g));
}

/* Task i: pad image i and compute its output cells. */
static void fwd_task(void *arg, int i) {
  const conv_job *j = arg;
  const st_conv_geom *g = j->g;
  float *xp = j->xp + (size_t)i * padded_floats(g);
  pad_block(g, 1, j->x + (size_t)i * image_floats(g), xp);
  direct_forward(g, 1, j->f, xp, j->w, j->y + (size_t)i * g->oh * g->ow * j->f);
}

/* Task t: tile k = t % per_tap of tap q = t / per_tap (full tiles of `wide`
 * channels first, then the channels left, one each). */
static void dw_task(void *arg, int t) {
  const conv_job *j = arg;
  const st_conv_geom *g = j->g;
  int q = t / j->per_tap, k = t % j->per_tap, full = g->c / j->wide;
  int ci = k < full ? k * j->wide : full * j->wide + (k - full), ci_n = k < full ? j->wide : 1;
  int o = ((q / g->kw) * st__conv_padded_cols(g) + q % g->kw) * g->c + ci;
  float *dq = j->dw + ((size_t)q * g->c + (size_t)ci) * j->f;
  direct_dw_tile(g, j->n, j->f, ci_n, j->xp, o, j->dy, j->accumulate, dq);
}

bool st__cpu_conv_direct_forward(st_backend_ctx *ctx, const st_conv_geom *g, int n, int f,
                                 const float *x, const float *w, float *y, float *ws) {
  if (!direct_usable(ctx, g, f)) return false;
  conv_job j = {.g = g, .n = n, .f = f, .x = x, .w = w, .xp = ws, .y = y};
  st__cpu_parallel(ctx, n, fwd_task, &j);
  return true;
}

bool st__cpu_conv_direct_dw(st_backend_ctx *ctx, const st_conv_geom *g, int n, int f,
                            const float *x, const float *dy, bool accumulate, float *dw,
                            float *ws) {
  if (!direct_usable(ctx, g, f)) return false;
  conv_job j = {.g = g, .n = n, .f = f, .x = x, .xp = ws, .dy = dy, .accumulate = accumulate,
                .dw = dw, .wide = dw_wide(f, st__cpu_threads(ctx))};
  j.per_tap = g->c / j.wide + g->c % j.wide;
  st__cpu_parallel(ctx, n, pad_task, &j);
  /* sub-blocks whose padded images and dy stay in a core's L2 while every
   * tap's tiles sweep them (f = 16 is bound by their loads otherwise); a
   * fixed size, so the sums do not depend on the thread count */
  const size_t P = (size_t)g->oh * g->ow, per_image = padded_floats(g) + P * (size_t)f;
  const int sub = per_image < DW_BUDGET_FLOATS ? (int)(DW_BUDGET_FLOATS / per_image) : 1;
  for (int i0 = 0; i0 < n; i0 += sub) {
    j.n = n - i0 < sub ? n - i0 : sub;
    j.xp = ws + (size_t)i0 * padded_floats(g);
    j.dy = dy + (size_t)i0 * P * f;
    j.accumulate = accumulate || i0 > 0;
    st__cpu_parallel(ctx, g->kh * g->kw * j.per_tap, dw_task, &j);
  }
  return true;
}

/* dx = forward of the padded dy with wf[kh, kw, f, c] = w[kh-1-ky, kw-1-kx, c, f]
 * (stride 1 only; c takes the place of f). */
bool st__cpu_conv_direct_dx(st_backend_ctx *ctx, const st_conv_geom *g, int n, int f,
                            const float *dy, const float *w, float *dx, float *ws) {
  if (g->sh != 1 || g->sw != 1 || !direct_usable(ctx, g, f) || !direct_usable(ctx, g, g->c))
    return false;
  const int c = g->c, kh = g->kh, kw = g->kw;
  float *wf = ws; /* [kh*kw*f, c] */
  for (int ky = 0; ky < kh; ky++)
    for (int kx = 0; kx < kw; kx++) {
      const float *src = w + (size_t)((kh - 1 - ky) * kw + (kw - 1 - kx)) * c * f;
      float *dst = wf + (size_t)(ky * kw + kx) * f * c;
      for (int ci = 0; ci < c; ci++)
        for (int fi = 0; fi < f; fi++) dst[(size_t)fi * c + ci] = src[(size_t)ci * f + fi];
    }
  st_conv_geom t = st__conv_transposed_geom(g, f);
  conv_job j = {.g = &t, .n = n, .f = c, .x = dy, .w = wf, .xp = ws + (size_t)kh * kw * c * f,
                .y = dx};
  st__cpu_parallel(ctx, n, fwd_task, &j);
  return true;
}
