/* The Gloo transport (multi-worker jobs launched from TF_CONFIG, no mpirun)
 * against the plain rank-order reference, with 2 and 3 worker processes
 * forked here on loopback (worker 0 serves the rendezvous at its address):
 * all_reduce (SUM, MEAN; 0, 1, fewer elements than workers, odd sizes, 1 Mi
 * floats), broadcast from every root, all_gather, reduce_scatter, barrier,
 * point-to-point send/recv/wait in order; results bit-identical to the
 * reference (the sums of the MPI transport) on every worker, over messages
 * (STRATA_MPI_SHM=0) and with the workers' shared memory; transports made,
 * used once and destroyed in a row (no worker's close may fail a peer still
 * finishing). Then the faults: a worker that never starts (worker 0's
 * connect fails within the timeout naming the rendezvous), a worker that
 * leaves after connecting (the other's all-reduce fails naming worker 1,
 * within the timeout, and later operations fail at once), and one that
 * leaves with an error (st__collective_gloo_leave: over messages its peer
 * fails at once, long before the timeout). Skips (77) in a build without Gloo. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "free_port.h"
#include "distribute/collective/collective.h"

static float value(int r, size_t i) {
  return 0.1f * (float)(r + 1) + 1e-3f * (float)(i % 97) + 1e-7f * (float)r;
}

static float reference(int size, size_t i, st_reduce_op op) {
  float acc = value(0, i);
  for (int r = 1; r < size; r++) acc += value(r, i);
  return op == ST_REDUCE_MEAN ? acc * (1.0f / (float)size) : acc;
}

static char g_addr[ST_MAX_WORKERS][32];
static const char *g_addrs[ST_MAX_WORKERS];

static void make_addresses(int size) {
  for (int r = 0; r < size; r++) {
    snprintf(g_addr[r], sizeof g_addr[r], "127.0.0.1:%d", r == 0 ? free_port() : 1 + r);
    g_addrs[r] = g_addr[r];
  }
}

/* Every operation once on worker `rank`: the number of mismatches. */
static int run_ops(st_collective *c, int rank, int size) {
  int bad = 0;
  const size_t sizes[] = {0, 1, 2, 7, 1001, 1 << 20};
  for (int o = 0; o < 2; o++)
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
      size_t n = sizes[k];
      float *b = malloc((n + 1) * sizeof *b);
      for (size_t i = 0; i < n; i++) b[i] = value(rank, i);
      if (c->vt->all_reduce(c, rank, b, n, (st_reduce_op)o) != ST_OK) bad++;
      for (size_t i = 0; i < n; i++) bad += b[i] != reference(size, i, (st_reduce_op)o);
      free(b);
    }
  for (int root = 0; root < size; root++) {
    float b[5];
    for (int i = 0; i < 5; i++) b[i] = value(rank, (size_t)i);
    if (c->vt->broadcast(c, rank, b, 5, root) != ST_OK) bad++;
    for (int i = 0; i < 5; i++) bad += b[i] != value(root, (size_t)i);
  }
  float send[3 * ST_MAX_WORKERS], recv[3 * ST_MAX_WORKERS];
  for (int i = 0; i < 3; i++) send[i] = value(rank, (size_t)i);
  if (c->vt->all_gather(c, rank, send, 3, recv) != ST_OK) bad++;
  for (int r = 0; r < size; r++)
    for (int i = 0; i < 3; i++) bad += recv[r * 3 + i] != value(r, (size_t)i);
  for (int i = 0; i < 3 * size; i++) send[i] = value(rank, (size_t)i);
  if (c->vt->reduce_scatter(c, rank, send, recv, 3, ST_REDUCE_SUM) != ST_OK) bad++;
  for (int i = 0; i < 3; i++) bad += recv[i] != reference(size, (size_t)(rank * 3 + i), ST_REDUCE_SUM);
  if (c->vt->barrier(c, rank) != ST_OK) bad++;
  /* point to point: a ring, two messages each way, in order */
  int next = (rank + 1) % size, prev = (rank + size - 1) % size, h1, h2;
  float m1[4] = {(float)rank, 1, 2, 3}, m2[2] = {(float)rank + 10, 5}, r1[4], r2[2];
  if (c->vt->send(c, m1, 4, next, &h1) != ST_OK || c->vt->send(c, m2, 2, next, &h2) != ST_OK) bad++;
  if (c->vt->recv(c, r1, 4, prev) != ST_OK || c->vt->recv(c, r2, 2, prev) != ST_OK) bad++;
  if (c->vt->wait(c, h1) != ST_OK || c->vt->wait(c, h2) != ST_OK) bad++;
  bad += r1[0] != (float)prev || r1[3] != 3 || r2[0] != (float)prev + 10 || r2[1] != 5;
  return bad;
}

