/* ReLU and LeakyReLU (Keras classes), elementwise:
 *   y = x > threshold ? min(x, max_value) : negative_slope * (x - threshold)
 * which is Keras's ReLU (x for threshold < x < max_value, max_value above it,
 * negative_slope (x - threshold) below the threshold); LeakyReLU is the case
 * max_value none, threshold 0. dy/dx = 1 between threshold and max_value, 0
 * above max_value, negative_slope below the threshold. NaN propagates.
 *
 * The common forms run the backend's activation kernels (relu, relu6 and
 * leaky_relu with slope 0.2: any backend); every other form is a plain loop
 * over the buffers (host backends: cpu, reference). No parameters, no cache. */
#include <math.h>
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct relu_config {
  st_relu_options o;  /* name NULL */
  st_activation fast; /* the backend activation equal to o, else LINEAR */
} relu_config;

static st_status relu_build(st_layer *l) { return ST_OK; }

static void relu_forward(const st_layer *l, st_layer_args *c) {
  const relu_config *rc = l->config;
  size_t n = (size_t)c->batch * st_shape_size(l->in_shape);
  if (rc->fast != ST_ACT_LINEAR) {
    c->be->act_forward(c->ctx, rc->fast, c->batch, (int)st_shape_size(l->in_shape), c->x, c->y);
    return;
  }
  const float t = rc->o.threshold, m = rc->o.max_value, s = rc->o.negative_slope;
  const float *x = c->x;
  float *y = c->y;
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    y[i] = v > t ? (v < m ? v : m) : s * (v - t);
  }
}

static void relu_backward(const st_layer *l, st_layer_args *c) {
  const relu_config *rc = l->config;
  if (!c->dx) return;
  size_t n = (size_t)c->batch * st_shape_size(l->in_shape);
  if (rc->fast != ST_ACT_LINEAR) {
    c->be->act_backward(c->ctx, rc->fast, c->batch, (int)st_shape_size(l->in_shape), c->x,
                        c->y, c->dy, c->dx);
    return;
  }
  const float t = rc->o.threshold, m = rc->o.max_value, s = rc->o.negative_slope;
  const float *x = c->x, *dy = c->dy;
  float *dx = c->dx;
  for (size_t i = 0; i < n; i++) {
    float v = x[i], d = dy[i];
    dx[i] = v > t ? (v < m ? d : 0.0f) : s * d;
  }
}

static void relu_options(const st_layer *l, st_layer_options *out) {
  out->relu = ((const relu_config *)l->config)->o;
}

static const st_layer_vtable relu_vtable = {
    .class_name = "ReLU",
    .base_name = "re_lu",
    .build = relu_build,
    .forward = relu_forward,
    .backward = relu_backward,
    .get_options = relu_options,
    .host_loops = true,
};

static const st_layer_vtable leaky_relu_vtable = {
    .class_name = "LeakyReLU",
    .base_name = "leaky_re_lu",
    .build = relu_build,
    .forward = relu_forward,
    .backward = relu_backward,
    .get_options = relu_options,
    .host_loops = true,
};

st_relu_options st_relu_default_options(void) {
  st_relu_options o = {.max_value = INFINITY, .negative_slope = 0.0f, .threshold = 0.0f,
                       .name = NULL};
  return o;
}

static st_status relu_new(const st_layer_vtable *vt, st_relu_options o, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "%s: out is NULL", vt->class_name);
  *out = NULL;
  if (isnan(o.max_value) || o.max_value < 0.0f)
    return st_error(ST_ERR_INVALID, "%s: max_value %g must be >= 0 (INFINITY: none)",
                    vt->class_name, (double)o.max_value);
  if (!(o.negative_slope >= 0.0f) || isinf(o.negative_slope))
    return st_error(ST_ERR_INVALID, "%s: negative_slope %g must be finite and >= 0",
                    vt->class_name, (double)o.negative_slope);
  if (!(o.threshold >= 0.0f) || isinf(o.threshold))
    return st_error(ST_ERR_INVALID, "%s: threshold %g must be finite and >= 0", vt->class_name,
                    (double)o.threshold);
  relu_config rc = {.o = o, .fast = ST_ACT_LINEAR};
  rc.o.name = NULL; /* the config copy must not point at the caller's string */
  bool plain = o.threshold == 0.0f && o.negative_slope == 0.0f;
  if (plain && isinf(o.max_value)) rc.fast = ST_ACT_RELU;
  if (plain && o.max_value == 6.0f) rc.fast = ST_ACT_RELU6;
  if (o.threshold == 0.0f && o.negative_slope == 0.2f && isinf(o.max_value))
    rc.fast = ST_ACT_LEAKY_RELU;
  return st__layer_new(vt, &rc, sizeof rc, o.name, out);
}

/* New unbuilt layers (caller owns them until st_model_add), or NULL + error. */
st_status st_relu_ex(st_relu_options o, st_layer **out) {
  ST_REQUIRE(out);
  return relu_new(&relu_vtable, o, out);
}

st_status st_leaky_relu(float negative_slope, st_layer **out) {
  ST_REQUIRE(out);
  st_relu_options o = st_relu_default_options();
  o.negative_slope = negative_slope;
  return relu_new(&leaky_relu_vtable, o, out);
}
