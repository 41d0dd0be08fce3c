/* Every kernel of every built backend against the reference backend. One table
 * of {name, case function}: a case draws seeded random inputs, runs the kernel
 * on the reference (host pointers) and on the backend under test (through its
 * own alloc/to_device/to_host, so a device backend runs unchanged) and compares
 * with a tolerance. Adding a kernel = adding one row to k_cases. Prints one line
 * per (backend, case); exits non-zero on any mismatch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu.h"
#include "check.h"

#define TOL_EXACT 0.0
#define TOL_EW 1e-5   /* elementwise kernels */
#define TOL_SUM 1e-5  /* reductions (bias_grad, pooling, batchnorm, losses) */
#define TOL_GEMM 1e-4 /* gemm */
#define MAX_BUFS 128

/* State of one (backend, case) run: RNG, buffers to free, worst error. */
typedef struct ctx {
  const st_backend *be, *ref;
  st_backend_ctx *made_be, *made_ref; /* their contexts: be_ctx(), ref_ctx() */
  st_rng rng;
  void *host[MAX_BUFS];
  void *dev[MAX_BUFS];
  int nhost, ndev;
  double worst; /* max over comparisons of |got-want| / allowed */
  bool ok;
  char note[256]; /* first failure */
} ctx;

/* ---- contexts and buffers --------------------------------------------------- */

/* Kernel threads of the contexts of the backend under test (run_backend
 * runs the cpu backend with 1 and with 3: its pool splits the work). */
static int g_threads;

/* A context of backend be, made on first use (release() destroys it). */
static st_backend_ctx *lazy_ctx(const st_backend *be, int threads, st_backend_ctx **slot) {
  if (!*slot && st_backend_ctx_create(be, 0, threads, slot) != ST_OK) {
    fprintf(stderr, "test_kernels: %s: %s\n", be->name, st_last_error());
    exit(1);
  }
  return *slot;
}
static st_backend_ctx *be_ctx(ctx *c) { return lazy_ctx(c->be, g_threads, &c->made_be); }
static st_backend_ctx *ref_ctx(ctx *c) { return lazy_ctx(c->ref, 0, &c->made_ref); }

static float *host_alloc(ctx *c, size_t n) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  if (!p || c->nhost == MAX_BUFS) {
    fprintf(stderr, "test_kernels: out of memory or buffers\n");
    exit(1);
  }
  c->host[c->nhost++] = p;
  return p;
}

/* n floats uniform in [lo, hi). */
static float *rnd(ctx *c, size_t n, float lo, float hi) {
  float *p = host_alloc(c, n);
  for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * st_rng_uniform(&c->rng);
  return p;
}

/* n floats from {0, 0.25, .., 0.75}: many exact ties (pooling). */
static float *rnd_ties(ctx *c, size_t n) {
  float *p = host_alloc(c, n);
  for (size_t i = 0; i < n; i++) p[i] = (float)st_rng_below(&c->rng, 4) * 0.25f;
  return p;
}

static float *dup(ctx *c, const float *src, size_t n) {
  float *p = host_alloc(c, n);
  memcpy(p, src, sizeof(float) * n);
  return p;
}

static float *filled(ctx *c, size_t n, float v) {
  float *p = host_alloc(c, n);
  for (size_t i = 0; i < n; i++) p[i] = v;
  return p;
}

/* Device copy of host[n] on the backend under test (NULL stays NULL). */
static float *up(ctx *c, const float *host, size_t n) {
  if (!host) return NULL;
  float *d = c->be->alloc(be_ctx(c), sizeof(float) * (n ? n : 1));
  if (!d || c->ndev == MAX_BUFS) {
    fprintf(stderr, "test_kernels: device alloc failed\n");
    exit(1);
  }
  c->dev[c->ndev++] = d;
  if (n) st__be_to_device(be_ctx(c), d, host, sizeof(float) * n);
  return d;
}

/* Host copy of device[n]. */
static float *down(ctx *c, const float *dev, size_t n) {
  float *h = host_alloc(c, n);
  st__be_synchronize(be_ctx(c));
  if (n) st__be_to_host(be_ctx(c), h, dev, sizeof(float) * n);
  return h;
}

static void release(ctx *c) {
  for (int i = 0; i < c->nhost; i++) free(c->host[i]);
  for (int i = 0; i < c->ndev; i++) c->be->free(be_ctx(c), c->dev[i]);
  c->nhost = c->ndev = 0;
  st_backend_ctx_destroy(c->made_be);
  st_backend_ctx_destroy(c->made_ref);
  c->made_be = c->made_ref = NULL;
}

/* ---- comparison ------------------------------------------------------------- */

/* got vs want: |got - want| <= tol * (|want| + 0.01 * max|want|), NaN == NaN.
 * The max term lets sums that cancel to near zero keep an absolute tolerance. */
static void cmp(ctx *c, const char *what, const float *got, const float *want,
                size_t n, double tol) {
  double mx = 0.0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(want[i]) && fabs(want[i]) > mx) mx = fabs(want[i]);
  for (size_t i = 0; i < n; i++) {
    double g = got[i], w = want[i], err = fabs(g - w);
    if (isnan(g) && isnan(w)) continue;
    double allowed = tol * (fabs(w) + 0.01 * mx);
    double ratio = err == 0.0 ? 0.0 : (allowed > 0.0 ? err / allowed : INFINITY);
    if (isnan(err)) ratio = INFINITY;
    if (ratio > c->worst) c->worst = ratio;
    if (ratio > 1.0 && c->ok) {
      c->ok = false;
      snprintf(c->note, sizeof c->note, "%s[%zu]: got %.9g want %.9g (tol %g)",
               what, i, g, w, tol);
    }
  }
}

