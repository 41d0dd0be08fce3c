/* LayerNormalization (Keras "LayerNormalization", axis -1): each row of d
 * values (the last axis) is normalized on its own,
 *   y = gamma * (x - mean) / sqrt(var + epsilon) + beta,
 * var biased; gamma [d] (ones, if scale) then beta [d] (zeros, if center),
 * Keras's order. The same in training and inference.
 *
 * Fused, one row at a time while it is in cache: forward takes the row's
 * mean and variance in one pass (sums of x - x0 and its square in double,
 * shifted by the row's first value so the variance does not cancel), then
 * writes y; mean and 1/sqrt(var + eps) are cached per row. Backward, per
 * row: one pass for sum(g) and sum(g * xhat) with g = dy * gamma (adding
 * dgamma and dbeta on the way), one for dx = invstd (g - mean(g) - xhat
 * mean(g xhat)). Host-memory loops (valid for the host backends cpu and
 * reference). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct ln_config {
  st_layernorm_options o;
  int i_gamma, i_beta; /* param indices; -1 = absent */
  int d;               /* last axis */
} ln_config;

static st_status ln_build(st_layer *l) {
  ln_config *cf = l->config;
  int d = l->in_shape.dims[l->in_shape.rank - 1];
  cf->d = d;
  cf->i_gamma = cf->o.scale ? st__layer_add_param(l, "gamma", st_shape1(d), ST_INIT_ONES, true)
                            : -1;
  cf->i_beta = cf->o.center ? st__layer_add_param(l, "beta", st_shape1(d), ST_INIT_ZEROS, true)
                            : -1;
  /* mean and 1/sqrt(var + eps) of each row */
  l->cache_per_example = 2 * (st_shape_size(l->in_shape) / (size_t)d);
  return ST_OK;
}

static size_t ln_rows(const st_layer *l, int batch) {
  const ln_config *cf = l->config;
  return (size_t)batch * (st_shape_size(l->in_shape) / (size_t)cf->d);
}

static void ln_forward(const st_layer *l, st_layer_args *c) {
  const ln_config *cf = l->config;
  const int d = cf->d;
  const float *gamma = cf->i_gamma >= 0 ? c->w[cf->i_gamma] : NULL;
  const float *beta = cf->i_beta >= 0 ? c->w[cf->i_beta] : NULL;
  size_t rows = ln_rows(l, c->batch);
  if (!st__args_host(c)) { /* host loops only (see layer.h host_loops) */
    c->be->fill(c->ctx, rows * d, NAN, c->y);
    return;
  }
  for (size_t r = 0; r < rows; r++) {
    const float *restrict x = c->x + r * d;
    float *restrict y = c->y + r * d;
    double x0 = x[0], s1 = 0.0, s2 = 0.0;
    for (int j = 0; j < d; j++) {
      double v = (double)x[j] - x0;
      s1 += v, s2 += v * v;
    }
    double m = s1 / d, var = s2 / d - m * m;
    if (var < 0.0) var = 0.0;
    float mean = (float)(x0 + m), inv = (float)(1.0 / sqrt(var + cf->o.epsilon));
    c->cache[2 * r] = mean, c->cache[2 * r + 1] = inv;
    for (int j = 0; j < d; j++) {
      float h = (x[j] - mean) * inv;
      y[j] = (gamma ? h * gamma[j] : h) + (beta ? beta[j] : 0.0f);
    }
  }
}

static void ln_backward(const st_layer *l, st_layer_args *c) {
  const ln_config *cf = l->config;
  const int d = cf->d;
  const float *gamma = cf->i_gamma >= 0 ? c->w[cf->i_gamma] : NULL;
  float *dg = cf->i_gamma >= 0 ? c->dw[cf->i_gamma] : NULL;
  float *db = cf->i_beta >= 0 ? c->dw[cf->i_beta] : NULL;
  size_t rows = ln_rows(l, c->batch);
  if (!st__args_host(c)) { /* host loops only (see layer.h host_loops) */
    if (dg) c->be->fill(c->ctx, (size_t)d, NAN, dg);
    if (db) c->be->fill(c->ctx, (size_t)d, NAN, db);
    if (c->dx) c->be->fill(c->ctx, rows * d, NAN, c->dx);
    return;
  }
  if (dg) memset(dg, 0, (size_t)d * sizeof(float));
  if (db) memset(db, 0, (size_t)d * sizeof(float));
  for (size_t r = 0; r < rows; r++) {
    const float *restrict x = c->x + r * d, *restrict dy = c->dy + r * d;
    float mean = c->cache[2 * r], inv = c->cache[2 * r + 1];
    double sg = 0.0, sgh = 0.0;
    for (int j = 0; j < d; j++) {
      float h = (x[j] - mean) * inv, g = gamma ? dy[j] * gamma[j] : dy[j];
      sg += g, sgh += (double)g * h;
      if (dg) dg[j] += dy[j] * h;
      if (db) db[j] += dy[j];
    }
    if (!c->dx) continue;
    float *restrict dx = c->dx + r * d;
    float mg = (float)(sg / d), mgh = (float)(sgh / d);
    for (int j = 0; j < d; j++) {
      float h = (x[j] - mean) * inv, g = gamma ? dy[j] * gamma[j] : dy[j];
      dx[j] = inv * (g - mg - h * mgh);
    }
  }
}

/* Backward reads the input (with the cached mean and 1/std), not the output. */
static bool ln_backward_reads(const st_layer *l, bool output) { return !output; }

static void ln_options(const st_layer *l, st_layer_options *out) {
  out->layernorm = ((const ln_config *)l->config)->o;
  out->layernorm.name = NULL;
}

static const st_layer_vtable ln_vtable = {
    .class_name = "LayerNormalization",
    .base_name = "layer_normalization",
    .build = ln_build,
    .forward = ln_forward,
    .backward = ln_backward,
    .get_options = ln_options,
    .host_loops = true,
    .backward_reads = ln_backward_reads,
};

st_layernorm_options st_layernorm_default_options(void) {
  return (st_layernorm_options){.epsilon = 1e-3f, .center = true, .scale = true, .name = NULL};
}

/* New unbuilt LayerNormalization layer (caller owns it until st_model_add),
 * or NULL + error naming the option. */
st_status st_layernorm_ex(st_layernorm_options o, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_layernorm_ex: out is NULL");
  *out = NULL;
  if (!(o.epsilon > 0.0f) || isinf(o.epsilon))
    return st_error(ST_ERR_INVALID, "LayerNormalization: epsilon %g must be positive and "
                    "finite", (double)o.epsilon);
  ln_config cf = {.o = o};
  cf.o.name = NULL; /* the config copy must not point at the caller's string */
  return st__layer_new(&ln_vtable, &cf, sizeof cf, o.name, out);
}

st_status st_layernorm(st_layer **out) {
  ST_REQUIRE(out);
  return st_layernorm_ex(st_layernorm_default_options(), out);
}
