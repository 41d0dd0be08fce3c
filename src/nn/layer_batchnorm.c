/* BatchNormalization (Keras class): normalizes over every axis but the last
 * (channels). Parameters, in Keras order: gamma [c] (if scale), beta [c] (if
 * center), moving_mean [c] and moving_variance [c] (non-trainable).
 *
 * Training uses the biased batch statistics and updates the moving ones in
 * place: moving = moving*momentum + batch_stat*(1-momentum). Inference uses the
 * moving statistics.
 *
 * Synchronized mode (options.synchronized and c->all_reduce_sum set): per-channel sums are all-reduced
 * so every replica normalizes with the statistics of the global batch (counts
 * are all-reduced too, so global_batch is not needed); backward all-reduces
 * sum(dy) and sum(dy*xhat) the same way. Every replica must call forward and
 * backward even with an empty slice, since the all-reduces are collective.
 *
 * Host-memory note: the synchronized statistics and the moving-statistics
 * update are plain loops over the buffers (valid for host backends: cpu,
 * reference); a device backend needs kernels for them. Everything else goes
 * through the backend. */
#include <stdlib.h>
#include <math.h>
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct bn_config {
  st_batchnorm_options o;
  int i_gamma, i_beta, i_mean, i_var; /* param indices; -1 = absent */
  int c;                              /* channels (last axis) */
} bn_config;

static st_status bn_build(st_layer *l) {
  bn_config *bc = l->config;
  int c = l->in_shape.dims[l->in_shape.rank - 1];
  bc->c = c;
  bc->i_gamma = bc->o.scale
                    ? st__layer_add_param(l, "gamma", st_shape1(c), ST_INIT_ONES, true)
                    : -1;
  bc->i_beta = bc->o.center
                   ? st__layer_add_param(l, "beta", st_shape1(c), ST_INIT_ZEROS, true)
                   : -1;
  bc->i_mean = st__layer_add_param(l, "moving_mean", st_shape1(c), ST_INIT_ZEROS, false);
  bc->i_var = st__layer_add_param(l, "moving_variance", st_shape1(c), ST_INIT_ONES, false);
  /* mean[c], invstd[c] of the last training forward; sized per example so that
   * any batch >= 1 holds them (only the first 2c floats are used). */
  l->cache_per_example = 2 * (size_t)c;
  l->uses_collectives = bc->o.synchronized;
  return ST_OK;
}

/* Workspace layout (floats): ones[c] | zeros[c] | dgamma[c] | dbeta[c] |
 * red[2c+1] (all-reduce buffer; sync forward keeps var[c] at red + c + 1) | dx[batch*size] (when c->dx is NULL). */
enum { WS_ONES, WS_ZEROS, WS_DGAMMA, WS_DBETA, WS_RED };
static size_t bn_workspace(const st_layer *l, int batch) {
  const bn_config *bc = l->config;
  return 6 * (size_t)bc->c + 1 + (size_t)batch * st_shape_size(l->in_shape);
}
static float *ws(const bn_config *bc, const st_layer_args *c, int part) {
  return c->workspace + (size_t)part * bc->c;
}
static float *ws_dx(const bn_config *bc, const st_layer_args *c) {
  return c->workspace + 6 * (size_t)bc->c + 1;
}

static int bn_rows(const st_layer *l, int batch) {
  const bn_config *bc = l->config;
  return (int)((size_t)batch * (st_shape_size(l->in_shape) / (size_t)bc->c));
}

/* gamma (or ones) and beta (or zeros) for the kernels. */
static void bn_affine(const bn_config *bc, const st_layer_args *c,
                      const float **gamma, const float **beta) {
  if (bc->i_gamma < 0) c->be->fill(c->ctx, (size_t)bc->c, 1.0f, ws(bc, c, WS_ONES));
  if (bc->i_beta < 0) c->be->fill(c->ctx, (size_t)bc->c, 0.0f, ws(bc, c, WS_ZEROS));
  *gamma = bc->i_gamma >= 0 ? c->w[bc->i_gamma] : ws(bc, c, WS_ONES);
  *beta = bc->i_beta >= 0 ? c->w[bc->i_beta] : ws(bc, c, WS_ZEROS);
}

/* moving = moving*momentum + stat*(1-momentum), var from invstd (host loop). */
static void moving_average(const bn_config *bc, float *mm, float *mv, const float *mean,
                           const float *invstd) {
  double m = bc->o.momentum;
  for (int j = 0; j < bc->c; j++) {
    double var = 1.0 / ((double)invstd[j] * invstd[j]) - bc->o.epsilon;
    if (var < 0.0) var = 0.0;
    mm[j] = (float)(mm[j] * m + mean[j] * (1.0 - m));
    mv[j] = (float)(mv[j] * m + var * (1.0 - m));
  }
}

