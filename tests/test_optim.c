/* Tests of optimizers (SGD plain / momentum / Nesterov, Adam, AdamW, RMSprop
 * with and without momentum) against hand-computed Keras updates through the
 * reference backend, of learning-rate schedules, of accuracy metrics, and of the
 * activation / loss / optimizer name tables. */
#include <string.h>

#include "check.h"
#include "strata/nn.h"

#define N 3
static const double k_p0[N] = {1.0, -2.0, 0.5};
/* gradient of element i at step t (varies with both) */
static double grad_at(int t, int i) { return 0.3 * (i + 1) - 0.2 * t + 0.05 * i * t; }

/* A reference-backend context through the public API, made on first use
 * (after checking that bad arguments are refused) and kept until exit. */
static st_backend_ctx *ref_ctx(void) {
  static st_backend_ctx *made;
  const st_backend *be = NULL;
  if (!made) {
    CHECK_OK(st_backend_get("reference", &be));
    st_backend_ctx *bad = (st_backend_ctx *)&made;
    CHECK(st_backend_ctx_create(NULL, 0, 0, &bad) == ST_ERR_INVALID);
    CHECK(st_backend_ctx_create(be, -1, 0, &bad) == ST_ERR_INVALID && bad == NULL);
    CHECK(st_backend_ctx_create(be, 0, 0, NULL) == ST_ERR_INVALID);
    st_backend_ctx_destroy(NULL);
    CHECK_OK(st_backend_ctx_create(be, 0, 0, &made));
  }
  return made;
}

/* Run `steps` updates of o through the reference backend and return params. */
static void run_opt(const st_optimizer_options *o, int steps, float out[N]) {
  st_backend_ctx *ctx = ref_ctx();
  float p[N], g[N], s0[N] = {0}, s1[N] = {0};
  float *slots[2] = {s0, s1};
  for (int i = 0; i < N; i++) p[i] = (float)k_p0[i];
  for (int t = 0; t < steps; t++) {
    for (int i = 0; i < N; i++) g[i] = (float)grad_at(t, i);
    st_optimizer_apply(o, ctx, t, N, p, g, slots);
  }
  memcpy(out, p, sizeof p);
}

static void check_params(const char *what, const float got[N],
                         const double want[N], double tol) {
  for (int i = 0; i < N; i++)
    CHECK_MSG(fabs(got[i] - want[i]) <= tol, "%s[%d]: %.9g vs %.9g", what, i,
              (double)got[i], want[i]);
}

static void test_sgd(void) {
  for (int variant = 0; variant < 3; variant++) {
    st_optimizer_options o = st_optimizer_default_options(ST_OPT_SGD);
    o.lr = st_schedule_constant(0.1f);
    o.momentum = variant == 0 ? 0.0f : 0.9f;
    o.nesterov = variant == 2;
    CHECK(st_optimizer_slot_count(&o) == (variant == 0 ? 0 : 1));
    double want[N], v[N] = {0};
    memcpy(want, k_p0, sizeof want);
    for (int t = 0; t < 4; t++) {
      for (int i = 0; i < N; i++) {
        double g = grad_at(t, i);
        if (variant == 0) {
          want[i] -= 0.1 * g;
        } else {
          v[i] = 0.9 * v[i] - 0.1 * g;
          want[i] += variant == 2 ? 0.9 * v[i] - 0.1 * g : v[i];
        }
      }
    }
    float got[N];
    run_opt(&o, 4, got);
    check_params(variant == 0 ? "sgd" : variant == 1 ? "momentum" : "nesterov",
                 got, want, 1e-5);
  }
  /* fully by hand: p=1, g=1, lr=0.1, momentum 0.9 for 3 steps */
  st_backend_ctx *ctx = ref_ctx();
  st_optimizer_options o = st_optimizer_default_options(ST_OPT_SGD);
  o.lr = st_schedule_constant(0.1f);
  o.momentum = 0.9f;
  float p = 1, g = 1, v = 0, *slots[1] = {&v};
  for (int t = 0; t < 3; t++) st_optimizer_apply(&o, ctx, t, 1, &p, &g, slots);
  CHECK_NEAR(p, 0.439, 1e-6); /* v: -0.1, -0.19, -0.271 */
  o.nesterov = true;
  p = 1, v = 0;
  for (int t = 0; t < 2; t++) st_optimizer_apply(&o, ctx, t, 1, &p, &g, slots);
  CHECK_NEAR(p, 0.539, 1e-6); /* p += 0.9v - 0.1: 0.81, 0.539 */
  /* momentum 0 with nesterov: plain step, no slot touched */
  o.momentum = 0.0f;
  p = 1;
  st_optimizer_apply(&o, ctx, 0, 1, &p, &g, NULL);
  CHECK_NEAR(p, 0.9, 1e-7);
}

