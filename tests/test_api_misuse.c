/* The C API misused as a newcomer would (issue 21): every mistake gets an
 * error status and a message naming the function and the argument, never a
 * crash, a hang or a silent wrong result. Runs under ASan+UBSan (make
 * asan-test), ThreadSanitizer (label "threaded") and valgrind
 * (tests/test_valgrind.sh).
 *  - custom loops: a step function that fails on one replica, returns early
 *    without st_replica_apply_gradients, or meets bad data (no features, a
 *    label that is not a class index, as fit rejects) on one replica
 *    makes st_strategy_run return that failure within a second (2, 3 and 8
 *    mirrored replicas: threads, so 8 work on 2 cores) instead of hanging in
 *    the all-reduce barrier; the strategy runs normally afterwards;
 *  - NULL pointers and wrong states on the model, strategy and callback
 *    functions;
 *  - lifetimes: a layer added to two models, a strategy destroyed before its
 *    model;
 *  - a failed st_model_add makes compile refuse. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "strata/strata.h"

/* The message of the last failure contains needle. */
static void check_failed(st_status s, st_status want, const char *needle, const char *what) {
  CHECK_MSG(s == want, "%s: got %s, want %s (%s)", what, st_status_string(s),
            st_status_string(want), st_last_error());
  CHECK_MSG(strstr(st_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
            st_last_error(), needle);
}
#define CHECK_FAILS(expr, want, needle) check_failed((expr), (want), (needle), #expr)

/* ---- a small model on tiny data ------------------------------------------ */
enum { FEAT = 4, CLASSES = 3, ROWS = 64 };
static float X[ROWS * FEAT], Y[ROWS];

static void make_data(void) {
  for (int i = 0; i < ROWS; i++) {
    Y[i] = (float)(i % CLASSES);
    for (int f = 0; f < FEAT; f++) X[i * FEAT + f] = (float)((i * 7 + f * 3) % 11) / 11.0f;
  }
}

/* Dense 8 relu -> Dense 3, compiled; mirrored with `replicas` (0: one
 * device). *sout (may be NULL) gets the strategy (the caller destroys it
 * after the model). */
static st_model *make_model(int replicas, st_strategy **sout) {
  st_strategy *s = NULL;
  if (replicas > 0) {
    st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
    so.replicas = replicas;
    CHECK_OK(st_strategy_create(&so, &s));
  }
  st_model_options mo = st_model_default_options(st_shape1(FEAT));
  mo.strategy = s;
  st_model *m = NULL;
  st_layer *l1 = NULL, *l2 = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  CHECK_OK(st_dense(8, ST_ACT_RELU, &l1));
  CHECK_OK(st_model_add(m, l1));
  CHECK_OK(st_dense(CLASSES, ST_ACT_LINEAR, &l2));
  CHECK_OK(st_model_add(m, l2));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  CHECK_OK(st_model_compile(m, &co));
  if (sout) *sout = s;
  return m;
}

/* ---- 1. custom loops: a replica that leaves does not hang the others ------ */
typedef enum mode { STEP_OK, STEP_FAIL, STEP_EARLY, STEP_BAD_DATA, STEP_BAD_LABEL } mode;
typedef struct step_args {
  const st_batch *b;
  mode mode;
  int bad;   /* the replica that misbehaves */
} step_args;

static st_status step(st_replica_context *ctx, void *arg) {
  step_args *a = arg;
  int id = st_replica_id(ctx);
  bool me = id == a->bad;
  if (me && a->mode == STEP_FAIL)
    return st_error(ST_ERR_IO, "replica %d: the step's own failure", id);
  st_batch local = st_replica_slice(ctx, a->b);
  if (me && a->mode == STEP_BAD_DATA) local.x = NULL; /* examples without data */
  float y[ROWS];
  if (me && a->mode == STEP_BAD_LABEL) { /* a label fit rejects: NaN loss before */
    memcpy(y, local.y, (size_t)local.size * sizeof(float));
    y[local.size - 1] = (float)CLASSES + 0.5f;
    local.y = y;
  }
  st_status s = st_replica_compute_gradients(ctx, &local, a->b->size, NULL, NULL);
  if (s != ST_OK) return s;
  if (me && a->mode == STEP_EARLY) return ST_OK; /* skips apply */
  return st_replica_apply_gradients(ctx);
}

static void check_leave(int replicas, mode md, st_status want, const char *needle) {
  st_strategy *s = NULL;
  st_model *m = make_model(replicas, &s);
  st_batch b = {ROWS, X, Y};
  step_args a = {&b, md, replicas > 1 ? 1 : 0};
  double t0 = st_now_seconds();
  st_status st = st_strategy_run(s, step, &a);
  double dt = st_now_seconds() - t0;
  fprintf(stderr, "  %d replicas, mode %d: %s in %.4f s: %s\n", replicas, (int)md,
          st_status_string(st), dt, st_last_error());
  CHECK_MSG(st == want, "%d replicas: got %s, want %s", replicas, st_status_string(st),
            st_status_string(want));
  CHECK_MSG(strstr(st_last_error(), needle) != NULL, "message '%s' lacks '%s'",
            st_last_error(), needle);
  CHECK_LT(dt, 5.0); /* < 1 s on an idle machine; room for a loaded CI */
  /* the group is reusable: a correct step now runs and counts */
  a.mode = STEP_OK;
  CHECK_OK(st_strategy_run(s, step, &a));
  CHECK_OK(st_strategy_run(s, step, &a));
  st_model_destroy(m);
  st_strategy_destroy(s);
}

static void test_run_step_fails(void) {
  int ns[] = {2, 3, 8};
  for (int i = 0; i < 3; i++)
    check_leave(ns[i], STEP_FAIL, ST_ERR_IO, "replica 1: the step's own failure");
}

static void test_run_early_return(void) {
  int ns[] = {2, 3, 8};
  for (int i = 0; i < 3; i++)
    check_leave(ns[i], STEP_EARLY, ST_ERR_INVALID, "replica 1 returned while replica");
}

static void test_run_bad_data(void) {
  int ns[] = {2, 3, 8};
  for (int i = 0; i < 3; i++)
    check_leave(ns[i], STEP_BAD_DATA, ST_ERR_INVALID, "local->x is NULL with");
  for (int i = 0; i < 3; i++)
    check_leave(ns[i], STEP_BAD_LABEL, ST_ERR_INVALID,
                "replica 1: local batch: label 3.5 of example");
  check_leave(1, STEP_BAD_LABEL, ST_ERR_INVALID, "label 3.5 of example 63 is not a class index");
}

/* Every replica returning without a collective (an evaluation step) is fine,
 * and a normal run counts its step. */
static st_status no_collective(st_replica_context *ctx, void *arg) {
  (void)ctx, (void)arg;
  return ST_OK;
}

static void test_run_ok(void) {
  st_strategy *s = NULL;
  st_model *m = make_model(3, &s);
  CHECK_OK(st_strategy_run(s, no_collective, NULL));
  st_batch b = {ROWS, X, Y};
  step_args a = {&b, STEP_OK, 0};
  CHECK_OK(st_strategy_run(s, step, &a));
  st_model_destroy(m);
  st_strategy_destroy(s);
}

/* ---- 2. NULL pointers ------------------------------------------------------ */
static st_dataset *tiny_dataset(void) {
  st_tensor x = {ST_F32, 2, {ROWS, FEAT}, X}, y = {ST_F32, 1, {ROWS}, Y};
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_from_tensor_slices(&x, &y, 1.0f, false, &ds));
  CHECK_OK(st_dataset_batch(ds, 16, false, &ds));
  return ds;
}

