/* MultiHeadAttention's softmax over one block of scores [rows, cols] (one
 * example and head: Tq x Tv), in host loops that GCC vectorises (16 lanes of
 * partial maxima and sums; e^x by backend/cpu_exp.h, not glibc's scalar
 * expf). The scale 1/sqrt(K) is already in the scores (the score GEMM's
 * alpha); the causal mask is a column limit (row i keeps columns j <= i when
 * i + 1 < cols, as layer_attention.c's comment), the other columns get 0.
 * Forward keeps each row's max and 1/sum (stats [rows, 2]), so backward
 * recomputes P from the scores in one pass, with the forward's bits (the
 * same GEMM gives the same scores, the same arithmetic the same P) instead
 * of keeping P [batch, heads, Tq, Tv] for backward. Any thread; disjoint
 * buffers. */
#include <math.h>

#include "backend/cpu.h"
#include "backend/cpu_exp.h"
#include "nn/attention.h"

#define LANES 16

/* Columns row i keeps. */
static inline int kept_cols(int i, int cols, bool causal) {
  return causal && i + 1 < cols ? i + 1 : cols;
}

static inline float row_max(const float *x, int n) {
  float m[LANES];
  for (int k = 0; k < LANES; k++) m[k] = -INFINITY;
  int j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
  for (; j < n; j++) m[0] = x[j] > m[0] ? x[j] : m[0];
  float r = m[0];
  for (int k = 1; k < LANES; k++) r = m[k] > r ? m[k] : r;
  return r;
}

/* x[j] = e^(x[j] - mx) for j < n; returns their sum. */
static inline float exp_row(float *x, int n, float mx) {
  float s[LANES] = {0};
  int j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++) {
      float e = exp_vec(x[j + k] - mx, 0.0f);
      x[j + k] = e;
      s[k] += e;
    }
  for (; j < n; j++) {
    float e = exp_vec(x[j] - mx, 0.0f);
    x[j] = e;
    s[0] += e;
  }
  float r = 0.0f;
  for (int k = 0; k < LANES; k++) r += s[k];
  return r;
}

ST__SIMD_CLONES
void st__mha_softmax_forward(int rows, int cols, bool causal, float *p, float *stats) {
  for (int i = 0; i < rows; i++) {
    float *x = p + (size_t)i * cols;
    int n = kept_cols(i, cols, causal);
    float mx = row_max(x, n);
    float inv = 1.0f / exp_row(x, n, mx);
    for (int j = 0; j < n; j++) x[j] *= inv;
    for (int j = n; j < cols; j++) x[j] = 0.0f;
    stats[2 * i] = mx, stats[2 * i + 1] = inv;
  }
}

ST__SIMD_CLONES
void st__mha_softmax_recompute(int rows, int cols, bool causal, const float *stats, float *p) {
  for (int i = 0; i < rows; i++) {
    float *x = p + (size_t)i * cols;
    int n = kept_cols(i, cols, causal);
    float mx = stats[2 * i], inv = stats[2 * i + 1];
    for (int j = 0; j < n; j++) x[j] = exp_vec(x[j] - mx, 0.0f) * inv;
    for (int j = n; j < cols; j++) x[j] = 0.0f;
  }
}

ST__SIMD_CLONES
void st__mha_softmax_backward(int rows, int cols, const float *p, const float *pd,
                              float keep_scale, float *dp) {
  for (int i = 0; i < rows; i++) {
    const float *y = p + (size_t)i * cols;
    float *d = dp + (size_t)i * cols;
    if (pd) { /* dropout's backward: kept where pd != 0 (where P = 0, dS is 0 anyway) */
      const float *z = pd + (size_t)i * cols;
      for (int j = 0; j < cols; j++) d[j] = z[j] != 0.0f ? d[j] * keep_scale : 0.0f;
    }
    float s[LANES] = {0};
    int j = 0;
    for (; j + LANES <= cols; j += LANES)
      for (int k = 0; k < LANES; k++) s[k] += d[j + k] * y[j + k];
    for (; j < cols; j++) s[0] += d[j] * y[j];
    float dot = 0.0f;
    for (int k = 0; k < LANES; k++) dot += s[k];
    for (j = 0; j < cols; j++) d[j] = y[j] * (d[j] - dot);
  }
}