/* ---- memory and BLAS-like ------------------------------------------------------ */

static void case_memory(ctx *c) {
  size_t n = 1000;
  float *x = rnd(c, n, -1, 1);
  float *d = up(c, x, n);
  float *back = down(c, d, n);
  cmp(c, "roundtrip", back, x, n, TOL_EXACT);
}

/* One gemm: op(A) [m,k], op(B) [k,n], padded leading dimensions, C with a
 * padded ldc; beta == 0 starts C as NaN (must not be read). */
static void gemm_one(ctx *c, bool ta, bool tb, int m, int n, int k, float beta) {
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int lda = ac + 3, ldb = bc + 1, ldc = n + 2;
  size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)m * ldc;
  float *a = rnd(c, na ? na : 1, -1, 1), *b = rnd(c, nb ? nb : 1, -1, 1);
  float *c0 = beta == 0.0f ? filled(c, nc, NAN) : rnd(c, nc, -1, 1);
  float *want = dup(c, c0, nc);
  c->ref->gemm(ref_ctx(c), ta, tb, m, n, k, 0.7f, a, lda, b, ldb, beta, want, ldc);
  float *dc = up(c, c0, nc);
  c->be->gemm(be_ctx(c), ta, tb, m, n, k, 0.7f, up(c, a, na ? na : 1), lda,
              up(c, b, nb ? nb : 1), ldb, beta, dc, ldc);
  char what[64];
  snprintf(what, sizeof what, "gemm %c%c %dx%dx%d b%g", ta ? 'T' : 'N',
           tb ? 'T' : 'N', m, n, k, beta);
  cmp(c, what, down(c, dc, nc), want, nc, TOL_GEMM);
}

static void case_gemm(ctx *c) {
  static const int sizes[][3] = {{1, 1, 1},  {7, 5, 3},    {1, 9, 17},
                                 {13, 1, 6}, {33, 17, 65}, {64, 48, 300},
                                 {5, 4, 0}};
  for (int t = 0; t < 4; t++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      gemm_one(c, t & 1, t & 2, sizes[s][0], sizes[s][1], sizes[s][2], 0.0f);
      gemm_one(c, t & 1, t & 2, sizes[s][0], sizes[s][1], sizes[s][2], 0.5f);
      release(c);
    }
}

static void case_axpy_scale_fill(ctx *c) {
  static const size_t sizes[] = {1, 7, 1000, 1027};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    size_t n = sizes[s];
    float *x = rnd(c, n, -2, 2), *y = rnd(c, n, -2, 2);
    float *w = dup(c, y, n), *dy = up(c, y, n);
    c->ref->axpy(ref_ctx(c), n, -0.3f, x, w);
    c->be->axpy(be_ctx(c), n, -0.3f, up(c, x, n), dy);
    cmp(c, "axpy", down(c, dy, n), w, n, TOL_EW);
    c->ref->scale(ref_ctx(c), n, 1.7f, w);
    c->be->scale(be_ctx(c), n, 1.7f, dy);
    cmp(c, "scale", down(c, dy, n), w, n, TOL_EW);
    c->ref->fill(ref_ctx(c), n, 0.25f, w);
    c->be->fill(be_ctx(c), n, 0.25f, dy);
    cmp(c, "fill", down(c, dy, n), w, n, TOL_EXACT);
    release(c);
  }
}

/* ---- bias and activations -------------------------------------------------- */

static void case_bias(ctx *c) {
  static const int shapes[][2] = {{1, 1}, {37, 1}, {37, 19}, {64, 300}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int rows = shapes[s][0], cols = shapes[s][1];
    size_t n = (size_t)rows * cols;
    float *bias = rnd(c, cols, -1, 1), *y = rnd(c, n, -1, 1);
    float *w = dup(c, y, n), *dy = up(c, y, n);
    c->ref->bias_add(ref_ctx(c), rows, cols, bias, w);
    c->be->bias_add(be_ctx(c), rows, cols, up(c, bias, cols), dy);
    cmp(c, "bias_add", down(c, dy, n), w, n, TOL_EW);
    float *db_want = filled(c, cols, NAN), *ddb = up(c, db_want, cols);
    c->ref->bias_grad(ref_ctx(c), rows, cols, y, db_want);
    c->be->bias_grad(be_ctx(c), rows, cols, up(c, y, n), ddb);
    cmp(c, "bias_grad", down(c, ddb, cols), db_want, cols, TOL_SUM);
    release(c);
  }
}

/* act_forward for one activation, out of place and in place (x == y); the
 * last x is NaN, which every activation must propagate (a NaN input must
 * reach the loss, not turn into a finite value and NaN weights). */
static void act_forward_one(ctx *c, st_activation act, int rows, int cols) {
  size_t n = (size_t)rows * cols;
  float *x = rnd(c, n, -4, 4), *want = host_alloc(c, n);
  x[n - 1] = NAN;
  c->ref->act_forward(ref_ctx(c), act, rows, cols, x, want);
  if (!isnan(want[n - 1]) && c->ok) {
    c->ok = false;
    snprintf(c->note, sizeof c->note, "%s(NaN) = %g in the reference",
             st_activation_name(act), want[n - 1]);
  }
  float *dx = up(c, x, n), *dy = up(c, want, n);
  c->be->act_forward(be_ctx(c), act, rows, cols, dx, dy);
  cmp(c, st_activation_name(act), down(c, dy, n), want, n, TOL_EW);
  c->be->act_forward(be_ctx(c), act, rows, cols, dx, dx);
  cmp(c, st_activation_name(act), down(c, dx, n), want, n, TOL_EW);
}