/* The 15 cases of issue 21 (Found 2), and a few more of the same kind. */
static void test_null_model_layer(void) {
  st_model_options mo = st_model_default_options(st_shape1(FEAT));
  st_model *m = (st_model *)1;
  CHECK_FAILS(st_sequential_create(NULL, &m), ST_ERR_INVALID, "st_sequential_create: o is NULL");
  CHECK(m == NULL);
  CHECK_FAILS(st_sequential_create(&mo, NULL), ST_ERR_INVALID, "st_sequential_create: out is NULL");
  st_layer *l = NULL;
  CHECK_OK(st_dense(3, ST_ACT_LINEAR, &l));
  CHECK_FAILS(st_model_add(NULL, l), ST_ERR_INVALID, "st_model_add: m is NULL"); /* l freed */
  st_compile_options co = st_compile_default_options();
  CHECK_FAILS(st_model_compile(NULL, &co), ST_ERR_INVALID, "st_model_compile: m is NULL");
  st_model *u = NULL;
  CHECK_OK(st_sequential_create(&mo, &u));
  CHECK_FAILS(st_model_compile(u, NULL), ST_ERR_INVALID, "st_model_compile: o is NULL");
  char *text = NULL;
  CHECK_FAILS(st_model_summary(NULL, &text), ST_ERR_INVALID, "st_model_summary: m is NULL");
  CHECK_FAILS(st_model_summary(u, NULL), ST_ERR_INVALID, "st_model_summary: out is NULL");
  /* the uncompiled model refuses the verbs that need variables */
  st_history h;
  st_fit_options fo = st_fit_default_options();
  st_dataset *ds = tiny_dataset();
  CHECK_FAILS(st_model_fit(u, ds, &fo, &h), ST_ERR_INVALID, "st_model_fit: the model is not compiled");
  CHECK_FAILS(st_model_save_weights(u, "/tmp/x"), ST_ERR_INVALID, "not compiled");
  /* void and value getters take NULL quietly */
  CHECK_EQ(st_model_layer_count(NULL), 0);
  CHECK(st_model_layer(NULL, 0) == NULL);
  CHECK_EQ(st_model_param_count(NULL, false), 0u);
  CHECK_EQ(st_model_output_shape(NULL).rank, 0);
  CHECK_EQ(st_model_weights_size(NULL), 0u);
  st_model_stop_training(NULL);
  CHECK_FAILS(st_model_set_learning_rate(NULL, 0.1), ST_ERR_INVALID, "m is NULL");
  CHECK_STREQ(st_layer_name(NULL), "");
  CHECK_EQ(st_layer_param_count(NULL), 0u);
  st_layer_destroy(NULL);
  st_model_destroy(NULL);
  st_model_destroy(u);
  st_dataset_destroy(ds);
}