/* The moving statistics, on the host in double as on the CPU (a device
 * backend's [c]-float vectors make the round trip: the same bytes). */
static void bn_update_moving(const bn_config *bc, const st_layer_args *c,
                             const float *mean, const float *invstd) {
  float *mm = c->w[bc->i_mean], *mv = c->w[bc->i_var];
  if (st__be_is_host(c->be)) {
    moving_average(bc, mm, mv, mean, invstd);
    return;
  }
  size_t n = (size_t)bc->c, b = n * sizeof(float);
  float *h = malloc(4 * b);
  if (!h) return; /* the statistics keep their values (out of host memory) */
  st__be_to_host(c->ctx, h, mm, b);
  st__be_to_host(c->ctx, h + n, mv, b);
  st__be_to_host(c->ctx, h + 2 * n, mean, b);
  st__be_to_host(c->ctx, h + 3 * n, invstd, b);
  moving_average(bc, h, h + n, h + 2 * n, h + 3 * n);
  st__be_to_device(c->ctx, mm, h, b);
  st__be_to_device(c->ctx, mv, h + n, b);
  st__be_synchronize(c->ctx); /* h is freed next */
  free(h);
}

/* Local per-channel sums of f(row r, channel j) over x[rows, c] into red[c],
 * accumulated in double. */
static void channel_sums(int rows, int C, const float *x, const float *mean,
                         float *red) {
  for (int j = 0; j < C; j++) {
    double acc = 0.0;
    for (int r = 0; r < rows; r++) {
      double v = x[(size_t)r * C + j];
      acc += mean ? (v - mean[j]) * (v - mean[j]) : v;
    }
    red[j] = (float)acc;
  }
}

/* Synchronized statistics over all replicas (host loops, two all-reduces):
 * writes mean[c], var[c] (biased) and invstd[c]. Returns false when the
 * global batch is empty. */
static bool bn_sync_stats(const bn_config *bc, st_layer_args *c, int rows,
                          float *mean, float *var, float *invstd) {
  int C = bc->c;
  float *red = ws(bc, c, WS_RED); /* [c sums | count], then [c squares] */
  channel_sums(rows, C, c->x, NULL, red);
  red[C] = (float)rows;
  c->all_reduce_sum(c->all_reduce_ctx, red, (size_t)C + 1);
  double n = red[C];
  if (n <= 0) return false; /* every replica's slice is empty */
  for (int j = 0; j < C; j++) mean[j] = (float)(red[j] / n);
  channel_sums(rows, C, c->x, mean, red);
  c->all_reduce_sum(c->all_reduce_ctx, red, (size_t)C);
  for (int j = 0; j < C; j++) {
    var[j] = (float)(red[j] / n);
    invstd[j] = (float)(1.0 / sqrt((double)var[j] + bc->o.epsilon));
  }
  return true;
}

static bool bn_is_sync(const bn_config *bc, const st_layer_args *c) {
  return bc->o.synchronized && c->all_reduce_sum;
}

static void bn_forward_train(const st_layer *l, st_layer_args *c,
                             const float *gamma, const float *beta) {
  const bn_config *bc = l->config;
  int rows = bn_rows(l, c->batch), C = bc->c;
  /* mean[c], invstd[c]: the cache when it exists, else scratch */
  float *mean = c->batch > 0 ? c->cache : ws(bc, c, WS_DGAMMA);
  float *invstd = c->batch > 0 ? c->cache + C : ws(bc, c, WS_DBETA);
  if (!bn_is_sync(bc, c)) {
    if (rows == 0) return; /* no statistics from an empty batch */
    c->be->batchnorm_forward_train(c->ctx, rows, C, c->x, gamma, beta, bc->o.epsilon,
                                   mean, invstd, c->y);
    bn_update_moving(bc, c, mean, invstd);
    return;
  }
  float *var = ws(bc, c, WS_RED) + C + 1; /* [c] */
  if (!bn_sync_stats(bc, c, rows, mean, var, invstd)) return;
  c->be->batchnorm_forward_infer(c->ctx, rows, C, c->x, gamma, beta, mean, var,
                                 bc->o.epsilon, c->y);
  bn_update_moving(bc, c, mean, invstd);
}

static void bn_forward(const st_layer *l, st_layer_args *c) {
  const bn_config *bc = l->config;
  const float *gamma, *beta;
  bn_affine(bc, c, &gamma, &beta);
  if (c->training)
    bn_forward_train(l, c, gamma, beta);
  else
    c->be->batchnorm_forward_infer(c->ctx, bn_rows(l, c->batch), bc->c, c->x, gamma,
                                   beta, c->w[bc->i_mean], c->w[bc->i_var],
                                   bc->o.epsilon, c->y);
}

