/* Finite-difference gradient checks of every layer kind and every loss kind on
 * the reference backend, plus forward checks against hand-written formulas
 * (direct convolution, batchnorm inference and moving statistics) and a few
 * layer-contract checks (dy untouched unless writable, multi-block Conv2D).
 *
 * A layer is checked with the scalar L = sum(y * r) for a fixed random r:
 * backward with dy = r gives dL/dx and dL/dw, compared against central
 * differences (L(v+eps) - L(v-eps)) / (2 eps) evaluated in double. */
#include <string.h>

#include "check.h"
#include "nn/layer.h"
#include "strata/nn.h"
#include "strata/train.h"

#define EPS 1e-3f
#define RTOL 1e-2
#define ATOL 2e-3

static const st_backend *be;

/* be's context: one per backend, made on first use and kept until exit. */
static st_backend_ctx *bctx(void) {
  static st_backend_ctx *made[2];
  int i = be == st_backend_cpu();
  if (!made[i]) CHECK_OK(st_backend_ctx_create(be, 0, 0, &made[i]));
  return made[i];
}

/* ---- a layer with its own buffers ---------------------------------------- */

typedef struct harness {
  st_layer *l;
  int batch;
  size_t nx, ny;                 /* floats of x [batch, in] and y [batch, out] */
  float *x, *y, *r, *dy, *dx;    /* r: the fixed loss weights [batch, out] */
  float *cache, *ws;             /* [batch*cache_per_example], workspace */
  float *w[ST_LAYER_MAX_PARAMS], *dw[ST_LAYER_MAX_PARAMS];
  void (*all_reduce_sum)(void *ctx, float *buf, size_t n);
} harness;

static float *zalloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* Distinct values spaced 2/n apart in (-1, 1), none within 1/n of 0 (no
 * max-pool ties, no relu kinks at the input). */
