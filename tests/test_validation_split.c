/* st_fit_options.validation_split (Keras's): fit holds out the last fraction
 * of the rows, before shuffling, and trains on the pipeline rebuilt over the
 * rest. Checked against the pipelines a user would build by hand with
 * take/skip (same weights bytes, same validation logs) under one_device and
 * mirrored x2, through a map, and for every refusal. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "strata/strata.h"

enum { N = 203, D = 5, C = 3, BATCH = 32, EPOCHS = 3 };
static float X[N * D], Y[N];
/* Keras's rounding: floor(203 * 0.75) = 152 training rows, 51 held out. */
static const double SPLIT = 0.25;
enum { N_TRAIN = 152 };

static st_status add_half(void *user, float *x, size_t xs, float *y, size_t ys) {
  (void)user, (void)y, (void)ys;
  for (size_t i = 0; i < xs; i++) x[i] += 0.5f;
  return ST_OK;
}

/* Rows [skip, skip + take) of X/Y (take -1: all), mapped when asked,
 * shuffled when asked (seed 5), batched. */
static st_dataset *pipeline(int64_t skip, int64_t take, bool map, bool shuffle) {
  st_tensor x = {ST_F32, 2, {N, D}, X}, y = {ST_F32, 1, {N}, Y};
  st_dataset *ds = NULL;
  st_status s = st_dataset_from_tensor_slices(&x, &y, 1.0f, false, &ds);
  if (s == ST_OK && skip) s = st_dataset_skip(ds, skip, &ds);
  if (s == ST_OK && take >= 0) s = st_dataset_take(ds, take, &ds);
  if (s == ST_OK && map) s = st_dataset_map(ds, add_half, NULL, &ds);
  if (s == ST_OK && shuffle) s = st_dataset_shuffle(ds, 64, 5, true, &ds);
  if (s == ST_OK) s = st_dataset_batch(ds, BATCH, false, &ds);
  return s == ST_OK ? ds : NULL;
}

/* The strategy of each model made by model(), destroyed with it. */
static st_strategy *strategies[2];
static st_model *models[2];

static st_model *model(st_strategy_kind kind, int replicas) {
  st_strategy_options so = st_strategy_default_options(kind);
  so.replicas = replicas;
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 11;
  st_model *m = NULL;
  CHECK_OK(st_strategy_create(&so, &mo.strategy));
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(16, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(C, ST_ACT_SOFTMAX, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  CHECK_OK(st_model_compile(m, &co));
  int k = models[0] ? 1 : 0;
  models[k] = m;
  strategies[k] = mo.strategy;
  return m;
}

static void destroy_model(st_model *m) {
  int k = models[0] == m ? 0 : 1;
  st_model_destroy(m);
  st_strategy_destroy(strategies[k]);
  models[k] = NULL;
  strategies[k] = NULL;
}

/* The weights file's bytes into *buf (malloc'd), *n its size. */
static void weights_bytes(const st_model *m, const char *path, char **buf, long *n) {
  CHECK_OK(st_model_save_weights(m, path));
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  rewind(f);
  *buf = malloc((size_t)*n);
  CHECK(*buf && fread(*buf, 1, (size_t)*n, f) == (size_t)*n);
  fclose(f);
  unlink(path);
}

/* fit(all rows, validation_split) == fit(take(N_TRAIN), validation =
 * skip(N_TRAIN)): same weights bytes, same logs. */
static void same_as_by_hand(st_strategy_kind kind, int replicas, bool map) {
  fixture_argmax_data(3, N, D, C, X, Y);
  st_model *a = model(kind, replicas), *b = model(kind, replicas);
  st_dataset *all = pipeline(0, -1, map, true);
  st_dataset *tr = pipeline(0, N_TRAIN, map, true), *val = pipeline(N_TRAIN, -1, map, false);
  CHECK(all && tr && val);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = EPOCHS;
  fo.validation_split = SPLIT;
  st_history ha, hb;
  CHECK_OK(st_model_fit(a, all, &fo, &ha));
  fo.validation_split = 0;
  fo.validation = val;
  CHECK_OK(st_model_fit(b, tr, &fo, &hb));
  CHECK_EQ(ha.epochs, EPOCHS);
  for (int e = 0; e < EPOCHS; e++) {
    CHECK(ha.logs[e].has_validation);
    CHECK_EQ(ha.logs[e].examples, (int64_t)N_TRAIN);
    CHECK(ha.logs[e].loss == hb.logs[e].loss);
    CHECK(ha.logs[e].val_loss == hb.logs[e].val_loss);
    CHECK(ha.logs[e].val_accuracy == hb.logs[e].val_accuracy);
  }
  char *wa, *wb;
  long na, nb;
  weights_bytes(a, "vs_a.safetensors", &wa, &na);
  weights_bytes(b, "vs_b.safetensors", &wb, &nb);
  CHECK(na == nb && memcmp(wa, wb, (size_t)na) == 0);
  /* the caller's pipeline is unchanged: still every row, in 7 batches */
  CHECK_EQ(st_dataset_cardinality(all), (int64_t)7);
  st_history_destroy(&ha);
  st_history_destroy(&hb);
  free(wa);
  free(wb);
  st_dataset_destroy(all);
  st_dataset_destroy(tr);
  st_dataset_destroy(val);
  destroy_model(a);
  destroy_model(b);
}

static void test_one_device(void) { same_as_by_hand(ST_STRATEGY_ONE_DEVICE, 1, false); }
static void test_mirrored(void) { same_as_by_hand(ST_STRATEGY_MIRRORED, 2, false); }
static void test_through_map(void) { same_as_by_hand(ST_STRATEGY_ONE_DEVICE, 1, true); }

static void expect_refusal(st_model *m, st_dataset *ds, double split, const char *part) {
  st_fit_options fo = st_fit_default_options();
  fo.validation_split = split;
  st_history h;
  CHECK(st_model_fit(m, ds, &fo, &h) == ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), part) != NULL);
  CHECK_EQ(h.epochs, 0);
}

