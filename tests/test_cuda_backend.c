/* Conformance of the cuda backend (src/backend/cuda/, loaded from
 * libstrata_cuda.so) against the reference backend: every required slot on
 * random inputs, shapes odd and empty included, results copied back and
 * compared within the tolerance each case states (NaN where the reference
 * gives NaN); plus bitwise repeatability of gemm and the reductions. Needs the
 * module, an NVIDIA driver and a GPU: without any of them it prints why and
 * exits 77 (the case on CI and on machines without a GPU; it still compiles
 * and links everywhere). Run on a GPU machine: build/test_cuda_backend
 * (docs/GPU.md); one case by name: build/test_cuda_backend test_gemm. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda.h"
#include "backend/impl.h"
#include "check.h"

static const st_backend *g_ref, *g_gpu;
static st_backend_ctx *g_rc, *g_gc;
static st_rng g_rng;

/* ---- helpers: host buffers, device copies, comparison --------------------- */

/* n floats uniform in [lo, hi) (at least one float allocated). */
static float *rnd(size_t n, float lo, float hi) {
  float *p = calloc(n ? n : 1, sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * st_rng_uniform(&g_rng);
  return p;
}
/* A device copy of h[n]. */
static float *up(const float *h, size_t n) {
  float *d = g_gpu->alloc(g_gc, (n ? n : 1) * sizeof *d);
  CHECK_MSG(d != NULL, "cuda alloc of %zu floats: %s", n, st_last_error());
  if (d) st__be_to_device(g_gc, d, h, n * sizeof *d);
  return d;
}
/* h[n] = d[n] (waits for the kernels before it). */
static void down(float *h, const float *d, size_t n) { st__be_to_host(g_gc, h, d, n * sizeof *h); }

/* got[n] against ref[n]: |got - ref| <= tol * (1 + |ref|), NaN only where
 * the reference has NaN. Prints the first few mismatches. */
static void cmp(const char *what, const float *ref, const float *got, size_t n, double tol) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    bool ok = isnan(ref[i]) ? isnan(got[i])
                            : fabs((double)got[i] - ref[i]) <= tol * (1.0 + fabs((double)ref[i]));
    if (!ok && bad++ < 3)
      fprintf(stderr, "%s[%zu]: cuda %.9g, reference %.9g (tol %g)\n", what, i, got[i], ref[i], tol);
  }
  CHECK_MSG(bad == 0, "%s: %zu of %zu elements differ", what, bad, n);
}
/* Runs the cuda result d[n] back and compares it with ref. Frees d. */
static void check_dev(const char *what, const float *ref, float *d, size_t n, double tol) {
  float *h = calloc(n ? n : 1, sizeof *h);
  down(h, d, n);
  cmp(what, ref, h, n, tol);
  free(h);
  g_gpu->free(g_gc, d);
}

/* ---- BLAS-like ------------------------------------------------------------ */

static void gemm_case(int m, int n, int k, bool ta, bool tb, float alpha, float beta) {
  int lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 1;
  size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
  float *a = rnd(na, -1, 1), *b = rnd(nb, -1, 1), *c = rnd(nc, -1, 1);
  float *da = up(a, na), *db = up(b, nb), *dc = up(c, nc);
  g_ref->gemm(g_rc, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  g_gpu->gemm(g_gc, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
  char what[96];
  snprintf(what, sizeof what, "gemm %dx%dx%d ta=%d tb=%d beta=%g", m, n, k, ta, tb, beta);
  check_dev(what, c, dc, nc, 1e-5 * (k + 4)); /* fp32 sums of k products */
  g_gpu->free(g_gc, da);
  g_gpu->free(g_gc, db);
  free(a), free(b), free(c);
}

static void test_gemm(void) {
  static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {0, 4, 3},
                                  {4, 0, 3}, {5, 4, 0}, {128, 64, 256}, {3, 200, 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int t = 0; t < 4; t++) {
      gemm_case(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, 1.3f, 0.0f);
      gemm_case(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, -0.7f, 0.5f);
    }
}

static void test_blas1(void) {
  static const size_t sizes[] = {0, 1, 1000, 4097};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s];
    float *x = rnd(n, -2, 2), *y = rnd(n, -2, 2);
    float *dx = up(x, n), *dy = up(y, n);
    g_ref->axpy(g_rc, n, 0.37f, x, y);
    g_gpu->axpy(g_gc, n, 0.37f, dx, dy);
    g_ref->scale(g_rc, n, -1.5f, y);
    g_gpu->scale(g_gc, n, -1.5f, dy);
    check_dev("axpy + scale", y, dy, n, 0); /* the same float operations: exact */
    g_ref->fill(g_rc, n, 2.5f, x);
    g_gpu->fill(g_gc, n, 2.5f, dx);
    check_dev("fill", x, dx, n, 0);
    free(x), free(y);
  }
}

