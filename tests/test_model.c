/* The model through the public C API on a small synthetic problem: fit lowers
 * the loss, evaluate agrees with predict, save/load round-trips exactly and
 * rejects a mismatched file without touching the model, and the key property
 * of the synchronous engine: splitting each global batch over 1, 2 or 3 worker
 * threads gives the same weights (within float rounding), bit-identical from
 * run to run — also with uneven and empty slices. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "model/model.h"
#include "strata/strata.h"

enum { N = 240, D = 8, C = 10 };
static float X[N * D], Y[N];

/* y = argmax(W x) for a fixed random W (tests/fixtures.h). */
static void make_data(void) { fixture_argmax_data(123, N, D, C, X, Y); }

static st_dataset *dataset(int batch, bool shuffle, const float *y) {
  st_tensor x = {ST_F32, 2, {N, D}, X}, t = {ST_F32, 1, {N}, (void *)y};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&x, &t, 1.0f, false, &ds) != ST_OK) return NULL;
  if (shuffle && st_dataset_shuffle(ds, N, 5, true, &ds) != ST_OK) return NULL;
  (void)st_dataset_batch(ds, batch, false, &ds); /* NULL on failure */
  return ds;
}

/* Dense 16 relu -> Dense 10 (+ optional BatchNorm/Dropout), compiled. */
static st_model *model(int threads, uint64_t seed, int hidden, bool extras) {
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  so.threads = threads;
  st_strategy *s = NULL;
  if (st_strategy_create(&so, &s) != ST_OK) return NULL;
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = seed;
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(hidden, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  if (extras) {
    CHECK_OK(st_batchnorm(&l));
    CHECK_OK(st_model_add(m, l));
    CHECK_OK(st_dropout(0.2f, &l));
    CHECK_OK(st_model_add(m, l));
  }
  CHECK_OK(st_dense(C, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  co.optimizer.lr = st_schedule_constant(0.01f);
  CHECK_OK(st_model_compile(m, &co));
  m->owns_strategy = true; /* destroyed with the model */
  return m;
}

static void test_fit_predict_evaluate(void) {
  st_model *m = model(0, 1, 16, false);
  st_dataset *train = dataset(32, true, Y), *eval = dataset(64, false, Y);
  st_eval_result before, after;
  CHECK_OK(st_model_evaluate(m, eval, &before));
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 15;
  fo.validation = eval;
  st_history h;
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  CHECK(h.epochs == 15);
  CHECK(h.logs[14].loss < h.logs[0].loss);
  CHECK(h.logs[14].has_validation);
  CHECK_OK(st_model_evaluate(m, eval, &after));
  CHECK_MSG(after.loss < 0.6 * before.loss, "loss %g -> %g", before.loss, after.loss);
  CHECK_MSG(after.accuracy > 0.8, "accuracy %g", after.accuracy);
  CHECK(after.examples == N);
  st_tensor pred;
  CHECK_OK(st_model_predict(m, eval, &pred));
  CHECK(pred.rank == 2 && pred.dims[0] == N && pred.dims[1] == C);
  int correct = 0;
  for (int n = 0; n < N; n++) {
    const float *row = (const float *)pred.data + n * C;
    int best = 0;
    for (int c = 1; c < C; c++)
      if (row[c] > row[best]) best = c;
    correct += best == (int)Y[n];
  }
  CHECK_NEAR((double)correct / N, after.accuracy, 1e-12);

  /* save -> load into a differently initialised model: identical outputs */
  char dir[] = "/tmp/strata_model_XXXXXX", path[256], bad[256];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  snprintf(bad, sizeof bad, "%s/other.safetensors", dir);
  CHECK_OK(st_model_save_weights(m, path));
  st_model *m2 = model(1, 99, 16, false);
  CHECK_OK(st_model_load_weights(m2, path));
  st_tensor pred2;
  CHECK_OK(st_model_predict(m2, eval, &pred2));
  CHECK(memcmp(pred.data, pred2.data, sizeof(float) * N * C) == 0);
  /* a file of another architecture is rejected, leaving the model as it was */
  st_model *other = model(1, 3, 17, false);
  CHECK_OK(st_model_save_weights(other, bad));
  st_status s = st_model_load_weights(m2, bad);
  CHECK(s == ST_ERR_FORMAT && strstr(st_last_error(), "dense/kernel"));
  st_tensor pred3;
  CHECK_OK(st_model_predict(m2, eval, &pred3));
  CHECK(memcmp(pred.data, pred3.data, sizeof(float) * N * C) == 0);
  unlink(path);
  unlink(bad);
  rmdir(dir);
  st_tensor_destroy(&pred);
  st_tensor_destroy(&pred2);
  st_tensor_destroy(&pred3);
  st_history_destroy(&h);
  st_model_destroy(m);
  st_model_destroy(m2);
  st_model_destroy(other);
  st_dataset_destroy(train);
  st_dataset_destroy(eval);
}

/* Train `epochs` over batches of `batch` with `threads` workers; return a
 * malloc'd copy of the weights. */
static float *train_weights(int threads, int batch, int epochs, size_t *n) {
  st_model *m = model(threads, 7, 16, false);
  st_dataset *ds = dataset(batch, true, Y);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = epochs;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  *n = m->net.n_params;
  float *w = malloc(*n * sizeof(float));
  memcpy(w, m->net.params, *n * sizeof(float));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  return w;
}

static void test_split_equivalence(void) {
  /* batch 64 over 240 examples: 4 steps/epoch incl. a short last batch of 48;
   * 5 epochs = 20 Adam steps. */
  size_t n1, n2, n3, n2b;
  float *w1 = train_weights(1, 64, 5, &n1), *w2 = train_weights(2, 64, 5, &n2);
  float *w3 = train_weights(3, 64, 5, &n3), *w2b = train_weights(2, 64, 5, &n2b);
  CHECK(n1 == n2 && n1 == n3 && n1 == n2b);
  double d2 = check_rel_diff(w1, w2, n1), d3 = check_rel_diff(w1, w3, n1);
  fprintf(stderr, "1 vs 2 workers: %.3g, 1 vs 3 workers: %.3g (max relative)\n", d2, d3);
  CHECK(d2 <= 1e-5 && d3 <= 1e-5);
  CHECK_MSG(memcmp(w2, w2b, n1 * sizeof(float)) == 0, "repeat run not bit-identical");
  free(w1), free(w2), free(w3), free(w2b);
  /* batch 7 over 3 workers (slices 2,2,3; last batch 240%7=2 gives an empty
   * slice) and batch 1 over 2 workers (always one empty slice) */
  float *a = train_weights(1, 7, 1, &n1), *b = train_weights(3, 7, 1, &n2);
  CHECK(check_rel_diff(a, b, n1) <= 1e-5);
  free(a), free(b);
  a = train_weights(1, 1, 1, &n1), b = train_weights(2, 1, 1, &n2);
  CHECK(check_rel_diff(a, b, n1) <= 1e-5);
  free(a), free(b);
}

static void test_state_and_errors(void) {
  /* BatchNorm + Dropout: trains, moving statistics move */
  st_model *m = model(0, 2, 16, true);
  CHECK(m->net.n_state == 32);
  float before[32];
  memcpy(before, m->net.state, sizeof before);
  st_dataset *ds = dataset(32, true, Y);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 3;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  CHECK(h.logs[2].loss < h.logs[0].loss);
  CHECK(memcmp(before, m->net.state, sizeof before) != 0);
  st_history_destroy(&h);
  char *text = NULL;
  CHECK_OK(st_model_summary(m, &text));
  CHECK(text && strstr(text, "batch_normalization (BatchNormalization)") &&
        strstr(text, "Non-trainable params: 32"));
  free(text);
  /* labels out of range for the model: rejected before any kernel runs */
  static float ybad[N];
  memcpy(ybad, Y, sizeof ybad);
  ybad[N - 1] = 10;
  st_dataset *bad = dataset(32, false, ybad);
  st_status s = st_model_fit(m, bad, &fo, &h);
  CHECK(s == ST_ERR_INVALID && strstr(st_last_error(), "label 10 at row 239 of the training "
                                                       "data is out of range [0, 10)"));
  st_history_destroy(&h);
  st_dataset_destroy(bad);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  /* a layer that cannot take the previous output names itself */
  st_model *cm = NULL;
  st_model_options mo = st_model_default_options(st_shape1(D));
  CHECK_OK(st_sequential_create(&mo, &cm));
  st_layer *conv = NULL;
  CHECK_OK(st_conv2d(4, 3, ST_ACT_RELU, &conv));
  s = st_model_add(cm, conv);
  CHECK(s == ST_ERR_INVALID && strstr(st_last_error(), "conv2d"));
  st_compile_options co = st_compile_default_options();
  CHECK(st_model_compile(cm, &co) == ST_ERR_INVALID); /* no layers */
  st_model_destroy(cm);
}

static const check_case cases[] = {CHECK_CASE(test_fit_predict_evaluate),
                                   CHECK_CASE(test_split_equivalence),
                                   CHECK_CASE(test_state_and_errors)};

int main(int argc, char **argv) {
  make_data();
  return CHECK_MAIN(argc, argv, cases);
}
