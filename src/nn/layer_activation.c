/* Activation (Keras "Activation"): y = act(x) elementwise; softmax runs over
 * the last axis of the per-example shape. */
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct activation_config {
  st_activation act;
} activation_config;

static st_status activation_build(st_layer *l) {
  l->out_activation = ((const activation_config *)l->config)->act;
  return ST_OK;
}

/* The [rows, cols] view the kernels see: cols = last axis. */
static void act_view(const st_layer *l, int batch, int *rows, int *cols) {
  *cols = l->in_shape.dims[l->in_shape.rank - 1];
  *rows = (int)((size_t)batch * (st_shape_size(l->in_shape) / (size_t)*cols));
}

static void activation_forward(const st_layer *l, st_layer_args *c) {
  const activation_config *ac = l->config;
  int rows, cols;
  act_view(l, c->batch, &rows, &cols);
  c->be->act_forward(c->ctx, ac->act, rows, cols, c->x, c->y);
}

static void activation_backward(const st_layer *l, st_layer_args *c) {
  const activation_config *ac = l->config;
  if (!c->dx) return;
  int rows, cols;
  act_view(l, c->batch, &rows, &cols);
  c->be->act_backward(c->ctx, st__layer_grad_act(l, ac->act), rows, cols, c->x, c->y,
                      c->dy, c->dx);
}

static void activation_options(const st_layer *l, st_layer_options *out) {
  out->activation = ((const activation_config *)l->config)->act;
}

/* act_backward reads x only for activations that need their input (GELU,
 * ...); ReLU, sigmoid, tanh, softmax read y. */
static bool activation_backward_reads(const st_layer *l, bool output) {
  return output || st_activation_needs_input(((const activation_config *)l->config)->act);
}

static const st_layer_vtable activation_vtable = {
    .class_name = "Activation",
    .base_name = "activation",
    .build = activation_build,
    .forward = activation_forward,
    .backward = activation_backward,
    .get_options = activation_options,
    .backward_reads = activation_backward_reads,
};

/* New unbuilt layer (caller owns it until st_model_add), or NULL + error. */
st_status st_activation_layer(st_activation act, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  if ((int)act < 0 || act >= ST_ACT_COUNT) {
    return st_error(ST_ERR_INVALID, "Activation: invalid activation %d", (int)act);
  }
  activation_config ac = {.act = act};
  return st__layer_new(&activation_vtable, &ac, sizeof ac, NULL, out);
}
