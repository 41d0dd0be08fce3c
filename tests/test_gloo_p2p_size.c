/* The Gloo transport does not trust the peer's size (issue 29, D1's Gloo
 * twin). Gloo's unbound-buffer receive aborts the process (an exception in
 * its device thread) when the message is larger than the posted receive and
 * leaves the rest of the buffer unwritten, silently, when it is smaller. Two
 * worker processes forked here on 127.0.0.1 (worker 0 serves the
 * rendezvous), a fresh job per case:
 *  - point to point, worker 0 sends, worker 1 receives into a buffer of
 *    exactly its expected size filled with a sentinel: a larger message, a
 *    smaller one, an empty one where floats are expected, and a matching one.
 *    On a mismatch the receiver gets ST_ERR_INVALID naming worker 0, both
 *    counts and the receive; its buffer keeps the sentinel; the sender's wait
 *    fails as a lost peer (the receiver closed the pairs), not by its
 *    timeout (an empty message's sender is done when its header went);
 *    nobody dies of a signal. The matching message arrives intact.
 *  - all-reduce with other counts on the two workers, over Gloo's messages
 *    (STRATA_MPI_SHM=0; small, and large enough that most of each part goes
 *    outside the staging areas): both fail naming the other worker and
 *    their own count, at least one at once with ST_ERR_INVALID naming both
 *    counts (the staged header; the other may first see the pairs closed);
 *    a broadcast (worker 0, its root) against an all-reduce of the same
 *    count (over messages): refused by at least one of them naming the
 *    other's collective; through shared memory (the default on one
 *    host, shm.c): both fail at once with ST_ERR_INVALID naming the other
 *    rank and both counts; no signal; buffers unchanged.
 * Skips (77) in a build without Gloo. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fork_workers.h"
#include "free_port.h"
#include "distribute/collective/collective.h"

enum { CASES = 8, MSG = 1024 };
/* per case: floats worker 0 sends, floats worker 1 expects (cases 4-6: the
 * counts each passes to an all-reduce, over messages / shared memory / over
 * messages with parts larger than a staged message, whose rest goes straight
 * into a buffer of the size the receiver expected) */
static const size_t g_sizes[CASES][2] = {{16, 8},   {4, 8},  {0, 8},          {1000, 1000},
                                         {16, 8},   {16, 8}, {600000, 400000}, {8, 8}};
static const char *g_names[CASES] = {"larger message", "smaller message", "empty message",
                                     "matching message", "all-reduce of other counts",
                                     "all-reduce of other counts through shared memory",
                                     "large all-reduce of other counts",
                                     "a broadcast against an all-reduce"};

static char g_addr[2][32];
static const char *g_addrs[2];

/* Worker `rank` of case k: writes "<status> <flags> <seconds>: <message>"
 * into the pipe fd. */
static void worker(const void *arg, int rank, int fd) {
  int k = *(const int *)arg;
  alarm(60);
  char out[MSG];
  st_collective *c = NULL;
  st_status s = st__gloo_world_join(rank, 2, g_addrs);
  if (s == ST_OK) s = st__collective_gloo_create(3.0, NULL, &c);
  if (s != ST_OK) {
    snprintf(out, sizeof out, "setup %s: %s", st_status_string(s), st_last_error());
    (void)!write(fd, out, strlen(out) + 1);
    _exit(10);
  }
  size_t n = g_sizes[k][rank], sent = g_sizes[k][0];
  float *buf = malloc((n ? n : 1) * sizeof *buf);
  for (size_t i = 0; i < n; i++) buf[i] = k >= 4 || rank == 0 ? (float)i : -1.0f;
  time_t t0 = time(NULL);
  int h = -1, kept = 1, right = 1;
  if (k == 7 && rank == 0)
    s = c->vt->broadcast(c, rank, buf, n, 0);
  else if (k >= 4)
    s = c->vt->all_reduce(c, rank, buf, n, ST_REDUCE_SUM);
  else if (rank == 0 && (s = c->vt->send(c, buf, n, 1, &h)) == ST_OK)
    s = c->vt->wait(c, h);
  else if (rank == 1)
    s = c->vt->recv(c, buf, n, 0);
  for (size_t i = 0; i < n; i++) {
    float was = k >= 4 || rank == 0 ? (float)i : -1.0f;
    kept &= buf[i] == was;
    right &= buf[i] == (float)i && n == sent;
  }
  snprintf(out, sizeof out, "%s kept=%d right=%d took=%lld: %s", st_status_string(s), kept,
           right, (long long)(time(NULL) - t0), s == ST_OK ? "ok" : st_last_error());
  (void)!write(fd, out, strlen(out) + 1);
  free(buf);
  st__collective_destroy(c);
  _exit(0);
}

/* Run case k; each worker's line into got[rank], its exit into rc[rank]. */
static void run_case(int k, char got[2][MSG], int rc[2]) {
  for (int r = 0; r < 2; r++) {
    snprintf(g_addr[r], sizeof g_addr[r], "127.0.0.1:%d", r == 0 ? free_port() : 2);
    g_addrs[r] = g_addr[r];
  }
  fork_workers(2, worker, &k, &got[0][0], MSG, rc);
  printf("# %s: worker 0: %s\n# %s: worker 1: %s\n", g_names[k], got[0], g_names[k], got[1]);
}

