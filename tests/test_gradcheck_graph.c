/* Finite-difference gradient checks of the layers of several inputs (Add,
 * Subtract, Multiply, Concatenate, MultiHeadAttention: issue 28), the same
 * method as tests/test_gradcheck.c with one input per tensor: L = sum(y * r)
 * for a fixed random r, backward with dy = r gives dL/dx_j and dL/dw,
 * compared with central differences of L evaluated in double. Also:
 * MultiHeadAttention's fast path against its plain-loop reference
 * (src/nn/attention_ref.c) on the reference and cpu backends, shape errors
 * naming layer and shapes, and the init RNG streams kept from before. */
#include <string.h>

#include "check.h"
#include "nn/attention.h"
#include "nn/layer.h"
#include "strata/nn.h"

#define EPS 1e-3f
#define RTOL 1e-2
#define ATOL 2e-3
#define MAXIN 3

static const st_backend *be;

static st_backend_ctx *bctx(void) {
  static st_backend_ctx *made[2];
  int i = be == st_backend_cpu();
  if (!made[i]) CHECK_OK(st_backend_ctx_create(be, 0, 0, &made[i]));
  return made[i];
}

typedef struct mh {
  st_layer *l;
  int batch, n;
  size_t nx[MAXIN], ny;
  float *x[MAXIN], *dx[MAXIN];
  const float *xin[MAXIN]; /* what the call passes as xs[j] (may alias: self-attention) */
  float *y, *r, *dy, *cache, *ws;
  float *w[ST_LAYER_MAX_PARAMS], *dw[ST_LAYER_MAX_PARAMS];
  bool training;
} mh;

static float *zalloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void fill_uniform(float *v, size_t n, float lo, float hi, st_rng *rng) {
  for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * st_rng_uniform(rng);
}

static st_layer *g_made;
static st_layer *made(st_status s) {
  CHECK_OK(s);
  st_layer *l = g_made;
  g_made = NULL;
  return l;
}

/* Builds l for the n input shapes; random inputs, weights and (nonzero) biases. */
static bool mh_init(mh *h, st_layer *l, const st_shape *in, int n, int batch, uint64_t seed) {
  memset(h, 0, sizeof *h);
  h->l = l, h->batch = batch, h->n = n, h->training = true;
  if (!l || st__layer_build_inputs(l, in, n) != ST_OK) {
    fprintf(stderr, "build failed: %s\n", st_last_error());
    return false;
  }
  st_rng rng = st_rng_make(seed, 1);
  for (int j = 0; j < n; j++) {
    h->nx[j] = (size_t)batch * st_shape_size(in[j]);
    h->x[j] = zalloc(h->nx[j]), h->dx[j] = zalloc(h->nx[j]);
    fill_uniform(h->x[j], h->nx[j], -1.0f, 1.0f, &rng);
    h->xin[j] = h->x[j];
  }
  h->ny = (size_t)batch * st_shape_size(l->out_shape);
  h->y = zalloc(h->ny), h->r = zalloc(h->ny), h->dy = zalloc(h->ny);
  fill_uniform(h->r, h->ny, -1.0f, 1.0f, &rng);
  h->cache = zalloc((size_t)batch * l->cache_per_example);
  h->ws = zalloc(l->vt->workspace_floats ? l->vt->workspace_floats(l, batch) : 0);
  for (int p = 0; p < l->nparams; p++) {
    size_t k = st_shape_size(l->params[p].shape);
    h->w[p] = zalloc(k);
    st__init_fill(l->params[p].init, l->params[p].shape, h->w[p], &rng);
    if (l->params[p].init == ST_INIT_ZEROS) fill_uniform(h->w[p], k, -0.5f, 0.5f, &rng);
    if (l->params[p].trainable) h->dw[p] = zalloc(k);
  }
  return true;
}

static void mh_free(mh *h) {
  for (int j = 0; j < MAXIN; j++) free(h->x[j]), free(h->dx[j]);
  free(h->y), free(h->r), free(h->dy), free(h->cache), free(h->ws);
  for (int p = 0; p < ST_LAYER_MAX_PARAMS; p++) free(h->w[p]), free(h->dw[p]);
  st_layer_destroy(h->l);
}