static void fill_distinct(float *v, size_t n, st_rng *rng) {
  for (size_t i = 0; i < n; i++) v[i] = -1.0f + (2.0f * (float)i + 1.0f) / (float)n;
  for (size_t i = n; i > 1; i--) {
    size_t j = st_rng_below(rng, i);
    float t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

static void fill_uniform(float *v, size_t n, float lo, float hi, st_rng *rng) {
  for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * st_rng_uniform(rng);
}

/* A constructor's layer as an argument: made(st_dense(4, act, &g_made)).
 * CHECKs the constructor's status; NULL on failure (h_init then fails). Use
 * once per full expression. */
static st_layer *g_made;
static st_layer *made(st_status s) {
  CHECK_OK(s);
  st_layer *l = g_made;
  g_made = NULL;
  return l;
}

/* Builds l for `in` and allocates and initialises everything a call needs. */
static bool h_init(harness *h, st_layer *l, st_shape in, int batch,
                   uint64_t seed) {
  memset(h, 0, sizeof *h);
  h->l = l;
  h->batch = batch;
  if (!l || st__layer_build(l, in) != ST_OK) {
    fprintf(stderr, "build failed: %s\n", st_last_error());
    return false;
  }
  h->nx = (size_t)batch * st_shape_size(in);
  h->ny = (size_t)batch * st_shape_size(l->out_shape);
  h->x = zalloc(h->nx), h->dx = zalloc(h->nx);
  h->y = zalloc(h->ny), h->r = zalloc(h->ny), h->dy = zalloc(h->ny);
  h->cache = zalloc((size_t)batch * l->cache_per_example);
  h->ws = zalloc(l->vt->workspace_floats ? l->vt->workspace_floats(l, batch) : 0);
  st_rng rng = st_rng_make(seed, 1);
  fill_distinct(h->x, h->nx, &rng);
  fill_uniform(h->r, h->ny, -1.0f, 1.0f, &rng);
  for (int p = 0; p < l->nparams; p++) {
    size_t n = st_shape_size(l->params[p].shape);
    h->w[p] = zalloc(n);
    st__init_fill(l->params[p].init, l->params[p].shape, h->w[p], &rng);
    if (l->params[p].trainable) h->dw[p] = zalloc(n);
  }
  return true;
}

static void h_free(harness *h) {
  free(h->x), free(h->dx), free(h->y), free(h->r), free(h->dy);
  free(h->cache), free(h->ws);
  for (int p = 0; p < ST_LAYER_MAX_PARAMS; p++) free(h->w[p]), free(h->dw[p]);
  st_layer_destroy(h->l);
}

static st_layer_args h_call(harness *h, bool training) {
  st_layer_args c;
  memset(&c, 0, sizeof c);
  c.be = be;
  c.ctx = bctx();
  c.batch = h->batch;
  c.training = training;
  c.x = h->x, c.y = h->y, c.dy = h->dy, c.dx = h->dx;
  c.cache = h->cache, c.workspace = h->ws;
  c.seed = 1234, c.stream = 77;
  c.all_reduce_sum = h->all_reduce_sum;
  c.global_batch = h->batch;
  for (int p = 0; p < h->l->nparams; p++) c.w[p] = h->w[p], c.dw[p] = h->dw[p];
  return c;
}

/* Training forward, then L = sum(y * r) in double. */
static double h_loss(harness *h) {
  st_layer_args c = h_call(h, true);
  h->l->vt->forward(h->l, &c);
  double s = 0.0;
  for (size_t i = 0; i < h->ny; i++) s += (double)h->y[i] * h->r[i];
  return s;
}

/* Forward then backward with dy = r. */
static void h_backward(harness *h, bool dy_writable) {
  h_loss(h);
  memcpy(h->dy, h->r, h->ny * sizeof(float));
  st_layer_args c = h_call(h, true);
  c.dy_writable = dy_writable;
  h->l->vt->backward(h->l, &c);
}

/* Compares analytic[n] with central differences of L over v[n]; one CHECK
 * for the whole tensor, reporting the worst element. */
static void h_check(harness *h, const char *label, const char *what, float *v,
                    size_t n, const float *analytic) {
  double amax = 1.0, worst = 0.0, wa = 0.0, wn = 0.0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(analytic[i]));
  for (size_t i = 0; i < n; i++) {
    float orig = v[i], vp = orig + EPS, vm = orig - EPS;
    v[i] = vp;
    double lp = h_loss(h);
    v[i] = vm;
    double lm = h_loss(h);
    v[i] = orig;
    double num = (lp - lm) / ((double)vp - vm), a = analytic[i];
    double excess = fabs(a - num) - (RTOL * fmax(fabs(a), fabs(num)) + ATOL * amax);
    if (i == 0 || excess > worst) worst = excess, wi = i, wa = a, wn = num;
  }
  CHECK_MSG(n == 0 || worst <= 0.0, "%s: d%s[%zu]: analytic %.6g numeric %.6g",
            label, what, wi, wa, wn);
}

/* Full gradient check of one layer: dx and every trainable parameter. */
static void gradcheck(const char *label, st_layer *l, st_shape in, int batch) {
  harness h;
  if (!h_init(&h, l, in, batch, 42)) {
    CHECK_MSG(false, "%s: build failed", label);
    h_free(&h);
    return;
  }
  h_backward(&h, false);
  size_t ndw = 0;
  for (int p = 0; p < l->nparams; p++)
    if (h.dw[p]) ndw = fmax(ndw, st_shape_size(l->params[p].shape));
  float *dx = zalloc(h.nx), *dw = zalloc(ndw);
  memcpy(dx, h.dx, h.nx * sizeof(float));
  h_check(&h, label, "x", h.x, h.nx, dx);
  for (int p = 0; p < l->nparams; p++) {
    if (!h.dw[p]) continue;
    size_t n = st_shape_size(l->params[p].shape);
    memcpy(dw, h.dw[p], n * sizeof(float));
    h_check(&h, label, l->params[p].name, h.w[p], n, dw);
  }
  free(dx), free(dw);
  h_free(&h);
}

/* ---- layers ---------------------------------------------------------------- */

static void test_dense(void) {
  char label[64];
  for (int a = 0; a < ST_ACT_COUNT; a++) {
    snprintf(label, sizeof label, "dense %s", st_activation_name(a));
    gradcheck(label, made(st_dense(4, (st_activation)a, &g_made)), st_shape1(5), 3);
  }
  st_dense_options o = st_dense_default_options(3);
  o.use_bias = false;
  o.activation = ST_ACT_TANH;
  gradcheck("dense on tokens [3, 4]", made(st_dense(5, ST_ACT_TANH, &g_made)),
            (st_shape){2, {3, 4}}, 2);
  gradcheck("dense no bias", made(st_dense_ex(o, &g_made)), st_shape1(4), 2);
}

static void conv_case(const char *label, int k_h, int k_w, int s_h, int s_w,
                      st_padding pad, st_activation act) {
  st_conv2d_options o = st_conv2d_default_options(3, k_h, k_w);
  o.sh = s_h, o.sw = s_w, o.padding = pad, o.activation = act;
  o.bias_init = ST_INIT_ONES; /* nonzero bias */
  gradcheck(label, made(st_conv2d_ex(o, &g_made)), st_shape3(6, 5, 2), 2);
}

static void test_conv2d(void) {
  conv_case("conv valid s1", 3, 3, 1, 1, ST_PAD_VALID, ST_ACT_RELU);
  conv_case("conv same s1", 3, 3, 1, 1, ST_PAD_SAME, ST_ACT_RELU);
  conv_case("conv valid s2", 3, 3, 2, 2, ST_PAD_VALID, ST_ACT_LINEAR);
  conv_case("conv same s2", 3, 3, 2, 2, ST_PAD_SAME, ST_ACT_RELU);
  conv_case("conv same s2 gelu", 3, 3, 2, 2, ST_PAD_SAME, ST_ACT_GELU);
  conv_case("conv same 2x3 s(2,1) tanh", 2, 3, 2, 1, ST_PAD_SAME, ST_ACT_TANH);
  conv_case("conv valid 2x2 s2 sigmoid", 2, 2, 2, 2, ST_PAD_VALID, ST_ACT_SIGMOID);
}

static void test_pool(void) {
  st_pool2d_options o = st_pool2d_default_options(3);
  o.sh = o.sw = 2;
  o.padding = ST_PAD_SAME;
  gradcheck("maxpool 2 valid", made(st_maxpool2d(2, &g_made)), st_shape3(5, 5, 2), 2);
  gradcheck("maxpool 3 s2 same", made(st_maxpool2d_ex(o, &g_made)), st_shape3(5, 6, 2), 2);
  gradcheck("avgpool 2 valid", made(st_avgpool2d(2, &g_made)), st_shape3(5, 5, 2), 2);
  gradcheck("avgpool 3 s2 same", made(st_avgpool2d_ex(o, &g_made)), st_shape3(5, 6, 2), 2);
  o = st_pool2d_default_options(2);
  o.padding = ST_PAD_SAME;
  gradcheck("avgpool 2 same", made(st_avgpool2d_ex(o, &g_made)), st_shape3(5, 5, 1), 2);
}

static void test_simple_layers(void) {
  gradcheck("flatten", made(st_flatten(&g_made)), st_shape3(3, 2, 2), 2);
  gradcheck("reshape", made(st_reshape(st_shape3(2, 3, 2), &g_made)), st_shape1(12), 2);
  gradcheck("dropout 0.3", made(st_dropout(0.3f, &g_made)), st_shape1(20), 3);
  char label[64];
  for (int a = 0; a < ST_ACT_COUNT; a++) {
    snprintf(label, sizeof label, "activation %s", st_activation_name(a));
    gradcheck(label, made(st_activation_layer((st_activation)a, &g_made)), st_shape3(2, 2, 4),
              2);
  }
}

/* One replica: the all-reduce of a single participant is the identity. */
static void identity_reduce(void *ctx, float *buf, size_t n) {
  (void)ctx, (void)buf, (void)n;
}

static void test_batchnorm_grad(void) {
  gradcheck("batchnorm rank1", made(st_batchnorm(&g_made)), st_shape1(4), 5);
  gradcheck("batchnorm rank3", made(st_batchnorm(&g_made)), st_shape3(3, 3, 2), 2);
  st_batchnorm_options o = st_batchnorm_default_options();
  o.center = o.scale = false;
  gradcheck("batchnorm no affine", made(st_batchnorm_ex(o, &g_made)), st_shape1(3), 4);
  /* synchronized path (host loops) with one replica */
  o = st_batchnorm_default_options();
  o.synchronized = true;
  harness h;
  st_layer *l = made(st_batchnorm_ex(o, &g_made));
  if (!h_init(&h, l, st_shape1(4), 5, 42)) return;
  h.all_reduce_sum = identity_reduce;
  h_backward(&h, false);
  float *dx = zalloc(h.nx), *dg = zalloc(4);
  memcpy(dx, h.dx, h.nx * sizeof(float));
  memcpy(dg, h.dw[0], 4 * sizeof(float));
  h_check(&h, "batchnorm sync", "x", h.x, h.nx, dx);
  h_check(&h, "batchnorm sync", "gamma", h.w[0], 4, dg);
  free(dx), free(dg);
  h_free(&h);
}

/* ---- issue 28, layers-a: global pooling, ZeroPadding2D, ReLU, LeakyReLU ---- */

static void test_layers_a(void) {
  const st_shape seq = {2, {5, 3}};
  gradcheck("global avgpool2d", made(st_global_avgpool2d(&g_made)), st_shape3(3, 4, 2), 2);
  gradcheck("global maxpool2d", made(st_global_maxpool2d(&g_made)), st_shape3(3, 4, 2), 2);
  gradcheck("global avgpool1d", made(st_global_avgpool1d(&g_made)), seq, 2);
  gradcheck("global maxpool1d", made(st_global_maxpool1d(&g_made)), seq, 2);
  st_zeropad2d_options zo = st_zeropad2d_default_options(0);
  zo.top = 1, zo.bottom = 2, zo.right = 3;
  gradcheck("zeropad2d", made(st_zeropad2d_ex(zo, &g_made)), st_shape3(3, 2, 2), 2);
  gradcheck("zeropad2d 1", made(st_zeropad2d(1, &g_made)), st_shape3(2, 2, 1), 3);
  /* inputs are odd multiples of 1/24: no kink within EPS of 0.2, 0.5 or 0 */
  st_relu_options ro = st_relu_default_options();
  ro.max_value = 0.5f, ro.negative_slope = 0.1f, ro.threshold = 0.2f;
  gradcheck("relu max 0.5 slope 0.1 threshold 0.2", made(st_relu_ex(ro, &g_made)),
            st_shape1(12), 2);
  ro = st_relu_default_options();
  ro.max_value = 0.5f;
  gradcheck("relu max 0.5", made(st_relu_ex(ro, &g_made)), st_shape1(12), 2);
  ro.max_value = 6.0f; /* the relu6 kernel */
  gradcheck("relu max 6", made(st_relu_ex(ro, &g_made)), st_shape1(12), 2);
  gradcheck("leaky relu 0.3", made(st_leaky_relu(0.3f, &g_made)), st_shape1(12), 2);
  gradcheck("leaky relu 0.2 (kernel)", made(st_leaky_relu(0.2f, &g_made)), st_shape1(12), 2);
  /* the new activations fused into Conv2D (the GELUs keep the pre-activation) */
  conv_case("conv same s2 gelu_approximate", 3, 3, 2, 2, ST_PAD_SAME, ST_ACT_GELU_TANH);
  conv_case("conv valid s1 leaky_relu", 3, 3, 1, 1, ST_PAD_VALID, ST_ACT_LEAKY_RELU);
}

/* Tied maxima share the gradient (TensorFlow's reduce_max gradient); the
 * average spreads it evenly. x [1, 4 steps, 2 channels]. */
static void test_global_pool_ties(void) {
  harness h;
  if (!h_init(&h, made(st_global_maxpool1d(&g_made)), (st_shape){2, {4, 2}}, 1, 3)) return;
  const float x[8] = {1, -1, 3, -2, 3, -1, 0, -5};
  memcpy(h.x, x, sizeof x);
  h.r[0] = 4.0f, h.r[1] = 2.0f;
  h_backward(&h, false);
  const float want_y[2] = {3, -1}, want_dx[8] = {0, 1, 2, 0, 2, 1, 0, 0};
  CHECK(memcmp(h.y, want_y, sizeof want_y) == 0);
  CHECK_MSG(memcmp(h.dx, want_dx, sizeof want_dx) == 0, "dx %g %g %g %g %g %g %g %g", h.dx[0],
            h.dx[1], h.dx[2], h.dx[3], h.dx[4], h.dx[5], h.dx[6], h.dx[7]);
  h_free(&h);
  if (!h_init(&h, made(st_global_avgpool2d(&g_made)), st_shape3(2, 2, 1), 1, 3)) return;
  h.r[0] = 2.0f;
  h_backward(&h, false);
  for (int i = 0; i < 4; i++) CHECK(h.dx[i] == 0.5f);
  h_free(&h);
}
/* ---- end of layers-a ---- */

/* ---- Conv1D, DepthwiseConv2D, Embedding, LayerNormalization (issue 28) ------ */

/* gradcheck of a built harness whose parameters were set by the caller. */
static void gradcheck_h(const char *label, harness *h) {
  h_backward(h, false);
  size_t nmax = h->nx;
  for (int p = 0; p < h->l->nparams; p++) nmax = fmax(nmax, st_shape_size(h->l->params[p].shape));
  float *a = zalloc(nmax);
  memcpy(a, h->dx, h->nx * sizeof(float));
  h_check(h, label, "x", h->x, h->nx, a);
  for (int p = 0; p < h->l->nparams; p++) {
    size_t n = st_shape_size(h->l->params[p].shape);
    memcpy(a, h->dw[p], n * sizeof(float));
    h_check(h, label, h->l->params[p].name, h->w[p], n, a);
  }
  free(a);
  h_free(h);
}

static void conv1d_case(const char *label, int k, int s, st_padding pad, st_activation act,
                        bool bias) {
  st_conv1d_options o = st_conv1d_default_options(3, k);
  o.strides = s, o.padding = pad, o.activation = act, o.use_bias = bias;
  o.bias_init = ST_INIT_ONES;
  gradcheck(label, made(st_conv1d_ex(o, &g_made)), (st_shape){2, {7, 2}}, 2);
}

/* 3 channels (scalar path) or 6 (multiplier 1: four in a vector, two after) */
static void dw_case(const char *label, int k, int s, int dm, st_padding pad,
                    st_activation act, bool bias) {
  st_depthwise_conv2d_options o = st_depthwise_conv2d_default_options(k, k);
  o.sh = o.sw = s, o.depth_multiplier = dm, o.padding = pad, o.activation = act;
  o.use_bias = bias, o.bias_init = ST_INIT_ONES;
  gradcheck(label, made(st_depthwise_conv2d_ex(o, &g_made)), st_shape3(5, 6, dm == 1 ? 6 : 3), 2);
}

static void test_issue28_b_grad(void) {
  conv1d_case("conv1d valid", 3, 1, ST_PAD_VALID, ST_ACT_RELU, true);
  conv1d_case("conv1d same s2", 3, 2, ST_PAD_SAME, ST_ACT_TANH, true);
  conv1d_case("conv1d causal", 3, 1, ST_PAD_CAUSAL, ST_ACT_LINEAR, true);
  conv1d_case("conv1d causal s2 no bias", 2, 2, ST_PAD_CAUSAL, ST_ACT_GELU, false);
  dw_case("depthwise valid", 3, 1, 1, ST_PAD_VALID, ST_ACT_RELU, true);
  dw_case("depthwise same s2 dm2", 3, 2, 2, ST_PAD_SAME, ST_ACT_LINEAR, true);
  dw_case("depthwise same dm3 no bias", 2, 1, 3, ST_PAD_SAME, ST_ACT_TANH, false);
  st_conv2d_options co = st_conv2d_default_options(2, 3, 2);
  co.sh = 2, co.use_bias = false, co.padding = ST_PAD_SAME;
  gradcheck("conv2d s(2,1) no bias", made(st_conv2d_ex(co, &g_made)), st_shape3(5, 4, 2), 2);
  st_layernorm_options lo = st_layernorm_default_options();
  const st_shape ln_in[3] = {st_shape1(6), st_shape3(2, 3, 5), st_shape1(4)};
  for (int i = 0; i < 3; i++) {
    if (i == 2) lo.center = lo.scale = false;
    harness h;
    if (!h_init(&h, made(st_layernorm_ex(lo, &g_made)), ln_in[i], 3, 40 + i)) return;
    st_rng rng = st_rng_make(3, 3);
    for (int p = 0; p < h.l->nparams; p++)
      fill_uniform(h.w[p], st_shape_size(h.l->params[p].shape), 0.5f, 1.5f, &rng);
    gradcheck_h(i == 2 ? "layernorm no affine" : "layernorm", &h);
  }
}

/* Embedding: dembeddings against finite differences with repeated ids,
 * dx zeroed, bad ids refused by check_input and NaN rows in forward. */
static void test_embedding(void) {
  harness h;
  if (!h_init(&h, made(st_embedding(5, 3, &g_made)), st_shape1(4), 3, 8)) return;
  CHECK(st_shape_equal(h.l->out_shape, (st_shape){2, {4, 3}}));
  float lo = 1, hi = -1; /* random_uniform: Keras's [-0.05, 0.05] */
  for (int i = 0; i < 15; i++) lo = fminf(lo, h.w[0][i]), hi = fmaxf(hi, h.w[0][i]);
  CHECK_MSG(lo >= -0.05f && hi <= 0.05f && hi - lo > 0.02f, "embeddings init in [%g, %g]", lo, hi);
  const float ids[12] = {0, 4, 4, 2, 1, 1, 1, 0, 3, 4, 0, 2};
  memcpy(h.x, ids, sizeof ids);
  for (size_t i = 0; i < h.nx; i++) h.dx[i] = 7.0f;
  CHECK_OK(st__layer_check_input(h.l, h.x, 3, 0));
  h_backward(&h, false);
  for (size_t i = 0; i < h.nx; i++) CHECK(h.dx[i] == 0.0f);
  for (int i = 0; i < 12; i++)
    CHECK(memcmp(h.y + i * 3, h.w[0] + (int)ids[i] * 3, 3 * sizeof(float)) == 0);
  float *a = zalloc(15);
  memcpy(a, h.dw[0], 15 * sizeof(float));
  h_check(&h, "embedding", "embeddings", h.w[0], 15, a);
  free(a);
  h.x[6] = 5.0f; /* example 1, position 2 */
  CHECK(st__layer_check_input(h.l, h.x, 3, 10) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "id 5 of example 11 at position 2"), "%s", st_last_error());
  h.x[6] = 1.5f;
  CHECK(st__layer_check_input(h.l, h.x, 3, 0) == ST_ERR_INVALID);
  h.x[6] = -1.0f;
  CHECK(st__layer_check_input(h.l, h.x, 3, 0) == ST_ERR_INVALID);
  h_loss(&h);
  CHECK(isnan(h.y[18]) && isnan(h.y[20]) && !isnan(h.y[17]));
  h_free(&h);
}