static void test_null_fit_evaluate_predict(void) {
  st_model *m = make_model(0, NULL);
  st_dataset *ds = tiny_dataset();
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK_FAILS(st_model_fit(NULL, ds, &fo, &h), ST_ERR_INVALID, "st_model_fit: m is NULL");
  CHECK_FAILS(st_model_fit(m, NULL, &fo, &h), ST_ERR_INVALID, "st_model_fit: train is NULL");
  CHECK_FAILS(st_model_fit(m, ds, NULL, &h), ST_ERR_INVALID, "st_model_fit: o is NULL");
  CHECK_FAILS(st_model_fit(m, ds, &fo, NULL), ST_ERR_INVALID, "st_model_fit: out is NULL");
  fo.ncallbacks = 2;
  CHECK_FAILS(st_model_fit(m, ds, &fo, &h), ST_ERR_INVALID, "o->callbacks is NULL with o->ncallbacks = 2");
  fo.ncallbacks = -1;
  CHECK_FAILS(st_model_fit(m, ds, &fo, &h), ST_ERR_INVALID, "o->ncallbacks -1 is negative");
  st_eval_result ev;
  CHECK_FAILS(st_model_evaluate(NULL, ds, &ev), ST_ERR_INVALID, "st_model_evaluate: m is NULL");
  CHECK_FAILS(st_model_evaluate(m, NULL, &ev), ST_ERR_INVALID, "st_model_evaluate: ds is NULL");
  CHECK_FAILS(st_model_evaluate(m, ds, NULL), ST_ERR_INVALID, "st_model_evaluate: out is NULL");
  st_tensor t;
  CHECK_FAILS(st_model_predict(NULL, ds, &t), ST_ERR_INVALID, "st_model_predict: m is NULL");
  CHECK_FAILS(st_model_predict(m, NULL, &t), ST_ERR_INVALID, "st_model_predict: ds is NULL");
  CHECK_FAILS(st_model_predict(m, ds, NULL), ST_ERR_INVALID, "st_model_predict: out is NULL");
  CHECK_FAILS(st_model_save_weights(m, NULL), ST_ERR_INVALID, "st_model_save_weights: path is NULL");
  CHECK_FAILS(st_model_load_weights(m, NULL), ST_ERR_INVALID, "st_model_load_weights: path is NULL");
  CHECK_FAILS(st_model_save_weights(NULL, "/tmp/x"), ST_ERR_INVALID, "m is NULL");
  CHECK_FAILS(st_model_get_weights(m, NULL), ST_ERR_INVALID, "st_model_get_weights: out is NULL");
  CHECK_FAILS(st_model_set_weights(m, NULL), ST_ERR_INVALID, "st_model_set_weights: in is NULL");
  st_checkpoint_options co = st_checkpoint_default_options();
  char name[64];
  CHECK_FAILS(st_checkpoint_save(NULL, "/tmp/x", &co), ST_ERR_INVALID, "st_checkpoint_save: m is NULL");
  CHECK_FAILS(st_checkpoint_save(m, NULL, &co), ST_ERR_INVALID, "st_checkpoint_save: dir is NULL");
  CHECK_FAILS(st_checkpoint_save(m, "", &co), ST_ERR_INVALID, "st_checkpoint_save: dir is empty");
  CHECK_FAILS(st_checkpoint_save(m, "/tmp/x", NULL), ST_ERR_INVALID, "st_checkpoint_save: o is NULL");
  CHECK_FAILS(st_checkpoint_restore(NULL, "/tmp/x"), ST_ERR_INVALID, "st_checkpoint_restore: m is NULL");
  CHECK_FAILS(st_checkpoint_restore(m, NULL), ST_ERR_INVALID, "st_checkpoint_restore: dir is NULL");
  CHECK_FAILS(st_checkpoint_latest(NULL, name, sizeof name), ST_ERR_INVALID, "st_checkpoint_latest: dir is NULL");
  CHECK_FAILS(st_checkpoint_latest("/tmp/x", NULL, 8), ST_ERR_INVALID, "out is NULL or n is 0");
  /* the model still works after all that */
  fo = st_fit_default_options();
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  CHECK_EQ(h.epochs, 1);
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
}

