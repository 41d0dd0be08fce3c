/* All-reduce bandwidth of Strata's MPI transport (the one under
 * multi_worker_mirrored) beside raw MPI_Allreduce of the same bytes, in one
 * run, alternating per size.
 *
 * Build (after `make`, which builds build/libstrata.a with MPI):
 *   mpicc -O2 -std=c11 -Iinclude -Isrc bench/mpi_allreduce_bench.c build/libstrata.a \
 *       -lpthread -lm -ldl -lz -ljansson -o /tmp/mpi_allreduce_bench
 * (with the Gloo transport, libstrata.a needs -lgloo -lstdc++ too)
 * Run:
 *   mpirun --oversubscribe -np 2 /tmp/mpi_allreduce_bench [trials=7] [fused_mib=4] [min_bytes=4096] [max_bytes=268435456] [gloo=0]
 * (fused_mib 0: no "fused" rows, half the time; min/max_bytes: a size range;
 * gloo 1: also the Gloo transport of TF_CONFIG launches, the same processes
 * joined through it: "gloo all-reduce" (shared memory on one machine) and
 * "gloo messages" (TCP), on the hosts STRATA_BENCH_HOSTS lists (host of rank
 * 0,1,..., comma-separated; default 127.0.0.1 for every rank), rendezvous at
 * port STRATA_BENCH_PORT (default 29511) of rank 0's host)
 *
 * "strata messages": the same transport made with STRATA_MPI_SHM=0, which on
 * one machine is the message exchange used between machines (the default
 * "strata all-reduce" goes through shared memory when the ranks share one).
 *
 * Per size S (4 KiB .. 256 MiB by x4): 3 warm-up ops, then `trials` trials of
 * `iters` back-to-back in-place float SUM all-reduces (iters: a trial moves
 * >= ~128 MiB, 3..1000 ops); time per op = max over ranks; median over
 * trials. algbw = S / t; busbw = algbw * 2(n-1)/n (GB/s = 1e9 B/s).
 *
 * "fused" rows: a model's gradients as 64 tensors of S/64 bytes, all-reduced
 * either one tensor at a time with MPI_Allreduce or packed into buckets of
 * fused_mib MiB (as the strategy's reducer packs whole layers) through
 * Strata's transport: what gradient fusion buys over per-tensor calls. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/collective/collective.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef void (*op_fn)(st_collective *c, float *buf, size_t n, size_t pack);

static void strata_op(st_collective *c, float *buf, size_t n, size_t pack) {
  (void)pack;
  if (c->vt->all_reduce(c, c->self, buf, n, ST_REDUCE_SUM) != ST_OK) {
    fprintf(stderr, "all-reduce failed: %s\n", st_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static st_collective *g_msgs; /* made with STRATA_MPI_SHM=0 */

static void strata_msgs_op(st_collective *c, float *buf, size_t n, size_t pack) {
  (void)c;
  strata_op(g_msgs, buf, n, pack);
}

