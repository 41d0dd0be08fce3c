/* Keras's semantics where a newcomer relies on them, through the public API on
 * a small synthetic classification problem: the default loss is sparse CE on
 * probabilities (Keras's from_logits=False), so a softmax model compiled with
 * the defaults trains as well as a linear-output model with the from-logits
 * loss; a softmax output meeting a from-logits loss logs exactly one warning
 * per compile through the log callback (st_log_set_callback), and the
 * callback receives what st_log would have written to stderr. Errors found
 * before training: a bad label of in-memory data names its source row, and a
 * val_* monitor without validation data fails before epoch 1. The data's
 * shape must be the model input's (rank and each dimension; an implicit
 * trailing channel of 1 allowed), channels_last named for images. A second
 * compile replaces the optimizer and keeps the weights; weights loaded
 * before compile are the ones compile starts from. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixtures.h"
#include "strata/strata.h"

enum { N = 600, D = 4, C = 3 };
static float X[N * D], Y[N];

/* y = argmax(W x) for a fixed random W (tests/fixtures.h). */
static void make_data(void) { fixture_argmax_data(11, N, D, C, X, Y); }

static st_dataset *dataset(int batch) { return fixture_dataset(X, Y, N, D, batch); }

/* What the log callback saw. */
typedef struct captured {
  int warnings;
  char last[1024];
} captured;

static void capture(st_log_level level, const char *message, void *user) {
  captured *c = user;
  if (level == ST_LOG_WARN) c->warnings++;
  snprintf(c->last, sizeof c->last, "%s", message);
}

/* Dense 16 relu -> Dense C with `out_act`, compiled with `loss` (the default
 * loss when loss < 0); the warnings compile logged go to *cap. */