static st_layer_args mh_call(mh *h) {
  st_layer_args c;
  memset(&c, 0, sizeof c);
  c.be = be, c.ctx = bctx(), c.batch = h->batch, c.training = h->training;
  for (int j = 0; j < h->n; j++) c.xs[j] = h->xin[j], c.dxs[j] = h->dx[j];
  c.x = c.xs[0], c.dx = c.dxs[0];
  c.y = h->y, c.dy = h->dy, c.cache = h->cache, c.workspace = h->ws;
  c.seed = 1234, c.stream = 77, c.global_batch = h->batch;
  for (int p = 0; p < h->l->nparams; p++) c.w[p] = h->w[p], c.dw[p] = h->dw[p];
  return c;
}

static double mh_loss(mh *h) {
  st_layer_args c = mh_call(h);
  h->l->vt->forward(h->l, &c);
  double s = 0.0;
  for (size_t i = 0; i < h->ny; i++) s += (double)h->y[i] * h->r[i];
  return s;
}

static void mh_backward(mh *h) {
  mh_loss(h);
  memcpy(h->dy, h->r, h->ny * sizeof(float));
  st_layer_args c = mh_call(h);
  h->l->vt->backward(h->l, &c);
}

/* analytic[n] against central differences of L over v[n]; one CHECK. */
static void mh_check(mh *h, const char *label, const char *what, float *v, size_t n,
                     const float *analytic) {
  double amax = 1.0, worst = 0.0, wa = 0.0, wn = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(analytic[i]));
  for (size_t i = 0; i < n; i++) {
    float orig = v[i], vp = orig + EPS, vm = orig - EPS;
    v[i] = vp;
    double lp = mh_loss(h);
    v[i] = vm;
    double lm = mh_loss(h);
    v[i] = orig;
    double num = (lp - lm) / ((double)vp - vm), a = analytic[i];
    double excess = fabs(a - num) - (RTOL * fmax(fabs(a), fabs(num)) + ATOL * amax);
    if (i == 0 || excess > worst) worst = excess, wi = i, wa = a, wn = num;
  }
  CHECK_MSG(n == 0 || worst <= 0.0, "%s: d%s[%zu]: analytic %.6g numeric %.6g", label, what,
            wi, wa, wn);
}

/* Every dx_j and every trainable dw of l on the given inputs. */
static void gradcheck_n(const char *label, st_layer *l, const st_shape *in, int n, int batch) {
  mh h;
  if (!mh_init(&h, l, in, n, batch, 42)) {
    CHECK_MSG(false, "%s: build failed", label);
    mh_free(&h);
    return;
  }
  mh_backward(&h);
  char what[48];
  for (int j = 0; j < n; j++) {
    float *a = zalloc(h.nx[j]);
    memcpy(a, h.dx[j], h.nx[j] * sizeof(float));
    snprintf(what, sizeof what, "x%d", j);
    mh_check(&h, label, what, h.x[j], h.nx[j], a);
    free(a);
  }
  for (int p = 0; p < l->nparams; p++) {
    if (!h.dw[p]) continue;
    size_t k = st_shape_size(l->params[p].shape);
    float *a = zalloc(k);
    memcpy(a, h.dw[p], k * sizeof(float));
    mh_check(&h, label, l->params[p].name, h.w[p], k, a);
    free(a);
  }
  mh_free(&h);
}

/* ---- merge layers ------------------------------------------------------------ */

static void test_merge_grad(void) {
  st_shape s2[2] = {st_shape3(2, 3, 2), st_shape3(2, 3, 2)};
  st_shape s3[3] = {st_shape1(5), st_shape1(5), st_shape1(5)};
  gradcheck_n("add 2", made(st_add(&g_made)), s2, 2, 2);
  gradcheck_n("add 3", made(st_add(&g_made)), s3, 3, 3);
  gradcheck_n("subtract", made(st_subtract(&g_made)), s2, 2, 2);
  gradcheck_n("multiply 2", made(st_multiply(&g_made)), s2, 2, 2);
  gradcheck_n("multiply 3", made(st_multiply(&g_made)), s3, 3, 3);
}

static void test_concat_grad(void) {
  st_shape last[3] = {st_shape3(2, 3, 2), st_shape3(2, 3, 1), st_shape3(2, 3, 3)};
  st_shape mid[2] = {st_shape3(2, 1, 2), st_shape3(2, 3, 2)};
  st_shape first[2] = {st_shape3(1, 3, 2), st_shape3(2, 3, 2)};
  st_shape flat[2] = {st_shape1(3), st_shape1(4)};
  gradcheck_n("concat -1", made(st_concatenate(-1, &g_made)), last, 3, 2);
  gradcheck_n("concat 3", made(st_concatenate(3, &g_made)), last, 3, 2);
  gradcheck_n("concat 2", made(st_concatenate(2, &g_made)), mid, 2, 2);
  gradcheck_n("concat -2", made(st_concatenate(-2, &g_made)), mid, 2, 2);
  gradcheck_n("concat 1", made(st_concatenate(1, &g_made)), first, 2, 3);
  gradcheck_n("concat flat", made(st_concatenate(-1, &g_made)), flat, 2, 2);
}