static void test_null_strategy(void) {
  st_strategy *s = (st_strategy *)1;
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  CHECK_FAILS(st_strategy_create(NULL, &s), ST_ERR_INVALID, "st_strategy_create: o is NULL");
  CHECK(s == NULL);
  CHECK_FAILS(st_strategy_create(&so, NULL), ST_ERR_INVALID, "st_strategy_create: out is NULL");
  CHECK_FAILS(st_strategy_run(NULL, step, NULL), ST_ERR_INVALID, "st_strategy_run: s is NULL");
  st_model *m = make_model(2, &s);
  CHECK_FAILS(st_strategy_run(s, NULL, NULL), ST_ERR_INVALID, "st_strategy_run: fn is NULL");
  float out;
  CHECK_FAILS(st_strategy_reduce(NULL, ST_REDUCE_SUM, &out, 1, &out), ST_ERR_INVALID, "s is NULL");
  CHECK_FAILS(st_strategy_reduce(s, ST_REDUCE_SUM, NULL, 1, &out), ST_ERR_INVALID, "per_replica is NULL");
  CHECK_FAILS(st_strategy_reduce(s, (st_reduce_op)7, &out, 1, &out), ST_ERR_INVALID, "op 7 out of range");
  CHECK_FAILS(st_strategy_kind_parse(NULL, &so.kind), ST_ERR_INVALID, "name is NULL");
  CHECK_EQ(st_strategy_num_replicas_in_sync(NULL), 0);
  CHECK_EQ(st_strategy_worker_count(NULL), 1);
  CHECK_EQ(st_replica_id(NULL), 0);
  st_batch b = st_replica_slice(NULL, NULL);
  CHECK(b.size == 0 && b.x == NULL);
  CHECK_FAILS(st_replica_compute_gradients(NULL, &b, 1, NULL, NULL), ST_ERR_INVALID, "c is NULL");
  CHECK_FAILS(st_replica_apply_gradients(NULL), ST_ERR_INVALID, "c is NULL");
  CHECK_FAILS(st_replica_all_reduce(NULL, ST_REDUCE_SUM, &out, 1), ST_ERR_INVALID, "c is NULL");
  st_model_destroy(m);
  st_strategy_destroy(s);
  st_strategy_destroy(NULL);
}

