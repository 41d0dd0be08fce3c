/* Dropout (Keras "Dropout"): in training, zero each element with probability
 * `rate` and scale the kept ones by 1/(1-rate); identity otherwise. The mask is
 * a pure function of (c->seed, c->stream, element index), so backward
 * regenerates it instead of storing it. */
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct dropout_config {
  float rate;
} dropout_config;

static st_status dropout_build(st_layer *l) { return ST_OK; }

static void dropout_forward(const st_layer *l, st_layer_args *c) {
  const dropout_config *dc = l->config;
  size_t size = st_shape_size(l->in_shape), n = (size_t)c->batch * size;
  if (c->training && dc->rate > 0.0f)
    c->be->dropout_forward(c->ctx, n, dc->rate, c->seed, c->stream, c->x, c->y);
  else /* identity copy */
    c->be->act_forward(c->ctx, ST_ACT_LINEAR, c->batch, (int)size, c->x, c->y);
}

/* Backward is only called after a training forward with the same seed/stream. */
static void dropout_backward(const st_layer *l, st_layer_args *c) {
  const dropout_config *dc = l->config;
  if (!c->dx) return;
  size_t size = st_shape_size(l->in_shape), n = (size_t)c->batch * size;
  if (dc->rate > 0.0f)
    c->be->dropout_backward(c->ctx, n, dc->rate, c->seed, c->stream, c->dy, c->dx);
  else
    c->be->act_forward(c->ctx, ST_ACT_LINEAR, c->batch, (int)size, c->dy, c->dx);
}

static void dropout_options(const st_layer *l, st_layer_options *out) {
  out->dropout_rate = ((const dropout_config *)l->config)->rate;
}

static const st_layer_vtable dropout_vtable = {
    .class_name = "Dropout",
    .base_name = "dropout",
    .build = dropout_build,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .get_options = dropout_options,
};

/* New unbuilt layer (caller owns it until st_model_add), or NULL + error. */
st_status st_dropout(float rate, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  if (!(rate >= 0.0f && rate < 1.0f)) {
    return st_error(ST_ERR_INVALID, "Dropout: rate must be in [0, 1), got %g",
                    (double)rate);
  }
  dropout_config dc = {.rate = rate};
  return st__layer_new(&dropout_vtable, &dc, sizeof dc, NULL, out);
}