/* ---- bias and activations ------------------------------------------------- */

static void test_bias(void) {
  /* the last two: column sums over three and two levels of chunks (the
   * cnn's first convolution at batch 128: 100,352 rows of 32) */
  static const int shapes[][2] = {{0, 3}, {1, 1}, {37, 19}, {256, 10}, {100352, 32}, {4097, 3}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int rows = shapes[s][0], cols = shapes[s][1];
    size_t n = (size_t)rows * cols;
    float *bias = rnd(cols, -1, 1), *y = rnd(n, -1, 1), *db = rnd(cols, 0, 1);
    float *dbias = up(bias, cols), *dy = up(y, n), *ddb = up(db, cols);
    g_ref->bias_grad(g_rc, rows, cols, y, db);
    g_gpu->bias_grad(g_gc, rows, cols, dy, ddb);
    check_dev("bias_grad", db, ddb, cols, 1e-6);
    g_ref->bias_add(g_rc, rows, cols, bias, y);
    g_gpu->bias_add(g_gc, rows, cols, dbias, dy);
    check_dev("bias_add", y, dy, n, 0);
    g_gpu->free(g_gc, dbias);
    free(bias), free(y), free(db);
  }
}

static void act_case(st_activation act, int rows, int cols) {
  size_t n = (size_t)rows * cols;
  float *x = rnd(n, -3, 3), *y = rnd(n, 0, 1), *g = rnd(n, -1, 1), *dx = rnd(n, 0, 1);
  float *d_x = up(x, n), *d_y = up(y, n), *d_g = up(g, n), *d_dx = up(dx, n);
  g_ref->act_forward(g_rc, act, rows, cols, x, y);
  g_gpu->act_forward(g_gc, act, rows, cols, d_x, d_y);
  float *gy = calloc(n ? n : 1, sizeof *gy);
  down(gy, d_y, n);
  char what[64];
  snprintf(what, sizeof what, "act_forward %s %dx%d", st_activation_name(act), rows, cols);
  cmp(what, y, gy, n, 1e-6);
  g_ref->act_backward(g_rc, act, rows, cols, x, y, g, dx);
  g_gpu->act_backward(g_gc, act, rows, cols, d_x, d_y, d_g, d_dx);
  snprintf(what, sizeof what, "act_backward %s %dx%d", st_activation_name(act), rows, cols);
  check_dev(what, dx, d_dx, n, 1e-6);
  g_gpu->free(g_gc, d_x), g_gpu->free(g_gc, d_y), g_gpu->free(g_gc, d_g);
  free(x), free(y), free(g), free(dx), free(gy);
}

static void test_activations(void) {
  for (int a = 0; a < ST_ACT_COUNT; a++) {
    act_case((st_activation)a, 5, 7);
    act_case((st_activation)a, 0, 3);
    act_case((st_activation)a, 64, 10);
  }
}

/* ---- convolution helpers and pooling -------------------------------------- */

static st_conv_geom conv_geom(int h, int w, int c, int kh, int kw, int sh, int sw, int pt, int pl) {
  st_conv_geom g = {.h = h, .w = w, .c = c, .kh = kh, .kw = kw, .sh = sh, .sw = sw,
                    .pad_top = pt, .pad_left = pl};
  g.oh = (h + 2 * pt - kh) / sh + 1;
  g.ow = (w + 2 * pl - kw) / sw + 1;
  return g;
}