static void test_null_callbacks(void) {
  CHECK_FAILS(st_csv_logger_create("x.csv", NULL), ST_ERR_INVALID, "st_csv_logger_create: out is NULL");
  CHECK_FAILS(st_early_stopping_create(st_early_stopping_default_options(), NULL), ST_ERR_INVALID,
              "st_early_stopping_create: out is NULL");
  CHECK_FAILS(st_progress_create(stderr, false, 1, NULL), ST_ERR_INVALID, "out is NULL");
  CHECK_FAILS(st_model_checkpoint_create("d", NULL, false, 1, NULL), ST_ERR_INVALID, "out is NULL");
  CHECK_FAILS(st_tensorboard_callback_create(NULL, 0, NULL), ST_ERR_INVALID, "out is NULL");
  CHECK_FAILS(st_tensorboard_create("d", NULL), ST_ERR_INVALID, "out is NULL");
  CHECK_FAILS(st_tensorboard_flush(NULL), ST_ERR_INVALID, "tb is NULL");
  CHECK_FAILS(st_tensorboard_scalar(NULL, false, "loss", 0, 1.0), ST_ERR_INVALID, "tb is NULL");
  st_model *m = (st_model *)1;
  CHECK_FAILS(st_builtin_model_create(NULL, NULL, &m), ST_ERR_INVALID, "name is NULL");
  CHECK(m == NULL);
  CHECK_FAILS(st_model_from_keras_json(NULL, NULL, &m), ST_ERR_INVALID, "path is NULL");
  st_callback_destroy(NULL);
  st_history_destroy(NULL);
}