static void case_act_forward(ctx *c) {
  for (int a = 0; a < ST_ACT_COUNT; a++) {
    act_forward_one(c, (st_activation)a, 7, 13);
    act_forward_one(c, (st_activation)a, 3, 1);
    act_forward_one(c, (st_activation)a, 301, 300); /* several ranges: split over threads */
    release(c);
  }
}

/* act_backward: x given, x NULL where allowed, and dx == dy in place. */
static void act_backward_one(ctx *c, st_activation act, int rows, int cols) {
  size_t n = (size_t)rows * cols;
  float *x = rnd(c, n, -4, 4), *y = host_alloc(c, n), *g = rnd(c, n, -1, 1);
  float *want = host_alloc(c, n);
  c->ref->act_forward(ref_ctx(c), act, rows, cols, x, y);
  c->ref->act_backward(ref_ctx(c), act, rows, cols, x, y, g, want);
  float *dx = up(c, x, n), *dy = up(c, y, n), *dg = up(c, g, n);
  float *dout = up(c, want, n);
  const char *name = st_activation_name(act);
  c->be->act_backward(be_ctx(c), act, rows, cols, dx, dy, dg, dout);
  cmp(c, name, down(c, dout, n), want, n, TOL_EW);
  if (!st_activation_needs_input(act)) {
    c->be->act_backward(be_ctx(c), act, rows, cols, NULL, dy, dg, dout);
    cmp(c, name, down(c, dout, n), want, n, TOL_EW);
  }
  c->be->act_backward(be_ctx(c), act, rows, cols, dx, dy, dg, dg);
  cmp(c, name, down(c, dg, n), want, n, TOL_EW);
}

static void case_act_backward(ctx *c) {
  for (int a = 0; a < ST_ACT_COUNT; a++) {
    act_backward_one(c, (st_activation)a, 7, 13);
    act_backward_one(c, (st_activation)a, 3, 1);
    act_backward_one(c, (st_activation)a, 301, 300);
    release(c);
  }
}

/* ---- convolution helpers ----------------------------------------------------- */

/* Geometry as TensorFlow computes it for 'valid' or 'same' padding. */
static st_conv_geom conv_geom(int h, int w, int ch, int kh, int kw, int sh,
                              int sw, bool same) {
  st_conv_geom g = {.h = h, .w = w, .c = ch, .kh = kh, .kw = kw, .sh = sh, .sw = sw};
  if (same) {
    g.oh = (h + sh - 1) / sh;
    g.ow = (w + sw - 1) / sw;
    int ph = (g.oh - 1) * sh + kh - h, pw = (g.ow - 1) * sw + kw - w;
    g.pad_top = ph > 0 ? ph / 2 : 0;
    g.pad_left = pw > 0 ? pw / 2 : 0;
  } else {
    g.oh = (h - kh) / sh + 1;
    g.ow = (w - kw) / sw + 1;
  }
  return g;
}

static const struct { int h, w, c, kh, kw, sh, sw; bool same; } k_conv[] = {
    {5, 5, 1, 3, 3, 1, 1, false}, {5, 5, 1, 3, 3, 1, 1, true},
    {7, 6, 3, 3, 3, 2, 2, true},  {8, 7, 3, 3, 3, 2, 2, false},
    {6, 5, 3, 5, 5, 1, 1, true},  {4, 9, 2, 1, 3, 1, 2, true},
    {9, 9, 3, 2, 2, 2, 2, false}, {3, 3, 1, 3, 3, 1, 1, false},
    {1, 1, 3, 3, 3, 1, 1, true},  {28, 28, 1, 3, 3, 1, 1, false},
};

static void case_im2col(ctx *c) {
  for (size_t s = 0; s < sizeof k_conv / sizeof k_conv[0]; s++) {
    st_conv_geom g = conv_geom(k_conv[s].h, k_conv[s].w, k_conv[s].c,
                               k_conv[s].kh, k_conv[s].kw, k_conv[s].sh,
                               k_conv[s].sw, k_conv[s].same);
    size_t nx = (size_t)g.h * g.w * g.c;
    size_t ncol = (size_t)g.oh * g.ow * g.kh * g.kw * g.c;
    float *x = rnd(c, nx, -1, 1), *want = filled(c, ncol, NAN);
    float *dcol = up(c, want, ncol);
    c->ref->im2col(ref_ctx(c), &g, x, want);
    c->be->im2col(be_ctx(c), &g, up(c, x, nx), dcol);
    cmp(c, "im2col", down(c, dcol, ncol), want, ncol, TOL_EXACT);
    release(c);
  }
}

static void case_col2im(ctx *c) {
  for (size_t s = 0; s < sizeof k_conv / sizeof k_conv[0]; s++) {
    st_conv_geom g = conv_geom(k_conv[s].h, k_conv[s].w, k_conv[s].c,
                               k_conv[s].kh, k_conv[s].kw, k_conv[s].sh,
                               k_conv[s].sw, k_conv[s].same);
    size_t nx = (size_t)g.h * g.w * g.c;
    size_t ncol = (size_t)g.oh * g.ow * g.kh * g.kw * g.c;
    float *col = rnd(c, ncol, -1, 1), *dx0 = rnd(c, nx, -1, 1);
    float *want = dup(c, dx0, nx), *ddx = up(c, dx0, nx);
    c->ref->col2im(ref_ctx(c), &g, col, want);
    c->be->col2im(be_ctx(c), &g, up(c, col, ncol), ddx);
    cmp(c, "col2im", down(c, ddx, nx), want, nx, TOL_SUM);
    release(c);
  }
}

