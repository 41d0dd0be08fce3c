/* st_fit_options.validation_freq / validation_epochs and class_weight through
 * the public API: validation runs on the epochs Keras's _should_eval picks
 * (val_* only there; EarlyStopping on val_loss skips the other epochs), and
 * one SGD step with class weights moves a Dense layer's weights as a plain
 * double-precision reference of Keras's weighted SUM_OVER_BATCH_SIZE loss
 * does, with the reported loss sum(w_i * l_i) / n and accuracy unweighted;
 * mirrored x2 gives the one-device step; sample weights carried as the
 * labels' last value give the same step, shuffled and mirrored; bad options,
 * a label without a weight and a non-finite weight are errors naming them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixtures.h"
#include "strata/strata.h"

enum { N = 48, D = 4, C = 3 };
static float X[N * D], Y[N];

static st_dataset *dataset(int batch) { return fixture_dataset(X, Y, N, D, batch); }

/* Dense C logits (hidden layer when `hidden`), SGD at 0.5, under strategy s. */
static st_model *model(bool hidden, st_strategy *s) {
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 5;
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  if (hidden) {
    CHECK_OK(st_dense(8, ST_ACT_RELU, &l));
    CHECK_OK(st_model_add(m, l));
  }
  CHECK_OK(st_dense(C, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = st_optimizer_default_options(ST_OPT_SGD);
  co.optimizer.lr = st_schedule_constant(0.5f);
  CHECK_OK(st_model_compile(m, &co));
  return m;
}

/* Which epochs (0-based) got validation in a 6-epoch fit with these options. */
static unsigned validated(int freq, const int *list, int nlist, bool early_stopping) {
  st_model *m = model(true, NULL);
  st_dataset *tr = dataset(16), *va = dataset(16);
  st_callback cb = {0};
  st_early_stopping_options eo = st_early_stopping_default_options();
  eo.patience = 100;
  if (early_stopping) CHECK_OK(st_early_stopping_create(eo, &cb));
  st_fit_options o = st_fit_default_options();
  o.epochs = 6;
  o.validation = va;
  o.validation_freq = freq;
  o.validation_epochs = list;
  o.nvalidation_epochs = nlist;
  o.callbacks = &cb;
  o.ncallbacks = early_stopping ? 1 : 0;
  st_history h;
  CHECK_OK(st_model_fit(m, tr, &o, &h));
  CHECK_EQ(h.epochs, 6);
  unsigned mask = 0;
  for (int e = 0; e < h.epochs; e++)
    if (h.logs[e].has_validation) {
      mask |= 1u << e;
      CHECK(h.logs[e].val_loss > 0.0);
    }
  st_history_destroy(&h);
  st_callback_destroy(&cb);
  st_dataset_destroy(tr);
  st_dataset_destroy(va);
  st_model_destroy(m);
  return mask;
}

static void test_validation_freq(void) {
  CHECK_EQ(validated(1, NULL, 0, false), 0x3fu);
  CHECK_EQ(validated(0, NULL, 0, false), 0x3fu);      /* 0 = every epoch */
  CHECK_EQ(validated(2, NULL, 0, false), 0x2au);      /* epochs 2, 4, 6 */
  CHECK_EQ(validated(4, NULL, 0, false), 0x08u);      /* epoch 4 */
  static const int list[] = {1, 5, 9};
  CHECK_EQ(validated(3, list, 3, false), 0x11u);      /* the list wins: epochs 1, 5 */
  CHECK_EQ(validated(2, NULL, 0, true), 0x2au);       /* EarlyStopping skips the others */
}

/* One full-batch SGD step with class weights cw, as a double reference:
 * z = x W + b, dz_i = cw[y_i] (softmax(z_i) - onehot(y_i)) / N. */
static void reference_step(const float *w0, const float *cw, float lr, double *w1,
                           double *loss, double *acc) {
  const float *W = w0, *b = w0 + D * C;
  double dW[D * C] = {0}, db[C] = {0};
  *loss = *acc = 0;
  for (int i = 0; i < N; i++) {
    double z[C], mx = -1e300, sum = 0;
    int best = 0;
    for (int c = 0; c < C; c++) {
      z[c] = b[c];
      for (int j = 0; j < D; j++) z[c] += (double)X[i * D + j] * W[j * C + c];
      if (z[c] > mx) mx = z[c], best = c;
    }
    for (int c = 0; c < C; c++) sum += exp(z[c] - mx);
    int y = (int)Y[i];
    double wi = cw[y];
    *loss += wi * -(z[y] - mx - log(sum));
    *acc += best == y;
    for (int c = 0; c < C; c++) {
      double dz = wi * (exp(z[c] - mx) / sum - (c == y)) / N;
      db[c] += dz;
      for (int j = 0; j < D; j++) dW[j * C + c] += X[i * D + j] * dz;
    }
  }
  *loss /= N;
  *acc /= N;
  for (int k = 0; k < D * C; k++) w1[k] = W[k] - lr * dW[k];
  for (int c = 0; c < C; c++) w1[D * C + c] = b[c] - lr * db[c];
}

/* One step of fit with class weights cw under strategy s; the weights after. */
static void step(st_strategy *s, const float *cw, int ncw, float *w0, float *w1, st_history *h) {
  st_model *m = model(false, s);
  CHECK_EQ(st_model_weights_size(m), (size_t)(D * C + C));
  CHECK_OK(st_model_get_weights(m, w0));
  st_dataset *tr = dataset(N);
  st_fit_options o = st_fit_default_options();
  o.class_weight = cw;
  o.nclass_weight = ncw;
  CHECK_OK(st_model_fit(m, tr, &o, h));
  CHECK_OK(st_model_get_weights(m, w1));
  st_dataset_destroy(tr);
  st_model_destroy(m);
}

static void test_class_weight_step(void) {
  static const float cw[C] = {0.25f, 3.0f, 1.5f};
  float w0[D * C + C], w1[D * C + C], u1[D * C + C];
  double ref[D * C + C], loss, acc;
  st_history h, hu;
  step(NULL, cw, C, w0, w1, &h);
  reference_step(w0, cw, 0.5f, ref, &loss, &acc);
  double worst = 0;
  for (int k = 0; k < D * C + C; k++) worst = fmax(worst, fabs(w1[k] - ref[k]));
  CHECK_LT(worst, 2e-6); /* float arithmetic against the double reference */
  CHECK_LT(fabs(h.logs[0].loss - loss), 1e-5 * loss);
  CHECK_LT(fabs(h.logs[0].accuracy - acc), 1e-12); /* unweighted, as Keras's metrics= */
  /* the weights change the step: without them it differs by far more */
  static const float ones[C] = {1, 1, 1};
  step(NULL, NULL, 0, w0, u1, &hu);
  double moved = 0;
  for (int k = 0; k < D * C + C; k++) moved = fmax(moved, fabs(u1[k] - ref[k]));
  CHECK_GT(moved, 1e-3);
  float o1[D * C + C];
  st_history ho;
  step(NULL, ones, C, w0, o1, &ho); /* all ones: the unweighted bytes */
  CHECK_EQ(memcmp(o1, u1, sizeof o1), 0);
  /* mirrored x2: each replica weights its own half of the batch */
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.devices = "cpu:0,cpu:1";
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  float m1[D * C + C];
  st_history hm;
  step(s, cw, C, w0, m1, &hm);
  worst = 0;
  for (int k = 0; k < D * C + C; k++) worst = fmax(worst, fabs(m1[k] - ref[k]));
  CHECK_LT(worst, 2e-6);
  CHECK_LT(fabs(hm.logs[0].loss - loss), 1e-5 * loss);
  st_strategy_destroy(s);
  st_history_destroy(&h);
  st_history_destroy(&hu);
  st_history_destroy(&ho);
  st_history_destroy(&hm);
}

/* Dense C logits trained one step on labels [N, 2] = (class, weight):
 * sample_weight_column under strategy s, shuffled or not (the weights must
 * follow the examples); the weights after into w1, the loss into *loss. */
static void sw_step(st_strategy *s, const float *sw, bool shuffle, float *w0, float *w1,
                    double *loss) {
  static float yw[N * 2];
  for (int i = 0; i < N; i++) yw[2 * i] = Y[i], yw[2 * i + 1] = sw[i];
  st_model *m = model(false, s);
  CHECK_OK(st_model_get_weights(m, w0));
  st_tensor xt = {ST_F32, 2, {N, D}, X}, yt = {ST_F32, 2, {N, 2}, yw};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&xt, &yt, 1.0f, false, &ds));
  if (shuffle) CHECK_OK(st_dataset_shuffle(ds, N, 9, true, &ds));
  CHECK_OK(st_dataset_batch(ds, N, false, &ds));
  st_fit_options o = st_fit_default_options();
  o.sample_weight_column = true;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &o, &h));
  CHECK_OK(st_model_get_weights(m, w1));
  *loss = h.epochs ? h.logs[0].loss : -1;
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
}

