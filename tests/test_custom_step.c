/* The model as a differentiable step in a custom loop (st_replica_forward,
 * st_replica_loss_gradient, st_replica_backward (st_replica_gradients /
 * st_replica_set_gradients read and replace the gradients), then
 * st_replica_apply_gradients), on a graph with a residual Add:
 *  - with fit's own loss gradient it trains fit's bytes, on one device and
 *    on mirrored x2;
 *  - with a loss gradient the C program computes itself (mean squared error
 *    against one-hot labels) it trains what fit trains with the MSE loss, up
 *    to rounding;
 *  - the input gradient agrees with central differences of the loss;
 *  - misuse (backward before forward, NULL dy) is refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixtures.h"
#include "model/model.h"
#include "strata/strata.h"

enum { N = 96, D = 8, C = 4, B = 32 };
static float X[N * D], Y[N], Y1[N * C];

static st_node *call(st_layer *l, st_node *a, st_node *b) {
  st_node *in[2] = {a, b}, *out = NULL;
  CHECK_OK(st_layer_call(l, in, b ? 2 : 1, &out));
  return out;
}
static st_layer *dense(int units, st_activation act) {
  st_layer *l = NULL;
  CHECK_OK(st_dense(units, act, &l));
  return l;
}

/* x -> h = Dense 8 tanh -> Add(h, Dense 8 tanh (h)) -> Dense C, compiled. */
static st_model *model(st_strategy_kind kind, int replicas, st_loss_kind loss) {
  st_strategy_options so = st_strategy_default_options(kind);
  so.threads = 1;
  if (replicas) so.replicas = replicas;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_node *x = NULL;
  CHECK_OK(st_input(st_shape1(D), NULL, &x));
  st_layer *add = NULL;
  CHECK_OK(st_add(&add));
  st_node *h = call(dense(D, ST_ACT_TANH), x, NULL);
  st_node *y = call(dense(C, ST_ACT_LINEAR), call(add, h, call(dense(D, ST_ACT_TANH), h, NULL)), NULL);
  st_model_options o = st_model_default_options(st_shape1(D));
  o.seed = 8;
  o.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_functional_create(&x, 1, &y, 1, &o, &m));
  if (!m) return NULL;
  m->owns_strategy = true;
  st_compile_options co = st_compile_default_options();
  co.loss = loss;
  co.optimizer = st_optimizer_default_options(ST_OPT_SGD);
  co.optimizer.lr = st_schedule_constant(0.1f);
  CHECK_OK(st_model_compile(m, &co));
  return m;
}

static st_dataset *dataset(const float *y, int ywidth) {
  st_tensor xt = {ST_F32, 2, {N, D}, X}, yt = {ST_F32, ywidth > 1 ? 2 : 1, {N, ywidth}, (void *)y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&xt, &yt, 1.0f, false, &ds));
  CHECK_OK(st_dataset_batch(ds, B, false, &ds));
  return ds;
}

typedef struct step_args {
  const st_batch *b;
  bool own_mse; /* compute the MSE gradient here instead of fit's */
} step_args;

static st_status step(st_replica_context *c, void *arg) {
  step_args *a = arg;
  st_batch local = st_replica_slice(c, a->b);
  const float *out = NULL;
  st_status s = st_replica_forward(c, &local, true, &out);
  if (s != ST_OK) return s;
  float dy[B * C];
  if (a->own_mse) { /* d/d out of sum_i mean_j (out - y)^2, over the global batch */
    for (int i = 0; i < local.size * C; i++)
      dy[i] = 2.0f * (out[i] - local.y[i]) / (float)C / (float)a->b->size;
  } else if ((s = st_replica_loss_gradient(c, local.y, a->b->size, dy, NULL)) != ST_OK) {
    return s;
  }
  if ((s = st_replica_backward(c, dy, NULL)) != ST_OK) return s;
  return st_replica_apply_gradients(c);
}

static void custom_loop(st_model *m, const float *y, int ywidth, bool own_mse) {
  st_dataset *ds = dataset(y, ywidth);
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  for (bool end = false;;) {
    st_batch b;
    CHECK_OK(st_iterator_next(it, &b, &end));
    if (end) break;
    step_args a = {&b, own_mse};
    CHECK_OK(st_strategy_run(m->strategy, step, &a));
  }
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
}

static void fit(st_model *m, const float *y, int ywidth) {
  st_dataset *ds = dataset(y, ywidth);
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
}