/* The optional direct convolution (conv_direct_*) against the reference's
 * lowering: y = im2col(x) . w, dw = im2col(x)^T . dy (+ dw0 when
 * accumulating), dx = col2im(dy . w^T). A backend may decline a geometry
 * (the layer then lowers itself); the cpu backend must take every one of
 * these where the CPU has AVX-512F (dx: stride 1 only). */
static const struct { int h, w, c, f, k, s, n; bool same; } k_direct[] = {
    {28, 28, 1, 16, 3, 1, 3, true}, {28, 28, 16, 16, 3, 1, 2, true},
    {14, 14, 16, 32, 3, 2, 2, true}, {7, 7, 64, 64, 3, 1, 3, true},
    {14, 14, 32, 64, 1, 2, 2, true}, {9, 8, 16, 32, 3, 1, 2, false},
    {6, 7, 32, 16, 5, 1, 1, true},   {5, 5, 3, 64, 3, 2, 2, false},
};

static int direct_one(ctx *c, size_t s) {
  st_conv_geom g = conv_geom(k_direct[s].h, k_direct[s].w, k_direct[s].c, k_direct[s].k,
                             k_direct[s].k, k_direct[s].s, k_direct[s].s, k_direct[s].same);
  int n = k_direct[s].n, f = k_direct[s].f, taken = 0;
  size_t P = (size_t)g.oh * g.ow, K = (size_t)g.kh * g.kw * g.c, X = (size_t)g.h * g.w * g.c;
  float *x = rnd(c, n * X, -1, 1), *w = rnd(c, K * f, -1, 1), *dy = rnd(c, n * P * f, -1, 1);
  float *dw0 = rnd(c, K * f, -1, 1), *col = filled(c, n * P * K, 0.0f);
  float *y = filled(c, n * P * f, NAN), *dw = dup(c, dw0, K * f), *dx = filled(c, n * X, 0.0f);
  for (int i = 0; i < n; i++) c->ref->im2col(ref_ctx(c), &g, x + i * X, col + i * P * K);
  c->ref->gemm(ref_ctx(c), false, false, n * P, f, K, 1.0f, col, K, w, f, 0.0f, y, f);
  c->ref->gemm(ref_ctx(c), true, false, K, f, n * P, 1.0f, col, K, dy, f, 1.0f, dw, f);
  c->ref->gemm(ref_ctx(c), false, true, n * P, K, f, 1.0f, dy, f, w, f, 0.0f, col, K);
  for (int i = 0; i < n; i++) c->ref->col2im(ref_ctx(c), &g, col + i * P * K, dx + i * X);
  float *ws = up(c, filled(c, st__conv_direct_ws_floats(&g, n, f), NAN),
                 st__conv_direct_ws_floats(&g, n, f));
  float *dx_d = up(c, filled(c, n * X, NAN), n * X), *y_d = up(c, filled(c, n * P * f, NAN), n * P * f);
  float *dw_d = up(c, dw0, K * f), *x_d = up(c, x, n * X), *w_d = up(c, w, K * f);
  float *dy_d = up(c, dy, n * P * f);
  if (st__be_conv_direct_forward(be_ctx(c), &g, n, f, x_d, w_d, y_d, ws))
    taken++, cmp(c, "conv_direct_forward", down(c, y_d, n * P * f), y, n * P * f, TOL_GEMM);
  if (st__be_conv_direct_dw(be_ctx(c), &g, n, f, x_d, dy_d, true, dw_d, ws))
    taken++, cmp(c, "conv_direct_dw", down(c, dw_d, K * f), dw, K * f, TOL_GEMM);
  if (st__be_conv_direct_dx(be_ctx(c), &g, n, f, dy_d, w_d, dx_d, ws))
    taken++, cmp(c, "conv_direct_dx", down(c, dx_d, n * X), dx, n * X, TOL_GEMM);
  bool want_dx = g.sh == 1 && g.c % 16 == 0 && g.c <= 64;
  return taken == 2 + want_dx ? 1 : 0;
}

static void case_conv_direct(ctx *c) {
  int full = 0, cases = (int)(sizeof k_direct / sizeof k_direct[0]);
  for (int s = 0; s < cases; s++) {
    full += direct_one(c, (size_t)s);
    release(c);
  }
  bool must = !strcmp(c->be->name, "cpu") && st__cpu_conv_direct_built();
  if (must && full != cases && c->ok) {
    c->ok = false;
    snprintf(c->note, sizeof c->note, "cpu took %d of %d direct geometries", full, cases);
  }
}

/* ---- pooling ----------------------------------------------------------------- */

static const struct { int h, w, c, p, s; bool same; } k_pool[] = {
    {6, 6, 3, 2, 2, false},   {7, 5, 3, 2, 2, false}, {7, 5, 3, 2, 2, true},
    {6, 6, 4, 3, 2, false},   {5, 5, 2, 3, 1, true},  {6, 6, 300, 2, 2, false},
    {5, 5, 300, 3, 2, true},  {1, 1, 1, 2, 2, true},  {4, 4, 1, 2, 1, false},
    {7, 6, 6, 2, 2, false}, /* 2x2 with 4 vector lanes and a 2-channel tail */
    {4, 4, 21, 2, 2, false}, /* 2x2: 16 lanes, 4 lanes, 1-channel tail */
};

static st_pool_geom pool_geom(size_t i) {
  st_conv_geom cg = conv_geom(k_pool[i].h, k_pool[i].w, k_pool[i].c, k_pool[i].p,
                              k_pool[i].p, k_pool[i].s, k_pool[i].s, k_pool[i].same);
  st_pool_geom g = {.n = 2, .h = cg.h, .w = cg.w, .c = cg.c, .ph = cg.kh,
                    .pw = cg.kw, .sh = cg.sh, .sw = cg.sw, .pad_top = cg.pad_top,
                    .pad_left = cg.pad_left, .oh = cg.oh, .ow = cg.ow};
  return g;
}