static st_model *model(st_activation out_act, int loss, captured *cap) {
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 5;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  if (!m) return NULL;
  st_layer *l = NULL;
  CHECK_OK(st_dense(16, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(C, out_act, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  if (loss >= 0) co.loss = (st_loss_kind)loss;
  co.optimizer.lr = st_schedule_constant(0.01f);
  memset(cap, 0, sizeof *cap);
  st_log_set_callback(capture, cap);
  CHECK_OK(st_model_compile(m, &co));
  st_log_set_callback(NULL, NULL);
  return m;
}

/* Accuracy on the training data after 8 epochs. */
static double train_accuracy(st_model *m) {
  st_dataset *train = dataset(32);
  CHECK(train != NULL);
  if (!m || !train) return -1;
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 8;
  st_history h;
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  st_history_destroy(&h);
  st_eval_result r = {0};
  CHECK_OK(st_model_evaluate(m, train, &r));
  st_dataset_destroy(train);
  return r.accuracy;
}

static void test_default_loss_is_keras(void) {
  st_compile_options co = st_compile_default_options();
  CHECK_EQ((int)co.loss, (int)ST_LOSS_SPARSE_CE);
}

/* The acceptance: softmax + defaults trains as linear + from-logits does. */
static void test_softmax_defaults_train_as_logits(void) {
  make_data();
  captured c1, c2;
  st_model *soft = model(ST_ACT_SOFTMAX, -1, &c1);
  st_model *lin = model(ST_ACT_LINEAR, ST_LOSS_SPARSE_CE_LOGITS, &c2);
  CHECK_EQ(c1.warnings, 0);
  CHECK_EQ(c2.warnings, 0);
  double a = train_accuracy(soft), b = train_accuracy(lin);
  printf("softmax + default loss: accuracy %.4f; linear + from-logits: %.4f\n", a, b);
  CHECK_GT(a, 0.9); /* both learnt the problem */
  CHECK_GT(b, 0.9);
  CHECK_NEAR(a, b, 0.01);
  st_model_destroy(soft);
  st_model_destroy(lin);
}

static void test_softmax_with_logits_loss_warns_once(void) {
  captured c;
  st_model *m = model(ST_ACT_SOFTMAX, ST_LOSS_SPARSE_CE_LOGITS, &c);
  CHECK_EQ(c.warnings, 1);
  CHECK_MSG(strstr(c.last, "the last layer applies softmax but the loss expects logits "
                           "(from_logits): softmax is applied twice; use ST_LOSS_SPARSE_CE"),
            "%s", c.last);
  CHECK(strchr(c.last, '\n') == NULL);
  st_model_destroy(m);
  m = model(ST_ACT_SOFTMAX, ST_LOSS_CE_LOGITS, &c);
  CHECK_EQ(c.warnings, 1);
  CHECK_MSG(strstr(c.last, "use ST_LOSS_CE") != NULL, "%s", c.last);
  st_model_destroy(m);
}

/* The mirror mistake (a linear output under a probability loss, what a model
 * written for the old default meets) also warns once. */
static void test_linear_with_probability_loss_warns_once(void) {
  captured c;
  st_model *m = model(ST_ACT_LINEAR, -1, &c);
  CHECK_EQ(c.warnings, 1);
  CHECK_MSG(strstr(c.last, "use ST_LOSS_SPARSE_CE_LOGITS") != NULL, "%s", c.last);
  st_model_destroy(m);
}

/* Messages below the level are filtered before the callback; after
 * st_log_set_callback(NULL, NULL) nothing more reaches it. */
static void test_log_callback(void) {
  captured c = {0};
  st_log_level old = st_log_get_level();
  st_log_set_level(ST_LOG_WARN);
  st_log_set_callback(capture, &c);
  st_log(ST_LOG_INFO, "dropped %d", 1);
  CHECK_EQ(c.warnings, 0);
  CHECK_STREQ(c.last, "");
  st_log(ST_LOG_WARN, "kept %d\n", 2);
  CHECK_EQ(c.warnings, 1);
  CHECK_STREQ(c.last, "kept 2"); /* no prefix, no newline */
  st_log(ST_LOG_ERROR, "an error");
  CHECK_EQ(c.warnings, 1);
  CHECK_STREQ(c.last, "an error");
  st_log_set_callback(NULL, NULL);
  st_log_set_level(ST_LOG_OFF); /* keep the test's stderr clean */
  st_log(ST_LOG_WARN, "to stderr");
  CHECK_EQ(c.warnings, 1);
  st_log_set_level(old);
}


/* ---- errors found before training ---- */

/* Counts the training steps a fit ran. */
static st_status count_batch(void *user, st_model *m, const st_batch_logs *l) {
  (void)m, (void)l;
  ++*(int *)user;
  return ST_OK;
}

/* Fit on `train` (validation `val`, callbacks `extra`) must fail before its
 * first step with a message holding `want`. */
static void expect_fit_fails_early(st_model *m, st_dataset *train, st_dataset *val,
                                   st_callback *extra, int nextra, const char *want) {
  int steps = 0;
  st_callback cbs[4] = {{.user = &steps, .on_batch_end = count_batch}};
  for (int i = 0; i < nextra && i < 3; i++) cbs[1 + i] = extra[i];
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 2;
  fo.validation = val;
  fo.callbacks = cbs;
  fo.ncallbacks = 1 + nextra;
  st_history h;
  CHECK(st_model_fit(m, train, &fo, &h) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "got: %s", st_last_error());
  CHECK_EQ(steps, 0);
  CHECK_EQ(h.epochs, 0);
  st_history_destroy(&h);
}

/* A shuffled, batched in-memory source: the bad label is named by its source
 * row before anything trains (not by its shuffled position mid-epoch). */
static void test_bad_label_named_by_source_row(void) {
  make_data();
  captured c;
  st_model *m = model(ST_ACT_LINEAR, ST_LOSS_SPARSE_CE_LOGITS, &c);
  float keep = Y[500];
  Y[500] = 7;
  st_tensor x = {ST_F32, 2, {N, D}, X}, t = {ST_F32, 1, {N}, Y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &t, 1.0f, false, &ds));
  CHECK_OK(st_dataset_shuffle(ds, N, 1, true, &ds));
  CHECK_OK(st_dataset_batch(ds, 32, false, &ds));
  expect_fit_fails_early(m, ds, NULL, NULL, 0,
                         "fit: label 7 at row 500 of the training data is out of range [0, 3)");
  st_dataset_destroy(ds);
  /* a take/skip view (a validation split) names the source row too */
  Y[500] = keep;
  Y[590] = 1.5f;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &t, 1.0f, false, &ds));
  CHECK_OK(st_dataset_skip(ds, 540, &ds));
  CHECK_OK(st_dataset_batch(ds, 32, false, &ds));
  st_dataset *train = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &t, 1.0f, false, &train));
  CHECK_OK(st_dataset_take(train, 540, &train));
  CHECK_OK(st_dataset_batch(train, 32, false, &train));
  expect_fit_fails_early(m, train, ds, NULL, 0,
                         "label 1.5 at row 590 of the validation data is not a class index");
  st_dataset_destroy(ds);
  st_dataset_destroy(train);
  Y[590] = 0;
  st_model_destroy(m);
}