static void fit_bytes(st_strategy_kind kind, int replicas) {
  st_model *a = model(kind, replicas, ST_LOSS_SPARSE_CE_LOGITS);
  st_model *b = model(kind, replicas, ST_LOSS_SPARSE_CE_LOGITS);
  if (!a || !b) return;
  fit(a, Y, 1);
  custom_loop(b, Y, 1, false);
  CHECK(a->net.step == b->net.step && a->net.step == N / B);
  CHECK_MSG(memcmp(a->net.params, b->net.params, a->net.n_params * sizeof(float)) == 0,
            "%s x%d: the custom loop's bytes differ from fit's", st_strategy_kind_name(kind),
            replicas);
  st_model_destroy(a), st_model_destroy(b);
}
static void test_fit_bytes_one_device(void) { fit_bytes(ST_STRATEGY_ONE_DEVICE, 0); }
static void test_fit_bytes_mirrored(void) { fit_bytes(ST_STRATEGY_MIRRORED, 2); }

static void test_own_loss(void) {
  st_model *a = model(ST_STRATEGY_MIRRORED, 2, ST_LOSS_MSE);
  st_model *b = model(ST_STRATEGY_MIRRORED, 2, ST_LOSS_MSE);
  if (!a || !b) return;
  fit(a, Y1, C);
  custom_loop(b, Y1, C, true);
  double d = 0, mx = 1e-30;
  for (size_t i = 0; i < a->net.n_params; i++) {
    d = fmax(d, fabs((double)a->net.params[i] - b->net.params[i]));
    mx = fmax(mx, fabs((double)a->net.params[i]));
  }
  CHECK_MSG(d / mx < 1e-5, "own MSE gradient: %g from fit's", d / mx);
  st_model_destroy(a), st_model_destroy(b);
}

/* dL/dx by the step API against central differences of fit's loss. */
typedef struct dx_args {
  const st_batch *b;
  float *dx, *loss;
} dx_args;

static st_status dx_step(st_replica_context *c, void *arg) {
  dx_args *a = arg;
  const float *out = NULL;
  float dy[8 * C];
  double sum = 0;
  st_status s = st_replica_forward(c, a->b, false, &out);
  if (s == ST_OK) s = st_replica_loss_gradient(c, a->b->y, a->b->size, dy, &sum);
  if (s == ST_OK && a->dx) s = st_replica_backward(c, dy, a->dx);
  *a->loss = (float)(sum / a->b->size); /* the loss dy is the gradient of */
  return s;
}

static void test_input_gradient(void) {
  st_model *m = model(ST_STRATEGY_ONE_DEVICE, 0, ST_LOSS_SPARSE_CE_LOGITS);
  if (!m) return;
  float x[8 * D], dx[8 * D], loss;
  memcpy(x, X, sizeof x);
  st_batch b = {8, x, Y};
  dx_args a = {&b, dx, &loss};
  CHECK_OK(st_strategy_run(m->strategy, dx_step, &a));
  double worst = 0;
  for (int i = 0; i < 8 * D; i++) {
    float keep = x[i], lp, lm;
    a.dx = NULL;
    x[i] = keep + 1e-2f, a.loss = &lp;
    CHECK_OK(st_strategy_run(m->strategy, dx_step, &a));
    x[i] = keep - 1e-2f, a.loss = &lm;
    CHECK_OK(st_strategy_run(m->strategy, dx_step, &a));
    x[i] = keep;
    worst = fmax(worst, fabs((lp - lm) / 2e-2 - dx[i]) / fmax(1.0, fabs(dx[i])));
  }
  CHECK_MSG(worst < 2e-2, "input gradient off by %g", worst);
  CHECK(m->net.step == 0); /* nothing applied */
  st_model_destroy(m);
}

/* Each replica's gradients read (st_replica_gradients), summed on replica 0
 * in replica order and written back there, zeros on the others
 * (st_replica_set_gradients): the update is fit's (the sum plus zeros). */
typedef struct grads_args {
  const st_batch *b;
  size_t n;
  float *g[2]; /* [n] per replica */
} grads_args;