static void test_refusals(void) {
  fixture_argmax_data(3, N, D, C, X, Y);
  st_model *m = model(ST_STRATEGY_ONE_DEVICE, 1);
  st_dataset *ds = pipeline(0, -1, false, true);
  CHECK(ds != NULL);
  expect_refusal(m, ds, 1.0, "validation_split 1 must be in (0, 1)");
  expect_refusal(m, ds, -0.2, "validation_split -0.2 must be in (0, 1)");
  expect_refusal(m, ds, NAN, "must be in (0, 1)");
  expect_refusal(m, ds, 1e-18, "leaves 203 for training and 0 for validation");
  st_dataset_destroy(ds);
  ds = pipeline(0, 1, false, false); /* one row: nothing to split */
  expect_refusal(m, ds, 0.5, "validation_split 0.5 of 1 examples leaves 0 for training");
  st_dataset_destroy(ds);
  ds = pipeline(0, -1, false, false);
  CHECK_OK(st_dataset_repeat(ds, 2, &ds));
  expect_refusal(m, ds, 0.25, "cannot split a pipeline with repeat");
  st_dataset_destroy(ds);
  destroy_model(m);
}

static int warnings;
static void count_warning(st_log_level level, const char *msg, void *user) {
  (void)user;
  warnings += level == ST_LOG_WARN && strstr(msg, "using validation (as Keras)") != NULL;
}

/* validation given too: it is used, with one warning (Keras ignores the split). */
static void test_validation_wins(void) {
  fixture_argmax_data(3, N, D, C, X, Y);
  st_model *m = model(ST_STRATEGY_ONE_DEVICE, 1);
  st_dataset *ds = pipeline(0, -1, false, true), *val = pipeline(0, 10, false, false);
  st_fit_options fo = st_fit_default_options();
  fo.validation_split = 0.5;
  fo.validation = val;
  st_history h;
  warnings = 0;
  st_log_set_callback(count_warning, NULL);
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_log_set_callback(NULL, NULL);
  CHECK_EQ(warnings, 1);
  CHECK_EQ(h.logs[0].examples, (int64_t)N); /* no row held out */
  st_eval_result r;
  CHECK_OK(st_model_evaluate(m, val, &r));
  CHECK(r.loss == h.logs[0].val_loss);
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_dataset_destroy(val);
  destroy_model(m);
}

int main(int argc, char **argv) {
  static const check_case cases[] = {
      CHECK_CASE(test_one_device),   CHECK_CASE(test_mirrored),
      CHECK_CASE(test_through_map),  CHECK_CASE(test_refusals),
      CHECK_CASE(test_validation_wins),
  };
  return CHECK_MAIN(argc, argv, cases);
}