static st_status break_label(void *user, float *x, size_t x_size, float *y, size_t y_size) {
  (void)x, (void)x_size, (void)y_size;
  if (++*(int *)user == 100) y[0] = -1;
  return ST_OK;
}

/* Through a map the labels are only known per batch: still an error (and
 * no leak on that path: this case runs under ASan and valgrind). */
static void test_bad_label_after_map(void) {
  make_data();
  captured c;
  st_model *m = model(ST_ACT_LINEAR, ST_LOSS_SPARSE_CE_LOGITS, &c);
  int seen = 0;
  st_tensor x = {ST_F32, 2, {N, D}, X}, t = {ST_F32, 1, {N}, Y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &t, 1.0f, false, &ds));
  CHECK_OK(st_dataset_map(ds, break_label, &seen, &ds));
  CHECK_OK(st_dataset_shuffle(ds, 64, 1, true, &ds));
  CHECK_OK(st_dataset_batch(ds, 32, false, &ds));
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK(st_model_fit(m, ds, &fo, &h) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "label -1 of example") != NULL, "%s", st_last_error());
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
}

/* A val_* monitor without validation data fails at fit start, not after
 * epoch 1 has trained. */
static void test_val_monitor_without_validation(void) {
  make_data();
  captured c;
  st_model *m = model(ST_ACT_LINEAR, ST_LOSS_SPARSE_CE_LOGITS, &c);
  st_dataset *train = dataset(32);
  st_callback cb[2];
  st_early_stopping_options eo = st_early_stopping_default_options();
  CHECK_OK(st_early_stopping_create(eo, &cb[0]));
  expect_fit_fails_early(m, train, NULL, cb, 1,
                         "fit: callbacks[1] (EarlyStopping) monitors val_loss but fit has no "
                         "validation data");
  CHECK_OK(st_model_checkpoint_create("/tmp/strata_never_written", "val_accuracy", true, 1,
                                      &cb[1]));
  eo.monitor = "loss";
  st_callback_destroy(&cb[0]);
  CHECK_OK(st_early_stopping_create(eo, &cb[0]));
  expect_fit_fails_early(m, train, NULL, cb, 2,
                         "fit: callbacks[2] (ModelCheckpoint) monitors val_accuracy but fit "
                         "has no validation data");
  st_callback_destroy(&cb[0]);
  st_callback_destroy(&cb[1]);
  st_dataset_destroy(train);
  st_model_destroy(m);
}

/* ---- full-shape checks of the data against the model input ---- */

/* fit of a model with input `in` on n examples of x [dims...] (zeros),
 * labels 0: the status, the message in st_last_error(). */