/* Two transports of one job used in turn (each its own mesh, one store),
 * the second made and destroyed `rounds` times: a worker done with it
 * closes while the others may still be reading its last message. */
static int two_transports(st_collective *a, int rank, int size, int rounds) {
  int bad = 0;
  for (int k = 0; k < rounds; k++) {
    st_collective *b = NULL;
    if (st__collective_gloo_create(20.0, NULL, &b) != ST_OK) return bad + 1;
    float x[3] = {1, 2, 3}, y[3] = {10, 20, 30};
    bad += a->vt->all_reduce(a, rank, x, 3, ST_REDUCE_SUM) != ST_OK ||
           b->vt->all_reduce(b, rank, y, 3, ST_REDUCE_SUM) != ST_OK;
    bad += x[2] != 3.0f * (float)size || y[2] != 30.0f * (float)size;
    st__collective_destroy(b);
  }
  return bad;
}

/* Worker 0 of a job whose worker 1 left (mode 1: gone without a word,
 * mode 2: with an error, under a 30 s timeout): its all-reduce fails naming
 * worker 1 within 10 s, later operations at once. */
static int partner_left(st_collective *c, int rank) {
  float b[64] = {0};
  double t0 = (double)time(NULL);
  st_status s = c->vt->all_reduce(c, rank, b, 64, ST_REDUCE_SUM);
  const char *e = st_last_error();
  double waited = (double)time(NULL) - t0;
  int bad = s == ST_OK || !strstr(e, "worker 1") || waited > 10;
  fprintf(stderr, "worker 0 after the other left (%.0f s): %s\n", waited, e);
  st_status later = c->vt->barrier(c, rank);
  if (later != ST_ERR_PEER) fprintf(stderr, "worker 0: a later barrier gave %d\n", (int)later);
  return bad + (later != ST_ERR_PEER);
}

/* A forked worker: join, connect, run, exit 0 when every result matched.
 * mode 0: every operation; 1, 2: worker 1 leaves (partner_left). */
static void worker(int rank, int size, int mode) {
  alarm(60);
  st_collective *c = NULL;
  st_status s = st__gloo_world_join(rank, size, g_addrs);
  if (s == ST_OK) s = st__collective_gloo_create(mode == 1 ? 3.0 : mode ? 30.0 : 20.0, NULL, &c);
  if (s != ST_OK) {
    fprintf(stderr, "worker %d: %s\n", rank, st_last_error());
    _exit(10);
  }
  if (mode == 1 && rank == 1) _exit(0); /* leaves without a word */
  if (mode == 2 && rank == 1) { /* leaves with an error (else the destroy waits 30 s) */
    st__collective_gloo_leave(c, "worker 1 failed");
    st__collective_destroy(c);
    _exit(0);
  }
  int bad = mode ? partner_left(c, rank) : run_ops(c, rank, size) + two_transports(c, rank, size, 8);
  st__collective_destroy(c);
  _exit(bad ? 1 : 0);
}

