/* Three workers, one of which passes another count to an all-reduce (issue
 * 30): every worker ends with a clear error, none hangs, none dies of a
 * signal. Three worker processes forked here on 127.0.0.1 (worker 0 serves
 * the rendezvous), a fresh job per case, collective timeout 3 s:
 *  - over Gloo's messages (STRATA_MPI_SHM=0), the odd worker 2 (small
 *    counts), the odd worker 0 (the rendezvous; small) and the odd worker 1
 *    with parts larger than a staged message (most of each part goes
 *    outside the staging areas): every worker fails with ST_ERR_INVALID
 *    (not a lost peer, not its timeout), the agreeing workers naming the
 *    odd worker with both counts ("worker J sent its all-reduce #1 with N
 *    floats, this worker's count: M"), the odd worker naming an agreeing one
 *    with both counts; every buffer unchanged. This holds whichever worker
 *    sees the mismatch first: the first to see it closes its pairs at once,
 *    and the others still read what had reached them before the close.
 *  - through shared memory (the default on one host, shm.c): the same,
 *    with shm.c's words ("rank J passed N floats, this rank M").
 * Skips (77) in a build without Gloo. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fork_workers.h"
#include "free_port.h"
#include "distribute/collective/collective.h"

enum { W = 3, MSG = 1024 };

typedef struct count_case {
  const char *name;
  int odd;         /* the worker that passes the other count */
  size_t n, other; /* floats the others pass, floats the odd worker passes */
  int shm;         /* through shared memory */
} count_case;

static const count_case g_cases[] = {
    {"small counts, worker 2 odd", 2, 8, 12, 0},
    {"small counts, worker 0 odd", 0, 8, 4, 0},
    {"large counts, worker 1 odd", 1, 600000, 900000, 0},
    {"through shared memory, worker 2 odd", 2, 8, 12, 1},
};

static char g_addr[W][32];
static const char *g_addrs[W];

/* Worker `rank` of case k: writes "<status> kept=<0|1>: <message>" into fd. */
static void worker(const void *arg, int rank, int fd) {
  const count_case *k = arg;
  alarm(60); /* a hang ends by this signal: the parent sees it */
  char out[MSG];
  st_collective *c = NULL;
  st_status s = st__gloo_world_join(rank, W, g_addrs);
  if (s == ST_OK) s = st__collective_gloo_create(3.0, NULL, &c);
  if (s != ST_OK) {
    snprintf(out, sizeof out, "setup %s: %s", st_status_string(s), st_last_error());
    (void)!write(fd, out, strlen(out) + 1);
    _exit(10);
  }
  size_t n = rank == k->odd ? k->other : k->n;
  float *buf = malloc(n * sizeof *buf);
  for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 97);
  s = c->vt->all_reduce(c, rank, buf, n, ST_REDUCE_SUM);
  int kept = 1;
  for (size_t i = 0; i < n; i++) kept &= buf[i] == (float)(i % 97);
  snprintf(out, sizeof out, "%s kept=%d: %s", st_status_string(s), kept,
           s == ST_OK ? "ok" : st_last_error());
  (void)!write(fd, out, strlen(out) + 1);
  free(buf);
  st__collective_destroy(c);
  _exit(0);
}

/* Run case k: each worker's line into got[rank], its exit into rc[rank]. */
static void run_case(const count_case *k, char got[W][MSG], int rc[W]) {
  if (k->shm) unsetenv("STRATA_MPI_SHM");
  else setenv("STRATA_MPI_SHM", "0", 1);
  for (int r = 0; r < W; r++) {
    snprintf(g_addr[r], sizeof g_addr[r], "127.0.0.1:%d", r == 0 ? free_port() : r + 1);
    g_addrs[r] = g_addr[r];
  }
  fork_workers(W, worker, k, &got[0][0], MSG, rc);
  for (int r = 0; r < W; r++)
    printf("# %s: worker %d (exit %d): %s\n", k->name, r, rc[r], got[r]);
}

/* What worker r must say: the worker it names and both counts, in the
 * words of the messages' headers or of shm.c. An agreeing worker names the
 * odd one; the odd one names any agreeing one. */
static int names_mismatch(const count_case *k, int r, const char *got) {
  char want[200];
  for (int j = 0; j < W; j++) {
    if (j == r || (r != k->odd && j != k->odd)) continue;
    size_t theirs = j == k->odd ? k->other : k->n, mine = r == k->odd ? k->other : k->n;
    if (k->shm)
      snprintf(want, sizeof want, "all-reduce through shared memory: rank %d passed %zu floats, "
               "this rank %zu", j, theirs, mine);
    else
      snprintf(want, sizeof want, "all-reduce #1: worker %d sent its all-reduce #1 with %zu "
               "floats, this worker's count: %zu", j, theirs, mine);
    if (strstr(got, want)) return 1;
  }
  return 0;
}

static void test_counts(void) {
  const char *inval = st_status_string(ST_ERR_INVALID);
  for (size_t t = 0; t < sizeof g_cases / sizeof *g_cases; t++) {
    const count_case *k = &g_cases[t];
    char got[W][MSG];
    int rc[W];
    run_case(k, got, rc);
    for (int r = 0; r < W; r++) {
      CHECK_MSG(rc[r] == 0, "%s: worker %d exited %d (a signal: 128+; a hang: SIGALRM)", k->name,
                r, rc[r]);
      CHECK_MSG(strncmp(got[r], inval, strlen(inval)) == 0, "%s: worker %d: %s", k->name, r,
                got[r]);
      CHECK_MSG(names_mismatch(k, r, got[r]), "%s: worker %d does not name the other worker and "
                "both counts: %s", k->name, r, got[r]);
      CHECK_MSG(strstr(got[r], "kept=1") != NULL, "%s: worker %d: %s", k->name, r, got[r]);
    }
  }
}

int main(int argc, char **argv) {
  if (!st__gloo_built()) check_skip("this build has no Gloo transport (libgloo-dev not found)");
  signal(SIGPIPE, SIG_IGN);
  static const check_case cases[] = {CHECK_CASE(test_counts)};
  return check_main(argc, argv, cases, sizeof cases / sizeof *cases);
}