static st_status fit_shape(st_shape in, bool conv, int rank, const int64_t *dims) {
  st_model_options mo = st_model_default_options(in);
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  if (conv) {
    CHECK_OK(st_conv2d(2, 3, ST_ACT_RELU, &l));
    CHECK_OK(st_model_add(m, l));
  }
  if (in.rank > 1) {
    CHECK_OK(st_flatten(&l));
    CHECK_OK(st_model_add(m, l));
  }
  CHECK_OK(st_dense(C, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  float *xs = calloc(n, sizeof *xs), ys[8] = {0};
  st_tensor x = {ST_F32, rank, {0}, xs}, t = {ST_F32, 1, {dims[0]}, ys};
  memcpy(x.dims, dims, sizeof(int64_t) * (size_t)rank);
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &t, 1.0f, false, &ds));
  CHECK_OK(st_dataset_batch(ds, 4, false, &ds));
  st_fit_options fo = st_fit_default_options();
  st_history h;
  st_status s = st_model_fit(m, ds, &fo, &h);
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  free(xs);
  return s;
}

static void test_data_shape_must_match_input(void) {
  /* [n,4,5] into a [20]-input Dense model: refused, though 20 values each */
  CHECK(fit_shape(st_shape1(20), false, 3, (int64_t[]){8, 4, 5}) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "fit: dataset features (None, 4, 5) do not fit model input "
                                    "(None, 20): same size, other shape: reshape") != NULL,
            "%s", st_last_error());
  CHECK_OK(fit_shape(st_shape1(20), false, 2, (int64_t[]){8, 20}));
  /* channels first into a channels_last conv model: refused, named */
  CHECK(fit_shape(st_shape3(8, 8, 1), true, 4, (int64_t[]){8, 1, 8, 8}) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "(None, 1, 8, 8) do not fit model input (None, 8, 8, 1): "
                                    "the data looks channels_first") != NULL &&
                strstr(st_last_error(), "channels_last") != NULL,
            "%s", st_last_error());
  CHECK(fit_shape(st_shape3(8, 8, 1), true, 4, (int64_t[]){8, 4, 16, 1}) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "channels_last") != NULL, "%s", st_last_error());
  /* the legitimate cases: the same shape, and images without their channel */
  CHECK_OK(fit_shape(st_shape3(8, 8, 1), true, 4, (int64_t[]){8, 8, 8, 1}));
  CHECK_OK(fit_shape(st_shape3(8, 8, 1), true, 3, (int64_t[]){8, 8, 8}));
  CHECK_OK(fit_shape(st_shape3(8, 8, 1), false, 3, (int64_t[]){8, 8, 8})); /* Flatten first */
}

/* ---- recompile ---- */

/* Dense 16 relu -> Dense C on `replicas` mirrored replicas (0: one device),
 * Adam 0.01, 2 epochs; then recompiled with SGD at `lr2` and 1 more epoch.
 * The weights after the first fit and at the end into a, b (n floats). */
