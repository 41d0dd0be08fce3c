/* Data shared by the C tests that train a small model: a classification
 * problem a small MLP learns. Header-only, like check.h. */
#ifndef STRATA_TESTS_FIXTURES_H
#define STRATA_TESTS_FIXTURES_H
#include <stdint.h>

#include "strata/data.h"

/* x [n, d] standard normal, y [n] = argmax over c classes of W x for a random
 * W [c, d]: all drawn from the Philox stream (seed, 0), W first. */
static inline void fixture_argmax_data(uint64_t seed, int n, int d, int c, float *x, float *y) {
  st_rng r = st_rng_make(seed, 0);
  float w[c * d];
  for (int i = 0; i < c * d; i++) w[i] = st_rng_normal(&r);
  for (int k = 0; k < n; k++) {
    for (int j = 0; j < d; j++) x[k * d + j] = st_rng_normal(&r);
    int best = 0;
    float bv = -1e30f;
    for (int q = 0; q < c; q++) {
      float s = 0;
      for (int j = 0; j < d; j++) s += w[q * d + j] * x[k * d + j];
      if (s > bv) bv = s, best = q;
    }
    y[k] = (float)best;
  }
}

/* x [n, d] and y [n] (borrowed) as a dataset of batches of `batch`; NULL on
 * failure (the test's checks then fail on it). */
static inline st_dataset *fixture_dataset(float *x, float *y, int n, int d, int batch) {
  st_tensor xt = {ST_F32, 2, {n, d}, x}, yt = {ST_F32, 1, {n}, y};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&xt, &yt, 1.0f, false, &ds) != ST_OK) return NULL;
  (void)st_dataset_batch(ds, batch, false, &ds); /* NULL on failure */
  return ds;
}
#endif