static void adam_expect(double lr, double wd, int steps, double want[N]) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-7;
  double m[N] = {0}, v[N] = {0};
  memcpy(want, k_p0, sizeof(double) * N);
  for (int t = 0; t < steps; t++) {
    double alpha = lr * sqrt(1 - pow(b2, t + 1)) / (1 - pow(b1, t + 1));
    for (int i = 0; i < N; i++) {
      double g = grad_at(t, i);
      want[i] -= lr * wd * want[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      want[i] -= alpha * m[i] / (sqrt(v[i]) + eps);
    }
  }
}

static void test_adam(void) {
  st_optimizer_options o = st_optimizer_default_options(ST_OPT_ADAM);
  CHECK(st_optimizer_slot_count(&o) == 2);
  o.lr = st_schedule_constant(0.01f);
  double want[N];
  float got[N];
  adam_expect(0.01, 0.0, 5, want);
  run_opt(&o, 5, got);
  check_params("adam", got, want, 1e-6);
  /* by hand: the first bias-corrected step is lr * sign(g) (eps aside) */
  run_opt(&o, 1, got);
  for (int i = 0; i < N; i++)
    CHECK_NEAR(got[i], k_p0[i] - 0.01 * (grad_at(0, i) > 0 ? 1 : -1), 1e-6);

  o = st_optimizer_default_options(ST_OPT_ADAMW);
  CHECK(st_optimizer_slot_count(&o) == 2);
  o.lr = st_schedule_constant(0.01f);
  o.weight_decay = 0.1f;
  adam_expect(0.01, 0.1, 5, want);
  run_opt(&o, 5, got);
  check_params("adamw", got, want, 1e-6);
  /* by hand: zero gradient leaves only the decay, p = 1 - lr*wd*1 */
  o = st_optimizer_default_options(ST_OPT_ADAMW);
  float p = 1, g = 0, m = 0, v = 0, *slots[2] = {&m, &v};
  st_optimizer_apply(&o, ref_ctx(), 0, 1, &p, &g, slots);
  CHECK_NEAR(p, 1.0 - 1e-3 * 0.004, 1e-7);
}

/* Keras 3 RMSprop: eps inside the square root. */
static void rms_expect(double lr, double rho, double mom, double eps, int steps,
                       double want[N]) {
  double ms[N] = {0}, mo[N] = {0};
  memcpy(want, k_p0, sizeof(double) * N);
  for (int t = 0; t < steps; t++) {
    for (int i = 0; i < N; i++) {
      double g = grad_at(t, i);
      ms[i] = rho * ms[i] + (1 - rho) * g * g;
      double inc = lr * g / sqrt(ms[i] + eps);
      if (mom > 0) {
        mo[i] = mom * mo[i] + inc;
        want[i] -= mo[i];
      } else {
        want[i] -= inc;
      }
    }
  }
}

static void test_rmsprop(void) {
  st_optimizer_options o = st_optimizer_default_options(ST_OPT_RMSPROP);
  CHECK(st_optimizer_slot_count(&o) == 1);
  o.lr = st_schedule_constant(0.01f);
  double want[N];
  float got[N];
  rms_expect(0.01, 0.9, 0.0, 1e-7, 5, want);
  run_opt(&o, 5, got);
  check_params("rmsprop", got, want, 1e-6);
  o.momentum = 0.5f;
  CHECK(st_optimizer_slot_count(&o) == 2);
  rms_expect(0.01, 0.9, 0.5, 1e-7, 5, want);
  run_opt(&o, 5, got);
  check_params("rmsprop momentum", got, want, 1e-6);
  /* a large epsilon pins where it goes (inside the sqrt, as Keras 3) */
  o.momentum = 0.0f;
  o.epsilon = 0.1f;
  rms_expect(0.01, 0.9, 0.0, 0.1, 3, want);
  run_opt(&o, 3, got);
  check_params("rmsprop eps", got, want, 1e-6);
  /* by hand: g=1, rho .9 -> ms .1, step lr/sqrt(.1) */
  o = st_optimizer_default_options(ST_OPT_RMSPROP);
  float p = 0, g = 1, ms = 0, *slots[1] = {&ms};
  st_optimizer_apply(&o, ref_ctx(), 0, 1, &p, &g, slots);
  CHECK_NEAR(p, -1e-3 / sqrt(0.1), 1e-7);
}

