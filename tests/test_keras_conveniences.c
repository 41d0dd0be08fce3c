/* Keras conveniences of the C API: predict on a dataset without labels
 * (st_dataset_from_tensor_slices with y NULL) gives the predictions a
 * labelled dataset gives, for one_device and mirrored with 2 replicas, while
 * fit and evaluate refuse it; st_strategy_reduce_tensor reduces a tensor kept
 * per replica elementwise, in replica order, as a hand sum does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "strata/strata.h"

enum { N = 203, D = 4, C = 3 };
static float X[N * D], Y[N];

static void make_data(void) {
  st_rng r = st_rng_make(7, 0);
  for (int i = 0; i < N * D; i++) X[i] = st_rng_normal(&r);
  for (int n = 0; n < N; n++) Y[n] = (float)(n % C);
}

/* Batched dataset over X (and Y when labelled). */
static st_dataset *dataset(bool labelled, int batch) {
  st_tensor x = {ST_F32, 2, {N, D}, X}, t = {ST_F32, 1, {N}, Y};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&x, labelled ? &t : NULL, 1.0f, false, &ds) != ST_OK)
    return NULL;
  (void)st_dataset_batch(ds, batch, false, &ds);
  return ds;
}

/* Dense 8 relu -> Dense C softmax on strategy st (NULL: the default). */
static st_model *model(st_strategy *st) {
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 3;
  mo.strategy = st;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(8, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(C, ST_ACT_SOFTMAX, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  CHECK_OK(st_model_compile(m, &co));
  return m;
}

static void predict_both_ways(st_strategy_kind kind, int replicas) {
  make_data();
  st_strategy_options so = st_strategy_default_options(kind);
  so.replicas = replicas;
  st_strategy *st = NULL;
  CHECK_OK(st_strategy_create(&so, &st));
  st_model *m = model(st);
  st_dataset *with = dataset(true, 32), *without = dataset(false, 32);
  CHECK(with && without);
  CHECK_EQ(st_dataset_y_size(without), (size_t)0);
  st_tensor a = {0}, b = {0};
  CHECK_OK(st_model_predict(m, with, &a));
  CHECK_OK(st_model_predict(m, without, &b));
  CHECK_EQ(b.dims[0], (int64_t)N);
  CHECK_EQ(b.dims[1], (int64_t)C);
  CHECK(a.data && b.data && memcmp(a.data, b.data, (size_t)N * C * sizeof(float)) == 0);
  /* the predictions are the model's (rows are probabilities) */
  const float *p = b.data;
  CHECK_NEAR(p[0] + p[1] + p[2], 1.0, 1e-5);
  st_tensor_destroy(&a);
  st_tensor_destroy(&b);
  /* fit and evaluate need labels */
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK(st_model_fit(m, without, &fo, &h) == ST_ERR_INVALID);
  CHECK_STREQ(st_last_error(), "st_model_fit: the dataset has no labels");
  fo.validation = without;
  CHECK(st_model_fit(m, with, &fo, &h) == ST_ERR_INVALID);
  CHECK_STREQ(st_last_error(), "st_model_fit: the validation dataset has no labels");
  st_eval_result r;
  CHECK(st_model_evaluate(m, without, &r) == ST_ERR_INVALID);
  CHECK_STREQ(st_last_error(), "st_model_evaluate: the dataset has no labels");
  st_dataset_destroy(with);
  st_dataset_destroy(without);
  st_model_destroy(m);
  st_strategy_destroy(st);
}

static void test_predict_without_labels_one_device(void) {
  predict_both_ways(ST_STRATEGY_ONE_DEVICE, 0);
}

static void test_predict_without_labels_mirrored(void) {
  predict_both_ways(ST_STRATEGY_MIRRORED, 2);
}

/* Shuffled, prefetched and mapped pipelines without labels iterate too. */
static st_status add_one(void *user, float *x, size_t xs, float *y, size_t ys) {
  (void)user, (void)y;
  CHECK_EQ(ys, (size_t)0);
  for (size_t i = 0; i < xs; i++) x[i] += 1.0f;
  return ST_OK;
}

static void test_unlabelled_pipeline(void) {
  make_data();
  st_tensor x = {ST_F32, 2, {N, D}, X};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, NULL, 1.0f, true, &ds));
  CHECK_OK(st_dataset_shuffle(ds, N, 1, true, &ds));
  CHECK_OK(st_dataset_map(ds, add_one, NULL, &ds));
  CHECK_OK(st_dataset_batch(ds, 10, false, &ds));
  CHECK_OK(st_dataset_prefetch(ds, 2, &ds));
  st_iterator *it = NULL;
  CHECK_OK(st_dataset_iterate(ds, &it));
  double sum = 0, want = 0;
  int64_t rows = 0;
  for (int i = 0; i < N * D; i++) want += X[i] + 1.0f;
  for (bool end = false;;) {
    st_batch b;
    CHECK_OK(st_iterator_next(it, &b, &end));
    if (end) break;
    rows += b.size;
    for (int i = 0; i < b.size * D; i++) sum += b.x[i];
  }
  CHECK_EQ(rows, (int64_t)N);
  CHECK_NEAR(sum, want, 1e-3);
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
}