static void test_p2p(void) {
  for (int k = 0; k < 4; k++) {
    char got[2][MSG], want[160];
    int rc[2];
    run_case(k, got, rc);
    CHECK_EQ(rc[0], 0); /* no signal (Gloo's abort is 128 + SIGABRT) */
    CHECK_EQ(rc[1], 0);
    if (k == 3) {
      CHECK_MSG(strncmp(got[0], "ok ", 3) == 0, "%s: %s", g_names[k], got[0]);
      CHECK_MSG(strncmp(got[1], "ok kept=0 right=1", 17) == 0, "%s: %s", g_names[k], got[1]);
      continue;
    }
    snprintf(want, sizeof want, "receive #1 from worker 0: it sent %zu floats (%zu bytes), this "
             "worker expects %zu (%zu bytes)", g_sizes[k][0], g_sizes[k][0] * 4, g_sizes[k][1],
             g_sizes[k][1] * 4);
    CHECK_MSG(strstr(got[1], want) != NULL, "%s: %s", g_names[k], got[1]);
    const char *inval = st_status_string(ST_ERR_INVALID);
    CHECK_MSG(strncmp(got[1], inval, strlen(inval)) == 0, "%s: %s", g_names[k], got[1]);
    CHECK_MSG(strstr(got[1], "kept=1") != NULL, "%s: the buffer was written: %s", g_names[k], got[1]);
    /* the sender fails because the receiver closed the pairs (a lost peer),
     * not by its timeout (an empty message's sender is done once its header
     * went) */
    const char *lost = st_status_string(ST_ERR_PEER);
    CHECK_MSG((k == 2 && strncmp(got[0], "ok", 2) == 0) ||
              (strncmp(got[0], lost, strlen(lost)) == 0 && strstr(got[0], "worker 1")),
              "%s: %s", g_names[k], got[0]);
  }
}

static void test_all_reduce_counts_shm(void) {
  char got[2][MSG];
  int rc[2];
  unsetenv("STRATA_MPI_SHM");
  run_case(5, got, rc);
  for (int r = 0; r < 2; r++) {
    char want[160];
    const char *inval = st_status_string(ST_ERR_INVALID);
    CHECK_EQ(rc[r], 0);
    CHECK_MSG(strncmp(got[r], inval, strlen(inval)) == 0, "worker %d: %s", r, got[r]);
    snprintf(want, sizeof want, "all-reduce through shared memory: rank %d passed %zu floats, this "
             "rank %zu", 1 - r, g_sizes[5][1 - r], g_sizes[5][r]);
    CHECK_MSG(strstr(got[r], want) != NULL, "worker %d: %s", r, got[r]);
    CHECK_MSG(strstr(got[r], "kept=1") != NULL, "worker %d: %s", r, got[r]);
  }
}

static void test_all_reduce_counts(void) {
  static const int ks[] = {4, 6};
  setenv("STRATA_MPI_SHM", "0", 1);
  for (int t = 0; t < 2; t++) {
    int k = ks[t], rc[2], both = 0;
    char got[2][MSG];
    run_case(k, got, rc);
    for (int r = 0; r < 2; r++) {
      char want[160];
      CHECK_EQ(rc[r], 0); /* no signal (Gloo's abort is 128 + SIGABRT) */
      snprintf(want, sizeof want, "worker %d", 1 - r);
      CHECK_MSG(strstr(got[r], want) != NULL, "%s: worker %d: %s", g_names[k], r, got[r]);
      snprintf(want, sizeof want, "this worker's count: %zu", g_sizes[k][r]);
      CHECK_MSG(strstr(got[r], want) != NULL, "%s: worker %d: %s", g_names[k], r, got[r]);
      CHECK_MSG(strstr(got[r], "kept=1") != NULL, "%s: worker %d: %s", g_names[k], r, got[r]);
      snprintf(want, sizeof want, "all-reduce #1: worker %d sent its all-reduce #1 with %zu "
               "floats, this worker's count: %zu", 1 - r, g_sizes[k][1 - r], g_sizes[k][r]);
      const char *inval = st_status_string(ST_ERR_INVALID);
      both += strncmp(got[r], inval, strlen(inval)) == 0 && strstr(got[r], want) != NULL;
    }
    CHECK_MSG(both >= 1, "%s: neither worker named both counts", g_names[k]);
  }
}

static void test_other_collectives(void) {
  char got[2][MSG];
  int rc[2], named = 0;
  setenv("STRATA_MPI_SHM", "0", 1);
  run_case(7, got, rc);
  static const char *const want[2] = {"broadcast #1: worker 1 sent its all-reduce #1 with 8",
                                      "all-reduce #1: worker 0 sent its broadcast #1 with 8"};
  for (int r = 0; r < 2; r++) {
    CHECK_EQ(rc[r], 0);
    CHECK_MSG(strstr(got[r], "kept=1") != NULL, "worker %d: %s", r, got[r]);
    CHECK_MSG(strncmp(got[r], "ok", 2) != 0, "worker %d: %s", r, got[r]);
    named += strstr(got[r], want[r]) != NULL;
  }
  CHECK_MSG(named >= 1, "neither worker named the other's collective");
}

int main(int argc, char **argv) {
  if (!st__gloo_built()) check_skip("this build has no Gloo transport (libgloo-dev not found)");
  signal(SIGPIPE, SIG_IGN);
  static const check_case cases[] = {CHECK_CASE(test_p2p), CHECK_CASE(test_all_reduce_counts),
                                     CHECK_CASE(test_other_collectives),
                                     CHECK_CASE(test_all_reduce_counts_shm)};
  return check_main(argc, argv, cases, sizeof cases / sizeof *cases);
}