/* Per-example weights equal to the class weights give class_weight's step
 * (same reference), shuffled too (one full batch: the same sum, reordered)
 * and under mirrored x2 (each replica weights its own half). */
static void test_sample_weight_step(void) {
  static const float cw[C] = {0.25f, 3.0f, 1.5f};
  float sw[N], w0[D * C + C], w1[D * C + C];
  for (int i = 0; i < N; i++) sw[i] = cw[(int)Y[i]];
  double ref[D * C + C], loss, acc, got;
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.devices = "cpu:0,cpu:1";
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  for (int v = 0; v < 3; v++) {
    sw_step(v == 2 ? s : NULL, sw, v >= 1, w0, w1, &got);
    reference_step(w0, cw, 0.5f, ref, &loss, &acc);
    double worst = 0;
    for (int k = 0; k < D * C + C; k++) worst = fmax(worst, fabs(w1[k] - ref[k]));
    CHECK_LT(worst, 2e-6);
    CHECK_LT(fabs(got - loss), 1e-5 * loss);
  }
  st_strategy_destroy(s);
  /* a non-finite weight names its example */
  sw[5] = NAN;
  static float yw[N * 2];
  for (int i = 0; i < N; i++) yw[2 * i] = Y[i], yw[2 * i + 1] = sw[i];
  st_model *m = model(false, NULL);
  st_tensor xt = {ST_F32, 2, {N, D}, X}, yt = {ST_F32, 2, {N, 2}, yw};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&xt, &yt, 1.0f, false, &ds));
  CHECK_OK(st_dataset_batch(ds, 16, false, &ds));
  st_fit_options o = st_fit_default_options();
  o.sample_weight_column = true;
  st_history h;
  CHECK_EQ(st_model_fit(m, ds, &o, &h), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "sample_weight: example 5 has weight nan"));
  st_history_destroy(&h);
  o.sample_weight_column = false; /* labels of 2 values for a sparse loss */
  CHECK_EQ(st_model_fit(m, ds, &o, &h), ST_ERR_INVALID);
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
}