/* Forward then backward of max (is_max) or average pooling; x has ties (and
 * zeros: windows whose max is 0 drop the gradient when g->relu_input), and
 * with `nans` a NaN in every 7th cell (NaN is the max of its window). */
static void pool_one(ctx *c, const st_pool_geom *g, bool is_max, bool nans) {
  size_t nx = (size_t)g->n * g->h * g->w * g->c;
  size_t ny = (size_t)g->n * g->oh * g->ow * g->c;
  float *x = rnd_ties(c, nx), *y = filled(c, ny, NAN), *gy = rnd(c, ny, -1, 1);
  for (size_t i = 0; nans && i < nx; i += 7) x[i] = NAN;
  float *dx = filled(c, nx, NAN);
  float *d_x = up(c, x, nx), *d_y = up(c, y, ny), *d_dx = up(c, dx, nx);
  if (is_max) {
    c->ref->maxpool_forward(ref_ctx(c), g, x, y);
    c->ref->maxpool_backward(ref_ctx(c), g, x, y, gy, dx);
    c->be->maxpool_forward(be_ctx(c), g, d_x, d_y);
    cmp(c, "maxpool_forward", down(c, d_y, ny), y, ny, TOL_EXACT);
    c->be->maxpool_backward(be_ctx(c), g, d_x, d_y, up(c, gy, ny), d_dx);
    cmp(c, "maxpool_backward", down(c, d_dx, nx), dx, nx, TOL_SUM);
  } else {
    c->ref->avgpool_forward(ref_ctx(c), g, x, y);
    c->ref->avgpool_backward(ref_ctx(c), g, gy, dx);
    c->be->avgpool_forward(be_ctx(c), g, d_x, d_y);
    cmp(c, "avgpool_forward", down(c, d_y, ny), y, ny, TOL_SUM);
    c->be->avgpool_backward(be_ctx(c), g, up(c, gy, ny), d_dx);
    cmp(c, "avgpool_backward", down(c, d_dx, nx), dx, nx, TOL_SUM);
  }
}

static void case_maxpool(ctx *c) {
  for (size_t s = 0; s < sizeof k_pool / sizeof k_pool[0]; s++) {
    st_pool_geom g = pool_geom(s);
    for (int v = 0; v < 3; v++) { /* plain, ReLU's derivative folded in, NaNs */
      g.relu_input = v == 1;
      pool_one(c, &g, true, v == 2);
      release(c);
    }
  }
}

static void case_avgpool(ctx *c) {
  for (size_t s = 0; s < sizeof k_pool / sizeof k_pool[0]; s++) {
    st_pool_geom g = pool_geom(s);
    pool_one(c, &g, false, false);
    release(c);
  }
}

/* ---- batch normalization ------------------------------------------------------ */

static void bn_one(ctx *c, int rows, int ch) {
  size_t n = (size_t)rows * ch;
  const float eps = 1e-3f;
  float *x = rnd(c, n, -2, 3), *gam = rnd(c, ch, 0.5f, 1.5f);
  float *bet = rnd(c, ch, -1, 1), *gy = rnd(c, n, -1, 1);
  float *mean = host_alloc(c, ch), *inv = host_alloc(c, ch), *y = host_alloc(c, n);
  c->ref->batchnorm_forward_train(ref_ctx(c), rows, ch, x, gam, bet, eps, mean, inv, y);
  float *d_x = up(c, x, n), *d_g = up(c, gam, ch), *d_b = up(c, bet, ch);
  float *d_m = up(c, mean, ch), *d_i = up(c, inv, ch), *d_y = up(c, y, n);
  c->be->batchnorm_forward_train(be_ctx(c), rows, ch, d_x, d_g, d_b, eps, d_m, d_i, d_y);
  cmp(c, "bn_train mean", down(c, d_m, ch), mean, ch, TOL_SUM);
  cmp(c, "bn_train invstd", down(c, d_i, ch), inv, ch, TOL_SUM);
  cmp(c, "bn_train y", down(c, d_y, n), y, n, TOL_SUM);
  float *mm = rnd(c, ch, -1, 1), *mv = rnd(c, ch, 0.1f, 2.0f);
  c->ref->batchnorm_forward_infer(ref_ctx(c), rows, ch, x, gam, bet, mm, mv, eps, y);
  c->be->batchnorm_forward_infer(be_ctx(c), rows, ch, d_x, d_g, d_b, up(c, mm, ch),
                                 up(c, mv, ch), eps, d_y);
  cmp(c, "bn_infer y", down(c, d_y, n), y, n, TOL_SUM);
  float *dx = host_alloc(c, n), *dg = host_alloc(c, ch), *db = host_alloc(c, ch);
  c->ref->batchnorm_backward(ref_ctx(c), rows, ch, x, gam, mean, inv, gy, dx, dg, db);
  float *d_dx = up(c, dx, n), *d_dg = up(c, dg, ch), *d_db = up(c, db, ch);
  c->be->batchnorm_backward(be_ctx(c), rows, ch, d_x, d_g, up(c, mean, ch), up(c, inv, ch),
                            up(c, gy, n), d_dx, d_dg, d_db);
  cmp(c, "bn_backward dx", down(c, d_dx, n), dx, n, TOL_SUM);
  cmp(c, "bn_backward dgamma", down(c, d_dg, ch), dg, ch, TOL_SUM);
  cmp(c, "bn_backward dbeta", down(c, d_db, ch), db, ch, TOL_SUM);
}

