/* In-process all-reduce bandwidth: Strata's threads collective (both
 * cross_device_ops) for 4 KiB .. 64 MiB by x4, beside the memory-bandwidth
 * bound measured in the same program.
 *
 * Build (after building libstrata, e.g. in build/):
 *   gcc -O2 -std=c11 -Iinclude -Isrc bench/allreduce_bench.c build/libstrata.a \
 *       -lpthread -lm -ldl -lz -ljansson -o /tmp/allreduce_bench
 * Run:
 *   /tmp/allreduce_bench [trials=7] [ranks=2]
 *
 * Method (the same as ../shared/peers/allreduce_mpi.c, so the tables sit side
 * by side): per size, 5 warm-up ops, then `trials` trials; a trial is a barrier
 * plus `iters` back-to-back in-place float SUM all-reduces on every rank, iters
 * chosen so a trial moves >= ~256 MiB (5..2000 ops); time per op = max over
 * ranks of trial time / iters; median, min, max over trials. algbw = S / t,
 * busbw = algbw * 2(n-1)/n. GB/s = 1e9 B/s.
 *
 * Memory bound: memcpy bandwidth is measured the way memcpy_bw.c does it (two
 * warm-up copies, then timed back-to-back copies, GB/s = bytes copied / time
 * of the slowest thread), with the `ranks` threads each copying its own S
 * bytes (n*S copied in all, like the n buffers of the all-reduce). The bound is
 * t_bound = 2*n*S / memcpy_GB/s (the formula) and frac = t_bound / t.
 * Each byte of an in-place all-reduce is read once and written once, which is
 * the traffic of copying n*S bytes, so n*S / memcpy_GB/s = t_bound / 2 is the
 * tighter physical floor: frac can approach 2.0. Rows of the 64 MiB memcpy
 * modes of memcpy_bw.c are printed too. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/collective/collective.h"
#include "strata/base.h"

enum { MAXR = 8, MAXT = 64, WARMUP = 5 };
static const size_t k_max_bytes = (size_t)64 << 20;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static long iters_for(size_t bytes) {
  long it = (long)((256.0 * (1 << 20)) / (double)bytes);
  return it < 5 ? 5 : it > 2000 ? 2000 : it;
}

/* ---- all-reduce ------------------------------------------------------------ */
typedef struct ar_job {
  st_collective *c;
  int rank, trials;
  float *buf;
  size_t n;
  long iters;
  double dt[MAXT]; /* per trial, per op */
} ar_job;

static void *ar_main(void *p) {
  ar_job *j = p;
  const st_collective_vtable *vt = j->c->vt;
  for (int w = 0; w < WARMUP; w++) vt->all_reduce(j->c, j->rank, j->buf, j->n, ST_REDUCE_SUM);
  for (int t = 0; t < j->trials; t++) {
    vt->barrier(j->c, j->rank);
    double t0 = st_now_seconds();
    for (long i = 0; i < j->iters; i++)
      vt->all_reduce(j->c, j->rank, j->buf, j->n, ST_REDUCE_SUM);
    j->dt[t] = (st_now_seconds() - t0) / (double)j->iters;
  }
  return NULL;
}

/* Runs `ranks` jobs (rank 0 on this thread); t[trial] = max over ranks. */
static void run_jobs(int ranks, void *(*fn)(void *), void *jobs, size_t job_size,
                     const double *(*dt_of)(void *), int trials, double *t) {
  pthread_t th[MAXR];
  char *base = jobs;
  for (int r = 1; r < ranks; r++) pthread_create(&th[r], NULL, fn, base + (size_t)r * job_size);
  fn(base);
  for (int r = 1; r < ranks; r++) pthread_join(th[r], NULL);
  for (int k = 0; k < trials; k++) {
    t[k] = 0;
    for (int r = 0; r < ranks; r++) {
      double d = dt_of(base + (size_t)r * job_size)[k];
      if (d > t[k]) t[k] = d;
    }
  }
  qsort(t, (size_t)trials, sizeof(double), cmp_double);
}

static const double *ar_dt(void *p) { return ((ar_job *)p)->dt; }

