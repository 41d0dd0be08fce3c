/* sgemm throughput (1 OpenBLAS thread, Strata's loader) at every GEMM shape
 * of one transformer encoder block's training step on one replica (bench/
 * graph_bench.c's model: d_model 256, 4 heads of 64, seq 128, ff 1024;
 * B examples per replica, default 8: one_device's 2 threads split a batch
 * of 16): the fused Q/K/V projection, the per-(example, head) score and
 * weighted-sum products, the 256-row chunks of the attention's backward,
 * the feed-forward GEMMs and their gradients. Operands are reused from call
 * to call (hot caches): the figures are each shape's best case, for
 * comparing shapes, not a training step's time. Best of 7 per shape.
 * Build (after building libstrata in build/):
 *   gcc -O2 -std=c11 -Iinclude -Isrc bench/transformer_gemm_shapes.c build/libstrata.a \
 *       -ldl -lm -lpthread -lz -ljansson -o /tmp/transformer_gemm_shapes
 * Run: /tmp/transformer_gemm_shapes [B] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/blas.h"
#include "strata/base.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
typedef struct {
  const char *name;
  int ta, tb, m, n, k, lda, ldb, ldc, calls;
  float beta; /* 1: accumulated over the chunks */
} shp;

int main(int argc, char **argv) {
  int B = argc > 1 ? atoi(argv[1]) : 8;
  int R = B * 128;
  st_blas_set_threads(1);
  /* F: forward, B: backward; primed rows (F4', B5'): the same product unchunked
   * (not what the layer runs), left out of the total */
  shp s[] = {
    {"F1 qkv NN (x3)", 0, 0, R, 256, 256, 256, 256, 768, 3, 0},
    {"F2 scores NT", 0, 1, 128, 128, 64, 768, 768, 128, 4 * B, 0},
    {"F3 wsum NN", 0, 0, 128, 64, 128, 128, 768, 256, 4 * B, 0},
    {"F4 outproj NN chunk", 0, 0, 256, 256, 256, 256, 256, 256, B / 2, 0},
    {"F4' outproj NN whole", 0, 0, R, 256, 256, 256, 256, 256, 1, 0},
    {"F5 ff1 NN", 0, 0, R, 1024, 256, 256, 1024, 1024, 1, 0},
    {"F6 ff2 NN", 0, 0, R, 256, 1024, 1024, 256, 256, 1, 0},
    {"B1 ff2 dW TN", 1, 0, 1024, 256, R, 1024, 256, 256, 1, 0},
    {"B1 ff2 dX NT", 0, 1, R, 1024, 256, 256, 256, 1024, 1, 0},
    {"B2 ff1 dW TN", 1, 0, 256, 1024, R, 256, 1024, 1024, 1, 0},
    {"B2 ff1 dX NT", 0, 1, R, 256, 1024, 1024, 1024, 256, 1, 0},
    {"B3 dO NT chunk", 0, 1, 256, 256, 256, 256, 256, 256, B / 2, 0},
    {"B3 dWo TN chunk", 1, 0, 256, 256, 256, 256, 256, 256, B / 2, 1},
    {"B4 O NN", 0, 0, 128, 64, 128, 128, 768, 256, 4 * B, 0},
    {"B4 dV TN", 1, 0, 128, 64, 128, 128, 256, 768, 4 * B, 0},
    {"B4 dP NT", 0, 1, 128, 128, 64, 256, 768, 128, 4 * B, 0},
    {"B4 dQ NN", 0, 0, 128, 64, 128, 128, 768, 768, 4 * B, 0},
    {"B4 dK TN", 1, 0, 128, 64, 128, 128, 768, 768, 4 * B, 0},
    {"B5 qkv dW TN chunk (x3)", 1, 0, 256, 256, 256, 256, 768, 256, 3 * B / 2, 1},
    {"B5 qkv dX NT chunk (x3)", 0, 1, 256, 256, 256, 768, 256, 256, 3 * B / 2, 1},
    {"B5' qkv dW TN whole k768", 1, 0, 256, 768, R, 256, 768, 768, 1, 0},
    {"B5' qkv dX NT whole k768", 0, 1, R, 256, 768, 768, 768, 256, 1, 0},
  };
  int ns = sizeof s / sizeof s[0];
  size_t big = (size_t)R * 1024 + 4096;
  float *a = malloc(big * 4), *b = malloc(big * 4), *c = malloc(big * 4);
  for (size_t i = 0; i < big; i++) a[i] = b[i] = c[i] = (float)(i % 7) * 0.1f;
  double tot = 0, totf = 0;
  for (int i = 0; i < ns; i++) {
    shp *x = &s[i];
    double best = 1e9;
    for (int rep = 0; rep < 7; rep++) {
      double t0 = now();
      for (int q = 0; q < x->calls; q++)
        st__sgemm(x->ta, x->tb, x->m, x->n, x->k, 1.0f, a, x->lda, b, x->ldb, x->beta, c,
                  x->ldc);
      double t = now() - t0;
      if (t < best) best = t;
    }
    double fl = 2.0 * x->m * x->n * x->k * x->calls;
    if (x->name[2] != '\'') tot += best, totf += fl;
    printf("%-28s calls %3d  %7.3f ms  %6.1f GF/s\n", x->name, x->calls, best * 1e3,
           fl / best * 1e-9);
  }
  printf("total (unprimed) %.2f ms, %.1f GF/s\n", tot * 1e3, totf / tot * 1e-9);
  return 0;
}
