/* GELU (exact, erf form) on the CPU, written so that GCC vectorises it:
 * glibc's erff and expf are scalar calls (their vector variants are declared
 * only under -ffast-math), and in the transformer bench (bench/graph_bench.c)
 * the two GELU loops took ~15% of a training step. Here
 *   Phi(x) = 1 - erfc(z)/2 (x >= 0), erfc(z)/2 (x < 0), z = |x|/sqrt(2),
 *   erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2)
 * (Numerical Recipes' erfcc, Chebyshev fit: fractional error < 1.2e-7 for
 * every z >= 0, so Phi has no cancellation for negative x), and exp by
 * Cody-Waite reduction to [-ln2/2, ln2/2], Cephes's expf polynomial and the
 * exponent put in by integer bits: no branches, no calls (the polynomials
 * by fused multiply-adds, __builtin_fmaf: ~25% fewer instructions than
 * separate multiplies and adds, the same bits in every build). The reference is
 * the reference backend's double erf (tests/test_gelu_fast.c compares them
 * on a dense grid and the special values). Any thread; disjoint buffers. */
#include <stdint.h>
#include <string.h>

#include "backend/cpu.h"
#include "backend/cpu_exp.h"

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

/* -x^2/2 as hi + lo: xh = x to 12 significant bits, so xh^2 is exact (and
 * x^2/2 = z^2 without z = x/sqrt 2's rounding, which alone is 2e-6 of
 * relative error at x = -6). */
static inline float neg_half_square(float x, float *lo) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  b &= 0xFFFFF000u;
  float xh;
  memcpy(&xh, &b, sizeof xh);
  float lo_ = -0.5f * ((x - xh) * (x + xh));
  *lo = lo_ == lo_ ? lo_ : 0.0f; /* x = +-inf: inf - inf */
  return -0.5f * (xh * xh);
}

/* erfc(z) for z = |x|/sqrt 2 (z = +inf: 0), and e^(-z^2) through *g. */
static inline float erfc_pos(float x, float z, float *g) {
  float t = 1.0f / __builtin_fmaf(0.5f, z, 1.0f);
  float p = 0.17087277f;
  p = __builtin_fmaf(p, t, -0.82215223f);
  p = __builtin_fmaf(p, t, 1.48851587f);
  p = __builtin_fmaf(p, t, -1.13520398f);
  p = __builtin_fmaf(p, t, 0.27886807f);
  p = __builtin_fmaf(p, t, -0.18628806f);
  p = __builtin_fmaf(p, t, 0.09678418f);
  p = __builtin_fmaf(p, t, 0.37409196f);
  p = __builtin_fmaf(p, t, 1.00002368f);
  p = __builtin_fmaf(p, t, -1.26551223f);
  float lo, hi = neg_half_square(x, &lo);
  *g = exp_vec_fma(hi, lo);
  return t * exp_vec_fma(hi, lo + p);
}

/* Phi(x), the standard normal CDF, and (through *pdf) phi(x). */
static inline float normal_cdf(float x, float *pdf) {
  float z = (x < 0.0f ? -x : x) * INV_SQRT2, g;
  float half = 0.5f * erfc_pos(x, z, &g);
  *pdf = g * INV_SQRT_2PI;
  return x < 0.0f ? half : 1.0f - half;
}

ST__SIMD_CLONES
void st__cpu_gelu_forward(size_t n, const float *x, float *y) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i], pdf;
    float cdf = normal_cdf(v, &pdf);
    y[i] = v * cdf;
  }
}

ST__SIMD_CLONES
void st__cpu_gelu_backward(size_t n, const float *x, const float *dy, float *dx) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i], pdf;
    float cdf = normal_cdf(v, &pdf);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}