/* Forward against direct formulas: Conv1D causal stride 2 and DepthwiseConv2D
 * 'same' stride 2 with multiplier 2 (TF padding computed here); LayerNorm. */
static void test_issue28_b_forward(void) {
  st_conv1d_options o = st_conv1d_default_options(2, 3);
  o.padding = ST_PAD_CAUSAL, o.strides = 2, o.bias_init = ST_INIT_ONES;
  harness h;
  if (!h_init(&h, made(st_conv1d_ex(o, &g_made)), (st_shape){2, {6, 2}}, 2, 5)) return;
  CHECK(st_shape_equal(h.l->out_shape, (st_shape){2, {3, 2}}));
  h_loss(&h);
  double worst = 0.0;
  for (int n = 0; n < 2; n++)
    for (int t = 0; t < 3; t++)
      for (int f = 0; f < 2; f++) {
        double acc = h.w[1][f];
        for (int k = 0; k < 3; k++)
          for (int c = 0; c < 2; c++) {
            int i = t * 2 - 2 + k; /* left pad k-1 = 2 */
            if (i >= 0) acc += (double)h.x[(n * 6 + i) * 2 + c] * h.w[0][(k * 2 + c) * 2 + f];
          }
        worst = fmax(worst, fabs(h.y[(n * 3 + t) * 2 + f] - acc));
      }
  CHECK_MSG(worst < 1e-5, "conv1d causal vs direct: max error %g", worst);
  h_free(&h);
  st_depthwise_conv2d_options d = st_depthwise_conv2d_default_options(3, 2);
  d.sh = d.sw = 2, d.depth_multiplier = 2, d.padding = ST_PAD_SAME, d.bias_init = ST_INIT_ONES;
  const int H = 5, W = 4, C = 2, M = 2, OH = 3, OW = 2, PT = 1, PL = 0;
  if (!h_init(&h, made(st_depthwise_conv2d_ex(d, &g_made)), st_shape3(H, W, C), 2, 6)) return;
  CHECK(st_shape_equal(h.l->out_shape, st_shape3(OH, OW, C * M)));
  h_loss(&h);
  worst = 0.0;
  for (int n = 0; n < 2; n++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int j = 0; j < C * M; j++) {
          double acc = h.w[1][j];
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 2; kx++) {
              int iy = oy * 2 - PT + ky, ix = ox * 2 - PL + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              acc += (double)h.x[((n * H + iy) * W + ix) * C + j / M] *
                     h.w[0][(ky * 2 + kx) * C * M + j];
            }
          worst = fmax(worst, fabs(h.y[((n * OH + oy) * OW + ox) * C * M + j] - acc));
        }
  CHECK_MSG(worst < 1e-5, "depthwise vs direct: max error %g", worst);
  h_free(&h);
  if (!h_init(&h, made(st_layernorm(&g_made)), st_shape1(5), 2, 7)) return;
  for (int i = 0; i < 10; i++) h.x[i] = 1000.0f + 0.01f * (float)(i * i); /* offset: no cancellation */
  h.w[0][2] = 2.0f, h.w[1][3] = 0.5f;
  h_loss(&h);
  worst = 0.0;
  for (int r = 0; r < 2; r++) {
    double m = 0.0, v = 0.0;
    for (int j = 0; j < 5; j++) m += h.x[r * 5 + j] / 5.0;
    for (int j = 0; j < 5; j++) v += pow(h.x[r * 5 + j] - m, 2) / 5.0;
    for (int j = 0; j < 5; j++) {
      double want = h.w[0][j] * (h.x[r * 5 + j] - m) / sqrt(v + 1e-3) + h.w[1][j];
      worst = fmax(worst, fabs(h.y[r * 5 + j] - want));
    }
  }
  CHECK_MSG(worst < 1e-3, "layernorm vs formula: max error %g", worst);
  h_free(&h);
}
static void copy_to_device(st_backend_ctx *ctx, void *dst, const void *src, size_t n) {
  (void)ctx;
  memcpy(dst, src, n);
}