static void mpi_op(st_collective *c, float *buf, size_t n, size_t pack) {
  (void)c, (void)pack;
  MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* 64 tensors, one MPI_Allreduce each */
static void mpi_per_tensor(st_collective *c, float *buf, size_t n, size_t pack) {
  (void)c, (void)pack;
  size_t t = n / 64;
  for (int i = 0; i < 64; i++)
    MPI_Allreduce(MPI_IN_PLACE, buf + (size_t)i * t, (int)t, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* the same tensors packed into buckets of `pack` floats (whole tensors) */
static void strata_fused(st_collective *c, float *buf, size_t n, size_t pack) {
  size_t t = n / 64, lo = 0;
  while (lo < 64 * t) {
    size_t len = 0;
    while (lo + len < 64 * t && (len == 0 || len + t <= pack)) len += t;
    strata_op(c, buf + lo, len, 0);
    lo += len;
  }
}

static st_collective *g_gloo, *g_gloo_msgs; /* gloo=1: over the Gloo transport */

static void gloo_op(st_collective *c, float *buf, size_t n, size_t pack) {
  (void)c;
  strata_op(g_gloo, buf, n, pack);
}

static void gloo_msgs_op(st_collective *c, float *buf, size_t n, size_t pack) {
  (void)c;
  strata_op(g_gloo_msgs, buf, n, pack);
}

/* Join the Gloo job of these same processes and make its two transports. */
static void open_gloo(int rank, int size) {
  static char addr[ST_MAX_WORKERS][ST__GLOO_ADDRESS_MAX];
  const char *a[ST_MAX_WORKERS], *hosts = getenv("STRATA_BENCH_HOSTS"), *port = getenv("STRATA_BENCH_PORT");
  for (int r = 0; r < size; r++) {
    const char *h = "127.0.0.1";
    char one[200] = "";
    for (int i = 0, k = 0; hosts && hosts[k] && i <= r; i++) { /* the r-th of "h0,h1,..." */
      size_t len = strcspn(hosts + k, ",");
      if (i == r && len < sizeof one) memcpy(one, hosts + k, len), one[len] = 0, h = one;
      k += (int)len + (hosts[k + len] == ',');
    }
    snprintf(addr[r], sizeof addr[r], "%s:%d", h, (port ? atoi(port) : 29511) + r);
    a[r] = addr[r];
  }
  if (st__gloo_world_join(rank, size, a) != ST_OK || st__collective_gloo_create(60.0, NULL, &g_gloo) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  setenv("STRATA_MPI_SHM", "0", 1);
  if (st__collective_gloo_create(60.0, NULL, &g_gloo_msgs) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  unsetenv("STRATA_MPI_SHM");
}

static double time_op(op_fn f, st_collective *c, float *buf, size_t n, size_t pack, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) f(c, buf, n, pack);
  double t = (MPI_Wtime() - t0) / iters, worst;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

int main(int argc, char **argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 7;
  size_t pack = (size_t)(argc > 2 ? atof(argv[2]) : 4.0) * (1u << 20) / sizeof(float);
  size_t lo = argc > 3 ? (size_t)atof(argv[3]) : 4096, hi = argc > 4 ? (size_t)atof(argv[4]) : (256u << 20);
  int gloo = argc > 5 && atoi(argv[5]) && st__gloo_built();
  int rank, size;
  if (st__mpi_world(&rank, &size) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    return 1;
  }
  st_collective *c = NULL;
  if (st__collective_mpi_create(60.0, NULL, &c) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    return 1;
  }
  setenv("STRATA_MPI_SHM", "0", 1);
  if (st__collective_mpi_create(60.0, NULL, &g_msgs) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    return 1;
  }
  unsetenv("STRATA_MPI_SHM");
  if (gloo) open_gloo(rank, size);
  if (rank == 0) {
    printf("# %d processes, %d trials, medians; GB/s = 1e9 B/s; fused pack %zu MiB\n", size,
           trials, pack * sizeof(float) >> 20);
    printf("%-10s %-24s %12s %10s %10s\n", "bytes", "what", "us/op", "algbw", "busbw");
  }
  struct {
    const char *name;
    op_fn f;
  } ops[] = {{"strata all-reduce", strata_op},
             {"MPI_Allreduce", mpi_op},
             {"strata messages", strata_msgs_op},
             {"fused: strata packs", strata_fused},
             {"fused: MPI per tensor", mpi_per_tensor},
             {"gloo all-reduce", gloo_op},
             {"gloo messages", gloo_msgs_op}};
  int nops = pack ? 5 : 3; /* pack 0: no fused rows */
  int kg = nops; /* the Gloo rows after the others */
  if (gloo) {
    if (!pack) ops[3] = ops[5], ops[4] = ops[6], kg = 3;
    nops = kg + 2;
  }
  for (size_t bytes = 4096; bytes <= hi; bytes *= 4) {
    if (bytes < lo) continue;
    size_t n = bytes / sizeof(float);
    float *buf = malloc(bytes);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 7) * 0.001f;
    int iters = (int)((128u << 20) / bytes);
    iters = iters < 3 ? 3 : iters > 1000 ? 1000 : iters;
    double med[7];
    double *t = malloc(sizeof(double) * 7 * (size_t)trials);
    for (int k = 0; k < nops; k++) time_op(ops[k].f, c, buf, n, pack, 3); /* warm-up */
    for (int r = 0; r < trials; r++) /* alternate the contenders trial by trial */
      for (int k = 0; k < nops; k++) t[k * trials + r] = time_op(ops[k].f, c, buf, n, pack, iters);
    for (int k = 0; k < nops; k++) {
      qsort(t + k * trials, (size_t)trials, sizeof(double), cmp_double);
      med[k] = t[k * trials + trials / 2];
      double alg = (double)bytes / med[k] / 1e9;
      if (rank == 0)
        printf("%-10zu %-24s %12.1f %10.2f %10.2f\n", bytes, ops[k].name, med[k] * 1e6, alg,
               alg * 2.0 * (size - 1) / size);
    }
    if (rank == 0)
      printf("%-10zu %-24s %12.2fx %10.2fx (messages)\n", bytes, "MPI time / strata time",
             med[1] / med[0], med[1] / med[2]);
    if (rank == 0 && pack)
      printf("%-10zu %-24s %12.2fx\n", bytes, "fused: MPI / strata", med[4] / med[3]);
    if (rank == 0 && gloo)
      printf("%-10zu %-24s %12.2fx %10.2fx (messages)\n", bytes, "strata MPI / gloo time",
             med[0] / med[kg], med[2] / med[kg + 1]);
    free(t);
    free(buf);
  }
  st__collective_destroy(g_gloo_msgs);
  st__collective_destroy(g_gloo);
  st__collective_destroy(g_msgs);
  st__collective_destroy(c);
  return 0;
}