static void case_batchnorm(ctx *c) {
  /* the last two: enough rows for the cpu backend to split them over threads */
  static const int shapes[][2] = {{1, 3}, {50, 3}, {50, 300}, {7, 1}, {4099, 16}, {2001, 20}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    bn_one(c, shapes[s][0], shapes[s][1]);
    release(c);
  }
}

/* ---- dropout ------------------------------------------------------------------ */

static void case_dropout(ctx *c) {
  static const size_t sizes[] = {1, 3, 4, 5, 64, 261, 1001};
  static const float rates[] = {0.0f, 0.3f, 0.5f, 0.1234567f, 1.0f};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
      size_t n = sizes[s];
      uint64_t seed = 1234 + s, stream = 7 * r;
      float *x = rnd(c, n, -1, 1), *y = host_alloc(c, n), *dx = host_alloc(c, n);
      c->ref->dropout_forward(ref_ctx(c), n, rates[r], seed, stream, x, y);
      c->ref->dropout_backward(ref_ctx(c), n, rates[r], seed, stream, x, dx);
      float *d_x = up(c, x, n), *d_y = up(c, y, n);
      c->be->dropout_forward(be_ctx(c), n, rates[r], seed, stream, d_x, d_y);
      cmp(c, "dropout_forward", down(c, d_y, n), y, n, TOL_EXACT);
      c->be->dropout_backward(be_ctx(c), n, rates[r], seed, stream, d_x, d_x);
      cmp(c, "dropout_backward", down(c, d_x, n), dx, n, TOL_EXACT);
      release(c);
    }
}

/* ---- losses ------------------------------------------------------------------- */

/* Predictions and targets suited to each kind: logits, row-normalised
 * probabilities (with a few clipped extremes) or sigmoid outputs. */
static void loss_inputs(ctx *c, st_loss_kind k, int rows, int cols,
                        float **pred, float **y) {
  size_t n = (size_t)rows * cols;
  float *p = rnd(c, n, -4, 4);
  if (k == ST_LOSS_SPARSE_CE || k == ST_LOSS_CE)
    c->ref->act_forward(ref_ctx(c), ST_ACT_SOFTMAX, rows, cols, p, p);
  if (k == ST_LOSS_BCE) c->ref->act_forward(ref_ctx(c), ST_ACT_SIGMOID, rows, cols, p, p);
  if (k == ST_LOSS_BCE || k == ST_LOSS_SPARSE_CE) {
    p[0] = 0.0f; /* exercise the clipping */
    p[n - 1] = 1.0f;
  }
  *pred = p;
  if (st_loss_is_sparse(k)) {
    *y = host_alloc(c, rows);
    for (int r = 0; r < rows; r++) (*y)[r] = (float)st_rng_below(&c->rng, cols);
    if (rows > 2) (*y)[1] = (float)cols; /* invalid label: NaN, zero grad */
  } else if (k == ST_LOSS_CE || k == ST_LOSS_CE_LOGITS) {
    *y = rnd(c, n, 0, 1);
    c->ref->act_forward(ref_ctx(c), ST_ACT_SOFTMAX, rows, cols, *y, *y); /* soft labels */
  } else {
    *y = rnd(c, n, 0, 1);
  }
}

static void loss_one(ctx *c, st_loss_kind k, int rows, int cols) {
  size_t n = (size_t)rows * cols, ny = st_loss_is_sparse(k) ? (size_t)rows : n;
  float *pred, *y;
  loss_inputs(c, k, rows, cols, &pred, &y);
  float *loss = filled(c, rows, 0), *dp = filled(c, n, 0);
  c->ref->loss(ref_ctx(c), k, rows, cols, pred, y, 0.125f, loss, dp);
  float *d_p = up(c, pred, n), *d_y = up(c, y, ny);
  float *d_l = up(c, loss, rows), *d_dp = up(c, dp, n);
  c->be->loss(be_ctx(c), k, rows, cols, d_p, d_y, 0.125f, d_l, d_dp);
  char what[64];
  snprintf(what, sizeof what, "%s loss", st_loss_name(k));
  cmp(c, what, down(c, d_l, rows), loss, rows, TOL_SUM);
  snprintf(what, sizeof what, "%s dpred", st_loss_name(k));
  cmp(c, what, down(c, d_dp, n), dp, n, TOL_SUM);
  c->be->loss(be_ctx(c), k, rows, cols, d_p, d_y, 0.125f, d_l, NULL);
  snprintf(what, sizeof what, "%s loss (no dpred)", st_loss_name(k));
  cmp(c, what, down(c, d_l, rows), loss, rows, TOL_SUM);
}

static void case_loss(ctx *c) {
  for (int k = 0; k < ST_LOSS_COUNT; k++) {
    loss_one(c, (st_loss_kind)k, 9, 5);
    loss_one(c, (st_loss_kind)k, 4, 1000);
    loss_one(c, (st_loss_kind)k, 3, 50257); /* a vocabulary: cpu's wide-row path */
    loss_one(c, (st_loss_kind)k, 1, 1);
    release(c);
  }
}

/* ---- optimizers --------------------------------------------------------------- */

/* State of one optimizer comparison: params and up to two slots per side. */
typedef struct opt_state {
  size_t n;
  float *p, *s1, *s2;     /* reference (host) */
  float *dp, *ds1, *ds2;  /* backend under test */
} opt_state;

static opt_state opt_init(ctx *c, size_t n, bool slot1, bool slot2) {
  opt_state o = {.n = n};
  o.p = rnd(c, n, -1, 1);
  o.s1 = slot1 ? filled(c, n, 0) : NULL;
  o.s2 = slot2 ? filled(c, n, 0) : NULL;
  o.dp = up(c, o.p, n);
  o.ds1 = up(c, o.s1, n);
  o.ds2 = up(c, o.s2, n);
  return o;
}