/* ---- st_strategy_reduce_tensor ---- */

static void test_reduce_tensor(void) {
  enum { R = 3, K = 5 };
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.replicas = R;
  st_strategy *st = NULL;
  CHECK_OK(st_strategy_create(&so, &st));
  CHECK_EQ(st_strategy_num_replicas_in_sync(st), R);
  float t[R][K], sum[K], mean[K], hand[K];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < K; j++) t[r][j] = 0.1f * (float)(r * 7 + j) - (float)r;
  const float *per[R] = {t[0], t[1], t[2]};
  CHECK_OK(st_strategy_reduce_tensor(st, ST_REDUCE_SUM, per, K, sum));
  CHECK_OK(st_strategy_reduce_tensor(st, ST_REDUCE_MEAN, per, K, mean));
  for (int j = 0; j < K; j++) {
    hand[j] = (t[0][j] + t[1][j]) + t[2][j]; /* replica order */
    CHECK(sum[j] == hand[j]);
    CHECK(mean[j] == hand[j] * (1.0f / R));
  }
  /* the same as st_strategy_reduce over the packed layout */
  float packed[R * K], flat[K];
  memcpy(packed, t, sizeof packed);
  CHECK_OK(st_strategy_reduce(st, ST_REDUCE_SUM, packed, K, flat));
  CHECK(memcmp(flat, sum, sizeof sum) == 0);
  /* in place into replica 0's buffer */
  CHECK_OK(st_strategy_reduce_tensor(st, ST_REDUCE_SUM, per, K, t[0]));
  CHECK(memcmp(t[0], sum, sizeof sum) == 0);
  /* misuse */
  CHECK(st_strategy_reduce_tensor(NULL, ST_REDUCE_SUM, per, K, sum) == ST_ERR_INVALID);
  CHECK(st_strategy_reduce_tensor(st, ST_REDUCE_COUNT, per, K, sum) == ST_ERR_INVALID);
  CHECK(st_strategy_reduce_tensor(st, ST_REDUCE_SUM, NULL, K, sum) == ST_ERR_INVALID);
  CHECK(st_strategy_reduce_tensor(st, ST_REDUCE_SUM, per, K, NULL) == ST_ERR_INVALID);
  const float *holed[R] = {t[0], NULL, t[2]};
  CHECK(st_strategy_reduce_tensor(st, ST_REDUCE_SUM, holed, K, sum) == ST_ERR_INVALID);
  CHECK_STREQ(st_last_error(), "st_strategy_reduce_tensor: per_replica[1] is NULL (n = 5)");
  CHECK_OK(st_strategy_reduce_tensor(st, ST_REDUCE_SUM, NULL, 0, NULL));
  st_strategy_destroy(st);
}

int main(int argc, char **argv) {
  static const check_case cases[] = {
      CHECK_CASE(test_predict_without_labels_one_device),
      CHECK_CASE(test_predict_without_labels_mirrored),
      CHECK_CASE(test_unlabelled_pipeline),
      CHECK_CASE(test_reduce_tensor),
  };
  return CHECK_MAIN(argc, argv, cases);
}
