/* fit over an endless dataset (st_dataset_repeat with -1) with
 * steps_per_epoch: one iterator across the epochs, as Keras keeps it, so
 * epoch e trains on batches [e spe, (e + 1) spe) of the stream (not the
 * first spe batches again); 3 epochs of 5 steps give the bytes of 1 epoch
 * of 15 steps (shuffled or not, one device or mirrored); a finite dataset
 * still starts a new pass each epoch; validation_steps on an endless
 * validation set evaluates its first batches at every epoch (as Keras); a
 * fit crashed or preempted anywhere and resumed from its backup ends with
 * the uninterrupted run's bytes and history. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tmpdir.h"
#include "model/model.h"
#include "strata/strata.h"

enum { NB = 8, B = 4, D = 2, N = NB * B, MAXSEEN = 64 };
static float X[N * D], Y[N];   /* x 0, label of row i: its batch + 1 */
static float XR[N * D], YR[N]; /* random regression data */

static void make_data(void) {
  st_rng r = st_rng_make(11, 0);
  for (int i = 0; i < N; i++) {
    Y[i] = (float)(i / B + 1);
    YR[i] = st_rng_normal(&r);
    for (int j = 0; j < D; j++) XR[i * D + j] = st_rng_normal(&r);
  }
}

/* Batches of B from X/Y (random: XR/YR), shuffled under the repeat when
 * asked, repeated forever unless finite. */
static st_dataset *data(bool random, bool shuffled, bool finite) {
  st_tensor x = {ST_F32, 2, {N, D}, random ? XR : X}, y = {ST_F32, 1, {N}, random ? YR : Y};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&x, &y, 1.0f, false, &ds) != ST_OK) return NULL;
  if (shuffled && st_dataset_shuffle(ds, N, 7, true, &ds) != ST_OK) return NULL;
  if (st_dataset_batch(ds, B, false, &ds) != ST_OK) return NULL;
  if (!finite) (void)st_dataset_repeat(ds, -1, &ds); /* NULL on failure */
  return ds;
}