static void test_im2col_col2im(void) {
  const st_conv_geom gs[] = {conv_geom(7, 6, 3, 3, 2, 2, 1, 1, 0), conv_geom(5, 5, 1, 5, 5, 1, 1, 0, 0),
                             conv_geom(9, 8, 4, 3, 3, 1, 1, 1, 1), conv_geom(1, 1, 2, 1, 1, 1, 1, 0, 0)};
  for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) {
    const st_conv_geom *g = &gs[i];
    size_t nx = (size_t)g->h * g->w * g->c, ncol = (size_t)g->oh * g->ow * g->kh * g->kw * g->c;
    float *x = rnd(nx, -1, 1), *col = rnd(ncol, -1, 1), *dx = rnd(nx, -1, 1);
    float *d_x = up(x, nx), *d_col = up(col, ncol), *d_dx = up(dx, nx);
    g_ref->col2im(g_rc, g, col, dx);
    g_gpu->col2im(g_gc, g, d_col, d_dx);
    check_dev("col2im", dx, d_dx, nx, 1e-6); /* gathered in another order */
    g_ref->im2col(g_rc, g, x, col);
    g_gpu->im2col(g_gc, g, d_x, d_col);
    check_dev("im2col", col, d_col, ncol, 0);
    g_gpu->free(g_gc, d_x);
    free(x), free(col), free(dx);
    /* three images at once (im2col_n, col2im_n) = image by image */
    int n = 3;
    float *xn = rnd(nx * n, -1, 1), *coln = rnd(ncol * n, -1, 1), *dxn = rnd(nx * n, -1, 1);
    float *d_xn = up(xn, nx * n), *d_coln = up(coln, ncol * n), *d_dxn = up(dxn, nx * n);
    for (int k = 0; k < n; k++) g_ref->col2im(g_rc, g, coln + k * ncol, dxn + k * nx);
    st__be_col2im_n(g_gc, g, n, d_coln, d_dxn);
    check_dev("col2im_n", dxn, d_dxn, nx * n, 1e-6);
    for (int k = 0; k < n; k++) g_ref->im2col(g_rc, g, xn + k * nx, coln + k * ncol);
    st__be_im2col_n(g_gc, g, n, d_xn, d_coln);
    check_dev("im2col_n", coln, d_coln, ncol * n, 0);
    g_gpu->free(g_gc, d_xn);
    free(xn), free(coln), free(dxn);
  }
}

static st_pool_geom pool_geom(int n, int h, int w, int c, int p, int s, int pad, bool relu) {
  st_pool_geom g = {.n = n, .h = h, .w = w, .c = c, .ph = p, .pw = p + 1, .sh = s, .sw = s,
                    .pad_top = pad, .pad_left = pad, .relu_input = relu};
  g.oh = (h + 2 * pad - g.ph) / s + 1;
  g.ow = (w + 2 * pad - g.pw) / s + 1;
  return g;
}

static void pool_case(const st_pool_geom *g) {
  size_t nx = (size_t)g->n * g->h * g->w * g->c, ny = (size_t)g->n * g->oh * g->ow * g->c;
  float *x = rnd(nx, -1, 1), *y = rnd(ny, 0, 1), *dy = rnd(ny, -1, 1), *dx = rnd(nx, 0, 1);
  if (nx > 3) x[3] = NAN; /* a NaN is the max of its windows */
  if (nx > 7) x[7] = x[6]; /* a tie: the first max wins */
  float *d_x = up(x, nx), *d_y = up(y, ny), *d_dy = up(dy, ny), *d_dx = up(dx, nx);
  g_ref->maxpool_forward(g_rc, g, x, y);
  g_gpu->maxpool_forward(g_gc, g, d_x, d_y);
  float *gy = calloc(ny ? ny : 1, sizeof *gy);
  down(gy, d_y, ny);
  cmp("maxpool_forward", y, gy, ny, 0);
  g_ref->maxpool_backward(g_rc, g, x, y, dy, dx);
  g_gpu->maxpool_backward(g_gc, g, d_x, d_y, d_dy, d_dx);
  float *gdx = calloc(nx ? nx : 1, sizeof *gdx);
  down(gdx, d_dx, nx);
  cmp("maxpool_backward", dx, gdx, nx, 1e-6);
  g_ref->avgpool_forward(g_rc, g, x, y);
  g_gpu->avgpool_forward(g_gc, g, d_x, d_y);
  down(gy, d_y, ny);
  cmp("avgpool_forward", y, gy, ny, 1e-6);
  g_ref->avgpool_backward(g_rc, g, dy, dx);
  g_gpu->avgpool_backward(g_gc, g, d_dy, d_dx);
  check_dev("avgpool_backward", dx, d_dx, nx, 1e-6);
  g_gpu->free(g_gc, d_x), g_gpu->free(g_gc, d_y), g_gpu->free(g_gc, d_dy);
  free(x), free(y), free(dy), free(dx), free(gy), free(gdx);
}