/* Fresh gradient for step t on both sides (host and device copies). */
static const float *opt_grad(ctx *c, size_t n, float **dg) {
  float *g = rnd(c, n, -1, 1);
  *dg = up(c, g, n);
  return g;
}

static void opt_check(ctx *c, const char *what, const opt_state *o) {
  cmp(c, what, down(c, o->dp, o->n), o->p, o->n, TOL_EW);
  if (o->s1) cmp(c, what, down(c, o->ds1, o->n), o->s1, o->n, TOL_EW);
  if (o->s2) cmp(c, what, down(c, o->ds2, o->n), o->s2, o->n, TOL_EW);
}

static void case_sgd(ctx *c) {
  static const struct { float mom; bool nest, slot; } v[] = {
      {0.0f, false, false}, {0.9f, false, true}, {0.9f, true, true}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    opt_state o = opt_init(c, 1027, v[i].slot, false);
    for (int t = 1; t <= 3; t++) {
      float *dg;
      const float *g = opt_grad(c, o.n, &dg);
      c->ref->sgd_update(ref_ctx(c), o.n, 0.05f, v[i].mom, v[i].nest, o.p, g, o.s1);
      c->be->sgd_update(be_ctx(c), o.n, 0.05f, v[i].mom, v[i].nest, o.dp, dg, o.ds1);
    }
    opt_check(c, "sgd", &o);
    release(c);
  }
}

static void case_adam(ctx *c) {
  static const float wds[] = {0.0f, 0.01f};
  for (size_t i = 0; i < sizeof wds / sizeof wds[0]; i++) {
    opt_state o = opt_init(c, 1027, true, true);
    for (int64_t t = 1; t <= 3; t++) {
      float *dg;
      const float *g = opt_grad(c, o.n, &dg);
      c->ref->adam_update(ref_ctx(c), o.n, 1e-3f, 0.9f, 0.999f, 1e-7f, wds[i], t, o.p, g,
                          o.s1, o.s2);
      c->be->adam_update(be_ctx(c), o.n, 1e-3f, 0.9f, 0.999f, 1e-7f, wds[i], t, o.dp, dg,
                         o.ds1, o.ds2);
    }
    opt_check(c, wds[i] > 0 ? "adamw" : "adam", &o);
    release(c);
  }
}

static void case_rmsprop(ctx *c) {
  static const float moms[] = {0.0f, 0.9f};
  for (size_t i = 0; i < sizeof moms / sizeof moms[0]; i++) {
    opt_state o = opt_init(c, 1027, true, moms[i] > 0);
    for (int t = 1; t <= 3; t++) {
      float *dg;
      const float *g = opt_grad(c, o.n, &dg);
      c->ref->rmsprop_update(ref_ctx(c), o.n, 1e-3f, 0.9f, moms[i], 1e-7f, o.p, g, o.s1, o.s2);
      c->be->rmsprop_update(be_ctx(c), o.n, 1e-3f, 0.9f, moms[i], 1e-7f, o.dp, dg, o.ds1,
                            o.ds2);
    }
    opt_check(c, "rmsprop", &o);
    release(c);
  }
}

/* ---- the table ---------------------------------------------------------------- */

static const struct {
  const char *name;
  void (*run)(ctx *c);
} k_cases[] = {
    {"memory", case_memory},
    {"gemm", case_gemm},
    {"axpy/scale/fill", case_axpy_scale_fill},
    {"bias_add/bias_grad", case_bias},
    {"act_forward", case_act_forward},
    {"act_backward", case_act_backward},
    {"im2col", case_im2col},
    {"col2im", case_col2im},
    {"conv_direct", case_conv_direct},
    {"maxpool", case_maxpool},
    {"avgpool", case_avgpool},
    {"batchnorm", case_batchnorm},
    {"dropout", case_dropout},
    {"loss", case_loss},
    {"sgd_update", case_sgd},
    {"adam_update", case_adam},
    {"rmsprop_update", case_rmsprop},
};

/* Backends compared with the reference; one not built is skipped. */
static const char *const k_backends[] = {"cpu", "cuda"};

static void run_backend(const st_backend *be) {
  int threads = g_threads ? g_threads : 1;
  for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
    ctx c = {.be = be, .ref = st_backend_reference(), .ok = true};
    c.rng = st_rng_make(42, i);
    k_cases[i].run(&c);
    release(&c);
    printf("%s x%d: %-20s %s (worst error %.3g of tolerance)%s%s\n", be->name, threads,
           k_cases[i].name, c.ok ? "ok" : "MISMATCH", c.worst,
           c.ok ? "" : ": ", c.note);
    CHECK_MSG(c.ok, "%s x%d: %s: %s", be->name, threads, k_cases[i].name, c.note);
  }
}

/* Every kernel of every built backend against the reference. */
static void test_backends(void) {
  for (size_t b = 0; b < sizeof k_backends / sizeof k_backends[0]; b++) {
    const st_backend *be = NULL;
    st_status s = st_backend_get(k_backends[b], &be);
    if (s == ST_ERR_NOT_BUILT) {
      printf("%s: not built, skipped\n", k_backends[b]);
      continue;
    }
    CHECK_OK(s);
    if (s == ST_OK) run_backend(be);
    if (s == ST_OK && !strcmp(be->name, "cpu")) { /* again with a 3-thread context */
      g_threads = 3;
      run_backend(be);
      g_threads = 0;
    }
  }
}

/* ---- the same bytes for any thread count --------------------------------------- */

/* Runs the kernels that split their work on ctx over resnet20-sized inputs
 * and appends every output to out (the caller compares two contexts'). */
