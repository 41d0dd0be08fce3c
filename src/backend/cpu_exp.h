/* Internal: e^x without a call, in plain float arithmetic GCC vectorises
 * (glibc's expf is a scalar call): the GELU kernels (cpu_gelu.c) and the
 * softmax cross-entropy over wide rows (cpu_loss_wide.c). Any thread. */
#ifndef STRATA_SRC_BACKEND_CPU_EXP_H
#define STRATA_SRC_BACKEND_CPU_EXP_H

#include <stdint.h>
#include <string.h>

/* e^(hi + lo) within ~2 ulp for hi + lo in [-87, 88], |lo| < 1; 0 below
 * -87 (no subnormals), e^88 above (the callers' arguments are <= 0); NaN
 * stays NaN. lo carries what a single float of the argument would round
 * away (a z^2 of up to 87 has an ulp of 8e-6: that much relative error). */
static inline float exp_vec(float hi, float lo) {
  float s = hi + lo;
  float c = s > -87.0f ? s : -87.0f; /* NaN: -87 (the result is NaN, below) */
  c = c < 88.0f ? c : 88.0f;
  float k = c * 1.44269504088896341f + 12582912.0f; /* round to nearest: 1.5 * 2^23 */
  k -= 12582912.0f;
  /* r = hi + lo - k ln2 in [-ln2/2, ln2/2] (clamped: anything); hi - k
   * ln2_hi is exact where |hi| is large (both within a factor 2), Cody-Waite
   * ln2 = 0.693359375 - 2.12194440e-4 */
  float h = s > -87.0f && s < 88.0f ? hi : c;
  float r = h - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  r = s > -87.0f && s < 88.0f ? r + lo : r;
  float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)k + 127) << 23; /* k in [-126, 127] */
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float e = p * scale;
  e = s < -87.0f ? 0.0f : e;
  return s != s ? s : e; /* NaN in, NaN out */
}

/* exp_vec with its polynomial by fused multiply-adds (__builtin_fmaf: one
 * instruction where the target has FMA, the correctly rounded libm call
 * elsewhere, so every build gives the same bits): the GELU kernels
 * (cpu_gelu.c), where the separate multiplies and adds were a third of the
 * work. Same range and special values as exp_vec; within ~2 ulp too, but
 * not bit for bit the same as exp_vec. */
static inline float exp_vec_fma(float hi, float lo) {
  float s = hi + lo;
  float c = s > -87.0f ? s : -87.0f;
  c = c < 88.0f ? c : 88.0f;
  float k = __builtin_fmaf(c, 1.44269504088896341f, 12582912.0f);
  k -= 12582912.0f;
  float h = s > -87.0f && s < 88.0f ? hi : c;
  float r = __builtin_fmaf(-k, 0.693359375f, h);
  r = __builtin_fmaf(k, 2.12194440e-4f, r);
  r = s > -87.0f && s < 88.0f ? r + lo : r;
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r * r, r) + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float e = p * scale;
  e = s < -87.0f ? 0.0f : e;
  return s != s ? s : e;
}

#endif