/* Dense(1) under MSE, SGD at lr (1e-20: the weights stay, to rounding). */
static st_model *model(st_strategy_kind kind, float lr) {
  st_strategy_options so = st_strategy_default_options(kind);
  if (kind == ST_STRATEGY_MIRRORED) so.replicas = 2;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 3;
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(1, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_MSE;
  co.optimizer = st_optimizer_default_options(ST_OPT_SGD);
  co.optimizer.lr = st_schedule_constant(lr);
  CHECK_OK(st_model_compile(m, &co));
  m->owns_strategy = true;
  return m;
}

/* Which batch of X/Y each step trained on: its own loss is (label)^2 while
 * the weights stay at 0 output (x is 0, the bias moves by ~1e-20). Also
 * crashes (an error) or asks to stop at step `at` (1-based, 0: never). */
typedef struct recorder {
  int seen[MAXSEEN], n;
  int64_t at;
  bool preempt;
} recorder;
static st_status record(void *user, st_model *m, const st_batch_logs *l) {
  recorder *r = user;
  (void)m;
  if (r->n < MAXSEEN) r->seen[r->n] = (int)lround(sqrt(l->step_loss)) - 1;
  if (++r->n != r->at) return ST_OK;
  if (!r->preempt) return st_error(ST_ERR_INTERNAL, "simulated crash");
  st_request_stop();
  return ST_OK;
}

static st_status fit(st_model *m, st_dataset *ds, int epochs, int64_t spe, recorder *r,
                     const char *backup, st_history *h) {
  st_callback cb = {r, NULL, record, NULL, NULL};
  st_fit_options fo = st_fit_default_options();
  fo.epochs = epochs;
  fo.steps_per_epoch = spe;
  fo.callbacks = &cb;
  fo.ncallbacks = r ? 1 : 0;
  fo.backup_dir = backup;
  fo.backup_every_steps = backup ? 2 : 0;
  return st_model_fit(m, ds, &fo, h);
}

static void seen_is(const recorder *r, const int *want, int n, const char *what) {
  CHECK_EQ(r->n, n);
  bool same = r->n == n;
  for (int i = 0; same && i < n; i++) same = r->seen[i] == want[i];
  char got[256] = "", *p = got;
  for (int i = 0; i < r->n && i < 16; i++) p += snprintf(p, 16, "%d ", r->seen[i]);
  CHECK_MSG(same, "%s: the steps trained on batches %s", what, got);
}

/* 3 epochs of 3 steps over the endless stream of 8 batches: batches 0..7
 * then 0 (Keras); the same over the 8 batches without repeat: each epoch a
 * new pass, its first 3 batches. */
static void test_stream_order(void) {
  st_model *m = model(ST_STRATEGY_ONE_DEVICE, 1e-20f);
  st_dataset *ds = data(false, false, false);
  recorder r = {0};
  st_history h;
  CHECK_OK(fit(m, ds, 3, 3, &r, NULL, &h));
  seen_is(&r, (const int[]){0, 1, 2, 3, 4, 5, 6, 7, 0}, 9, "endless");
  CHECK(h.epochs == 3 && h.logs[2].steps == 3 && h.logs[2].examples == 3 * B);
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  ds = data(false, false, true);
  r = (recorder){0};
  CHECK_OK(fit(m, ds, 3, 3, &r, NULL, &h));
  seen_is(&r, (const int[]){0, 1, 2, 0, 1, 2, 0, 1, 2}, 9, "finite, 8 batches");
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
}

/* validation_steps 2 on an endless validation set: every epoch evaluates
 * its first 2 batches (labels 1 and 2: MSE (1 + 4) / 2 with the weights
 * at 0 output), as Keras makes a new validation iterator each time. */
static void test_stream_validation(void) {
  st_model *m = model(ST_STRATEGY_ONE_DEVICE, 1e-20f);
  st_dataset *ds = data(false, false, false), *val = data(false, false, false);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 3;
  fo.steps_per_epoch = 3;
  fo.validation = val;
  fo.validation_steps = 2;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  CHECK_EQ(h.epochs, 3);
  for (int e = 0; e < h.epochs; e++) {
    CHECK(h.logs[e].has_validation);
    CHECK_NEAR(h.logs[e].val_loss, 2.5, 1e-4);
  }
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_dataset_destroy(val);
  st_model_destroy(m);
}

static float *trained(st_strategy_kind kind, bool shuffled, int epochs, int64_t spe,
                      st_history *h) {
  st_model *m = model(kind, 0.05f);
  st_dataset *ds = data(true, shuffled, false);
  CHECK_OK(fit(m, ds, epochs, spe, NULL, NULL, h));
  float *w = malloc(st_model_weights_size(m) * sizeof(float));
  CHECK_OK(st_model_get_weights(m, w));
  st_dataset_destroy(ds);
  st_model_destroy(m);
  return w;
}

/* Keras's rule as an identity: fit(ds.repeat(), steps_per_epoch=5,
 * epochs=3) trains what steps_per_epoch=15, epochs=1 trains. */
static void stream_equals_one_epoch(st_strategy_kind kind) {
  for (int sh = 0; sh < 2; sh++) {
    st_history h3, h1;
    float *w3 = trained(kind, sh, 3, 5, &h3), *w1 = trained(kind, sh, 1, 15, &h1);
    CHECK_MSG(memcmp(w3, w1, (D + 1) * sizeof(float)) == 0,
              "%s, %s: 3 epochs of 5 steps differ from 1 epoch of 15 (%g %g %g vs %g %g %g)",
              st_strategy_kind_name(kind), sh ? "shuffled" : "in order", w3[0], w3[1], w3[2],
              w1[0], w1[1], w1[2]);
    CHECK(h3.epochs == 3 && h1.epochs == 1);
    free(w3), free(w1);
    st_history_destroy(&h3), st_history_destroy(&h1);
  }
}
static void test_stream_one_device(void) { stream_equals_one_epoch(ST_STRATEGY_ONE_DEVICE); }
static void test_stream_mirrored(void) { stream_equals_one_epoch(ST_STRATEGY_MIRRORED); }

/* Crashed (an error from a callback) or preempted (st_request_stop) at
 * global step `at`, backups every 2 steps and at each epoch's end, then
 * resumed: the bytes and epoch losses of the uninterrupted run. */
static void stream_resume(st_strategy_kind kind) {
  st_history href;
  float *want = trained(kind, true, 3, 5, &href);
  struct { int64_t at; bool preempt; } cases[] = {{1, false}, {5, false}, {6, false}, {9, false},
                                                  {14, false}, {5, true}, {7, true}, {12, true}};
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s%d", g_dir, st_strategy_kind_name(kind), i);
    st_dataset *ds = data(true, true, false);
    st_model *a = model(kind, 0.05f);
    recorder r = {.at = cases[i].at, .preempt = cases[i].preempt};
    st_history h1, h2;
    CHECK(fit(a, ds, 3, 5, &r, dir, &h1) == (cases[i].preempt ? ST_ERR_STOPPED : ST_ERR_INTERNAL));
    st_clear_stop_request();
    st_model_destroy(a);
    st_model *b = model(kind, 0.05f); /* a new process would start like this */
    CHECK_OK(fit(b, ds, 3, 5, NULL, dir, &h2));
    float got[D + 1];
    CHECK_OK(st_model_get_weights(b, got));
    CHECK_MSG(memcmp(want, got, sizeof got) == 0, "%s: %s at step %lld, resumed: weights differ",
              st_strategy_kind_name(kind), cases[i].preempt ? "preempted" : "crashed",
              (long long)cases[i].at);
    CHECK_EQ(h2.epochs, 3);
    for (int e = 0; e < 3 && h2.epochs == 3; e++)
      CHECK_MSG(h2.logs[e].loss == href.logs[e].loss, "%s at step %lld: epoch %d loss %.9g, "
                "uninterrupted %.9g", cases[i].preempt ? "preempted" : "crashed",
                (long long)cases[i].at, e + 1, h2.logs[e].loss, href.logs[e].loss);
    st_history_destroy(&h1), st_history_destroy(&h2);
    st_model_destroy(b);
    st_dataset_destroy(ds);
  }
  st_history_destroy(&href);
  free(want);
}
static void test_resume_one_device(void) { stream_resume(ST_STRATEGY_ONE_DEVICE); }
static void test_resume_mirrored(void) { stream_resume(ST_STRATEGY_MIRRORED); }

static const check_case cases[] = {
    CHECK_CASE(test_stream_order),      CHECK_CASE(test_stream_validation),
    CHECK_CASE(test_stream_one_device), CHECK_CASE(test_stream_mirrored),
    CHECK_CASE(test_resume_one_device), CHECK_CASE(test_resume_mirrored)};

int main(int argc, char **argv) {
  make_data();
  CHECK(tmpdir_make("strata_stream"));
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