static st_status fit_with(int freq, const int *list, int nlist, const float *cw, int ncw) {
  st_model *m = model(false, NULL);
  st_dataset *tr = dataset(16);
  st_fit_options o = st_fit_default_options();
  o.validation_freq = freq;
  o.validation_epochs = list;
  o.nvalidation_epochs = nlist;
  o.class_weight = cw;
  o.nclass_weight = ncw;
  st_history h;
  st_status s = st_model_fit(m, tr, &o, &h);
  st_history_destroy(&h);
  st_dataset_destroy(tr);
  st_model_destroy(m);
  return s;
}

static void test_errors(void) {
  static const int zero[] = {0};
  static const float two[] = {1, 1}, nan_w[] = {1, NAN, 1}, ok[] = {1, 1, 1};
  CHECK_EQ(fit_with(-1, NULL, 0, NULL, 0), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "validation_freq -1"));
  CHECK_EQ(fit_with(1, zero, 1, NULL, 0), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "validation_epochs[0] = 0"));
  CHECK_EQ(fit_with(1, NULL, 2, NULL, 0), ST_ERR_INVALID);
  CHECK_EQ(fit_with(1, NULL, 0, NULL, 3), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "class_weight is NULL"));
  CHECK_EQ(fit_with(1, NULL, 0, nan_w, 3), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "class_weight[1]"));
  /* a label of class 2 with weights for classes 0 and 1 only */
  int first2 = -1;
  for (int i = 0; i < N && first2 < 0; i++)
    if (Y[i] == 2.0f) first2 = i;
  CHECK_GE(first2, 0);
  CHECK_EQ(fit_with(1, NULL, 0, two, 2), ST_ERR_INVALID);
  char want[96];
  snprintf(want, sizeof want, "example %d has class 2, which has no weight", first2);
  CHECK(strstr(st_last_error(), want));
  CHECK_OK(fit_with(1, NULL, 0, ok, 3));
}

static const check_case cases[] = {CHECK_CASE(test_validation_freq),
                                   CHECK_CASE(test_class_weight_step),
                                   CHECK_CASE(test_sample_weight_step),
                                   CHECK_CASE(test_errors)};
int main(int argc, char **argv) {
  fixture_argmax_data(11, N, D, C, X, Y);
  return CHECK_MAIN(argc, argv, cases);
}