static void test_optimizer_schedule_and_names(void) {
  /* the lr is taken from the schedule at `step` */
  st_optimizer_options o = st_optimizer_default_options(ST_OPT_SGD);
  o.lr = (st_schedule){.kind = ST_SCHEDULE_EXPONENTIAL, .initial = 0.1f,
                       .decay_steps = 1, .decay_rate = 0.5f};
  float p = 0, g = 1;
  st_optimizer_apply(&o, ref_ctx(), 3, 1, &p, &g, NULL);
  CHECK_NEAR(p, -0.0125, 1e-7);

  st_optimizer_options d = st_optimizer_default_options(ST_OPT_SGD);
  CHECK_NEAR(st_schedule_lr(&d.lr, 0), 0.01, 1e-9);
  CHECK(d.momentum == 0.0f && !d.nesterov && d.weight_decay == 0.0f);
  d = st_optimizer_default_options(ST_OPT_ADAM);
  CHECK_NEAR(st_schedule_lr(&d.lr, 0), 1e-3, 1e-9);
  CHECK(d.beta1 == 0.9f && d.beta2 == 0.999f && d.epsilon == 1e-7f);
  CHECK(d.weight_decay == 0.0f);
  d = st_optimizer_default_options(ST_OPT_ADAMW);
  CHECK(d.weight_decay == 0.004f);
  d = st_optimizer_default_options(ST_OPT_RMSPROP);
  CHECK(d.rho == 0.9f && d.momentum == 0.0f && d.epsilon == 1e-7f);

  for (int k = 0; k < ST_OPT_COUNT; k++) {
    st_optimizer_kind back = ST_OPT_COUNT;
    CHECK_OK(st_optimizer_parse(st_optimizer_name((st_optimizer_kind)k), &back));
    CHECK(back == (st_optimizer_kind)k);
  }
  st_optimizer_kind ok;
  CHECK_OK(st_optimizer_parse("Adam", &ok));
  CHECK(ok == ST_OPT_ADAM);
  CHECK(st_optimizer_parse("adagrad", &ok) == ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "adagrad") && strstr(st_last_error(), "rmsprop"));
}

static void test_names(void) {
  for (int a = 0; a < ST_ACT_COUNT; a++) {
    st_activation back = ST_ACT_COUNT;
    CHECK_OK(st_activation_parse(st_activation_name((st_activation)a), &back));
    CHECK(back == (st_activation)a);
  }
  CHECK(strcmp(st_activation_name(ST_ACT_RELU), "relu") == 0);
  st_activation act;
  CHECK(st_activation_parse("swish", &act) == ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "swish") && strstr(st_last_error(), "gelu"));
  CHECK(st_activation_needs_input(ST_ACT_GELU));
  CHECK(!st_activation_needs_input(ST_ACT_ELU));
  CHECK(!st_activation_needs_input(ST_ACT_RELU));

  for (int k = 0; k < ST_LOSS_COUNT; k++) {
    st_loss_kind back = ST_LOSS_COUNT;
    CHECK_OK(st_loss_parse(st_loss_name((st_loss_kind)k), &back));
    CHECK(back == (st_loss_kind)k);
  }
  st_loss_kind l;
  CHECK_OK(st_loss_parse("sparse_categorical_crossentropy", &l));
  CHECK(l == ST_LOSS_SPARSE_CE && st_loss_is_sparse(l));
  CHECK_OK(st_loss_parse("mse", &l));
  CHECK(l == ST_LOSS_MSE && !st_loss_is_sparse(l));
  CHECK_OK(st_loss_parse("binary_crossentropy_from_logits", &l));
  CHECK(l == ST_LOSS_BCE_LOGITS);
  CHECK(st_loss_is_sparse(ST_LOSS_SPARSE_CE_LOGITS));
  CHECK(!st_loss_is_sparse(ST_LOSS_CE));
  CHECK(st_loss_parse("hinge", &l) == ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "hinge") &&
        strstr(st_last_error(), "mean_squared_error"));
}

