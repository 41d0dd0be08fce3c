/* Shared by test_shard_optimizer.c and test_shard_optimizer_mpi.c: a small
 * Dense model (1669 parameters: not a multiple of 2, 3 or 4, so every shard
 * plan has a tail) trained with and without shard_optimizer, and helpers to
 * compare the weights and checkpoint files byte for byte. Header-only. */
#ifndef STRATA_TESTS_SHARD_FIXTURE_H
#define STRATA_TESTS_SHARD_FIXTURE_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixtures.h"
#include "model/model.h"
#include "strata/strata.h"

enum { SF_N = 480, SF_D = 20, SF_C = 5, SF_BATCH = 32 };
static float sf_x[SF_N * SF_D], sf_y[SF_N];

static void sf_make_data(void) { fixture_argmax_data(5, SF_N, SF_D, SF_C, sf_x, sf_y); }

/* The optimizers the tests run: Keras defaults plus momentum where it makes
 * slots (index: 0 adam, 1 adamw, 2 sgd momentum, 3 sgd nesterov, 4 sgd,
 * 5 rmsprop with momentum). */
enum { SF_NOPT = 6 };
static const char *const sf_opt_names[SF_NOPT] = {"adam", "adamw", "sgd-momentum",
                                                  "sgd-nesterov", "sgd", "rmsprop-momentum"};
static st_optimizer_options sf_optimizer(int which) {
  static const st_optimizer_kind kinds[SF_NOPT] = {ST_OPT_ADAM, ST_OPT_ADAMW, ST_OPT_SGD,
                                                   ST_OPT_SGD, ST_OPT_SGD, ST_OPT_RMSPROP};
  st_optimizer_options o = st_optimizer_default_options(kinds[which]);
  if (which == 2 || which == 3 || which == 5) o.momentum = 0.9f;
  if (which == 3) o.nesterov = true;
  if (which == 1) o.weight_decay = 0.05f; /* large enough to matter in a few steps */
  return o;
}

/* Dense 64 relu -> Dense 5 logits under `kind` with `replicas` (local)
 * replicas, compiled with optimizer `which`, collectives timing out after
 * `timeout` s. */
static st_model *sf_model_timeout(st_strategy_kind kind, int replicas, bool shard, int which,
                                  double timeout) {
  st_strategy_options so = st_strategy_default_options(kind);
  if (replicas) so.replicas = replicas;
  so.shard_optimizer = shard;
  so.collective_timeout = timeout;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  if (!s) return NULL;
  st_model_options mo = st_model_default_options(st_shape1(SF_D));
  mo.seed = 4;
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(64, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(SF_C, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = sf_optimizer(which);
  CHECK_OK(st_model_compile(m, &co));
  m->owns_strategy = true;
  return m;
}

/* ... with a timeout of 30 s: a hang fails in seconds, not minutes. */
static st_model *sf_model(st_strategy_kind kind, int replicas, bool shard, int which) {
  return sf_model_timeout(kind, replicas, shard, which, 30);
}

static void sf_fit(st_model *m, int epochs) {
  st_dataset *ds = fixture_dataset(sf_x, sf_y, SF_N, SF_D, SF_BATCH);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = epochs;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
}

static inline float *sf_params(const st_model *m) {
  float *w = malloc(m->net.n_params * sizeof(float));
  if (w) memcpy(w, m->net.params, m->net.n_params * sizeof(float));
  return w;
}

/* Whether two files hold the same bytes (false when one cannot be read). */
static inline bool sf_same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  bool same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    if (ca != cb) same = false;
    if (ca == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}
#endif