/* Forward values by formula (not only gradients). */
static void test_merge_values(void) {
  st_shape in[2] = {st_shape1(2), st_shape1(3)};
  mh h;
  if (!mh_init(&h, made(st_concatenate(-1, &g_made)), in, 2, 2, 3)) return;
  mh_loss(&h);
  float want[10] = {h.x[0][0], h.x[0][1], h.x[1][0], h.x[1][1], h.x[1][2],
                    h.x[0][2], h.x[0][3], h.x[1][3], h.x[1][4], h.x[1][5]};
  CHECK(memcmp(want, h.y, sizeof want) == 0);
  mh_free(&h);
  st_shape same[2] = {st_shape1(4), st_shape1(4)};
  if (!mh_init(&h, made(st_subtract(&g_made)), same, 2, 1, 3)) return;
  mh_loss(&h);
  for (int i = 0; i < 4; i++) CHECK_EQ(h.y[i], h.x[0][i] - h.x[1][i]);
  mh_free(&h);
  if (!mh_init(&h, made(st_multiply(&g_made)), same, 2, 1, 3)) return;
  mh_loss(&h);
  for (int i = 0; i < 4; i++) CHECK_EQ(h.y[i], h.x[0][i] * h.x[1][i]);
  mh_free(&h);
}

/* Builds l on n shapes; expects ST_ERR_INVALID whose message holds every
 * string of want (NULL-terminated). */
static void build_fails(st_layer *l, const st_shape *in, int n, const char *const *want) {
  st_status s = l ? st__layer_build_inputs(l, in, n) : ST_ERR_INVALID;
  CHECK_EQ(s, ST_ERR_INVALID);
  for (int i = 0; want[i]; i++)
    CHECK_MSG(strstr(st_last_error(), want[i]) != NULL, "'%s' lacks '%s'", st_last_error(),
              want[i]);
  st_layer_destroy(l);
}
#define WANT(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_merge_errors(void) {
  st_shape ab[2] = {(st_shape){2, {4, 9}}, (st_shape){2, {4, 8}}};
  build_fails(made(st_add(&g_made)), ab, 2,
              WANT("Add: input 1 has shape (None, 4, 8), input 0 (None, 4, 9)"));
  build_fails(made(st_multiply(&g_made)), ab, 2, WANT("Multiply", "(None, 4, 8)", "(None, 4, 9)"));
  st_shape three[3] = {st_shape1(2), st_shape1(2), st_shape1(2)};
  build_fails(made(st_subtract(&g_made)), three, 3, WANT("Subtract", "3 inputs"));
  build_fails(made(st_add(&g_made)), three, 1, WANT("Add", "1 inputs"));
  /* Concatenate: other axes must match; the axis must exist */
  build_fails(made(st_concatenate(1, &g_made)), ab, 2, WANT("Concatenate", "(None, 4, 8)", "(None, 4, 9)"));
  build_fails(made(st_concatenate(3, &g_made)), ab, 2, WANT("Concatenate", "axis 3", "(None, 4, 9)"));
  build_fails(made(st_concatenate(-3, &g_made)), ab, 2, WANT("axis -3"));
  st_shape rk[2] = {st_shape1(4), (st_shape){2, {4, 1}}};
  build_fails(made(st_concatenate(-1, &g_made)), rk, 2, WANT("input 1 has shape (None, 4, 1)"));
  st_layer *l = NULL;
  CHECK_EQ(st_concatenate(0, &l), ST_ERR_INVALID);
  CHECK(l == NULL);
  CHECK(strstr(st_last_error(), "batch axis") != NULL);
  /* a named layer is named */
  l = made(st_add(&g_made));
  snprintf(l->name, sizeof l->name, "res_1");
  build_fails(l, ab, 2, WANT("Add 'res_1': input 1"));
}


/* ---- MultiHeadAttention ------------------------------------------------------ */

