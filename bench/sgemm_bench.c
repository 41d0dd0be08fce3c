/* sgemm throughput: Strata's OpenBLAS loader (core chosen from the CPU) versus
 * OpenBLAS's own core detection, at a square size and at the shapes of the
 * Fashion-MNIST CNN (im2col conv1/conv2 and the dense layer).
 *
 * Build (after building libstrata, e.g. in build/ or build-cpu/):
 *   gcc -O2 -std=c11 -Iinclude -Isrc bench/sgemm_bench.c build/libstrata.a \
 *       -ldl -lm -lpthread -lz -ljansson -o /tmp/sgemm_bench
 * Run:
 *   /tmp/sgemm_bench fix 1   # Strata's loader, 1 OpenBLAS thread
 *   /tmp/sgemm_bench raw 2   # plain dlopen, OpenBLAS's detection, 2 threads
 * "raw" ignores Strata and loads libopenblas.so.0 as any program would, so it
 * shows what OpenBLAS picks without OPENBLAS_CORETYPE. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/blas.h"
#include "strata/base.h"

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *,
                         int, const float *, int, float, float *, int);

static sgemm_fn raw_sgemm;

/* Row-major, no transposes: C[m,n] = A[m,k] B[k,n]. */
static void run_gemm(bool raw, int m, int n, int k, const float *a,
                     const float *b, float *c) {
  if (raw)
    raw_sgemm(101, 111, 111, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
  else
    st__sgemm(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

/* Best-of GFLOP/s over repeated calls for about 0.5 s. */
static double bench_shape(bool raw, int m, int n, int k) {
  float *a = malloc(sizeof(float) * (size_t)m * k);
  float *b = malloc(sizeof(float) * (size_t)k * n);
  float *c = malloc(sizeof(float) * (size_t)m * n);
  for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < (size_t)k * n; i++) b[i] = (float)(i % 5) * 0.1f;
  run_gemm(raw, m, n, k, a, b, c); /* warm-up */
  double best = 1e30, start = st_now_seconds();
  while (st_now_seconds() - start < 0.5) {
    double t0 = st_now_seconds();
    run_gemm(raw, m, n, k, a, b, c);
    double dt = st_now_seconds() - t0;
    if (dt < best) best = dt;
  }
  free(a);
  free(b);
  free(c);
  return 2.0 * m * n * k / best * 1e-9;
}

static const char *setup_raw(int threads) {
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    exit(1);
  }
  void (*set_threads)(int);
  char *(*corename)(void);
  *(void **)&raw_sgemm = dlsym(h, "cblas_sgemm");
  *(void **)&set_threads = dlsym(h, "openblas_set_num_threads");
  *(void **)&corename = dlsym(h, "openblas_get_corename");
  set_threads(threads);
  return corename();
}

int main(int argc, char **argv) {
  bool raw = argc > 1 && strcmp(argv[1], "raw") == 0;
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  const char *core;
  if (raw) {
    core = setup_raw(threads);
  } else {
    st_blas_init(threads);
    core = st__blas_corename();
  }
  static const struct { const char *what; int m, n, k; } shapes[] = {
      {"square 512^3", 512, 512, 512},
      {"conv1 im2col 86528x32x9", 128 * 26 * 26, 32, 9},
      {"conv2 im2col 15488x64x288", 128 * 11 * 11, 64, 288},
      {"dense 128x128x1600", 128, 128, 1600},
  };
  printf("mode %s, threads %d, core %s\n", raw ? "raw" : "fix", threads, core);
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    printf("  %-28s %7.1f GFLOP/s\n", shapes[i].what,
           bench_shape(raw, shapes[i].m, shapes[i].n, shapes[i].k));
  return 0;
}
