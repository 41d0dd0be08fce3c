/* The MPI and hierarchical transports against a plain rank-order reference,
 * the MPI transport both through shared memory (the ranks of this test share
 * a machine) and through messages (STRATA_MPI_SHM=0):
 * all_reduce (SUM, MEAN; sizes 0, 1, fewer elements than ranks, odd sizes,
 * several chunks; the one-round exchange of small buffers in one piece (1000
 * floats) and in several (2500, and 4096 = 16 KiB, the largest), 4099 just
 * above it; chunks of one and two pipeline segments, 98305 = 3 x 32768 + 1
 * floats, and of more segments than are in flight, 491527; through shared
 * memory two rounds of 262144 floats, the second of 262149 one of 5), broadcast from
 * every root, all_gather, reduce_scatter (one segment, and several in place),
 * barrier; results bit-identical to the reference on every rank. Run by CTest
 * directly, it starts itself under `mpirun -np 3`; skips (77) when mpirun is
 * missing or Strata was built without MPI. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpi_env.h"
#include "distribute/collective/collective.h"
#include "distribute/collective/mpi/mpi_fault.h"

/* Rank r's element i: distinct per rank and element, not exactly summable. */
static float value(int r, size_t i) { return 0.1f * (float)(r + 1) + 1e-3f * (float)(i % 97) + 1e-7f * (float)r; }

static float reference_sum(int size, size_t i, st_reduce_op op) {
  float acc = value(0, i);
  for (int r = 1; r < size; r++) acc += value(r, i);
  return op == ST_REDUCE_MEAN ? acc * (1.0f / (float)size) : acc;
}

static void test_process_ops(st_collective *c) {
  int me = c->self, size = c->size;
  size_t sizes[] = {0, 1, 2, 5, 1000, 2500, 4096, 4099, 98305, 100003, 262149, 491527};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
    for (int op = 0; op < ST_REDUCE_COUNT; op++) {
      size_t n = sizes[k];
      float *buf = malloc((n + 1) * sizeof(float));
      for (size_t i = 0; i < n; i++) buf[i] = value(me, i);
      CHECK_OK(c->vt->all_reduce(c, me, buf, n, (st_reduce_op)op));
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += buf[i] != reference_sum(size, i, (st_reduce_op)op);
      CHECK(bad == 0);
      free(buf);
    }
  for (int root = 0; root < size; root++) {
    float b[37];
    for (int i = 0; i < 37; i++) b[i] = value(me, (size_t)i);
    CHECK_OK(c->vt->broadcast(c, me, b, 37, root));
    int bad = 0;
    for (int i = 0; i < 37; i++) bad += b[i] != value(root, (size_t)i);
    CHECK(bad == 0);
  }
  float send[11], recv[64 * 11];
  for (int i = 0; i < 11; i++) send[i] = value(me, (size_t)i);
  CHECK_OK(c->vt->all_gather(c, me, send, 11, recv));
  int bad = 0;
  for (int r = 0; r < size; r++)
    for (int i = 0; i < 11; i++) bad += recv[r * 11 + i] != value(r, (size_t)i);
  CHECK(bad == 0);
  float rs_send[64 * 7], rs_recv[7];
  for (int i = 0; i < size * 7; i++) rs_send[i] = value(me, (size_t)i);
  CHECK_OK(c->vt->reduce_scatter(c, me, rs_send, rs_recv, 7, ST_REDUCE_SUM));
  bad = 0;
  for (int i = 0; i < 7; i++) bad += rs_recv[i] != reference_sum(size, (size_t)(me * 7 + i), ST_REDUCE_SUM);
  CHECK(bad == 0);
  /* segmented reduce-scatter (5 segments per chunk: more than are in flight),
   * in place (recv = my chunk of send) and MEAN */
  for (int op = 0; op < ST_REDUCE_COUNT; op++) {
    size_t n = 4 * 32768 + 5;
    float *big = malloc((size_t)size * n * sizeof(float));
    for (size_t i = 0; i < (size_t)size * n; i++) big[i] = value(me, i);
    float *mine = big + (size_t)me * n;
    CHECK_OK(c->vt->reduce_scatter(c, me, big, mine, n, (st_reduce_op)op));
    size_t nbad = 0;
    for (size_t i = 0; i < n; i++)
      nbad += mine[i] != reference_sum(size, (size_t)me * n + i, (st_reduce_op)op);
    CHECK(nbad == 0);
    free(big);
  }
  CHECK_OK(c->vt->barrier(c, me));
}