/* The host-loop layers on a backend that claims device memory write NaN
 * through be->fill instead of touching its buffers. */
static void test_host_loops_guard(void) {
  st_backend dev = *st_backend_reference();
  dev.to_device = copy_to_device;
  const st_backend *saved = be;
  st_layer *ls[3] = {made(st_embedding(5, 3, &g_made)), made(st_layernorm(&g_made)),
                     made(st_depthwise_conv2d_ex(st_depthwise_conv2d_default_options(2, 2), &g_made))};
  st_shape in[3] = {st_shape1(4), st_shape1(4), st_shape3(3, 3, 2)};
  for (int i = 0; i < 3; i++) {
    harness h;
    if (!h_init(&h, ls[i], in[i], 2, 9)) continue;
    CHECK(h.l->vt->host_loops);
    if (i == 0) memset(h.x, 0, h.nx * sizeof(float)); /* valid ids */
    be = &dev;
    h_backward(&h, false);
    be = saved;
    bool nan = true;
    for (size_t j = 0; j < h.ny; j++) nan &= isnan(h.y[j]);
    for (size_t j = 0; j < st_shape_size(h.l->params[0].shape); j++) nan &= isnan(h.dw[0][j]);
    CHECK_MSG(nan, "%s: not NaN on a device backend", st_layer_class(h.l));
    h_free(&h);
  }
}
/* ---- end of the issue 28 (helper B) block ---- */