static void test_pooling(void) {
  const st_pool_geom gs[] = {pool_geom(2, 5, 7, 3, 2, 2, 0, false), pool_geom(1, 6, 6, 2, 3, 1, 1, true),
                             pool_geom(3, 4, 5, 1, 2, 2, 1, false), pool_geom(0, 4, 4, 2, 2, 2, 0, false)};
  for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) pool_case(&gs[i]);
}

/* ---- batch normalization and dropout -------------------------------------- */

static void bn_case(int rows, int c) {
  size_t n = (size_t)rows * c;
  float *x = rnd(n, -2, 2), *gamma = rnd(c, 0.5f, 1.5f), *beta = rnd(c, -1, 1);
  float *mean = rnd(c, 0, 1), *invstd = rnd(c, 0, 1), *y = rnd(n, 0, 1), *dy = rnd(n, -1, 1);
  float *dx = rnd(n, 0, 1), *dg = rnd(c, 0, 1), *dbeta = rnd(c, 0, 1), *mv = rnd(c, 0.5f, 2);
  float *d_x = up(x, n), *d_gamma = up(gamma, c), *d_beta = up(beta, c), *d_mean = up(mean, c),
        *d_invstd = up(invstd, c), *d_y = up(y, n), *d_dy = up(dy, n), *d_dx = up(dx, n),
        *d_dg = up(dg, c), *d_dbeta = up(dbeta, c), *d_mv = up(mv, c);
  g_ref->batchnorm_forward_train(g_rc, rows, c, x, gamma, beta, 1e-3f, mean, invstd, y);
  g_gpu->batchnorm_forward_train(g_gc, rows, c, d_x, d_gamma, d_beta, 1e-3f, d_mean, d_invstd, d_y);
  float *h = malloc((n > (size_t)c ? n : (size_t)c) * sizeof *h + 4);
  down(h, d_y, n), cmp("batchnorm_forward_train y", y, h, n, 1e-5);
  down(h, d_mean, c), cmp("batchnorm_forward_train mean", mean, h, c, 1e-6);
  down(h, d_invstd, c), cmp("batchnorm_forward_train invstd", invstd, h, c, 1e-6);
  g_ref->batchnorm_backward(g_rc, rows, c, x, gamma, mean, invstd, dy, dx, dg, dbeta);
  g_gpu->batchnorm_backward(g_gc, rows, c, d_x, d_gamma, d_mean, d_invstd, d_dy, d_dx, d_dg, d_dbeta);
  down(h, d_dg, c), cmp("batchnorm_backward dgamma", dg, h, c, 1e-5);
  down(h, d_dbeta, c), cmp("batchnorm_backward dbeta", dbeta, h, c, 1e-5);
  down(h, d_dx, n), cmp("batchnorm_backward dx", dx, h, n, 1e-4);
  g_ref->batchnorm_forward_infer(g_rc, rows, c, x, gamma, beta, mean, mv, 1e-3f, y);
  g_gpu->batchnorm_forward_infer(g_gc, rows, c, d_x, d_gamma, d_beta, d_mean, d_mv, 1e-3f, d_y);
  down(h, d_y, n), cmp("batchnorm_forward_infer", y, h, n, 1e-5);
  float *dev[] = {d_x, d_gamma, d_beta, d_mean, d_invstd, d_y, d_dy, d_dx, d_dg, d_dbeta, d_mv};
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) g_gpu->free(g_gc, dev[i]);
  float *host[] = {x, gamma, beta, mean, invstd, y, dy, dx, dg, dbeta, mv, h};
  for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
}

static void test_batchnorm(void) {
  bn_case(0, 3);
  bn_case(1, 1);
  bn_case(50, 7);
  bn_case(300, 16);
  bn_case(4097, 5);   /* the sums over levels of chunks (kernels.cu: st__cuda_colsum) */
  bn_case(65600, 3);
}