static st_layer *mha(int heads, int kd, int vd, int out, bool bias, bool causal, float drop) {
  st_mha_options o = st_multi_head_attention_default_options(heads, kd);
  o.value_dim = vd, o.output_dim = out, o.use_bias = bias, o.use_causal_mask = causal;
  o.dropout = drop;
  return made(st_multi_head_attention_ex(o, &g_made));
}

static void test_mha_grad(void) {
  st_shape qv[2] = {(st_shape){2, {3, 4}}, (st_shape){2, {4, 5}}};
  st_shape qvk[3] = {(st_shape){2, {3, 4}}, (st_shape){2, {4, 5}}, (st_shape){2, {4, 2}}};
  st_shape self[2] = {(st_shape){2, {4, 6}}, (st_shape){2, {4, 6}}};
  gradcheck_n("mha", mha(2, 3, 0, 0, true, false, 0), qv, 2, 2);
  gradcheck_n("mha causal", mha(2, 3, 0, 0, true, true, 0), qv, 2, 2);
  gradcheck_n("mha no bias", mha(2, 3, 0, 0, false, false, 0), qv, 2, 2);
  gradcheck_n("mha no bias causal", mha(1, 2, 0, 0, false, true, 0), self, 2, 2);
  gradcheck_n("mha key vd out", mha(3, 2, 4, 5, true, false, 0), qvk, 3, 2);
  gradcheck_n("mha key causal", mha(2, 2, 3, 0, true, true, 0), qvk, 3, 2);
  gradcheck_n("mha dropout", mha(2, 3, 0, 0, true, false, 0.3f), qv, 2, 2);
  gradcheck_n("mha dropout causal key", mha(2, 2, 0, 3, false, true, 0.25f), qvk, 3, 2);
}

static void test_mha_errors(void) {
  st_layer *l = NULL;
  CHECK_EQ(st_multi_head_attention(0, 4, &l), ST_ERR_INVALID);
  CHECK(l == NULL && strstr(st_last_error(), "num_heads 0") != NULL);
  CHECK_EQ(st_multi_head_attention(2, 0, &l), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "key_dim 0") != NULL);
  CHECK_EQ(st_multi_head_attention(2, -3, &l), ST_ERR_INVALID);
  st_mha_options o = st_multi_head_attention_default_options(2, 4);
  o.dropout = 1.0f;
  CHECK_EQ(st_multi_head_attention_ex(o, &l), ST_ERR_INVALID);
  CHECK_EQ(st_multi_head_attention(2, 4, NULL), ST_ERR_INVALID);
  st_shape len[3] = {(st_shape){2, {3, 4}}, (st_shape){2, {5, 4}}, (st_shape){2, {6, 4}}};
  build_fails(mha(2, 2, 0, 0, true, false, 0), len, 3,
              WANT("MultiHeadAttention", "query has shape (None, 3, 4), value (None, 5, 4), key (None, 6, 4)",
                   "same length"));
  st_shape rank[2] = {st_shape1(4), (st_shape){2, {5, 4}}};
  build_fails(mha(2, 2, 0, 0, true, false, 0), rank, 2, WANT("query has shape (None, 4)"));
  build_fails(mha(2, 2, 0, 0, true, false, 0), rank, 1, WANT("MultiHeadAttention", "1 inputs"));
}

static void test_mha_shapes(void) {
  st_shape qvk[3] = {(st_shape){2, {3, 4}}, (st_shape){2, {5, 6}}, (st_shape){2, {5, 7}}};
  st_layer *l = mha(2, 3, 5, 0, true, false, 0);
  if (!l) return;
  CHECK_OK(st__layer_build_inputs(l, qvk, 3));
  CHECK(st_shape_equal(l->out_shape, (st_shape){2, {3, 4}}));
  const char *names[8] = {"query/kernel", "query/bias", "key/kernel", "key/bias",
                          "value/kernel", "value/bias", "attention_output/kernel",
                          "attention_output/bias"};
  st_shape shapes[8] = {st_shape3(4, 2, 3), (st_shape){2, {2, 3}}, st_shape3(7, 2, 3),
                        (st_shape){2, {2, 3}}, st_shape3(6, 2, 5), (st_shape){2, {2, 5}},
                        st_shape3(2, 5, 4), st_shape1(4)};
  CHECK_EQ(l->nparams, 8);
  for (int p = 0; p < 8 && p < l->nparams; p++) {
    CHECK_STREQ(l->params[p].name, names[p]);
    CHECK(st_shape_equal(l->params[p].shape, shapes[p]));
  }
  st_layer_options opt;
  CHECK_OK(st_layer_get_options(l, &opt));
  CHECK_EQ(opt.mha.num_heads, 2);
  CHECK_EQ(opt.mha.value_dim, 5);
  st_layer_destroy(l);
  CHECK_OK(st_concatenate(2, &l));
  CHECK_OK(st_layer_get_options(l, &opt));
  CHECK_EQ(opt.concat_axis, 2);
  st_layer_destroy(l);
}

