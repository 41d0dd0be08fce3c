/* Flatten and Reshape (Keras classes): change the per-example shape only.
 * Forward and backward are copies, done with the backend's identity
 * activation (act_forward with ST_ACT_LINEAR copies x into y), since the
 * backend table has no device-to-device copy of its own. */
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct reshape_config {
  st_shape target; /* rank 0 = flatten */
} reshape_config;

static st_status flatten_build(st_layer *l) {
  l->out_shape = st_shape1((int)st_shape_size(l->in_shape));
  return ST_OK;
}

static st_status reshape_build(st_layer *l) {
  const reshape_config *rc = l->config;
  if (st_shape_size(rc->target) != st_shape_size(l->in_shape)) {
    char a[64], b[64];
    return st_error(ST_ERR_INVALID,
                    "Reshape: cannot reshape %s (%zu values) to %s (%zu values)",
                    st_shape_format(l->in_shape, a, sizeof a),
                    st_shape_size(l->in_shape),
                    st_shape_format(rc->target, b, sizeof b),
                    st_shape_size(rc->target));
  }
  l->out_shape = rc->target;
  return ST_OK;
}

/* dst[batch, size] = src[batch, size]. */
static void copy_rows(st_backend_ctx *ctx, int batch, size_t size,
                      const float *src, float *dst) {
  ctx->be->act_forward(ctx, ST_ACT_LINEAR, batch, (int)size, src, dst);
}

static void flat_forward(const st_layer *l, st_layer_args *c) {
  copy_rows(c->ctx, c->batch, st_shape_size(l->in_shape), c->x, c->y);
}

static void flat_backward(const st_layer *l, st_layer_args *c) {
  if (c->dx) copy_rows(c->ctx, c->batch, st_shape_size(l->in_shape), c->dy, c->dx);
}

static void reshape_options(const st_layer *l, st_layer_options *out) {
  out->target_shape = ((const reshape_config *)l->config)->target;
}

static const st_layer_vtable flatten_vtable = {
    .class_name = "Flatten",
    .base_name = "flatten",
    .build = flatten_build,
    .forward = flat_forward,
    .backward = flat_backward,
};

static const st_layer_vtable reshape_vtable = {
    .class_name = "Reshape",
    .base_name = "reshape",
    .build = reshape_build,
    .forward = flat_forward,
    .backward = flat_backward,
    .get_options = reshape_options,
};

/* New unbuilt layers (caller owns them until st_model_add), or NULL + error. */
st_status st_flatten(st_layer **out) {
  ST_REQUIRE(out);
  return st__layer_new(&flatten_vtable, NULL, 0, NULL, out);
}

st_status st_reshape(st_shape target, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  bool ok = target.rank >= 1 && target.rank <= ST_MAX_RANK;
  for (int i = 0; ok && i < target.rank; i++) ok = target.dims[i] > 0;
  if (!ok) {
    return st_error(ST_ERR_INVALID,
                    "Reshape: target must have rank 1..%d and positive dims",
                    ST_MAX_RANK);
  }
  reshape_config rc = {.target = target};
  return st__layer_new(&reshape_vtable, &rc, sizeof rc, NULL, out);
}