static double median(const double *t, int n) {
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* ---- memcpy --------------------------------------------------------------- */
typedef struct cp_job {
  char *dst, *src;
  size_t n;
  long reps;
  int trials;
  pthread_barrier_t *bar;
  double dt[MAXT]; /* per trial: seconds for all reps */
} cp_job;

static void *cp_main(void *p) {
  cp_job *j = p;
  memcpy(j->dst, j->src, j->n);
  memcpy(j->dst, j->src, j->n);
  for (int t = 0; t < j->trials; t++) {
    pthread_barrier_wait(j->bar);
    double t0 = st_now_seconds();
    for (long r = 0; r < j->reps; r++) {
      memcpy(j->dst, j->src, j->n);
      __asm__ volatile("" ::: "memory");
    }
    j->dt[t] = st_now_seconds() - t0;
  }
  return NULL;
}
static const double *cp_dt(void *p) { return ((cp_job *)p)->dt; }

/* Median GB/s of `threads` threads each copying n bytes src[i] -> dst[i]. */
static double memcpy_gbs(int threads, char **dst, char **src, size_t n, int trials) {
  cp_job j[MAXR];
  pthread_barrier_t bar;
  double t[MAXT];
  long reps = iters_for(n * (size_t)threads);
  pthread_barrier_init(&bar, NULL, (unsigned)threads);
  for (int i = 0; i < threads; i++)
    j[i] = (cp_job){.dst = dst[i], .src = src[i], .n = n, .reps = reps, .trials = trials,
                    .bar = &bar};
  run_jobs(threads, cp_main, j, sizeof j[0], cp_dt, trials, t);
  pthread_barrier_destroy(&bar);
  return (double)n * threads * reps / median(t, trials) / 1e9;
}

/* ---- driver --------------------------------------------------------------- */
static void bench_algo(st_cross_device_ops algo, int ranks, int trials, float **buf,
                       char **cdst, char **csrc) {
  st_collective *c = NULL;
  if (st__collective_threads_create(ranks, algo, &c) != ST_OK) {
    fprintf(stderr, "create: %s\n", st_last_error());
    exit(1);
  }
  printf("\n# strata threads collective, cross_device_ops=%s, ranks=%d, trials=%d "
         "(in-place, float sum)\n", st__cross_device_ops_name(algo), ranks, trials);
  printf("%10s %6s %10s %10s %10s %8s %8s %9s %10s %6s\n", "bytes", "iters", "t_med_us",
         "t_min_us", "t_max_us", "algbw", "busbw", "memcpyGBs", "bound_us", "frac");
  for (size_t bytes = 4096; bytes <= k_max_bytes; bytes *= 4) {
    ar_job j[MAXR];
    double t[MAXT];
    for (int r = 0; r < ranks; r++) {
      memset(buf[r], 0, bytes);
      j[r] = (ar_job){.c = c, .rank = r, .trials = trials, .buf = buf[r],
                      .n = bytes / sizeof(float), .iters = iters_for(bytes)};
    }
    run_jobs(ranks, ar_main, j, sizeof j[0], ar_dt, trials, t);
    double med = median(t, trials), alg = (double)bytes / med / 1e9;
    double bw = memcpy_gbs(ranks, cdst, csrc, bytes, trials);
    double bound = 2.0 * ranks * (double)bytes / (bw * 1e9);
    printf("%10zu %6ld %10.2f %10.2f %10.2f %8.3f %8.3f %9.2f %10.2f %6.2f\n", bytes,
           j[0].iters, med * 1e6, t[0] * 1e6, t[trials - 1] * 1e6, alg,
           alg * 2.0 * (ranks - 1) / ranks, bw, bound * 1e6, bound / med);
    fflush(stdout);
  }
  st__collective_destroy(c);
}

/* One all-reduce of known values, checked (1 + 2 + ... + ranks everywhere). */
static int verify(int ranks, float **buf, size_t n);

int main(int argc, char **argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 7;
  int ranks = argc > 2 ? atoi(argv[2]) : 2;
  if (trials < 1) trials = 1;
  if (trials > MAXT) trials = MAXT;
  if (ranks < 1 || ranks > MAXR) ranks = 2;
  float *buf[MAXR];
  char *cdst[MAXR], *csrc[MAXR];
  for (int r = 0; r < ranks; r++) {
    buf[r] = st_alloc(k_max_bytes);
    cdst[r] = st_alloc(k_max_bytes);
    csrc[r] = st_alloc(k_max_bytes);
    if (!buf[r] || !cdst[r] || !csrc[r]) return 1;
    memset(cdst[r], 1, k_max_bytes);
    memset(csrc[r], 2, k_max_bytes);
  }
  printf("# memcpy 64MiB, the modes of memcpy_bw.c (median of %d trials)\n", trials);
  printf("memcpy 64MiB 1 thread            %8.2f GB/s\n",
         memcpy_gbs(1, cdst, csrc, k_max_bytes, trials));
  char *sd[2] = {cdst[0], cdst[0] + k_max_bytes / 2}, *ss[2] = {csrc[0], csrc[0] + k_max_bytes / 2};
  printf("memcpy 64MiB 2 threads (split)   %8.2f GB/s\n",
         memcpy_gbs(2, sd, ss, k_max_bytes / 2, trials));
  if (ranks >= 2)
    printf("memcpy 64MiB x2 2 threads (own)  %8.2f GB/s\n",
           memcpy_gbs(2, cdst, csrc, k_max_bytes, trials));
  for (int a = 0; a < ST_CROSS_COUNT; a++)
    bench_algo((st_cross_device_ops)a, ranks, trials, buf, cdst, csrc);
  int bad = verify(ranks, buf, (1u << 20) + 3);
  for (int r = 0; r < ranks; r++) {
    st_free(buf[r]);
    st_free(cdst[r]);
    st_free(csrc[r]);
  }
  return bad;
}

typedef struct { st_collective *c; int rank; float *buf; size_t n; } v_job;
static void *v_main(void *p) {
  v_job *j = p;
  j->c->vt->all_reduce(j->c, j->rank, j->buf, j->n, ST_REDUCE_SUM);
  return NULL;
}

static int verify(int ranks, float **buf, size_t n) {
  st_collective *c = NULL;
  if (st__collective_threads_create(ranks, ST_CROSS_ALL_REDUCE, &c) != ST_OK) return 1;
  v_job j[MAXR];
  pthread_t th[MAXR];
  for (int r = 0; r < ranks; r++) {
    for (size_t i = 0; i < n; i++) buf[r][i] = (float)(r + 1);
    j[r] = (v_job){c, r, buf[r], n};
    if (r) pthread_create(&th[r], NULL, v_main, &j[r]);
  }
  v_main(&j[0]);
  for (int r = 1; r < ranks; r++) pthread_join(th[r], NULL);
  st__collective_destroy(c);
  float want = (float)ranks * (float)(ranks + 1) / 2.0f;
  for (int r = 0; r < ranks; r++)
    for (size_t i = 0; i < n; i++)
      if (buf[r][i] != want) {
        fprintf(stderr, "WRONG RESULT: rank %d [%zu] = %g, want %g\n", r, i, buf[r][i], want);
        return 1;
      }
  printf("\n# verified: %zu floats on %d ranks\n", n, ranks);
  return 0;
}
