/* GlobalAveragePooling2D / GlobalMaxPooling2D ([h, w, c] -> [c]) and
 * GlobalAveragePooling1D / GlobalMaxPooling1D ([steps, c] -> [c]), Keras
 * classes with keepdims=False. Both reduce the per-example [rows, c] view
 * (rows = h*w or steps) over its rows. Max backward follows TensorFlow's
 * reduce_max gradient (and PyTorch's amax): the gradient of a channel is
 * shared equally by the rows that hold its maximum; a channel whose maximum
 * is NaN gets NaN. No parameters, no cache; max backward recomputes the
 * maxima into its workspace (2 c floats).
 *
 * Host-memory note: plain loops over the buffers (host backends: cpu,
 * reference), like BatchNormalization's synchronized path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct gpool_config {
  int rank;    /* input rank: 3 (2D) or 2 (1D) */
  bool is_max;
} gpool_config;

static st_status gpool_build(st_layer *l) {
  const gpool_config *gc = l->config;
  if (l->in_shape.rank != gc->rank) {
    char buf[64];
    return st_error(ST_ERR_INVALID, "%s expects input (None, %s) but got %s",
                    l->vt->class_name, gc->rank == 3 ? "h, w, c" : "steps, c",
                    st_shape_format(l->in_shape, buf, sizeof buf));
  }
  l->out_shape = st_shape1(l->in_shape.dims[gc->rank - 1]);
  return ST_OK;
}

/* The [rows, c] view of one example. */
static void gpool_view(const st_layer *l, size_t *rows, size_t *c) {
  *c = (size_t)l->in_shape.dims[l->in_shape.rank - 1];
  *rows = st_shape_size(l->in_shape) / *c;
}

static size_t gpool_workspace(const st_layer *l, int batch) {
  const gpool_config *gc = l->config;
  return gc->is_max ? 2 * (size_t)l->in_shape.dims[l->in_shape.rank - 1] : 0;
}

/* y[c] = max over rows of x[rows, c] (NaN wins). */
static void max_rows(size_t rows, size_t C, const float *x, float *y) {
  memcpy(y, x, C * sizeof(float));
  for (size_t r = 1; r < rows; r++) {
    const float *xr = x + r * C;
    for (size_t j = 0; j < C; j++) {
      float v = xr[j], m = y[j];
      y[j] = (v > m || v != v) ? v : m;
    }
  }
}

/* Average pooling on a device backend: the backend's avgpool over one window
 * of the whole [rows] x 1 plane (no host loops). */
static st_pool_geom gavg_geom(const st_layer *l, int batch) {
  size_t rows, C;
  gpool_view(l, &rows, &C);
  st_pool_geom g = {.n = batch, .h = (int)rows, .w = 1, .c = (int)C, .ph = (int)rows, .pw = 1,
                    .sh = (int)rows, .sw = 1, .oh = 1, .ow = 1};
  return g;
}

static void gpool_forward(const st_layer *l, st_layer_args *c) {
  const gpool_config *gc = l->config;
  size_t rows, C;
  gpool_view(l, &rows, &C);
  if (!st__args_host(c) && !gc->is_max) {
    st_pool_geom g = gavg_geom(l, c->batch);
    if (c->batch) c->be->avgpool_forward(c->ctx, &g, c->x, c->y);
    return;
  }
  for (int n = 0; n < c->batch; n++) {
    const float *x = c->x + (size_t)n * rows * C;
    float *y = c->y + (size_t)n * C;
    if (gc->is_max) {
      max_rows(rows, C, x, y);
      continue;
    }
    for (size_t j = 0; j < C; j++) y[j] = 0.0f;
    for (size_t r = 0; r < rows; r++)
      for (size_t j = 0; j < C; j++) y[j] += x[r * C + j];
    float inv = 1.0f / (float)rows;
    for (size_t j = 0; j < C; j++) y[j] *= inv;
  }
}