/* ---- forward checks --------------------------------------------------------- */

/* Conv2D against a direct convolution (TF 'same' padding computed here). */
static void test_conv_direct(void) {
  const int H = 5, W = 6, C = 2, KH = 3, KW = 2, F = 3, SH = 2, SW = 1, N = 2;
  st_conv2d_options o = st_conv2d_default_options(F, KH, KW);
  o.sh = SH, o.sw = SW, o.padding = ST_PAD_SAME, o.bias_init = ST_INIT_ONES;
  harness h;
  if (!h_init(&h, made(st_conv2d_ex(o, &g_made)), st_shape3(H, W, C), N, 7)) return;
  int oh = (H + SH - 1) / SH, ow = (W + SW - 1) / SW;
  int pt = ((oh - 1) * SH + KH - H) / 2, pl = ((ow - 1) * SW + KW - W) / 2;
  CHECK(st_shape_equal(h.l->out_shape, st_shape3(oh, ow, F)));
  h.w[1][1] = 0.5f;
  h_loss(&h);
  double worst = 0.0;
  for (int n = 0; n < N; n++)
    for (int oy = 0; oy < oh; oy++)
      for (int ox = 0; ox < ow; ox++)
        for (int f = 0; f < F; f++) {
          double acc = h.w[1][f];
          for (int ky = 0; ky < KH; ky++)
            for (int kx = 0; kx < KW; kx++)
              for (int c = 0; c < C; c++) {
                int iy = oy * SH - pt + ky, ix = ox * SW - pl + kx;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                acc += (double)h.x[((n * H + iy) * W + ix) * C + c] *
                       h.w[0][((ky * KW + kx) * C + c) * F + f];
              }
          float got = h.y[((n * oh + oy) * ow + ox) * F + f];
          worst = fmax(worst, fabs(got - acc));
        }
  CHECK_MSG(worst < 1e-5, "conv vs direct: max error %g", worst);
  h_free(&h);
}