static void fit_recompile_fit(int replicas, float lr2, float *a, float *b, size_t n) {
  st_strategy *st = NULL;
  st_strategy_options so = st_strategy_default_options(replicas ? ST_STRATEGY_MIRRORED
                                                                : ST_STRATEGY_ONE_DEVICE);
  so.replicas = replicas;
  CHECK_OK(st_strategy_create(&so, &st));
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 9;
  mo.strategy = st;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(16, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(C, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer.lr = st_schedule_constant(0.01f);
  CHECK_OK(st_model_compile(m, &co));
  CHECK_EQ(st_model_param_count(m, false), n);
  st_dataset *train = dataset(32);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 2;
  st_history h;
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  st_history_destroy(&h);
  CHECK_OK(st_model_get_weights(m, a));
  co.optimizer = st_optimizer_default_options(ST_OPT_SGD);
  co.optimizer.lr = st_schedule_constant(lr2);
  CHECK_OK(st_model_compile(m, &co)); /* recompile: keeps the weights */
  float *w = malloc(n * sizeof *w);
  CHECK_OK(st_model_get_weights(m, w));
  CHECK(memcmp(w, a, n * sizeof *w) == 0);
  free(w);
  fo.epochs = 1;
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  CHECK_EQ(h.epochs, 1);
  CHECK_NEAR(h.logs[0].lr, lr2, 1e-9);
  st_history_destroy(&h);
  CHECK_OK(st_model_get_weights(m, b));
  st_dataset_destroy(train);
  st_model_destroy(m);
  st_strategy_destroy(st);
}

static void test_recompile_keeps_weights(void) {
  make_data();
  enum { P = D * 16 + 16 + 16 * C + C };
  float a[P], b[P], c[P], d[P];
  fit_recompile_fit(0, 1e-3f, a, b, P);
  CHECK(memcmp(a, b, sizeof a) != 0); /* the new optimizer trained */
  /* the new optimizer's learning rate is the one used: a tiny rate barely moves */
  fit_recompile_fit(0, 1e-9f, c, d, P);
  CHECK(memcmp(a, c, sizeof a) == 0);
  double moved = 0, tiny = 0;
  for (int i = 0; i < P; i++) moved += fabs(b[i] - a[i]), tiny += fabs(d[i] - c[i]);
  CHECK_GT(moved, 1000 * tiny);
  /* mirrored (replicas re-attached to the new optimizer) */
  fit_recompile_fit(2, 1e-3f, c, d, P);
  CHECK(memcmp(c, d, sizeof c) != 0);
}

/* ---- load_weights before compile ---- */

static st_model *uncompiled(uint64_t seed) {
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = seed;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(16, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(C, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  return m;
}

static void test_load_weights_before_compile(void) {
  enum { P = D * 16 + 16 + 16 * C + C };
  const char *path = "/tmp/strata_test_keras_semantics.safetensors";
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  st_model *a = uncompiled(1), *b = uncompiled(2);
  CHECK_OK(st_model_compile(a, &co));
  CHECK_OK(st_model_save_weights(a, path));
  CHECK(st_model_load_weights(b, "/nonexistent/w.safetensors") != ST_OK);
  CHECK_OK(st_model_load_weights(b, path)); /* not compiled yet */
  CHECK_OK(st_model_compile(b, &co));
  float wa[P], wb[P];
  CHECK_OK(st_model_get_weights(a, wa));
  CHECK_OK(st_model_get_weights(b, wb));
  CHECK(memcmp(wa, wb, sizeof wa) == 0); /* b starts from a's weights, not seed 2's */
  /* a file that does not fit the model is refused before compile too */
  st_model *c = NULL;
  st_model_options mo = st_model_default_options(st_shape1(D));
  CHECK_OK(st_sequential_create(&mo, &c));
  st_layer *l = NULL;
  CHECK_OK(st_dense(5, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(c, l));
  CHECK(st_model_load_weights(c, path) == ST_ERR_FORMAT);
  st_model_destroy(c); /* uncompiled, nothing pending */
  st_model *d = uncompiled(3);
  CHECK_OK(st_model_load_weights(d, path));
  st_model_destroy(d); /* loaded but never compiled: no leak */
  st_model_destroy(a);
  st_model_destroy(b);
  remove(path);
}

int main(int argc, char **argv) {
  static const check_case cases[] = {
      CHECK_CASE(test_default_loss_is_keras),
      CHECK_CASE(test_softmax_defaults_train_as_logits),
      CHECK_CASE(test_softmax_with_logits_loss_warns_once),
      CHECK_CASE(test_linear_with_probability_loss_warns_once),
      CHECK_CASE(test_log_callback),
      CHECK_CASE(test_bad_label_named_by_source_row),
      CHECK_CASE(test_bad_label_after_map),
      CHECK_CASE(test_val_monitor_without_validation),
      CHECK_CASE(test_data_shape_must_match_input),
      CHECK_CASE(test_recompile_keeps_weights),
      CHECK_CASE(test_load_weights_before_compile),
  };
  return CHECK_MAIN(argc, argv, cases);
}
