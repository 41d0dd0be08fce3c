/* Custom training loops across processes: under `mpirun -np 2`,
 * multi_worker_mirrored's st_strategy_run trains to the weight bytes of fit
 * for the same global batches (37 examples: uneven worker and replica
 * shares), with one and with two local replicas per worker (Adam), and both
 * workers end with the same bytes; st_strategy_reduce,
 * st_strategy_reduce_tensor and st_replica_all_reduce reduce over every
 * replica of every worker (worker-major, replica order: the expected sums are
 * computed here in that order); a worker that fails inside the run makes its
 * peer's run fail at once with ST_ERR_PEER naming rank 1, so does one that
 * leaves (destroys its model instead of running the step), and one that never
 * comes makes it fail with ST_ERR_TIMEOUT naming rank 1 within the
 * collective timeout (no hang). Every step of the loop also tries a nested
 * st_strategy_run and st_checkpoint_save from inside the step function:
 * refused on every replica of both workers, every step (issue 34), with the
 * weights still fit's bytes. One model per
 * process: each run is its own mpirun. Run by CTest directly, it starts
 * itself under `mpirun -np 2`; skips (77) when mpirun is missing or Strata
 * was built without MPI. */
#define _GNU_SOURCE
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "distribute/collective/collective.h"
#include "distribute/strategy.h"
#include "mpi_env.h"
#include "shard_fixture.h"

enum { BATCH = 37 };

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
static const bool g_sanitized = true;
#else
static const bool g_sanitized = false;
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* shard_fixture.h's model (Adam) with a collective timeout of `timeout` s. */
static st_model *model(int replicas, double timeout) {
  return sf_model_timeout(ST_STRATEGY_MULTI_WORKER_MIRRORED, replicas, false, 0, timeout);
}

static void save(st_model *m, const char *dir, const char *name, int rank) {
  char path[800];
  snprintf(path, sizeof path, "%s/%s-r%d", dir, name, rank);
  CHECK_OK(st_model_save_weights(m, path));
}

typedef struct step_arg {
  st_batch global;
  int fail_rank, rank; /* fail_rank: the worker whose replicas fail (-1: none) */
  st_model *m;         /* loop: tries re-entrant calls on it (NULL: none) */
  int refused;         /* re-entrant calls refused with the message (atomic) */
} step_arg;

/* One step as fit's: this replica's share, gradients over the global batch,
 * the all-reduced update. */
static st_status step(st_replica_context *c, void *p) {
  step_arg *a = p;
  if (a->rank == a->fail_rank) return st_error(ST_ERR_INVALID, "test: rank %d fails", a->rank);
  if (a->m) { /* issue 34: a nested run or checkpoint save is refused on every replica, every step */
    st_checkpoint_options co = st_checkpoint_default_options();
    const char *want = "cannot be called from inside st_strategy_run's step function";
    if (st_strategy_run(a->m->strategy, step, a) == ST_ERR_INVALID && strstr(st_last_error(), want) &&
        st_checkpoint_save(a->m, "/nonexistent/ckpt", &co) == ST_ERR_INVALID &&
        strstr(st_last_error(), want))
      __atomic_add_fetch(&a->refused, 1, __ATOMIC_RELAXED);
  }
  st_batch local = st_replica_slice(c, &a->global);
  st_status s = st_replica_compute_gradients(c, &local, a->global.size, NULL, NULL);
  return s == ST_OK ? st_replica_apply_gradients(c) : s;
}

/* Values of replica i of worker w (every worker can compute every one). */
static float value(int w, int i, size_t j) { return 0.1f * (float)(w * 7 + i * 3) + (float)j / 3.0f; }

typedef struct ar_arg {
  int rank, workers, local;
  int bad; /* replicas whose MEAN differs from the expected one */
} ar_arg;

static st_status all_reduce_fn(st_replica_context *c, void *p) {
  ar_arg *a = p;
  float v[3];
  for (size_t j = 0; j < 3; j++) v[j] = value(a->rank, st_replica_id(c), j);
  st_status s = st_replica_all_reduce(c, ST_REDUCE_SUM, v, 3);
  if (s != ST_OK) return s;
  /* the local replicas first (in order), then the workers in rank order */
  for (size_t j = 0; j < 3; j++) {
    float want = 0;
    for (int w = 0; w < a->workers; w++) {
      float loc = value(w, 0, j);
      for (int i = 1; i < a->local; i++) loc += value(w, i, j);
      want = w ? want + loc : loc;
    }
    if (v[j] != want) __atomic_add_fetch(&a->bad, 1, __ATOMIC_RELAXED);
  }
  return ST_OK;
}