/* Inference: y = gamma (x - mm) / sqrt(mv + eps) + beta; training updates the
 * moving statistics with the biased batch variance. */
static void test_batchnorm_forward(void) {
  harness h;
  if (!h_init(&h, made(st_batchnorm(&g_made)), st_shape1(3), 4, 9)) return;
  st_rng rng = st_rng_make(5, 5);
  fill_uniform(h.w[0], 3, 0.5f, 1.5f, &rng); /* gamma */
  fill_uniform(h.w[1], 3, -1.0f, 1.0f, &rng); /* beta */
  fill_uniform(h.w[2], 3, -0.5f, 0.5f, &rng); /* moving_mean */
  fill_uniform(h.w[3], 3, 0.5f, 2.0f, &rng);  /* moving_variance */
  st_layer_args c = h_call(&h, false);
  h.l->vt->forward(h.l, &c);
  double worst = 0.0;
  for (int r = 0; r < 4; r++)
    for (int j = 0; j < 3; j++) {
      double want = h.w[0][j] * (h.x[r * 3 + j] - h.w[2][j]) /
                        sqrt(h.w[3][j] + 1e-3) + h.w[1][j];
      worst = fmax(worst, fabs(h.y[r * 3 + j] - want));
    }
  CHECK_MSG(worst < 1e-5, "batchnorm inference: max error %g", worst);
  float mm[3], mv[3];
  memcpy(mm, h.w[2], sizeof mm), memcpy(mv, h.w[3], sizeof mv);
  c = h_call(&h, true);
  h.l->vt->forward(h.l, &c);
  for (int j = 0; j < 3; j++) {
    double mean = 0.0, var = 0.0;
    for (int r = 0; r < 4; r++) mean += h.x[r * 3 + j] / 4.0;
    for (int r = 0; r < 4; r++) var += pow(h.x[r * 3 + j] - mean, 2) / 4.0;
    CHECK_NEAR(h.w[2][j], mm[j] * 0.99 + mean * 0.01, 1e-6);
    CHECK_NEAR(h.w[3][j], mv[j] * 0.99 + var * 0.01, 1e-6);
  }
  h_free(&h);
}

/* Max pooling routes a tied window's gradient to its first max (row-major),
 * and 'same' padding never wins over negative values. */
static void test_maxpool_ties(void) {
  st_pool_geom g = {.n = 1, .h = 2, .w = 3, .c = 1, .ph = 2, .pw = 2, .sh = 2,
                    .sw = 2, .pad_top = 0, .pad_left = 0, .oh = 1, .ow = 2};
  float x[6] = {-2, -2, -5, -2, -2, -6}, y[2], dy[2] = {1, 3}, dx[6];
  be->maxpool_forward(bctx(), &g, x, y);
  CHECK(y[0] == -2.0f && y[1] == -5.0f); /* second window is half padding */
  be->maxpool_backward(bctx(), &g, x, y, dy, dx);
  const float want[6] = {1, 0, 3, 0, 0, 0};
  CHECK(memcmp(dx, want, sizeof want) == 0);
}

/* ReLU + MaxPooling2D fold: st_model_add marks Conv2D(relu) -> MaxPool (and
 * not Conv2D(tanh) -> MaxPool, nor Dense(relu) -> Flatten); with the flags set
 * the pair's dx and dkernel equal the unfolded chain's, on both backends.
 * Inputs include negatives, so some windows have max 0 after the ReLU. */