static size_t threaded_outputs(st_backend_ctx *ctx, const float *in, float *out) {
  const st_backend *be = ctx->be;
  size_t o = 0;
  static const struct { int h, c, f, k, s, n; } cv[] = {
      {28, 16, 16, 3, 1, 5}, {14, 16, 32, 3, 2, 4}, {7, 64, 64, 3, 1, 3}, {14, 32, 64, 1, 2, 3}};
  for (size_t i = 0; i < sizeof cv / sizeof cv[0]; i++) {
    st_conv_geom g = conv_geom(cv[i].h, cv[i].h, cv[i].c, cv[i].k, cv[i].k, cv[i].s, cv[i].s, true);
    size_t P = (size_t)g.oh * g.ow, K = (size_t)g.kh * g.kw * g.c, X = (size_t)g.h * g.w * g.c;
    int n = cv[i].n, f = cv[i].f;
    float *ws = malloc(sizeof(float) * st__conv_direct_ws_floats(&g, n, f));
    if (!ws) exit(1);
    if (!st__be_conv_direct_forward(ctx, &g, n, f, in, in + 1, out + o, ws)) {
      free(ws); /* a CPU without AVX-512: the layer lowers these itself */
      break;
    }
    o += n * P * f;
    memcpy(out + o, in, sizeof(float) * K * f); /* accumulate onto it */
    st__be_conv_direct_dw(ctx, &g, n, f, in + 3, in + 5, true, out + o, ws);
    o += K * f;
    if (st__be_conv_direct_dx(ctx, &g, n, f, in + 7, in + 11, out + o, ws)) o += n * X;
    free(ws);
  }
  static const int bn[][2] = {{50176, 16}, {3136, 64}, {4001, 20}};
  for (size_t i = 0; i < sizeof bn / sizeof bn[0]; i++) {
    int rows = bn[i][0], ch = bn[i][1];
    size_t n = (size_t)rows * ch;
    float *mean = out + o, *inv = mean + ch, *y = inv + ch;
    be->batchnorm_forward_train(ctx, rows, ch, in, in + 3, in + 5, 1e-3f, mean, inv, y);
    o += 2 * (size_t)ch + n;
    be->batchnorm_backward(ctx, rows, ch, in, in + 3, mean, inv, in + 9, out + o, out + o + n,
                           out + o + n + ch);
    o += n + 2 * (size_t)ch;
  }
  /* a gemm large enough to be split by rows (the stride-2 input gradient's) */
  be->gemm(ctx, false, true, 1764, 144, 32, 1.0f, in, 32, in + 7, 32, 0.0f, out + o, 144);
  o += 1764 * 144;
  be->act_forward(ctx, ST_ACT_RELU, 1000, 803, in, out + o);
  be->act_backward(ctx, ST_ACT_RELU, 1000, 803, NULL, in + 1, in + 2, out + o + 803000);
  memcpy(out + o + 2 * 803000, in + 3, sizeof(float) * 803000);
  be->axpy(ctx, 803000, 0.5f, in, out + o + 2 * 803000);
  return o + 3 * 803000;
}

static void test_threads_same_bytes(void) {
  const size_t nin = 1u << 20, nout = 8u << 20;
  float *in = malloc(sizeof(float) * nin), *a = calloc(nout, sizeof(float));
  float *b = calloc(nout, sizeof(float));
  CHECK_MSG(in && a && b, "out of memory");
  if (!in || !a || !b) return;
  st_rng rng = st_rng_make(7, 0);
  for (size_t i = 0; i < nin; i++) in[i] = 2.0f * st_rng_uniform(&rng) - 1.0f;
  st_backend_ctx *one = NULL, *three = NULL;
  CHECK_OK(st_backend_ctx_create(st_backend_cpu(), 0, 1, &one));
  CHECK_OK(st_backend_ctx_create(st_backend_cpu(), 0, 1, &three));
  CHECK_OK(st__be_set_threads(three, 3)); /* as one_device sets its replica's */
  if (one && three) {
    size_t na = threaded_outputs(one, in, a), nb = threaded_outputs(three, in, b);
    CHECK_MSG(na == nb && na <= nout, "outputs %zu and %zu floats", na, nb);
    size_t first = na;
    for (size_t i = 0; i < na && i < nb; i++)
      if (memcmp(a + i, b + i, sizeof(float)) != 0) {
        first = i;
        break;
      }
    printf("cpu: 1 and 3 kernel threads, %zu output floats: %s\n", na,
           first == na ? "the same bytes" : "DIFFER");
    CHECK_MSG(first == na, "1 and 3 threads differ at float %zu: %.9g vs %.9g", first,
              (double)a[first], (double)b[first]);
  }
  st_backend_ctx_destroy(one);
  st_backend_ctx_destroy(three);
  free(in), free(a), free(b);
}
/* the baseline build of the hand-dispatched kernels, where AVX-512 hid it */
static void test_baseline_maxpool(void) {
  const st_backend *cpu = st_backend_cpu();
  ctx c = {.be = cpu, .ref = st_backend_reference(), .ok = true};
  ((st__cpu_state *)be_ctx(&c)->impl)->baseline_kernels = true;
  c.rng = st_rng_make(43, 0);
  case_maxpool(&c);
  release(&c);
  printf("cpu (baseline kernels): maxpool %s (worst error %.3g of tolerance)\n",
         c.ok ? "ok" : "MISMATCH", c.worst);
  CHECK_MSG(c.ok, "cpu baseline kernels: maxpool: %s", c.note);
  fflush(stdout);
}
static const check_case cases[] = {CHECK_CASE(test_backends), CHECK_CASE(test_baseline_maxpool),
                                   CHECK_CASE(test_threads_same_bytes)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