static void test_schedules(void) {
  st_schedule c = st_schedule_constant(0.05f);
  CHECK_NEAR(st_schedule_lr(&c, 0), 0.05, 1e-9);
  CHECK_NEAR(st_schedule_lr(&c, 1000000), 0.05, 1e-9);

  st_schedule e = {.kind = ST_SCHEDULE_EXPONENTIAL, .initial = 0.1f,
                   .decay_steps = 10, .decay_rate = 0.5f, .staircase = false};
  CHECK_NEAR(st_schedule_lr(&e, 0), 0.1, 1e-8);
  CHECK_NEAR(st_schedule_lr(&e, 5), 0.1 * sqrt(0.5), 1e-8);
  CHECK_NEAR(st_schedule_lr(&e, 10), 0.05, 1e-8);
  CHECK_NEAR(st_schedule_lr(&e, 25), 0.1 * pow(0.5, 2.5), 1e-8);
  e.staircase = true;
  CHECK_NEAR(st_schedule_lr(&e, 5), 0.1, 1e-8);
  CHECK_NEAR(st_schedule_lr(&e, 9), 0.1, 1e-8);
  CHECK_NEAR(st_schedule_lr(&e, 10), 0.05, 1e-8);
  CHECK_NEAR(st_schedule_lr(&e, 25), 0.025, 1e-8);

  st_schedule k = {.kind = ST_SCHEDULE_COSINE, .initial = 1.0f,
                   .decay_steps = 100, .alpha = 0.1f};
  CHECK_NEAR(st_schedule_lr(&k, 0), 1.0, 1e-7);
  CHECK_NEAR(st_schedule_lr(&k, 25),
             0.9 * 0.5 * (1 + cos(M_PI / 4)) + 0.1, 1e-6);
  CHECK_NEAR(st_schedule_lr(&k, 50), 0.55, 1e-6);
  CHECK_NEAR(st_schedule_lr(&k, 100), 0.1, 1e-7);
  CHECK_NEAR(st_schedule_lr(&k, 250), 0.1, 1e-7);
  k.alpha = 0.0f;
  k.initial = 0.2f;
  CHECK_NEAR(st_schedule_lr(&k, 50), 0.1, 1e-7);
  CHECK_NEAR(st_schedule_lr(&k, 1000), 0.0, 1e-9);
}

static void test_metrics(void) {
  /* 3 rows x 3 classes; argmax per row: 1, 0, 2 */
  const float pred[9] = {0.1f, 0.7f, 0.2f, 0.5f, 0.3f, 0.2f, 0.1f, 0.1f, 0.8f};
  const float sparse_y[3] = {1, 2, 2};
  const float onehot_y[9] = {0, 1, 0, 1, 0, 0, 0, 1, 0};
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_SPARSE_CE, 3, 3, pred,
                          sparse_y) == 2);
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_SPARSE_CE_LOGITS, 3, 3,
                          pred, sparse_y) == 2);
  CHECK(st_metric_correct(ST_METRIC_SPARSE_CATEGORICAL_ACCURACY, ST_LOSS_MSE, 3,
                          3, pred, sparse_y) == 2);
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_CE, 3, 3, pred,
                          onehot_y) == 2);
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_CE_LOGITS, 3, 3, pred,
                          onehot_y) == 2);
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_MSE, 3, 3, pred,
                          onehot_y) == 2);
  CHECK(st_metric_correct(ST_METRIC_CATEGORICAL_ACCURACY, ST_LOSS_MSE, 3, 3,
                          pred, onehot_y) == 2);
  /* ties go to the first maximum */
  const float tie[3] = {0.4f, 0.4f, 0.2f}, tie_y[1] = {1};
  CHECK(st_metric_correct(ST_METRIC_SPARSE_CATEGORICAL_ACCURACY,
                          ST_LOSS_SPARSE_CE, 1, 3, tie, tie_y) == 0);

  /* binary: counts elements; threshold 0.5 on probabilities, 0 on logits */
  const float prob[4] = {0.9f, 0.4f, 0.6f, 0.5f}, by[4] = {1, 0, 0, 0};
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_BCE, 4, 1, prob, by) == 3);
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_BCE, 2, 2, prob, by) == 3);
  CHECK(st_metric_correct(ST_METRIC_BINARY_ACCURACY, ST_LOSS_BCE, 4, 1, prob,
                          by) == 3);
  const float logit[4] = {2.0f, -1.0f, 0.3f, -0.1f};
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_BCE_LOGITS, 4, 1, logit,
                          by) == 3);
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_MSE, 4, 1, prob, by) == 3);
  CHECK(st_metric_correct(ST_METRIC_ACCURACY, ST_LOSS_SPARSE_CE, 0, 3, pred,
                          sparse_y) == 0);
}

static const check_case cases[] = {
    CHECK_CASE(test_sgd),   CHECK_CASE(test_adam),      CHECK_CASE(test_rmsprop),
    CHECK_CASE(test_optimizer_schedule_and_names),      CHECK_CASE(test_names),
    CHECK_CASE(test_schedules), CHECK_CASE(test_metrics)};

int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
