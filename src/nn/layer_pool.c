/* MaxPooling2D and AveragePooling2D (Keras classes), NHWC, 'valid' or 'same'
 * padding split as TensorFlow does; strides default to the pool size. Max
 * pooling routes each gradient to the first max of its window; 'same' average
 * pooling leaves padded cells out of the mean. No parameters, no cache. */
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct pool_config {
  st_pool2d_options o;
  bool is_max;
  st_pool_geom g; /* set by build; n is set per call */
} pool_config;

/* Output size and leading pad of one axis (TensorFlow rules); false when
 * 'valid' does not fit. */
static bool pool_axis(int in, int k, int s, st_padding pad, int *out,
                      int *pad_before) {
  if (pad == ST_PAD_SAME) {
    *out = (in + s - 1) / s;
    int total = (*out - 1) * s + k - in;
    *pad_before = total > 0 ? total / 2 : 0;
    return true;
  }
  *out = in >= k ? (in - k) / s + 1 : 0;
  *pad_before = 0;
  return in >= k;
}

static st_status pool_build(st_layer *l) {
  pool_config *pc = l->config;
  const st_pool2d_options *o = &pc->o;
  st_pool_geom *g = &pc->g;
  char buf[64];
  st_shape_format(l->in_shape, buf, sizeof buf);
  if (l->in_shape.rank != 3)
    return st_error(ST_ERR_INVALID,
                    "%s expects image input (None, h, w, c) but got %s",
                    l->vt->class_name, buf);
  *g = (st_pool_geom){.h = l->in_shape.dims[0], .w = l->in_shape.dims[1],
                      .c = l->in_shape.dims[2], .ph = o->ph, .pw = o->pw,
                      .sh = o->sh, .sw = o->sw};
  if (!pool_axis(g->h, g->ph, g->sh, o->padding, &g->oh, &g->pad_top) ||
      !pool_axis(g->w, g->pw, g->sw, o->padding, &g->ow, &g->pad_left))
    return st_error(ST_ERR_INVALID,
                    "%s: pool %dx%d does not fit input %s with 'valid' padding",
                    l->vt->class_name, o->ph, o->pw, buf);
  l->out_shape = st_shape3(g->oh, g->ow, g->c);
  l->folds_input_relu = pc->is_max;
  return ST_OK;
}

static void pool_forward(const st_layer *l, st_layer_args *c) {
  const pool_config *pc = l->config;
  st_pool_geom g = pc->g;
  g.n = c->batch;
  if (pc->is_max)
    c->be->maxpool_forward(c->ctx, &g, c->x, c->y);
  else
    c->be->avgpool_forward(c->ctx, &g, c->x, c->y);
}

static void pool_backward(const st_layer *l, st_layer_args *c) {
  const pool_config *pc = l->config;
  if (!c->dx) return;
  st_pool_geom g = pc->g;
  g.n = c->batch;
  g.relu_input = l->input_relu_folded;
  if (pc->is_max)
    c->be->maxpool_backward(c->ctx, &g, c->x, c->y, c->dy, c->dx);
  else
    c->be->avgpool_backward(c->ctx, &g, c->dy, c->dx);
}

static void pool_options(const st_layer *l, st_layer_options *out) {
  out->pool2d = ((const pool_config *)l->config)->o;
  out->pool2d.name = NULL;
}

static const st_layer_vtable maxpool_vtable = {
    .class_name = "MaxPooling2D",
    .base_name = "max_pooling2d",
    .build = pool_build,
    .forward = pool_forward,
    .backward = pool_backward,
    .get_options = pool_options,
};

static const st_layer_vtable avgpool_vtable = {
    .class_name = "AveragePooling2D",
    .base_name = "average_pooling2d",
    .build = pool_build,
    .forward = pool_forward,
    .backward = pool_backward,
    .get_options = pool_options,
};

st_pool2d_options st_pool2d_default_options(int pool) {
  st_pool2d_options o = {.ph = pool, .pw = pool, .sh = 0, .sw = 0,
                         .padding = ST_PAD_VALID, .name = NULL};
  return o;
}

static st_status pool_new(const st_layer_vtable *vt, st_pool2d_options o, st_layer **out) {
  *out = NULL;
  if (o.ph <= 0 || o.pw <= 0 || o.sh < 0 || o.sw < 0 ||
      (o.padding != ST_PAD_VALID && o.padding != ST_PAD_SAME)) {
    return st_error(ST_ERR_INVALID,
                    "%s: pool size must be positive and strides >= 0 (pool %dx%d, "
                    "strides %dx%d)", vt->class_name, o.ph, o.pw, o.sh, o.sw);
  }
  pool_config pc = {.o = o, .is_max = vt == &maxpool_vtable};
  if (pc.o.sh == 0) pc.o.sh = o.ph; /* Keras strides=None */
  if (pc.o.sw == 0) pc.o.sw = o.pw;
  pc.o.name = NULL; /* the config copy must not point at the caller's string */
  return st__layer_new(vt, &pc, sizeof pc, o.name, out);
}

st_status st_maxpool2d_ex(st_pool2d_options o, st_layer **out) {
  ST_REQUIRE(out);
  return pool_new(&maxpool_vtable, o, out);
}
st_status st_avgpool2d_ex(st_pool2d_options o, st_layer **out) {
  ST_REQUIRE(out);
  return pool_new(&avgpool_vtable, o, out);
}
st_status st_maxpool2d(int pool, st_layer **out) {
  ST_REQUIRE(out);
  return st_maxpool2d_ex(st_pool2d_default_options(pool), out);
}
st_status st_avgpool2d(int pool, st_layer **out) {
  ST_REQUIRE(out);
  return st_avgpool2d_ex(st_pool2d_default_options(pool), out);
}