static void check_reduce(st_model *m, int rank, int local) {
  enum { N = 5 };
  float per[4 * N], out[N], want[N], *ptrs[4];
  for (int i = 0; i < local; i++) {
    for (size_t j = 0; j < N; j++) per[i * N + j] = value(rank, i, j);
    ptrs[i] = per + i * N;
  }
  for (int op = 0; op < 2; op++) {
    for (size_t j = 0; j < N; j++) { /* worker-major, replica order */
      float acc = value(0, 0, j);
      for (int w = 0; w < 2; w++)
        for (int i = w ? 0 : 1; i < local; i++) acc += value(w, i, j);
      want[j] = op ? acc * (1.0f / (float)(2 * local)) : acc;
    }
    CHECK_OK(st_strategy_reduce(m->strategy, (st_reduce_op)op, per, N, out));
    CHECK(memcmp(out, want, sizeof out) == 0);
    memset(out, 0, sizeof out);
    CHECK_OK(st_strategy_reduce_tensor(m->strategy, (st_reduce_op)op, (const float *const *)ptrs,
                                       N, out));
    CHECK(memcmp(out, want, sizeof out) == 0);
  }
  /* another shape on one worker: a clear error on both, no hang */
  st_status s = st_strategy_reduce(m->strategy, ST_REDUCE_SUM, per, rank ? N - 1 : N, out);
  CHECK_EQ(s, ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "every worker must reduce the same shape") != NULL);
  ar_arg a = {rank, 2, local, 0};
  CHECK_OK(st_strategy_run(m->strategy, all_reduce_fn, &a));
  CHECK_EQ(a.bad, 0);
}

/* One worker of one run: "fit" (1 epoch), "loop" (the same batches through
 * st_strategy_run, then the reduce checks), "fail" (rank 1's replicas fail
 * in the second step), "leave" (rank 1 destroys its model instead of the
 * second step) or "absent" (rank 1 sleeps past the timeout instead). */
static void worker(const char *mode, int local, const char *dir) {
  int rank = 0, size = 0;
  CHECK_OK(st__mpi_world(&rank, &size));
  CHECK(size == 2);
  st_model *m = model(local, !strcmp(mode, "fit") || !strcmp(mode, "loop") ? 30 : 3);
  if (!m) return;
  char name[64];
  snprintf(name, sizeof name, "%s%d", mode, local);
  if (!strcmp(mode, "fit")) {
    st_dataset *ds = fixture_dataset(sf_x, sf_y, SF_N, SF_D, BATCH);
    st_fit_options fo = st_fit_default_options();
    st_history h;
    CHECK_OK(st_model_fit(m, ds, &fo, &h));
    st_history_destroy(&h);
    st_dataset_destroy(ds);
    save(m, dir, name, rank);
  } else if (!strcmp(mode, "loop")) {
    step_arg a = {.fail_rank = -1, .rank = rank, .m = m};
    int steps = 0;
    for (int at = 0; at < SF_N; at += BATCH, steps++) {
      a.global = (st_batch){SF_N - at < BATCH ? SF_N - at : BATCH, sf_x + (size_t)at * SF_D,
                            sf_y + at};
      CHECK_OK(st_strategy_run(m->strategy, step, &a));
    }
    CHECK_MSG(a.refused == steps * local, "rank %d: %d of %d re-entrant steps refused", rank,
              a.refused, steps * local);
    save(m, dir, name, rank);
    check_reduce(m, rank, local);
  } else {
    bool absent = !strcmp(mode, "absent"), leave = !strcmp(mode, "leave");
    step_arg a = {.fail_rank = absent || leave ? -1 : 1, .rank = rank,
                  .global = (st_batch){BATCH, sf_x, sf_y}};
    CHECK_OK(st_strategy_run(m->strategy, step, &(step_arg){a.global, -1, rank, NULL, 0}));
    if (absent && rank == 1) sleep(4); /* past rank 0's timeout (3 s) */
    double t0 = now();
    bool away = (absent || leave) && rank == 1; /* rank 1 runs no second step */
    st_status s = away ? ST_ERR_PEER : st_strategy_run(m->strategy, step, &a);
    double took = now() - t0;
    /* checked by the launcher: a rank whose transport failed skips
     * MPI_Finalize, so mpirun's exit code says nothing */
    char path[800];
    snprintf(path, sizeof path, "%s/%s-r%d", dir, mode, rank);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
      fprintf(f, "%d %.3f %s\n", (int)s, took, s != ST_OK && !away ? st_last_error() : "");
      fclose(f);
    }
  }
  st_model_destroy(m);
}

