/* Softmax cross-entropy from logits over wide rows (a language model's
 * vocabulary: GPT-2's 50257 classes): the row's max and its sum of
 * exponentials kept in 16 float lanes (one AVX-512 register; GCC vectorises
 * the fixed-width inner loops, which it does not do for a single float
 * accumulator), e^x by exp_vec (cpu_exp.h) instead of glibc's scalar expf, the
 * lanes' sums added in double at the end. Rows narrower than
 * ST__CPU_WIDE_ROW keep cpu_train.c's scalar loop (so every model with a
 * classifier of up to thousands of classes, mlp and cnn among them, trains
 * the same bytes as before). Semantics as that loop: NaN logits give a NaN
 * loss; d = scale * (softmax - onehot). Any thread, disjoint buffers. */
#include <math.h>

#include "backend/cpu.h"
#include "backend/cpu_exp.h"

enum { LANES = 16 };

static float row_max(int cols, const float *restrict z) {
  float m[LANES];
  for (int l = 0; l < LANES; l++) m[l] = -INFINITY;
  int j = 0;
  for (; j + LANES <= cols; j += LANES)
    for (int l = 0; l < LANES; l++) m[l] = z[j + l] > m[l] ? z[j + l] : m[l];
  float mx = -INFINITY;
  for (; j < cols; j++) mx = z[j] > mx ? z[j] : mx;
  for (int l = 0; l < LANES; l++) mx = m[l] > mx ? m[l] : mx;
  return mx;
}

/* sum_j e^(z_j - mx); d[j] = e^(z_j - mx) when d is not NULL. */
static double row_exp_sum(int cols, const float *restrict z, float mx, float *restrict d) {
  float s[LANES] = {0};
  int j = 0;
  for (; j + LANES <= cols; j += LANES)
    for (int l = 0; l < LANES; l++) {
      float e = exp_vec(z[j + l] - mx, 0.0f);
      s[l] += e;
      if (d) d[j + l] = e;
    }
  double se = 0.0;
  for (; j < cols; j++) {
    float e = exp_vec(z[j] - mx, 0.0f);
    se += e;
    if (d) d[j] = e;
  }
  for (int l = 0; l < LANES; l++) se += s[l];
  return se;
}

ST__SIMD_CLONES
float st__cpu_sparse_ce_wide_row(int cols, const float *restrict z, int label, float scale,
                                 float *restrict d) {
  float mx = row_max(cols, z);
  double se = row_exp_sum(cols, z, mx, d);
  if (d) {
    float k = (float)(scale / se);
    for (int j = 0; j < cols; j++) d[j] *= k;
    d[label] -= scale;
  }
  return (float)(mx + log(se) - z[label]);
}
