/* Keras's semantics where a newcomer relies on them, through the public API on
 * a small synthetic classification problem: the default loss is sparse CE on
 * probabilities (Keras's from_logits=False), so a softmax model compiled with
 * the defaults trains as well as a linear-output model with the from-logits
 * loss; a softmax output meeting a from-logits loss logs exactly one warning
 * per compile through the log callback (st_log_set_callback), and the
 * callback receives what st_log would have written to stderr. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "strata/strata.h"

enum { N = 600, D = 4, C = 3 };
static float X[N * D], Y[N];

/* y = argmax(W x) for a fixed random W. */
static void make_data(void) {
  st_rng r = st_rng_make(11, 0);
  float w[C * D];
  for (int i = 0; i < C * D; i++) w[i] = st_rng_normal(&r);
  for (int n = 0; n < N; n++) {
    for (int d = 0; d < D; d++) X[n * D + d] = st_rng_normal(&r);
    int best = 0;
    float bv = -1e30f;
    for (int c = 0; c < C; c++) {
      float s = 0;
      for (int d = 0; d < D; d++) s += w[c * D + d] * X[n * D + d];
      if (s > bv) bv = s, best = c;
    }
    Y[n] = (float)best;
  }
}

static st_dataset *dataset(int batch) {
  st_tensor x = {ST_F32, 2, {N, D}, X}, t = {ST_F32, 1, {N}, Y};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&x, &t, 1.0f, false, &ds) != ST_OK) return NULL;
  (void)st_dataset_batch(ds, batch, false, &ds); /* NULL on failure */
  return ds;
}

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

int main(int argc, char **argv) {
  static const check_case cases[] = {
      CHECK_CASE(test_default_loss_is_keras),
      CHECK_CASE(test_softmax_defaults_train_as_logits),
      CHECK_CASE(test_softmax_with_logits_loss_warns_once),
      CHECK_CASE(test_linear_with_probability_loss_warns_once),
      CHECK_CASE(test_log_callback),
  };
  return CHECK_MAIN(argc, argv, cases);
}