/* dx of one example: dy[c] shared by the rows equal to the maximum. */
static void max_backward(size_t rows, size_t C, const float *x, const float *dy,
                         float *dx, float *ws) {
  float *mx = ws, *g = ws + C;
  max_rows(rows, C, x, mx);
  for (size_t j = 0; j < C; j++) g[j] = 0.0f;
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < C; j++) g[j] += x[r * C + j] == mx[j] ? 1.0f : 0.0f;
  for (size_t j = 0; j < C; j++) g[j] = g[j] > 0.0f ? dy[j] / g[j] : NAN;
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < C; j++) {
      float gj = g[j];
      dx[r * C + j] = x[r * C + j] == mx[j] || gj != gj ? gj : 0.0f;
    }
}

static void gpool_backward(const st_layer *l, st_layer_args *c) {
  const gpool_config *gc = l->config;
  if (!c->dx) return;
  size_t rows, C;
  gpool_view(l, &rows, &C);
  if (!st__args_host(c) && !gc->is_max) {
    st_pool_geom g = gavg_geom(l, c->batch);
    if (c->batch) c->be->avgpool_backward(c->ctx, &g, c->dy, c->dx);
    return;
  }
  float inv = 1.0f / (float)rows;
  for (int n = 0; n < c->batch; n++) {
    const float *dy = c->dy + (size_t)n * C;
    float *dx = c->dx + (size_t)n * rows * C;
    if (gc->is_max) {
      max_backward(rows, C, c->x + (size_t)n * rows * C, dy, dx, c->workspace);
      continue;
    }
    for (size_t r = 0; r < rows; r++)
      for (size_t j = 0; j < C; j++) dx[r * C + j] = dy[j] * inv;
  }
}

static const st_layer_vtable gavg2d_vtable = {
    .class_name = "GlobalAveragePooling2D",
    .base_name = "global_average_pooling2d",
    .build = gpool_build,
    .workspace_floats = gpool_workspace,
    .forward = gpool_forward,
    .backward = gpool_backward,
};

static const st_layer_vtable gmax2d_vtable = {
    .class_name = "GlobalMaxPooling2D",
    .base_name = "global_max_pooling2d",
    .build = gpool_build,
    .workspace_floats = gpool_workspace,
    .forward = gpool_forward,
    .backward = gpool_backward,
    .host_loops = true, /* the device path is average pooling only */
};

static const st_layer_vtable gavg1d_vtable = {
    .class_name = "GlobalAveragePooling1D",
    .base_name = "global_average_pooling1d",
    .build = gpool_build,
    .workspace_floats = gpool_workspace,
    .forward = gpool_forward,
    .backward = gpool_backward,
};

static const st_layer_vtable gmax1d_vtable = {
    .class_name = "GlobalMaxPooling1D",
    .base_name = "global_max_pooling1d",
    .build = gpool_build,
    .workspace_floats = gpool_workspace,
    .forward = gpool_forward,
    .backward = gpool_backward,
    .host_loops = true, /* the device path is average pooling only */
};

static st_status gpool_new(const st_layer_vtable *vt, int rank, bool is_max, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "%s: out is NULL", vt->class_name);
  gpool_config gc = {.rank = rank, .is_max = is_max};
  return st__layer_new(vt, &gc, sizeof gc, NULL, out);
}

/* New unbuilt layers (caller owns them until st_model_add), or NULL + error. */
st_status st_global_avgpool2d(st_layer **out) {
  ST_REQUIRE(out);
  return gpool_new(&gavg2d_vtable, 3, false, out);
}
st_status st_global_maxpool2d(st_layer **out) {
  ST_REQUIRE(out);
  return gpool_new(&gmax2d_vtable, 3, true, out);
}
st_status st_global_avgpool1d(st_layer **out) {
  ST_REQUIRE(out);
  return gpool_new(&gavg1d_vtable, 2, false, out);
}
st_status st_global_maxpool1d(st_layer **out) {
  ST_REQUIRE(out);
  return gpool_new(&gmax1d_vtable, 2, true, out);
}
