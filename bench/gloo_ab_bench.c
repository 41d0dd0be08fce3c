/* The Gloo transport against the MPI transport, both over messages
 * (STRATA_MPI_SHM=0), in the same processes, alternating trial by trial:
 * per size (4 KiB, 64 KiB, 256 KiB, 1, 4, 16 MiB), 2 warm-up ops each, then
 * `trials` trials of back-to-back in-place SUM all-reduces (a trial moves
 * >= 32 MiB, 4..300 ops); time per op = max over ranks. Prints, per size,
 * the medians and ranges of both and the median over trials of MPI/Gloo.
 * Fewer operations than mpi_allreduce_bench.c (no MPI_Allreduce column, no
 * shared memory), so that builds can be alternated run by run
 * (bench/gloo_ab.sh). Built against a libstrata.a with MPI and Gloo:
 *   mpicc -O2 -std=c11 -Iinclude -Ibuild/include -Isrc bench/gloo_ab_bench.c \
 *       build/libstrata.a -lpthread -lm -ldl -lz -ljansson -lprotobuf-c -lzmq -lgloo -lstdc++
 * Run: mpirun -np N a.out TRIALS TAG [MIN_BYTES], with STRATA_BENCH_HOSTS=h0,h1,... (the
 * ranks' hosts; Gloo's rendezvous at port 29511 + rank). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/collective/collective.h"

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double time_op(st_collective *c, float *buf, size_t n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++)
    if (c->vt->all_reduce(c, c->self, buf, n, ST_REDUCE_SUM) != ST_OK) {
      fprintf(stderr, "%s\n", st_last_error());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  double t = (MPI_Wtime() - t0) / iters, worst;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

/* The Gloo job of these processes: rank r at the r-th host of STRATA_BENCH_HOSTS. */
static st_collective *open_gloo(int rank, int size) {
  static char addr[ST_MAX_WORKERS][ST__GLOO_ADDRESS_MAX];
  const char *a[ST_MAX_WORKERS], *hosts = getenv("STRATA_BENCH_HOSTS");
  for (int r = 0; r < size; r++) {
    char one[200] = "127.0.0.1";
    for (int i = 0, k = 0; hosts && hosts[k] && i <= r; i++) {
      size_t len = strcspn(hosts + k, ",");
      if (i == r && len < sizeof one) memcpy(one, hosts + k, len), one[len] = 0;
      k += (int)len + (hosts[k + len] == ',');
    }
    snprintf(addr[r], sizeof addr[r], "%s:%d", one, 29511 + r);
    a[r] = addr[r];
  }
  st_collective *g = NULL;
  if (st__gloo_world_join(rank, size, a) != ST_OK || st__collective_gloo_create(60, NULL, &g) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return g;
}

int main(int argc, char **argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 5, rank, size;
  const char *tag = argc > 2 ? argv[2] : "";
  size_t min_bytes = argc > 3 ? (size_t)atol(argv[3]) : 0; /* the sizes below: skipped */
  if (trials < 1 || trials > 64 || st__mpi_world(&rank, &size) != ST_OK) return 1;
  setenv("STRATA_MPI_SHM", "0", 1);
  st_collective *m = NULL;
  if (st__collective_mpi_create(60, NULL, &m) != ST_OK) return 1;
  st_collective *g = open_gloo(rank, size);
  const size_t sizes[] = {4096, 65536, 262144, 1048576, 4194304, 16777216};
  for (int si = 0; si < 6; si++) {
    size_t bytes = sizes[si], n = bytes / 4;
    if (bytes < min_bytes) continue;
    float *buf = malloc(bytes);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 7) * 0.001f;
    int iters = (int)((32u << 20) / bytes);
    iters = iters < 4 ? 4 : iters > 300 ? 300 : iters;
    time_op(m, buf, n, 2), time_op(g, buf, n, 2);
    double tm[64], tg[64], ratio[64];
    for (int t = 0; t < trials; t++) {
      tm[t] = time_op(m, buf, n, iters);
      tg[t] = time_op(g, buf, n, iters);
      ratio[t] = tm[t] / tg[t];
    }
    qsort(tm, (size_t)trials, sizeof *tm, cmpd), qsort(tg, (size_t)trials, sizeof *tg, cmpd);
    qsort(ratio, (size_t)trials, sizeof *ratio, cmpd);
    int k = trials / 2, e = trials - 1;
    if (rank == 0)
      printf("%s %d hosts %9zu B: MPI %8.0f us [%.0f-%.0f]  gloo %8.0f us [%.0f-%.0f]  "
             "ratio-of-medians %.2f  median-ratio %.2f\n", tag, size, bytes, tm[k] * 1e6,
             tm[0] * 1e6, tm[e] * 1e6, tg[k] * 1e6, tg[0] * 1e6, tg[e] * 1e6, tm[k] / tg[k],
             ratio[k]);
    fflush(stdout);
    free(buf);
  }
  st__collective_destroy(g);
  st__collective_destroy(m);
  return 0;
}