/* max |a-b| over max(|a|, |b|, 0.1): key/bias's gradient is 0 in exact
 * arithmetic (a shift of every key adds one constant to a row of scores) and
 * rounding noise in floats, so it is compared on the scale of the others. */
static double rel(const float *a, const float *b, size_t n) {
  double num = 0.0, den = 0.1;
  for (size_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)a[i] - b[i]));
    den = fmax(den, fmax(fabs(a[i]), fabs(b[i])));
  }
  return num / den;
}

/* The fast layer against the plain-loop reference: y, every dx and dw. With
 * self = true the inputs are one buffer (self-attention: the fused path),
 * compared by the sum of their gradients; null_dx: dxs[0] is not asked for
 * (then each input's own part is compared). */
static void fast_vs_ref(const char *label, st_layer *l, const st_shape *in, int n, int batch,
                        bool self, bool null_dx) {
  mh h;
  if (!mh_init(&h, l, in, n, batch, 11)) return;
  if (self)
    for (int j = 1; j < n; j++) h.xin[j] = h.x[0];
  if (null_dx) free(h.dx[0]), h.dx[0] = NULL;
  mh_backward(&h);
  size_t nw = 0;
  for (int p = 0; p < l->nparams; p++) nw += st_shape_size(l->params[p].shape);
  float *y = zalloc(h.ny), *dx[MAXIN] = {0}, *dw = zalloc(nw);
  memcpy(y, h.y, h.ny * sizeof(float));
  for (int j = 0; j < n; j++)
    if (h.dx[j]) dx[j] = zalloc(h.nx[j]), memcpy(dx[j], h.dx[j], h.nx[j] * sizeof(float));
  for (int p = 0, off = 0; p < l->nparams; off += st_shape_size(l->params[p].shape), p++)
    memcpy(dw + off, h.dw[p], st_shape_size(l->params[p].shape) * sizeof(float));
  st_layer_args c = mh_call(&h);
  st__mha_forward_reference(l, &c);
  st__mha_backward_reference(l, &c);
  CHECK_MSG(rel(h.y, y, h.ny) < 1e-5, "%s: y differs by %g", label,
            rel(h.y, y, h.ny));
  if (self && !null_dx) /* one tensor: the sum of its gradients is what counts */
    for (int j = 1; j < n; j++)
      for (size_t i = 0; i < h.nx[0]; i++) h.dx[0][i] += h.dx[j][i], dx[0][i] += dx[j][i];
  for (int j = 0; j < (self && !null_dx ? 1 : n); j++)
    if (dx[j])
      CHECK_MSG(rel(h.dx[j], dx[j], h.nx[j]) < 1e-5, "%s: dx%d differs by %g", label,
                j, rel(h.dx[j], dx[j], h.nx[j]));
  for (int p = 0, off = 0; p < l->nparams; off += st_shape_size(l->params[p].shape), p++) {
    size_t k = st_shape_size(l->params[p].shape);
    CHECK_MSG(rel(h.dw[p], dw + off, k) < 1e-5, "%s: d%s differs by %g", label,
              l->params[p].name, rel(h.dw[p], dw + off, k));
  }
  for (int j = 0; j < n; j++) free(dx[j]);
  free(y), free(dw);
  mh_free(&h);
}

