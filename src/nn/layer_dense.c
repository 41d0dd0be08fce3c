/* Dense (Keras "Dense"): y[b, units] = act(x[b, in] . kernel[in, units] + bias).
 * On an input of rank > 1 it works on the last axis, as Keras: every row of
 * [..., in] (an example's tokens) is one row of the products. When the
 * activation's derivative needs its input (gelu) the pre-activation z is kept
 * in the cache, otherwise the output y suffices. */
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

/* Parameter indices. */
enum { KERNEL = 0, BIAS = 1 };

/* Rows of the products per example: the input's dimensions but the last. */
static int rows(const st_layer *l) {
  int r = 1;
  for (int i = 0; i + 1 < l->in_shape.rank; i++) r *= l->in_shape.dims[i];
  return r;
}
static int in_width(const st_layer *l) { return l->in_shape.dims[l->in_shape.rank - 1]; }

static st_status dense_build(st_layer *l) {
  const st_dense_options *o = l->config;
  int in = in_width(l);
  l->out_shape = l->in_shape;
  l->out_shape.dims[l->out_shape.rank - 1] = o->units;
  st__layer_add_param(l, "kernel", (st_shape){2, {in, o->units}},
                      o->kernel_init, true);
  if (o->use_bias)
    st__layer_add_param(l, "bias", st_shape1(o->units), o->bias_init, true);
  l->cache_per_example =
      st_activation_needs_input(o->activation) ? (size_t)rows(l) * (size_t)o->units : 0;
  l->out_activation = o->activation;
  return ST_OK;
}

/* dz[batch, units] when the activation is not linear and dy is read-only. */
static size_t dense_workspace(const st_layer *l, int batch) {
  const st_dense_options *o = l->config;
  return o->activation == ST_ACT_LINEAR ? 0 : (size_t)batch * (size_t)rows(l) * (size_t)o->units;
}

static void dense_forward(const st_layer *l, st_layer_args *c) {
  const st_dense_options *o = l->config;
  const st_backend *be = c->be;
  int in = in_width(l), units = o->units, n = c->batch * rows(l);
  bool keep_z = st_activation_needs_input(o->activation);
  float *z = keep_z ? c->cache : c->y; /* [n, units] pre-activation */
  be->gemm(c->ctx, false, false, n, units, in, 1.0f, c->x, in, c->w[KERNEL],
           units, 0.0f, z, units);
  if (o->use_bias) be->bias_add(c->ctx, n, units, c->w[BIAS], z);
  if (o->activation != ST_ACT_LINEAR)
    be->act_forward(c->ctx, o->activation, n, units, z, c->y);
}

/* dz[batch, units] = dy * act'(.): dy itself when linear, computed in place
 * when dy is writable, else in the workspace. */
static const float *dense_dz(const st_layer *l, st_layer_args *c) {
  const st_dense_options *o = l->config;
  st_activation act = st__layer_grad_act(l, o->activation);
  if (act == ST_ACT_LINEAR) return c->dy;
  float *dz = c->dy_writable ? (float *)c->dy : c->workspace;
  const float *z = st_activation_needs_input(act) ? c->cache : NULL;
  c->be->act_backward(c->ctx, act, c->batch * rows(l), o->units, z, c->y, c->dy, dz);
  return dz;
}

static void dense_backward(const st_layer *l, st_layer_args *c) {
  const st_dense_options *o = l->config;
  const st_backend *be = c->be;
  int in = in_width(l), units = o->units, n = c->batch * rows(l);
  const float *dz = dense_dz(l, c);
  /* dkernel[in, units] = x^T . dz */
  be->gemm(c->ctx, true, false, in, units, n, 1.0f, c->x, in, dz, units, 0.0f,
           c->dw[KERNEL], units);
  if (o->use_bias) be->bias_grad(c->ctx, n, units, dz, c->dw[BIAS]);
  /* dx[n, in] = dz . kernel^T */
  if (c->dx)
    be->gemm(c->ctx, false, true, n, in, units, 1.0f, dz, units, c->w[KERNEL],
             units, 0.0f, c->dx, in);
}

/* Backward reads the input (the kernel's gradient) and the output only for
 * an activation whose derivative comes from it (not linear, not the GELUs,
 * whose derivatives come from z in the cache): a linear Dense's output may
 * share a buffer in training (memplan_train.c). */
static bool dense_backward_reads(const st_layer *l, bool output) {
  if (!output) return true;
  st_activation act = st__layer_grad_act(l, ((const st_dense_options *)l->config)->activation);
  return act != ST_ACT_LINEAR && !st_activation_needs_input(act);
}

/* y = act(z) again from the cache (the forward's call: the same bits), for
 * the GELUs, whose output is then not kept for backward (layer.h). */
static bool dense_rematerialize(const st_layer *l, st_layer_args *c) {
  const st_dense_options *o = l->config;
  if (!st_activation_needs_input(o->activation)) return false;
  if (c) c->be->act_forward(c->ctx, o->activation, c->batch * rows(l), o->units, c->cache, c->y);
  return true;
}

static void dense_options(const st_layer *l, st_layer_options *out) {
  out->dense = *(const st_dense_options *)l->config;
  out->dense.name = NULL;
}

static const st_layer_vtable dense_vtable = {
    .class_name = "Dense",
    .base_name = "dense",
    .build = dense_build,
    .workspace_floats = dense_workspace,
    .forward = dense_forward,
    .backward = dense_backward,
    .get_options = dense_options,
    .backward_reads = dense_backward_reads,
    .rematerialize = dense_rematerialize,
};

st_dense_options st_dense_default_options(int units) {
  st_dense_options o = {
      .units = units,
      .activation = ST_ACT_LINEAR,
      .use_bias = true,
      .kernel_init = ST_INIT_GLOROT_UNIFORM,
      .bias_init = ST_INIT_ZEROS,
      .name = NULL,
  };
  return o;
}

/* New unbuilt Dense layer (caller owns it until st_model_add), or NULL + error. */
st_status st_dense_ex(st_dense_options o, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  if (o.units <= 0) {
    return st_error(ST_ERR_INVALID, "Dense: units must be positive, got %d", o.units);
  }
  if ((int)o.activation < 0 || o.activation >= ST_ACT_COUNT ||
      (int)o.kernel_init < 0 || o.kernel_init >= ST_INIT_COUNT ||
      (int)o.bias_init < 0 || o.bias_init >= ST_INIT_COUNT) {
    return st_error(ST_ERR_INVALID, "Dense: invalid activation or initializer");
  }
  const char *name = o.name;
  o.name = NULL; /* the config copy must not point at the caller's string */
  return st__layer_new(&dense_vtable, &o, sizeof o, name, out);
}

st_status st_dense(int units, st_activation act, st_layer **out) {
  ST_REQUIRE(out);
  st_dense_options o = st_dense_default_options(units);
  o.activation = act;
  return st_dense_ex(o, out);
}