static void run(const char *self, const char *dir, const char *mode, int local) {
  char cmd[4600];
  snprintf(cmd, sizeof cmd, "STRATA_LOOP_RUN='%s %d %s' timeout 120 mpirun -np 2 %s", mode, local,
           dir, self);
  CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
}

static void compare(const char *dir, const char *a, const char *b) {
  char pa[800], pb[800];
  snprintf(pa, sizeof pa, "%s/%s", dir, a);
  snprintf(pb, sizeof pb, "%s/%s", dir, b);
  CHECK_MSG(sf_same_file(pa, pb), "%s and %s differ", a, b);
}

/* Rank 1 failed (or never came): rank 0's run failed with `want`, naming
 * rank 1, within the collective timeout (3 s) and a second. */
static void check_leaving(const char *self, const char *dir, const char *mode, st_status want) {
  char cmd[4600], path[800], msg[2048] = "";
  snprintf(cmd, sizeof cmd, "STRATA_LOOP_RUN='%s 1 %s' timeout 120 mpirun -np 2 %s >/dev/null 2>&1",
           mode, dir, self);
  if (system(cmd) == -1) CHECK(!"system failed");
  snprintf(path, sizeof path, "%s/%s-r0", dir, mode);
  FILE *f = fopen(path, "r");
  CHECK_MSG(f != NULL, "%s: rank 0 wrote no verdict", mode);
  if (!f) return;
  int st = 0;
  double took = -1;
  CHECK_EQ(fscanf(f, "%d %lf %2047[^\n]", &st, &took, msg), 3);
  fclose(f);
  fprintf(stderr, "%s: rank 0 failed after %.2f s: %s\n", mode, took, msg);
  CHECK_EQ(st, (int)want);
  CHECK_MSG(strstr(msg, "rank 1") != NULL, "%s: %s", mode, msg);
  CHECK_MSG(took >= 0 && took < 3 + 1, "%s: rank 0 waited %.1f s (collective timeout 3 s)", mode,
            took);
}

static void launch(const char *self) {
  const char *missing = mpi_test_missing();
  if (missing) {
    check_skip(missing);
    return;
  }
  char dir[] = "/tmp/strata_loop_mpi_XXXXXX", cmd[4600];
  CHECK(mkdtemp(dir) != NULL);
  mpi_test_env();
  if (g_sanitized) { /* ~7 s per mpirun there: the 2-replica loop and its reduces only */
    fprintf(stderr, "sanitizer build: only the loop with 2 local replicas (the fit comparison "
            "and the leaving workers run in the Release suite)\n");
    run(self, dir, "loop", 2);
    compare(dir, "loop2-r0", "loop2-r1");
  }
  for (int local = 1; local <= 2 && !g_sanitized; local++) {
    run(self, dir, "fit", local);
    run(self, dir, "loop", local);
    char f[32], l[32], l1[32];
    snprintf(f, sizeof f, "fit%d-r0", local);
    snprintf(l, sizeof l, "loop%d-r0", local);
    snprintf(l1, sizeof l1, "loop%d-r1", local);
    compare(dir, f, l);
    compare(dir, l, l1);
  }
  if (!g_sanitized) {
    check_leaving(self, dir, "fail", ST_ERR_PEER);
    check_leaving(self, dir, "leave", ST_ERR_PEER);
    check_leaving(self, dir, "absent", ST_ERR_TIMEOUT);
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

static const char *g_self;
static void test_custom_loop_workers(void) {
  const char *env = getenv("STRATA_LOOP_RUN");
  char mode[16];
  int local, at;
  if (getenv("OMPI_COMM_WORLD_SIZE") && env && sscanf(env, "%15s %d %n", mode, &local, &at) == 2)
    worker(mode, local, env + at);
  else
    launch(g_self);
}

int main(int argc, char **argv) {
  g_self = argv[0];
  (void)sf_model, (void)sf_fit; /* shard_fixture.h's: this test builds its own */
  sf_make_data();
  static const check_case cases[] = {CHECK_CASE(test_custom_loop_workers)};
  return CHECK_MAIN(argc, argv, cases);
}