/* ---- 3. lifetimes ---------------------------------------------------------- */
static void test_layer_in_two_models(void) {
  st_model_options mo = st_model_default_options(st_shape1(FEAT));
  st_model *a = NULL, *b = NULL;
  CHECK_OK(st_sequential_create(&mo, &a));
  CHECK_OK(st_sequential_create(&mo, &b));
  st_layer *l = NULL;
  CHECK_OK(st_dense(3, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(a, l));
  CHECK_FAILS(st_model_add(b, l), ST_ERR_INVALID, "layer 'dense' already belongs to a model");
  CHECK_FAILS(st_model_add(a, l), ST_ERR_INVALID, "already belongs to a model");
  CHECK_EQ(st_model_layer_count(a), 1);
  CHECK_EQ(st_model_layer_count(b), 0);
  st_layer_destroy(l); /* the model's: ignored */
  CHECK_STREQ(st_layer_name(st_model_layer(a, 0)), "dense");
  st_model_destroy(b);
  st_model_destroy(a); /* frees l once (ASan/valgrind catch a double free) */
}

static void test_strategy_destroyed_first(void) {
  /* bound (compiled) */
  st_strategy *s = NULL;
  st_model *m = make_model(2, &s);
  st_strategy_destroy(s);
  st_strategy_destroy(s); /* the second call does nothing: s lives until m goes */
  st_dataset *ds = tiny_dataset();
  st_fit_options fo = st_fit_default_options();
  st_history h;
  CHECK_FAILS(st_model_fit(m, ds, &fo, &h), ST_ERR_INVALID,
              "st_model_fit: its strategy was destroyed");
  st_eval_result ev;
  CHECK_FAILS(st_model_evaluate(m, ds, &ev), ST_ERR_INVALID, "its strategy was destroyed");
  CHECK_FAILS(st_model_save_weights(m, "/tmp/never"), ST_ERR_INVALID, "its strategy was destroyed");
  st_model_destroy(m); /* frees the strategy too */
  /* not yet compiled */
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MIRRORED);
  so.replicas = 2;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape1(FEAT));
  mo.strategy = s;
  st_model *u = NULL;
  st_layer *l = NULL;
  CHECK_OK(st_sequential_create(&mo, &u));
  CHECK_OK(st_dense(3, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(u, l));
  st_strategy_destroy(s);
  st_compile_options co = st_compile_default_options();
  CHECK_FAILS(st_model_compile(u, &co), ST_ERR_INVALID,
              "st_model_compile: its strategy was destroyed");
  st_model *v = NULL;
  CHECK_FAILS(st_sequential_create(&mo, &v), ST_ERR_INVALID, "o->strategy was destroyed");
  st_model_destroy(u);
  st_dataset_destroy(ds);
}

/* ---- 4. a failed add makes compile refuse ---------------------------------- */
static void test_failed_add_refuses_compile(void) {
  st_model_options mo = st_model_default_options(st_shape1(FEAT));
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(8, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK(st_dense(0, ST_ACT_RELU, &l) != ST_OK); /* l = NULL */
  CHECK(st_model_add(m, l) != ST_OK);
  CHECK_OK(st_dense(CLASSES, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l)); /* the last add succeeds: the README's check passes */
  st_compile_options co = st_compile_default_options();
  CHECK_FAILS(st_model_compile(m, &co), ST_ERR_INVALID,
              "st_model_compile: layer 1 was not added: ");
  CHECK(strstr(st_last_error(), "units") != NULL);
  st_model_destroy(m);
  /* a layer that fails to build names its class */
  CHECK_OK(st_sequential_create(&mo, &m));
  CHECK_OK(st_conv2d(4, 3, ST_ACT_RELU, &l)); /* needs a rank-3 input */
  CHECK(st_model_add(m, l) != ST_OK);
  CHECK_OK(st_dense(CLASSES, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_FAILS(st_model_compile(m, &co), ST_ERR_INVALID, "layer 0 (Conv2D) was not added: ");
  st_model_destroy(m);
}

static const check_case cases[] = {
    CHECK_CASE(test_null_model_layer),
    CHECK_CASE(test_null_fit_evaluate_predict),
    CHECK_CASE(test_null_strategy),
    CHECK_CASE(test_null_callbacks),
    CHECK_CASE(test_layer_in_two_models),
    CHECK_CASE(test_strategy_destroyed_first),
    CHECK_CASE(test_failed_add_refuses_compile),
    CHECK_CASE(test_run_step_fails),
    CHECK_CASE(test_run_early_return),
    CHECK_CASE(test_run_bad_data),
    CHECK_CASE(test_run_ok),
};

int main(int argc, char **argv) {
  make_data();
  return CHECK_MAIN(argc, argv, cases);
}