/* Fork size workers of mode; the exit codes, in rank order, into rc. */
static void run_job(int size, int mode, int *rc) {
  make_addresses(size);
  pid_t pid[ST_MAX_WORKERS];
  for (int r = 0; r < size; r++)
    if ((pid[r] = fork()) == 0) worker(r, size, mode);
  for (int r = 0; r < size; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    rc[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
}

static void test_two_workers(void) {
  int rc[2];
  run_job(2, 0, rc);
  CHECK_EQ(rc[0], 0);
  CHECK_EQ(rc[1], 0);
}

static void test_three_workers(void) {
  int rc[3];
  run_job(3, 0, rc);
  for (int r = 0; r < 3; r++) CHECK_EQ(rc[r], 0);
}

/* The same over messages (as between hosts) */
static void test_three_workers_messages(void) {
  int rc[3];
  setenv("STRATA_MPI_SHM", "0", 1);
  run_job(3, 0, rc);
  unsetenv("STRATA_MPI_SHM");
  for (int r = 0; r < 3; r++) CHECK_EQ(rc[r], 0);
}

static void test_worker_leaves(void) {
  int rc[2];
  run_job(2, 1, rc);
  CHECK_EQ(rc[0], 0);
  CHECK_EQ(rc[1], 0);
}

static void test_worker_leaves_with_error(void) {
  int rc[2];
  setenv("STRATA_MPI_SHM", "0", 1); /* shared memory sees a lost worker only at the timeout */
  run_job(2, 2, rc);
  unsetenv("STRATA_MPI_SHM");
  CHECK_EQ(rc[0], 0);
  CHECK_EQ(rc[1], 0);
}

/* In a child (a process joins one job): exit 0 when every check held. */
static int in_child(void (*fn)(void)) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    check_failures_ = 0; /* the parent's so far are not this child's */
    fn();
    _exit(check_failures_ ? 1 : 0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void never_starts(void) {
  make_addresses(2);
  st_collective *c = NULL;
  time_t t0 = time(NULL);
  CHECK_OK(st__gloo_world_join(0, 2, g_addrs));
  st_status s = st__collective_gloo_create(2.0, NULL, &c);
  CHECK(s == ST_ERR_TIMEOUT || s == ST_ERR_PEER);
  CHECK(c == NULL);
  char want[96];
  snprintf(want, sizeof want, "worker 1 (%s) did not join within 2 s", g_addrs[1]);
  CHECK_MSG(strstr(st_last_error(), want) != NULL, "%s", st_last_error());
  CHECK_LE(time(NULL) - t0, 8);
}

static void test_worker_never_starts(void) { CHECK_EQ(in_child(never_starts), 0); }

static void bad_arguments(void) {
  st_collective *c = NULL;
  make_addresses(2);
  CHECK(st__collective_gloo_create(1.0, NULL, &c) == ST_ERR_INVALID); /* not joined */
  CHECK(st__gloo_world_join(2, 2, g_addrs) == ST_ERR_INVALID);
  const char *bad[2] = {"no-port", "127.0.0.1:2"};
  CHECK(st__gloo_world_join(0, 2, bad) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "worker 0: address 'no-port'") != NULL, "%s", st_last_error());
  CHECK_OK(st__gloo_world_join(1, 2, g_addrs));
  CHECK_OK(st__gloo_world_join(1, 2, g_addrs)); /* the same job again */
  CHECK(st__gloo_world_join(0, 2, g_addrs) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "already joined a job as worker 1 of 2") != NULL, "%s",
            st_last_error());
}

static void test_bad_arguments(void) { CHECK_EQ(in_child(bad_arguments), 0); }

int main(int argc, char **argv) {
  if (!st__gloo_built()) check_skip("this build has no Gloo transport (libgloo-dev not found)");
  static const check_case cases[] = {CHECK_CASE(test_two_workers), CHECK_CASE(test_three_workers),
                                     CHECK_CASE(test_three_workers_messages),
                                     CHECK_CASE(test_worker_leaves),
                                     CHECK_CASE(test_worker_leaves_with_error),
                                     CHECK_CASE(test_worker_never_starts),
                                     CHECK_CASE(test_bad_arguments)};
  return check_main(argc, argv, cases, sizeof cases / sizeof *cases);
}
