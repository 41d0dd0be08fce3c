/* LayerNormalization (Keras "LayerNormalization", axis -1): each row of d
 * values (the last axis) is normalized on its own,
 *   y = gamma * (x - mean) / sqrt(var + epsilon) + beta,
 * var biased; gamma [d] (ones, if scale) then beta [d] (zeros, if center),
 * Keras's order. The same in training and inference.
 *
 * Fused, one row at a time while it is in cache: forward takes the row's
 * mean and variance in one pass (sums of x - x0 and its square in double,
 * shifted by the row's first value so the variance does not cancel), then
 * writes xhat = (x - mean) / sqrt(var + eps) and y; xhat and 1/sqrt(var +
 * eps) are cached (cache [rows, d] xhat | [rows] invstd). Backward, per
 * row: one pass for sum(g) and sum(g * xhat) with g = dy * gamma (adding
 * dgamma and dbeta on the way), one for dx = invstd (g - mean(g) - xhat
 * mean(g xhat)). Backward reads neither x nor y: in training the input
 * (a residual sum) shares a buffer, and the output is rebuilt from xhat
 * (vtable rematerialize, layer.h) before a backward reads it, the
 * forward's arithmetic on the same floats (the same bits). Host-memory
 * loops (valid for the host backends cpu and reference). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu.h" /* ST__SIMD_CLONES (and -O3: the vectoriser) */
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
  /* xhat [rows, d], then 1/sqrt(var + eps) of each row */
  l->cache_per_example = st_shape_size(l->in_shape) + st_shape_size(l->in_shape) / (size_t)d;
  return ST_OK;
}

static size_t ln_rows(const st_layer *l, int batch) {
  const ln_config *cf = l->config;
  return (size_t)batch * (st_shape_size(l->in_shape) / (size_t)cf->d);
}

#define LANES 8 /* partial sums per row (doubles: one AVX-512 register) */

/* y [rows, d] = xhat gamma + beta (either may be absent). */
ST__SIMD_CLONES
static void scale_shift(size_t rows, int d, const float *restrict xhat,
                        const float *restrict gamma, const float *restrict beta,
                        float *restrict y) {
  for (size_t r = 0; r < rows; r++) {
    const float *restrict h = xhat + r * d;
    float *restrict yr = y + r * d;
    if (gamma && beta)
      for (int j = 0; j < d; j++) yr[j] = h[j] * gamma[j] + beta[j];
    else if (gamma)
      for (int j = 0; j < d; j++) yr[j] = h[j] * gamma[j] + 0.0f;
    else if (beta)
      for (int j = 0; j < d; j++) yr[j] = h[j] + beta[j];
    else
      for (int j = 0; j < d; j++) yr[j] = h[j] + 0.0f;
  }
}

/* xhat [rows, d] and invstd [rows] of x [rows, d]: each row's sums of x -
 * x0 and its square in double, LANES partial sums added at the end. */
ST__SIMD_CLONES
static void normalize_rows(size_t rows, int d, double eps, const float *restrict x,
                           float *restrict xhat, float *restrict invs) {
  for (size_t r = 0; r < rows; r++) {
    const float *restrict xr = x + r * d;
    float *restrict h = xhat + r * d;
    double x0 = xr[0], a[LANES] = {0}, b[LANES] = {0}, s1 = 0.0, s2 = 0.0;
    int j = 0;
    for (; j + LANES <= d; j += LANES)
      for (int k = 0; k < LANES; k++) {
        double v = (double)xr[j + k] - x0;
        a[k] += v, b[k] += v * v;
      }
    for (; j < d; j++) {
      double v = (double)xr[j] - x0;
      a[0] += v, b[0] += v * v;
    }
    for (int k = 0; k < LANES; k++) s1 += a[k], s2 += b[k];
    double m = s1 / d, var = s2 / d - m * m;
    if (var < 0.0) var = 0.0;
    float mean = (float)(x0 + m), inv = (float)(1.0 / sqrt(var + eps));
    invs[r] = inv;
    for (j = 0; j < d; j++) h[j] = (xr[j] - mean) * inv;
  }
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
  normalize_rows(rows, d, cf->o.epsilon, c->x, c->cache, c->cache + rows * d);
  scale_shift(rows, d, c->cache, gamma, beta, c->y);
}

/* Rebuild y from the cached xhat (layer.h rematerialize). */
static bool ln_rematerialize(const st_layer *l, st_layer_args *c) {
  if (!c) return true;
  const ln_config *cf = l->config;
  size_t rows = ln_rows(l, c->batch);
  if (!st__args_host(c)) {
    c->be->fill(c->ctx, rows * cf->d, NAN, c->y);
    return true;
  }
  scale_shift(rows, cf->d, c->cache, cf->i_gamma >= 0 ? c->w[cf->i_gamma] : NULL,
              cf->i_beta >= 0 ? c->w[cf->i_beta] : NULL, c->y);
  return true;
}

/* g = dy * gamma (dy without gamma): dgamma += dy xhat, dbeta += dy (when
 * given), then dx = invstd (g - mean(g) - xhat mean(g xhat)) (dx may be
 * NULL), row by row; the two means from LANES partial sums in double. */
ST__SIMD_CLONES
static void backward_rows(size_t rows, int d, const float *restrict xhat,
                          const float *restrict invs, const float *restrict dy,
                          const float *restrict gamma, float *restrict g, float *restrict dg,
                          float *restrict db, float *restrict dx) {
  for (size_t r = 0; r < rows; r++) {
    const float *restrict hr = xhat + r * d, *restrict dyr = dy + r * d;
    double a[LANES] = {0}, b[LANES] = {0}, sg = 0.0, sgh = 0.0;
    for (int j = 0; j < d; j++) g[j] = gamma ? dyr[j] * gamma[j] : dyr[j];
    int j = 0;
    for (; j + LANES <= d; j += LANES)
      for (int k = 0; k < LANES; k++) a[k] += g[j + k], b[k] += (double)g[j + k] * hr[j + k];
    for (; j < d; j++) a[0] += g[j], b[0] += (double)g[j] * hr[j];
    for (int k = 0; k < LANES; k++) sg += a[k], sgh += b[k];
    if (dg)
      for (j = 0; j < d; j++) dg[j] += dyr[j] * hr[j];
    if (db)
      for (j = 0; j < d; j++) db[j] += dyr[j];
    if (!dx) continue;
    float *restrict dxr = dx + r * d, inv = invs[r];
    float mg = (float)(sg / d), mgh = (float)(sgh / d);
    for (j = 0; j < d; j++) dxr[j] = inv * (g[j] - mg - hr[j] * mgh);
  }
}

static size_t ln_workspace(const st_layer *l, int batch) {
  return (size_t)((const ln_config *)l->config)->d; /* g: one row */
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
  backward_rows(rows, d, c->cache, c->cache + rows * d, c->dy, gamma, c->workspace, dg, db,
                c->dx);
}

/* Backward reads the cached xhat and 1/std only. */
static bool ln_backward_reads(const st_layer *l, bool output) { return false; }

static void ln_options(const st_layer *l, st_layer_options *out) {
  out->layernorm = ((const ln_config *)l->config)->o;
  out->layernorm.name = NULL;
}

static const st_layer_vtable ln_vtable = {
    .class_name = "LayerNormalization",
    .base_name = "layer_normalization",
    .build = ln_build,
    .workspace_floats = ln_workspace,
    .forward = ln_forward,
    .backward = ln_backward,
    .get_options = ln_options,
    .host_loops = true,
    .backward_reads = ln_backward_reads,
    .rematerialize = ln_rematerialize,
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