static void test_dropout(void) {
  static const size_t sizes[] = {0, 1, 1001};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t n = sizes[s];
    float *x = rnd(n, -1, 1), *y = rnd(n, 0, 1);
    float *d_x = up(x, n), *d_y = up(y, n);
    g_ref->dropout_forward(g_rc, n, 0.3f, 42, 7, x, y);
    g_gpu->dropout_forward(g_gc, n, 0.3f, 42, 7, d_x, d_y);
    float *h = malloc((n ? n : 1) * sizeof *h);
    down(h, d_y, n);
    cmp("dropout_forward (the same Philox mask)", y, h, n, 0);
    g_ref->dropout_backward(g_rc, n, 0.5f, 1ull << 40, 3, x, y);
    g_gpu->dropout_backward(g_gc, n, 0.5f, 1ull << 40, 3, d_x, d_y);
    check_dev("dropout_backward", y, d_y, n, 0);
    g_gpu->free(g_gc, d_x);
    free(x), free(y), free(h);
  }
}

/* ---- losses --------------------------------------------------------------- */

static void loss_case(st_loss_kind kind, int rows, int cols, bool with_grad) {
  bool sparse = st_loss_is_sparse(kind);
  bool probs = kind == ST_LOSS_SPARSE_CE || kind == ST_LOSS_CE || kind == ST_LOSS_BCE;
  size_t n = (size_t)rows * cols, ny = sparse ? (size_t)rows : n;
  float *pred = probs ? rnd(n, 0.01f, 1) : rnd(n, -3, 3);
  float *y = rnd(ny, 0, 1), *loss = rnd(rows, 0, 1), *d = rnd(n, 0, 1);
  for (size_t i = 0; sparse && i < ny; i++) y[i] = (float)(int)(y[i] * cols); /* class index */
  if (sparse && rows > 2) y[2] = (float)cols; /* out of range: NaN loss, zero gradient */
  float *d_pred = up(pred, n), *d_y = up(y, ny), *d_loss = up(loss, rows), *d_d = up(d, n);
  g_ref->loss(g_rc, kind, rows, cols, pred, y, 0.125f, loss, with_grad ? d : NULL);
  g_gpu->loss(g_gc, kind, rows, cols, d_pred, d_y, 0.125f, d_loss, with_grad ? d_d : NULL);
  char what[96];
  snprintf(what, sizeof what, "loss %s %dx%d", st_loss_name(kind), rows, cols);
  check_dev(what, loss, d_loss, rows, 1e-6);
  snprintf(what, sizeof what, "loss %s %dx%d dpred", st_loss_name(kind), rows, cols);
  check_dev(what, d, d_d, n, 1e-6);
  g_gpu->free(g_gc, d_pred), g_gpu->free(g_gc, d_y);
  free(pred), free(y), free(loss), free(d);
}

static void test_losses(void) {
  for (int k = 0; k < ST_LOSS_COUNT; k++) {
    loss_case((st_loss_kind)k, 0, 10, true);
    loss_case((st_loss_kind)k, 1, 1, true);
    loss_case((st_loss_kind)k, 33, 10, true);
    loss_case((st_loss_kind)k, 33, 10, false);
  }
}

/* ---- optimizers ----------------------------------------------------------- */

/* Runs `steps` updates of one optimizer on both backends, then compares p and
 * the slots. which: 0 sgd, 1 sgd momentum, 2 nesterov, 3 adam, 4 adamw,
 * 5 rmsprop, 6 rmsprop momentum. */
static void optim_case(int which, size_t n, int steps) {
  float *p = rnd(n, -1, 1), *g = rnd(n, -1, 1), *s1 = rnd(n, 0, 0.1f), *s2 = rnd(n, 0, 0.1f);
  float *d_p = up(p, n), *d_g = up(g, n), *d_s1 = up(s1, n), *d_s2 = up(s2, n);
  for (int t = 1; t <= steps; t++) {
    switch (which) {
      case 0: case 1: case 2: {
        float mom = which ? 0.9f : 0.0f;
        g_ref->sgd_update(g_rc, n, 0.01f, mom, which == 2, p, g, which ? s1 : NULL);
        g_gpu->sgd_update(g_gc, n, 0.01f, mom, which == 2, d_p, d_g, which ? d_s1 : NULL);
        break;
      }
      case 3: case 4:
        g_ref->adam_update(g_rc, n, 1e-3f, 0.9f, 0.999f, 1e-7f, which == 4 ? 0.004f : 0, t, p, g, s1, s2);
        g_gpu->adam_update(g_gc, n, 1e-3f, 0.9f, 0.999f, 1e-7f, which == 4 ? 0.004f : 0, t, d_p, d_g,
                           d_s1, d_s2);
        break;
      default: {
        float mom = which == 6 ? 0.9f : 0.0f;
        g_ref->rmsprop_update(g_rc, n, 1e-3f, 0.9f, mom, 1e-7f, p, g, s1, which == 6 ? s2 : NULL);
        g_gpu->rmsprop_update(g_gc, n, 1e-3f, 0.9f, mom, 1e-7f, d_p, d_g, d_s1,
                              which == 6 ? d_s2 : NULL);
      }
    }
  }
  char what[64];
  snprintf(what, sizeof what, "optimizer %d after %d steps: p", which, steps);
  check_dev(what, p, d_p, n, 1e-6);
  snprintf(what, sizeof what, "optimizer %d: first slot", which);
  check_dev(what, s1, d_s1, n, 1e-6);
  snprintf(what, sizeof what, "optimizer %d: second slot", which);
  check_dev(what, s2, d_s2, n, 1e-6);
  g_gpu->free(g_gc, d_g);
  free(p), free(g), free(s1), free(s2);
}