static void test_mha_fast_vs_reference(void) {
  const st_backend *both[2] = {st_backend_reference(), st_backend_cpu()};
  st_shape qv[2] = {(st_shape){2, {7, 8}}, (st_shape){2, {5, 6}}};
  st_shape vq[2] = {(st_shape){2, {4, 6}}, (st_shape){2, {7, 5}}}; /* Tq < Tv */
  st_shape qvk[3] = {(st_shape){2, {7, 8}}, (st_shape){2, {5, 6}}, (st_shape){2, {5, 3}}};
  st_shape self[3] = {(st_shape){2, {6, 8}}, (st_shape){2, {6, 8}}, (st_shape){2, {6, 8}}};
  st_shape lq[2] = {(st_shape){2, {100, 8}}, (st_shape){2, {90, 6}}};
  st_shape lself[3] = {(st_shape){2, {100, 8}}, (st_shape){2, {100, 8}},
                       (st_shape){2, {100, 8}}};
  for (int b = 0; b < 2; b++) {
    be = both[b];
    fast_vs_ref("ref qv", mha(2, 4, 0, 0, true, false, 0), qv, 2, 3, false, false);
    fast_vs_ref("ref qv causal", mha(4, 2, 3, 5, true, true, 0), qv, 2, 3, false, false);
    fast_vs_ref("ref short query causal", mha(2, 3, 0, 0, true, true, 0), vq, 2, 2, false, false);
    fast_vs_ref("ref qvk no bias", mha(3, 4, 2, 0, false, false, 0), qvk, 3, 2, false, false);
    fast_vs_ref("ref self causal", mha(2, 4, 0, 0, true, true, 0), self, 3, 2, true, false);
    fast_vs_ref("ref self 2 inputs", mha(2, 4, 0, 0, true, false, 0), self, 2, 2, true, true);
    /* 100 rows per example: backward runs chunks of 2 examples (3 = 2 + 1) */
    fast_vs_ref("ref long qv causal", mha(2, 4, 0, 0, true, true, 0), lq, 2, 3, false, false);
    fast_vs_ref("ref long self", mha(2, 4, 0, 0, true, false, 0), lself, 3, 3, true, false);
  }
  be = st_backend_reference();
}

/* Self-attention with dropout: the fused path (one buffer for the three
 * inputs) against the unfused one (three copies of it), same mask. */
static void fused_dropout(int t) {
  st_shape self[3] = {(st_shape){2, {t, 6}}, (st_shape){2, {t, 6}}, (st_shape){2, {t, 6}}};
  mh a, b;
  if (!mh_init(&a, mha(2, 3, 0, 0, true, true, 0.3f), self, 3, 3, 5)) return;
  if (!mh_init(&b, mha(2, 3, 0, 0, true, true, 0.3f), self, 3, 3, 5)) return;
  for (int j = 1; j < 3; j++) {
    a.xin[j] = a.x[0];
    memcpy(b.x[j], b.x[0], b.nx[0] * sizeof(float));
  }
  mh_backward(&a);
  mh_backward(&b);
  CHECK(rel(a.y, b.y, a.ny) < 1e-5);
  for (int j = 1; j < 3; j++)
    for (size_t i = 0; i < a.nx[0]; i++) a.dx[0][i] += a.dx[j][i], b.dx[0][i] += b.dx[j][i];
  CHECK(rel(a.dx[0], b.dx[0], a.nx[0]) < 1e-5);
  for (int p = 0; p < a.l->nparams; p++)
    CHECK_MSG(rel(a.dw[p], b.dw[p], st_shape_size(a.l->params[p].shape)) < 1e-5, "d%s",
              a.l->params[p].name);
  mh_free(&a), mh_free(&b);
}

static void test_mha_fused_dropout(void) {
  fused_dropout(5);
  fused_dropout(100); /* in chunks of 2 examples */
}

/* Parameters below 4 keep the init stream of every model made before
 * ST_LAYER_MAX_PARAMS grew to 8; the new ones share no stream. */
static void test_init_streams(void) {
  for (int i = 0; i < 50; i++)
    for (int p = 0; p < 4; p++) CHECK_EQ(st__layer_init_stream(i, p), (uint64_t)i * 4 + p);
  for (int i = 0; i < 50; i++)
    for (int p = 4; p < ST_LAYER_MAX_PARAMS; p++) {
      uint64_t s = st__layer_init_stream(i, p);
      CHECK(s >= ((uint64_t)1 << 40));
      CHECK(s != st__layer_init_stream(i, p == 4 ? 5 : 4));
      if (i) CHECK(s != st__layer_init_stream(i - 1, p));
    }
}

static const check_case cases[] = {
    CHECK_CASE(test_merge_grad),   CHECK_CASE(test_concat_grad),
    CHECK_CASE(test_merge_values), CHECK_CASE(test_merge_errors),
    CHECK_CASE(test_mha_grad),     CHECK_CASE(test_mha_errors),
    CHECK_CASE(test_mha_shapes),   CHECK_CASE(test_mha_fast_vs_reference),
    CHECK_CASE(test_mha_fused_dropout), CHECK_CASE(test_init_streams)};

int main(int argc, char **argv) {
  be = st_backend_reference();
  return CHECK_MAIN(argc, argv, cases);
}
