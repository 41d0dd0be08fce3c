/* Parameter initializers with Keras semantics (glorot_uniform, he_normal,
 * zeros, ones, random_uniform) and their names. Fans are computed from the tensor shape as
 * Keras's compute_fans does. Any thread (each caller owns its st_rng). */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "base/args.h"
#include "nn/layer.h"

static const char *const init_names[] = {
    [ST_INIT_GLOROT_UNIFORM] = "glorot_uniform",
    [ST_INIT_HE_NORMAL] = "he_normal",
    [ST_INIT_ZEROS] = "zeros",
    [ST_INIT_ONES] = "ones",
    [ST_INIT_RANDOM_UNIFORM] = "random_uniform",
};
static_assert(sizeof init_names / sizeof init_names[0] == ST_INIT_COUNT,
              "name every st_init");

const char *st_init_name(st_init i) {
  return (i >= 0 && i < ST_INIT_COUNT && init_names[i]) ? init_names[i]
                                                        : "unknown";
}

st_status st_init_parse(const char *name, st_init *out) {
  ST_REQUIRE(name);
  ST_REQUIRE(out);
  for (int i = 0; name && i < ST_INIT_COUNT; i++)
    if (strcmp(name, init_names[i]) == 0) {
      *out = (st_init)i;
      return ST_OK;
    }
  return st_error(ST_ERR_INVALID,
                  "unknown initializer '%s' (valid: glorot_uniform, he_normal, "
                  "zeros, ones, random_uniform)",
                  name ? name : "(null)");
}

/* Keras compute_fans: rank 0 -> 1,1; rank 1 -> d,d; rank 2 [in,out];
 * higher ranks [..receptive.., in, out] scale in/out by the receptive field. */
static void compute_fans(st_shape s, double *fan_in, double *fan_out) {
  if (s.rank <= 0) {
    *fan_in = *fan_out = 1.0;
  } else if (s.rank == 1) {
    *fan_in = *fan_out = s.dims[0];
  } else {
    double receptive = 1.0;
    for (int i = 0; i < s.rank - 2; i++) receptive *= s.dims[i];
    *fan_in = s.dims[s.rank - 2] * receptive;
    *fan_out = s.dims[s.rank - 1] * receptive;
  }
}

/* Normal(0, stddev) truncated to 2 stddev by redrawing (Keras TruncatedNormal). */
static float truncated_normal(st_rng *rng, double stddev) {
  for (;;) {
    float z = st_rng_normal(rng);
    if (z >= -2.0f && z <= 2.0f) return (float)(z * stddev);
  }
}

/* Fills dst[st_shape_size(shape)] with the initializer's values. */
void st__init_fill(st_init init, st_shape shape, float *dst, st_rng *rng) {
  size_t n = st_shape_size(shape);
  double fan_in, fan_out;
  compute_fans(shape, &fan_in, &fan_out);
  if (init == ST_INIT_GLOROT_UNIFORM) {
    double limit = sqrt(6.0 / fmax(fan_in + fan_out, 1.0));
    for (size_t i = 0; i < n; i++)
      dst[i] = (float)(-limit + 2.0 * limit * st_rng_uniform(rng));
  } else if (init == ST_INIT_HE_NORMAL) {
    /* .8796... is the stddev of a unit normal truncated to [-2, 2] */
    double stddev = sqrt(2.0 / fmax(fan_in, 1.0)) / .87962566103423978;
    for (size_t i = 0; i < n; i++) dst[i] = truncated_normal(rng, stddev);
  } else if (init == ST_INIT_RANDOM_UNIFORM) { /* Keras RandomUniform() */
    for (size_t i = 0; i < n; i++)
      dst[i] = (float)(-0.05 + 0.1 * st_rng_uniform(rng));
  } else {
    float v = init == ST_INIT_ONES ? 1.0f : 0.0f;
    for (size_t i = 0; i < n; i++) dst[i] = v;
  }
}