static void test_optimizers(void) {
  for (int w = 0; w < 7; w++) {
    optim_case(w, 0, 1);
    optim_case(w, 1027, 5);
  }
}

/* ---- determinism: the same inputs give the same bits ---------------------- */

static void test_repeatable(void) {
  int m = 96, n = 80, k = 300;
  float *a = rnd((size_t)m * k, -1, 1), *b = rnd((size_t)k * n, -1, 1);
  float *d_a = up(a, (size_t)m * k), *d_b = up(b, (size_t)k * n);
  float *c1 = calloc((size_t)m * n, sizeof *c1), *c2 = calloc((size_t)m * n, sizeof *c2);
  float *d_c = up(c1, (size_t)m * n), *d_db = up(c1, (size_t)n);
  for (int rep = 0; rep < 2; rep++) {
    float *c = rep ? c2 : c1;
    g_gpu->gemm(g_gc, false, false, m, n, k, 1.0f, d_a, k, d_b, n, 0.0f, d_c, n);
    g_gpu->bias_grad(g_gc, m, n, d_c, d_db);
    down(c, d_c, (size_t)m * n);
    down(c + (size_t)(m - 1) * n, d_db, (size_t)n); /* last row replaced by the bias gradient */
  }
  CHECK_MSG(memcmp(c1, c2, (size_t)m * n * sizeof *c1) == 0, "gemm + bias_grad twice: bits differ");
  g_gpu->free(g_gc, d_a), g_gpu->free(g_gc, d_b), g_gpu->free(g_gc, d_c), g_gpu->free(g_gc, d_db);
  free(a), free(b), free(c1), free(c2);
}

static const check_case cases[] = {
    CHECK_CASE(test_gemm),     CHECK_CASE(test_blas1),       CHECK_CASE(test_bias),
    CHECK_CASE(test_activations), CHECK_CASE(test_im2col_col2im), CHECK_CASE(test_pooling),
    CHECK_CASE(test_batchnorm), CHECK_CASE(test_dropout),    CHECK_CASE(test_losses),
    CHECK_CASE(test_optimizers), CHECK_CASE(test_repeatable),
};

/* The cuda backend, its device count and one context on gpu:0, or exit 77
 * saying which of them is missing. */
static void setup(void) {
  int count = 0;
  if (st_backend_get("cuda", &g_gpu) != ST_OK || st__cuda_device_count(&count) != ST_OK) {
    char why[1200];
    snprintf(why, sizeof why, "no usable GPU: %s", st_last_error());
    check_skip(why);
  }
  g_ref = st_backend_reference();
  if (st_backend_ctx_create(g_ref, 0, 0, &g_rc) != ST_OK ||
      st_backend_ctx_create(g_gpu, 0, 0, &g_gc) != ST_OK) {
    fprintf(stderr, "gpu:0: no context: %s\n", st_last_error());
    exit(1);
  }
  g_rng = st_rng_make(16, 0);
}

int main(int argc, char **argv) {
  if (!(argc == 2 && !strcmp(argv[1], "--list"))) setup();
  int rc = CHECK_MAIN(argc, argv, cases);
  st_backend_ctx_destroy(g_gc);
  st_backend_ctx_destroy(g_rc);
  return rc;
}