/* Two local replica threads per process over the MPI transport: an
 * all-reduce gives every replica ((l0 + l1) of process 0) + ((l0 + l1) of
 * process 1) + ... */
typedef struct local_arg {
  st_collective *h;
  int local, size; /* local replica, processes */
  st_status status;
  int bad;
} local_arg;

static void *local_main(void *p) {
  local_arg *a = p;
  float buf[300];
  for (int i = 0; i < 300; i++) buf[i] = value(a->local, (size_t)i);
  a->status = a->h->vt->all_reduce(a->h, a->local, buf, 300, ST_REDUCE_SUM);
  for (int i = 0; i < 300; i++) {
    float s = value(0, (size_t)i) + value(1, (size_t)i), acc = s;
    for (int proc = 1; proc < a->size; proc++) acc += s;
    a->bad += buf[i] != acc;
  }
  return NULL;
}

static void test_hierarchical(st_collective *net) {
  st_collective *h = NULL;
  CHECK_OK(st__collective_hier_create(2, ST_CROSS_ALL_REDUCE, net, &h));
  if (!h) return;
  local_arg a[2] = {{h, 0, net->size, ST_OK, 0}, {h, 1, net->size, ST_OK, 0}};
  pthread_t t;
  pthread_create(&t, NULL, local_main, &a[1]);
  local_main(&a[0]);
  pthread_join(t, NULL);
  CHECK_OK(a[0].status);
  CHECK_OK(a[1].status);
  CHECK(a[0].bad == 0 && a[1].bad == 0);
  st__collective_destroy(h);
}

static int relaunch(int argc, char **argv) {
  const char *missing = mpi_test_missing();
  if (missing) {
    printf("SKIP: %s\n", missing);
    return 77;
  }
  mpi_test_env();
  char cmd[4096];
  int len = snprintf(cmd, sizeof cmd, "timeout 120 mpirun -np 3 %s", argv[0]);
  for (int a = 1; a < argc && len < (int)sizeof cmd; a++) /* case names: identifiers */
    len += snprintf(cmd + len, sizeof cmd - (size_t)len, " '%s'", argv[a]);
  int rc = system(cmd);
  return rc == 0 ? 0 : 1;
}

static st_collective *g_coll; /* the MPI transport of this rank (main): shared memory */
static st_collective *g_msgs; /* one made with STRATA_MPI_SHM=0: messages */
static void test_process_ops_mpi(void) {
  CHECK(st__collective_mpi_uses_shm(g_coll));
  test_process_ops(g_coll);
}
static void test_process_ops_messages(void) {
  CHECK(!st__collective_mpi_uses_shm(g_msgs));
  test_process_ops(g_msgs);
}
static void test_hierarchical_mpi(void) { test_hierarchical(g_coll); }
static const check_case cases[] = {CHECK_CASE(test_process_ops_mpi),
                                   CHECK_CASE(test_process_ops_messages),
                                   CHECK_CASE(test_hierarchical_mpi)};

/* Outside mpirun: relaunches itself (with the case names) under mpirun -np 3. */
int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--list")) return CHECK_MAIN(argc, argv, cases);
  if (!getenv("OMPI_COMM_WORLD_SIZE")) return relaunch(argc, argv);
  int rank = 0, size = 1;
  CHECK_OK(st__mpi_world(&rank, &size));
  CHECK(size == 3);
  CHECK_OK(st__collective_mpi_create(30.0, NULL, &g_coll));
  setenv("STRATA_MPI_SHM", "0", 1);
  CHECK_OK(st__collective_mpi_create(30.0, NULL, &g_msgs));
  unsetenv("STRATA_MPI_SHM");
  if (!g_coll || !g_msgs) return check_report();
  CHECK(g_coll->self == rank && g_coll->size == size);
  int rc = CHECK_MAIN(argc, argv, cases);
  st__collective_destroy(g_msgs);
  st__collective_destroy(g_coll);
  return rc;
}
