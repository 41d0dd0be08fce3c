/* ZeroPadding2D (Keras class): [h, w, c] -> [top + h + bottom, left + w +
 * right, c] with zero rows and columns around each image; backward crops dy.
 * No parameters, no cache.
 *
 * Host-memory note: plain loops (memset/memcpy) over the buffers (host
 * backends: cpu, reference). */
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct zeropad_config {
  st_zeropad2d_options o; /* name NULL */
} zeropad_config;

static st_status zeropad_build(st_layer *l) {
  const st_zeropad2d_options *o = &((const zeropad_config *)l->config)->o;
  char buf[64];
  if (l->in_shape.rank != 3)
    return st_error(ST_ERR_INVALID, "ZeroPadding2D expects image input (None, h, w, c) but got %s",
                    st_shape_format(l->in_shape, buf, sizeof buf));
  long long h = (long long)l->in_shape.dims[0] + o->top + o->bottom;
  long long w = (long long)l->in_shape.dims[1] + o->left + o->right;
  if (h > (1 << 30) || w > (1 << 30) || h * w > (1LL << 31) ||
      h * w * l->in_shape.dims[2] > (1LL << 31))
    return st_error(ST_ERR_INVALID, "ZeroPadding2D: padding makes %s too large",
                    st_shape_format(l->in_shape, buf, sizeof buf));
  l->out_shape = st_shape3((int)h, (int)w, l->in_shape.dims[2]);
  return ST_OK;
}

/* Copies the h x w interior between x [h, w, c] and the padded y [oh, ow, c];
 * to_y: x -> y (forward), else y -> x (backward's crop). */
static void zeropad_copy(const st_layer *l, bool to_y, float *x, float *y) {
  const st_zeropad2d_options *o = &((const zeropad_config *)l->config)->o;
  size_t h = (size_t)l->in_shape.dims[0], row = (size_t)l->in_shape.dims[1] * l->in_shape.dims[2];
  size_t orow = (size_t)l->out_shape.dims[1] * l->out_shape.dims[2];
  size_t lead = (size_t)o->left * l->in_shape.dims[2];
  for (size_t r = 0; r < h; r++) {
    float *yr = y + (r + (size_t)o->top) * orow + lead, *xr = x + r * row;
    if (to_y)
      memcpy(yr, xr, row * sizeof(float));
    else
      memcpy(xr, yr, row * sizeof(float));
  }
}

static void zeropad_forward(const st_layer *l, st_layer_args *c) {
  size_t in = st_shape_size(l->in_shape), out = st_shape_size(l->out_shape);
  memset(c->y, 0, (size_t)c->batch * out * sizeof(float));
  for (int n = 0; n < c->batch; n++)
    zeropad_copy(l, true, (float *)c->x + (size_t)n * in, c->y + (size_t)n * out);
}

static void zeropad_backward(const st_layer *l, st_layer_args *c) {
  if (!c->dx) return;
  size_t in = st_shape_size(l->in_shape), out = st_shape_size(l->out_shape);
  for (int n = 0; n < c->batch; n++)
    zeropad_copy(l, false, c->dx + (size_t)n * in, (float *)c->dy + (size_t)n * out);
}

static void zeropad_options(const st_layer *l, st_layer_options *out) {
  out->zeropad2d = ((const zeropad_config *)l->config)->o;
}

static const st_layer_vtable zeropad_vtable = {
    .class_name = "ZeroPadding2D",
    .base_name = "zero_padding2d",
    .build = zeropad_build,
    .forward = zeropad_forward,
    .backward = zeropad_backward,
    .get_options = zeropad_options,
    .host_loops = true,
};

st_zeropad2d_options st_zeropad2d_default_options(int pad) {
  st_zeropad2d_options o = {.top = pad, .bottom = pad, .left = pad, .right = pad, .name = NULL};
  return o;
}

/* New unbuilt layer (caller owns it until st_model_add), or NULL + error. */
st_status st_zeropad2d_ex(st_zeropad2d_options o, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  if (o.top < 0 || o.bottom < 0 || o.left < 0 || o.right < 0)
    return st_error(ST_ERR_INVALID,
                    "ZeroPadding2D: padding must be >= 0 (top %d, bottom %d, left %d, right %d)",
                    o.top, o.bottom, o.left, o.right);
  zeropad_config zc = {.o = o};
  zc.o.name = NULL; /* the config copy must not point at the caller's string */
  return st__layer_new(&zeropad_vtable, &zc, sizeof zc, o.name, out);
}

st_status st_zeropad2d(int pad, st_layer **out) {
  ST_REQUIRE(out);
  return st_zeropad2d_ex(st_zeropad2d_default_options(pad), out);
}