/* Synchronized backward (host loops): local sums of dy and dy*xhat are the
 * parameter gradients; their all-reduced totals give dx. */
static void bn_sync_backward(const bn_config *bc, st_layer_args *c, int rows,
                             const float *gamma, float *dgamma, float *dbeta) {
  int C = bc->c;
  const float *mean = c->cache, *invstd = c->cache + C; /* valid if rows > 0 */
  float *red = ws(bc, c, WS_RED); /* [sum dy c | sum dy*xhat c | count] */
  for (int j = 0; j < C; j++) {
    double sdy = 0.0, sdyx = 0.0;
    for (int r = 0; r < rows; r++) {
      size_t i = (size_t)r * C + j;
      sdy += c->dy[i];
      sdyx += (double)c->dy[i] * (c->x[i] - (double)mean[j]) * invstd[j];
    }
    dbeta[j] = red[j] = (float)sdy;
    dgamma[j] = red[C + j] = (float)sdyx;
  }
  red[2 * C] = (float)rows;
  c->all_reduce_sum(c->all_reduce_ctx, red, 2 * (size_t)C + 1);
  double n = red[2 * C];
  for (int r = 0; c->dx && r < rows; r++)
    for (int j = 0; j < C; j++) {
      size_t i = (size_t)r * C + j;
      double xhat = (c->x[i] - (double)mean[j]) * invstd[j];
      c->dx[i] = (float)((double)gamma[j] * invstd[j] / n *
                         (n * c->dy[i] - red[j] - xhat * red[C + j]));
    }
}

static void bn_backward(const st_layer *l, st_layer_args *c) {
  const bn_config *bc = l->config;
  int rows = bn_rows(l, c->batch), C = bc->c;
  const float *gamma, *beta;
  bn_affine(bc, c, &gamma, &beta);
  float *dgamma = bc->i_gamma >= 0 ? c->dw[bc->i_gamma] : ws(bc, c, WS_DGAMMA);
  float *dbeta = bc->i_beta >= 0 ? c->dw[bc->i_beta] : ws(bc, c, WS_DBETA);
  if (bn_is_sync(bc, c)) {
    bn_sync_backward(bc, c, rows, gamma, dgamma, dbeta);
  } else if (rows == 0) {
    c->be->fill(c->ctx, (size_t)C, 0.0f, dgamma);
    c->be->fill(c->ctx, (size_t)C, 0.0f, dbeta);
  } else {
    float *dx = c->dx ? c->dx : ws_dx(bc, c);
    c->be->batchnorm_backward(c->ctx, rows, C, c->x, gamma, c->cache, c->cache + C,
                              c->dy, dx, dgamma, dbeta);
  }
}

static void bn_options(const st_layer *l, st_layer_options *out) {
  out->batchnorm = ((const bn_config *)l->config)->o;
  out->batchnorm.name = NULL;
}

/* Backward reads x and the cached statistics, never y. */
static bool bn_backward_reads(const st_layer *l, bool output) {
  (void)l;
  return !output;
}

static const st_layer_vtable bn_vtable = {
    .class_name = "BatchNormalization",
    .base_name = "batch_normalization",
    .build = bn_build,
    .workspace_floats = bn_workspace,
    .forward = bn_forward,
    .backward = bn_backward,
    .get_options = bn_options,
    .backward_reads = bn_backward_reads,
};

st_batchnorm_options st_batchnorm_default_options(void) {
  st_batchnorm_options o = {.momentum = 0.99f, .epsilon = 1e-3f, .center = true,
                            .scale = true, .synchronized = false, .name = NULL};
  return o;
}

/* New unbuilt layer (caller owns it until st_model_add), or NULL + error. */
st_status st_batchnorm_ex(st_batchnorm_options o, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  if (!(o.momentum >= 0.0f && o.momentum <= 1.0f) || !(o.epsilon > 0.0f)) {
    return st_error(ST_ERR_INVALID,
                    "BatchNormalization: momentum must be in [0, 1] and epsilon > 0 "
                    "(momentum %g, epsilon %g)", (double)o.momentum, (double)o.epsilon);
  }
  bn_config bc = {.o = o, .i_gamma = -1, .i_beta = -1, .i_mean = -1, .i_var = -1};
  bc.o.name = NULL; /* the config copy must not point at the caller's string */
  return st__layer_new(&bn_vtable, &bc, sizeof bc, o.name, out);
}

st_status st_batchnorm(st_layer **out) {
  ST_REQUIRE(out);
  return st_batchnorm_ex(st_batchnorm_default_options(), out);
}