static void test_relu_pool_fold(void) {
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&(st_model_options){.input_shape = st_shape3(6, 6, 2)}, &m));
  st_layer *l = NULL;
  CHECK_OK(st_conv2d(3, 3, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_maxpool2d(2, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_conv2d(2, 1, ST_ACT_TANH, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_maxpool2d(2, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK(st_model_layer(m, 0)->act_grad_folded && st_model_layer(m, 1)->input_relu_folded);
  CHECK(!st_model_layer(m, 2)->act_grad_folded && !st_model_layer(m, 3)->input_relu_folded);
  st_model_destroy(m);

  const st_backend *saved = be, *backends[2] = {st_backend_reference(), st_backend_cpu()};
  for (int bi = 0; bi < 2; bi++) {
    be = backends[bi];
    harness conv, pool;
    if (!h_init(&conv, made(st_conv2d(3, 3, ST_ACT_RELU, &g_made)), st_shape3(7, 6, 2), 3, 5))
      break;
    if (!h_init(&pool, made(st_maxpool2d(2, &g_made)), conv.l->out_shape, 3, 6)) {
      h_free(&conv);
      break;
    }
    float *dx[2], *dk[2];
    size_t nk = st_shape_size(conv.l->params[0].shape);
    for (int fold = 0; fold < 2; fold++) {
      conv.l->act_grad_folded = pool.l->input_relu_folded = fold;
      h_loss(&conv); /* forward */
      memcpy(pool.x, conv.y, conv.ny * sizeof(float));
      h_backward(&pool, false); /* dy = r */
      memcpy(conv.dy, pool.dx, conv.ny * sizeof(float));
      st_layer_args c = h_call(&conv, true);
      conv.l->vt->backward(conv.l, &c);
      dx[fold] = zalloc(conv.nx), dk[fold] = zalloc(nk);
      memcpy(dx[fold], conv.dx, conv.nx * sizeof(float));
      memcpy(dk[fold], conv.dw[0], nk * sizeof(float));
    }
    size_t zeros = 0;
    for (size_t i = 0; i < conv.ny; i++) zeros += conv.y[i] == 0.0f;
    CHECK_MSG(zeros > 0, "%s: the test input has no ReLU zeros", be->name);
    bool same = true;
    for (size_t i = 0; i < conv.nx; i++) same &= dx[0][i] == dx[1][i];
    for (size_t i = 0; i < nk; i++) same &= dk[0][i] == dk[1][i];
    CHECK_MSG(same, "%s: folded ReLU + MaxPool gradients differ from the unfolded ones",
              be->name);
    for (int f = 0; f < 2; f++) free(dx[f]), free(dk[f]);
    h_free(&conv), h_free(&pool);
  }
  be = saved;
}

/* ---- layer contract --------------------------------------------------------- */

/* Backward must leave dy alone unless dy_writable; results must not depend on
 * it. */
static void check_dy_kept(const char *label, st_layer *l, st_shape in) {
  harness h;
  if (!h_init(&h, l, in, 3, 11)) return;
  h_backward(&h, false);
  bool kept = memcmp(h.dy, h.r, h.ny * sizeof(float)) == 0;
  CHECK_MSG(kept, "%s: backward modified a read-only dy", label);
  float *dx = zalloc(h.nx), *dw = zalloc(st_shape_size(l->params[0].shape));
  memcpy(dx, h.dx, h.nx * sizeof(float));
  memcpy(dw, h.dw[0], st_shape_size(l->params[0].shape) * sizeof(float));
  h_backward(&h, true);
  CHECK_MSG(memcmp(dx, h.dx, h.nx * sizeof(float)) == 0, "%s: dx differs", label);
  CHECK_MSG(memcmp(dw, h.dw[0], st_shape_size(l->params[0].shape) * sizeof(float)) == 0,
            "%s: dkernel differs with writable dy", label);
  free(dx), free(dw);
  h_free(&h);
}

/* A batch split into several im2col blocks (24x24 outputs x 36 patch floats:
 * 12 images per block) gives the same dkernel and dbias as the sums over two
 * half batches (one block each), and the same dx. */
static void test_conv_blocks(void) {
  const int N = 20;
  st_conv2d_options o = st_conv2d_default_options(16, 3, 3);
  o.padding = ST_PAD_SAME, o.activation = ST_ACT_RELU;
  harness h;
  if (!h_init(&h, made(st_conv2d_ex(o, &g_made)), st_shape3(24, 24, 4), N, 3)) return;
  /* past one block only the dz part of the workspace grows with the batch */
  CHECK(h.l->vt->workspace_floats(h.l, N) - h.l->vt->workspace_floats(h.l, N - 1) ==
        (size_t)24 * 24 * 16);
  size_t nk = st_shape_size(h.l->params[0].shape), half = h.nx / 2;
  h_backward(&h, false);
  float *dk = zalloc(nk), *dx = zalloc(h.nx), db[16];
  memcpy(dk, h.dw[0], nk * sizeof(float));
  memcpy(dx, h.dx, h.nx * sizeof(float));
  memcpy(db, h.dw[1], sizeof db);
  double worst = 0.0, worst_b = 0.0;
  for (int part = 0; part < 2; part++) { /* the two halves, as one batch each */
    st_layer_args c = h_call(&h, true);
    c.batch = N / 2;
    c.x = h.x + part * half, c.y = h.y + part * h.ny / 2;
    h.l->vt->forward(h.l, &c);
    memcpy(h.dy, h.r + part * h.ny / 2, h.ny / 2 * sizeof(float));
    c.dy = h.dy, c.dx = h.dx + part * half;
    h.l->vt->backward(h.l, &c);
    for (size_t i = 0; i < nk; i++) dk[i] -= h.dw[0][i];
    for (int i = 0; i < 16; i++) db[i] -= h.dw[1][i];
  }
  for (size_t i = 0; i < nk; i++) worst = fmax(worst, fabs(dk[i]));
  for (int i = 0; i < 16; i++) worst_b = fmax(worst_b, fabs(db[i]));
  CHECK_MSG(worst < 1e-2, "conv blocks: dkernel differs by %g", worst);
  CHECK_MSG(worst_b < 1e-3, "conv blocks: dbias differs by %g", worst_b);
  CHECK(memcmp(dx, h.dx, h.nx * sizeof(float)) == 0);
  free(dk), free(dx);
  h_free(&h);
}

/* ---- losses ------------------------------------------------------------------ */

/* pred[4,5] and y suitable for the loss kind. */
static void loss_inputs(st_loss_kind k, float *pred, float *y, st_rng *rng) {
  bool logits = k == ST_LOSS_SPARSE_CE_LOGITS || k == ST_LOSS_CE_LOGITS ||
                k == ST_LOSS_BCE_LOGITS || k == ST_LOSS_MSE;
  if (logits)
    fill_uniform(pred, 20, -2.0f, 2.0f, rng);
  else /* probabilities; CE rows are deliberately not normalised */
    fill_uniform(pred, 20, 0.05f, 0.95f, rng);
  if (st_loss_is_sparse(k))
    for (int r = 0; r < 4; r++) y[r] = (float)st_rng_below(rng, 5);
  else if (k == ST_LOSS_MSE)
    fill_uniform(y, 20, -1.0f, 1.0f, rng);
  else /* soft targets in [0, 1] */
    fill_uniform(y, 20, 0.0f, 1.0f, rng);
}

static double loss_sum(st_loss_kind k, const float *pred, const float *y,
                       float scale) {
  float loss[4];
  be->loss(bctx(), k, 4, 5, pred, y, scale, loss, NULL);
  double s = 0.0;
  for (int r = 0; r < 4; r++) s += loss[r];
  return s * scale;
}

static void test_losses(void) {
  const float scale = 0.25f;
  for (int k = 0; k < ST_LOSS_COUNT; k++) {
    float pred[20], y[20], loss[4], d[20];
    st_rng rng = st_rng_make(100 + k, 0);
    loss_inputs((st_loss_kind)k, pred, y, &rng);
    be->loss(bctx(), (st_loss_kind)k, 4, 5, pred, y, scale, loss, d);
    double worst = 0.0;
    for (int i = 0; i < 20; i++) {
      float orig = pred[i], vp = orig + EPS, vm = orig - EPS;
      pred[i] = vp;
      double lp = loss_sum((st_loss_kind)k, pred, y, scale);
      pred[i] = vm;
      double lm = loss_sum((st_loss_kind)k, pred, y, scale);
      pred[i] = orig;
      double num = (lp - lm) / ((double)vp - vm);
      worst = fmax(worst, fabs(num - d[i]) - RTOL * fabs(num) - 1e-4);
    }
    CHECK_MSG(worst <= 0.0, "loss %s: dpred off by %g", st_loss_name(k), worst);
  }
}

/* Sparse and one-hot, logits and probabilities, binary pairs agree. */
static void test_loss_consistency(void) {
  float z[20], p[20], lab[4], onehot[20] = {0}, t[20], a[4], b[4];
  st_rng rng = st_rng_make(8, 8);
  fill_uniform(z, 20, -2.0f, 2.0f, &rng);
  be->act_forward(bctx(), ST_ACT_SOFTMAX, 4, 5, z, p);
  for (int r = 0; r < 4; r++) lab[r] = (float)r, onehot[r * 5 + r] = 1.0f;
  be->loss(bctx(), ST_LOSS_SPARSE_CE_LOGITS, 4, 5, z, lab, 1.0f, a, NULL);
  be->loss(bctx(), ST_LOSS_CE_LOGITS, 4, 5, z, onehot, 1.0f, b, NULL);
  for (int r = 0; r < 4; r++) CHECK_NEAR(a[r], b[r], 1e-6);
  be->loss(bctx(), ST_LOSS_SPARSE_CE, 4, 5, p, lab, 1.0f, b, NULL);
  for (int r = 0; r < 4; r++) CHECK_NEAR(a[r], b[r], 1e-5);
  be->loss(bctx(), ST_LOSS_CE, 4, 5, p, onehot, 1.0f, b, NULL);
  for (int r = 0; r < 4; r++) CHECK_NEAR(a[r], -log(p[r * 5 + r]), 1e-5);
  fill_uniform(t, 20, 0.0f, 1.0f, &rng);
  be->act_forward(bctx(), ST_ACT_SIGMOID, 4, 5, z, p);
  be->loss(bctx(), ST_LOSS_BCE_LOGITS, 4, 5, z, t, 1.0f, a, NULL);
  be->loss(bctx(), ST_LOSS_BCE, 4, 5, p, t, 1.0f, b, NULL);
  for (int r = 0; r < 4; r++) CHECK_NEAR(a[r], b[r], 1e-5);
  lab[0] = 7.0f; /* out of range */
  be->loss(bctx(), ST_LOSS_SPARSE_CE_LOGITS, 4, 5, z, lab, 1.0f, a, NULL);
  CHECK(isnan(a[0]));
}

/* First Adam step moves each weight by about lr against its gradient. */
static void test_adam_first_step(void) {
  float p[2] = {1.0f, 1.0f}, g[2] = {0.5f, -3.0f}, m[2] = {0}, v[2] = {0};
  be->adam_update(bctx(), 2, 0.01f, 0.9f, 0.999f, 1e-7f, 0.0f, 1, p, g, m, v);
  CHECK_NEAR(p[0], 0.99, 1e-5);
  CHECK_NEAR(p[1], 1.01, 1e-5);
}

static void test_backend_get(void) {
  const st_backend *got = NULL;
  CHECK_OK(st_backend_get("reference", &got));
  CHECK(got == be);
  st_status s = st_backend_get("cuda", &got); /* ST_OK only where the module and a driver are */
  CHECK(s == ST_OK || s == ST_ERR_NOT_BUILT);
  CHECK(st_backend_get("tpu", &got) == ST_ERR_INVALID);
}
static void test_dy_kept(void) {
  check_dy_kept("dense relu", made(st_dense(4, ST_ACT_RELU, &g_made)), st_shape1(5));
  check_dy_kept("dense gelu", made(st_dense(4, ST_ACT_GELU, &g_made)), st_shape1(5));
  check_dy_kept("conv relu", made(st_conv2d(2, 3, ST_ACT_RELU, &g_made)), st_shape3(5, 5, 2));
}
static const check_case cases[] = {
    CHECK_CASE(test_backend_get),     CHECK_CASE(test_dense),
    CHECK_CASE(test_conv2d),          CHECK_CASE(test_pool),
    CHECK_CASE(test_simple_layers),   CHECK_CASE(test_batchnorm_grad),
    CHECK_CASE(test_conv_direct),     CHECK_CASE(test_batchnorm_forward),
    CHECK_CASE(test_maxpool_ties),    CHECK_CASE(test_relu_pool_fold),
    CHECK_CASE(test_dy_kept),         CHECK_CASE(test_conv_blocks),
    CHECK_CASE(test_losses),          CHECK_CASE(test_loss_consistency),
    CHECK_CASE(test_adam_first_step),
    /* issue 28, layers-a */
    CHECK_CASE(test_layers_a),        CHECK_CASE(test_global_pool_ties),
    /* issue 28, helper B */
    CHECK_CASE(test_issue28_b_grad),  CHECK_CASE(test_embedding),
    CHECK_CASE(test_issue28_b_forward), CHECK_CASE(test_host_loops_guard)};

int main(int argc, char **argv) {
  be = st_backend_reference();
  return CHECK_MAIN(argc, argv, cases);
}
