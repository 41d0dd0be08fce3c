/* The MPI transport's point-to-point receive does not trust the peer's size
 * (issue 29 D1: pipeline ranks with different --micro-batches wrote a
 * 4096-byte message into a 2048-byte buffer). Under `mpirun -np 2`, rank 0
 * sends and rank 1 receives on a fresh transport per case, with a planted
 * mismatch: a message larger than the receive (eager and, at 1.2 MB, sent by
 * rendezvous), one smaller, and a matching one. The receive buffer is
 * allocated to exactly the expected size (ASan sees any write past it) and
 * filled with a sentinel: on a mismatch it must stay untouched and the error
 * must name the peer, both counts and the operation (exit 2's status,
 * ST_ERR_INVALID); the sender's wait must complete (the message is drained),
 * not time out. Each rank writes what it saw to a file; this process, outside
 * mpirun, checks them. Skips (77) without mpirun or an MPI build. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpi_env.h"
#include "distribute/collective/collective.h"
#include "tmpdir.h"

enum { CASES = 4 };
/* per case: floats rank 0 sends, floats rank 1 expects */
static const size_t g_sizes[CASES][2] = {{16, 8}, {4, 8}, {300000, 200000}, {1000, 1000}};
static const char *g_names[CASES] = {"larger message", "smaller message",
                                     "larger message (rendezvous)", "matching message"};

/* ---- inside mpirun ---- */

static void write_result(const char *dir, int c, int rank, const char *what) {
  char path[512];
  snprintf(path, sizeof path, "%s/c%d.rank%d", dir, c, rank);
  FILE *f = fopen(path, "w");
  if (f) fprintf(f, "%s\n", what), fclose(f);
}

/* Rank 1: receive into a buffer of exactly the expected size; report the
 * status and whether the buffer kept its sentinel / got the values. */
static void receive_case(const char *dir, int k, st_collective *c) {
  size_t n = g_sizes[k][1], sent = g_sizes[k][0];
  float *buf = malloc(n * sizeof *buf);
  if (!buf) return write_result(dir, k, 1, "out of memory");
  for (size_t i = 0; i < n; i++) buf[i] = -1.0f;
  st_status s = c->vt->recv(c, buf, n, 0);
  size_t kept = 0, right = 0;
  for (size_t i = 0; i < n; i++) kept += buf[i] == -1.0f, right += buf[i] == (float)i;
  char what[1024];
  snprintf(what, sizeof what, "%s kept=%d values=%d: %s", st_status_string(s), kept == n,
           right == n && n == sent, s == ST_OK ? "ok" : st_last_error());
  write_result(dir, k, 1, what);
  free(buf);
}

static void send_case(const char *dir, int k, st_collective *c) {
  size_t n = g_sizes[k][0];
  float *buf = malloc(n * sizeof *buf);
  if (!buf) return write_result(dir, k, 0, "out of memory");
  for (size_t i = 0; i < n; i++) buf[i] = (float)i;
  int h = -1;
  st_status s = c->vt->send(c, buf, n, 1, &h);
  if (s == ST_OK) s = c->vt->wait(c, h);
  write_result(dir, k, 0, s == ST_OK ? "ok" : st_last_error());
  free(buf);
}

static int run_rank(const char *dir) {
  int rank = 0, size = 1;
  st_collective *ctl = NULL;
  if (st__mpi_world(&rank, &size) != ST_OK || size != 2 ||
      st__collective_mpi_create(30.0, NULL, &ctl) != ST_OK)
    return 1;
  for (int k = 0; k < CASES; k++) {
    st_collective *c = NULL;
    if (st__collective_mpi_create(10.0, NULL, &c) != ST_OK) return 1;
    if (rank == 0)
      send_case(dir, k, c);
    else
      receive_case(dir, k, c);
    if (ctl->vt->barrier(ctl, rank) != ST_OK) return 1;
  }
  return 0;
}

/* ---- outside mpirun ---- */

static void read_result(int k, int rank, char *out, size_t cap) {
  char name[32];
  snprintf(name, sizeof name, "c%d.rank%d", k, rank);
  FILE *f = fopen(tmp_path(name), "r");
  out[0] = '\0';
  if (f) {
    if (!fgets(out, (int)cap, f)) out[0] = '\0';
    fclose(f);
  }
  printf("# %s, rank %d: %s%s", g_names[k], rank, out, out[0] ? "" : "(nothing)\n");
}

static void check_mismatch(int k) {
  char r0[1024], r1[1024], want[256];
  read_result(k, 0, r0, sizeof r0);
  read_result(k, 1, r1, sizeof r1);
  CHECK_STREQ(r0, "ok\n"); /* drained: the sender's wait completed */
  CHECK(strstr(r1, "kept=1 ") != NULL); /* nothing written */
  snprintf(want, sizeof want, "receive #1 at step -1: rank 0 sent %zu bytes (%zu floats), this "
           "rank expected %zu floats", g_sizes[k][0] * 4, g_sizes[k][0], g_sizes[k][1]);
  CHECK_MSG(strstr(r1, want) != NULL, "want '%s'", want);
  CHECK_MSG(strncmp(r1, st_status_string(ST_ERR_INVALID), strlen(st_status_string(ST_ERR_INVALID))) == 0,
            "status %s", r1);
}

static void test_larger(void) { check_mismatch(0); }
static void test_smaller(void) { check_mismatch(1); }
static void test_larger_rendezvous(void) { check_mismatch(2); }
static void test_matching(void) {
  char r0[1024], r1[1024];
  read_result(3, 0, r0, sizeof r0);
  read_result(3, 1, r1, sizeof r1);
  CHECK_STREQ(r0, "ok\n");
  CHECK(strstr(r1, "values=1: ok") != NULL);
}
static const check_case cases[] = {CHECK_CASE(test_larger), CHECK_CASE(test_smaller),
                                   CHECK_CASE(test_larger_rendezvous), CHECK_CASE(test_matching)};

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--list")) return CHECK_MAIN(argc, argv, cases);
  if (getenv("OMPI_COMM_WORLD_SIZE")) {
    const char *dir = getenv("STRATA_TEST_DIR");
    int rc = dir ? run_rank(dir) : 1;
    fflush(NULL);
    _exit(rc); /* no MPI_Finalize: rank 1's transports are broken */
  }
  const char *missing = mpi_test_missing();
  if (missing) {
    printf("SKIP: %s\n", missing);
    return 77;
  }
  if (!tmpdir_make("strata_p2p_size")) return 1;
  mpi_test_env();
  setenv("STRATA_TEST_DIR", g_dir, 1);
  char cmd[1024], self[512];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = '\0';
  snprintf(cmd, sizeof cmd, "timeout 120 mpirun -np 2 '%s' >>'%s' 2>&1", self,
           tmp_path("mpirun.log"));
  if (system(cmd) == -1) return 1;
  int rc = CHECK_MAIN(argc, argv, cases);
  if (rc != 0) {
    snprintf(cmd, sizeof cmd, "tail -n 20 '%s'", tmp_path("mpirun.log"));
    if (system(cmd) != 0) fprintf(stderr, "no mpirun log\n");
  }
  tmpdir_remove();
  return rc;
}