static st_status grads_step(st_replica_context *c, void *arg) {
  grads_args *a = arg;
  int r = st_replica_id(c);
  st_batch local = st_replica_slice(c, a->b);
  const float *out = NULL;
  float dy[B * C], token = 0.0f;
  st_status s = st_replica_forward(c, &local, true, &out);
  if (s == ST_OK) s = st_replica_loss_gradient(c, local.y, a->b->size, dy, NULL);
  if (s == ST_OK) s = st_replica_backward(c, dy, NULL);
  if (s == ST_OK) s = st_replica_gradients(c, a->g[r], a->n);
  if (s == ST_OK) s = st_replica_all_reduce(c, ST_REDUCE_SUM, &token, 1); /* both are read */
  if (s == ST_OK && r == 0)
    for (size_t i = 0; i < a->n; i++) a->g[0][i] += a->g[1][i];
  if (s == ST_OK) s = st_replica_all_reduce(c, ST_REDUCE_SUM, &token, 1); /* summed */
  if (s == ST_OK && r == 1) memset(a->g[1], 0, a->n * sizeof(float));
  if (s == ST_OK) s = st_replica_set_gradients(c, a->g[r], a->n);
  if (s == ST_OK) CHECK(st_replica_set_gradients(c, a->g[r], a->n + 1) == ST_ERR_INVALID);
  if (s == ST_OK) CHECK(st_replica_gradients(c, NULL, a->n) == ST_ERR_INVALID);
  return s == ST_OK ? st_replica_apply_gradients(c) : s;
}

static void test_gradients_read_and_set(void) {
  st_model *a = model(ST_STRATEGY_MIRRORED, 2, ST_LOSS_SPARSE_CE_LOGITS);
  st_model *b = model(ST_STRATEGY_MIRRORED, 2, ST_LOSS_SPARSE_CE_LOGITS);
  if (!a || !b) return;
  fit(a, Y, 1);
  size_t n = b->net.n_params;
  grads_args ga = {NULL, n, {calloc(n, sizeof(float)), calloc(n, sizeof(float))}};
  CHECK(ga.g[0] && ga.g[1]);
  st_dataset *ds = dataset(Y, 1);
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  for (bool end = false;;) {
    st_batch batch;
    CHECK_OK(st_iterator_next(it, &batch, &end));
    if (end) break;
    ga.b = &batch;
    CHECK_OK(st_strategy_run(b->strategy, grads_step, &ga));
  }
  CHECK_MSG(memcmp(a->net.params, b->net.params, n * sizeof(float)) == 0,
            "gradients read, summed and set: the bytes differ from fit's");
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
  free(ga.g[0]), free(ga.g[1]);
  st_model_destroy(a), st_model_destroy(b);
}

static st_status misuse_step(st_replica_context *c, void *arg) {
  (void)arg;
  float dy[C] = {0};
  const float *out;
  CHECK(st_replica_backward(c, dy, NULL) == ST_ERR_INVALID); /* before any forward */
  CHECK(strstr(st_last_error(), "no st_replica_forward") != NULL);
  CHECK(st_replica_forward(c, NULL, true, &out) == ST_ERR_INVALID);
  st_batch one = {1, X, Y};
  CHECK_OK(st_replica_forward(c, &one, true, &out));
  CHECK(st_replica_backward(c, NULL, NULL) == ST_ERR_INVALID);
  CHECK(st_replica_loss_gradient(c, Y, 0, dy, NULL) == ST_ERR_INVALID);
  float bad = 7; /* not a class of 4 */
  CHECK(st_replica_loss_gradient(c, &bad, 1, dy, NULL) == ST_ERR_INVALID);
  return ST_OK;
}

static void test_misuse(void) {
  st_model *m = model(ST_STRATEGY_ONE_DEVICE, 0, ST_LOSS_SPARSE_CE_LOGITS);
  if (m) CHECK_OK(st_strategy_run(m->strategy, misuse_step, NULL));
  CHECK(st_replica_forward(NULL, NULL, true, NULL) == ST_ERR_INVALID);
  st_model_destroy(m);
}

static const check_case cases[] = {
    CHECK_CASE(test_fit_bytes_one_device), CHECK_CASE(test_fit_bytes_mirrored),
    CHECK_CASE(test_own_loss), CHECK_CASE(test_input_gradient), CHECK_CASE(test_gradients_read_and_set),
    CHECK_CASE(test_misuse)};

int main(int argc, char **argv) {
  fixture_argmax_data(21, N, D, C, X, Y);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < C; j++) Y1[i * C + j] = (float)(Y[i] == (float)j);
  return CHECK_MAIN(argc, argv, cases);
}
