/* PositionEmbedding (keras_hub "PositionEmbedding"): a learned embedding of
 * each position. Input x [batch, T, d] (only its shape is read: keras_hub's
 * layer returns position embeddings shaped like its input, which the model
 * adds to the token embeddings), output y[b, t, :] = embeddings[t, :] for t <
 * T, embeddings [sequence_length, d] (T <= sequence_length; initializer
 * glorot_uniform as keras_hub, GPT-2's builder overwrites it). Backward:
 * dembeddings[t] = sum over the batch of dy[b, t] (rows T.. zero); x has no
 * gradient (dx zeroed). Every step is a backend kernel (fill, axpy): any
 * backend. */
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct pos_config {
  st_position_embedding_options o;
} pos_config;

static st_status pos_build(st_layer *l) {
  const pos_config *cf = l->config;
  char buf[64];
  if (l->in_shape.rank != 2 || l->in_shape.dims[0] > cf->o.sequence_length)
    return st_error(ST_ERR_INVALID, "PositionEmbedding: input %s is not [T, d] with T <= "
                    "sequence_length %d", st_shape_format(l->in_shape, buf, sizeof buf),
                    cf->o.sequence_length);
  l->out_shape = l->in_shape;
  st__layer_add_param(l, "embeddings",
                      (st_shape){2, {cf->o.sequence_length, l->in_shape.dims[1]}},
                      cf->o.initializer, true);
  return ST_OK;
}

/* y[b] = embeddings[0:T] for every example b. */
static void pos_forward(const st_layer *l, st_layer_args *c) {
  size_t per = st_shape_size(l->in_shape);
  for (int b = 0; b < c->batch; b++) {
    float *y = c->y + (size_t)b * per;
    c->be->fill(c->ctx, per, 0.0f, y);
    c->be->axpy(c->ctx, per, 1.0f, c->w[0], y);
  }
}

/* dembeddings[0:T] = sum_b dy[b], the rest 0; dx = 0. */
static void pos_backward(const st_layer *l, st_layer_args *c) {
  const pos_config *cf = l->config;
  size_t per = st_shape_size(l->in_shape);
  c->be->fill(c->ctx, (size_t)cf->o.sequence_length * (size_t)l->in_shape.dims[1], 0.0f,
              c->dw[0]);
  for (int b = 0; b < c->batch; b++)
    c->be->axpy(c->ctx, per, 1.0f, c->dy + (size_t)b * per, c->dw[0]);
  if (c->dx) c->be->fill(c->ctx, (size_t)c->batch * per, 0.0f, c->dx);
}

static void pos_options(const st_layer *l, st_layer_options *out) {
  out->position_embedding = ((const pos_config *)l->config)->o;
  out->position_embedding.name = NULL;
}

static const st_layer_vtable pos_vtable = {
    .class_name = "PositionEmbedding",
    .base_name = "position_embedding",
    .build = pos_build,
    .forward = pos_forward,
    .backward = pos_backward,
    .get_options = pos_options,
};

st_position_embedding_options st_position_embedding_default_options(int sequence_length) {
  return (st_position_embedding_options){.sequence_length = sequence_length,
                                         .initializer = ST_INIT_GLOROT_UNIFORM};
}

st_status st_position_embedding_ex(st_position_embedding_options o, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_position_embedding_ex: out is NULL");
  *out = NULL;
  if (o.sequence_length <= 0)
    return st_error(ST_ERR_INVALID, "PositionEmbedding: sequence_length must be positive "
                    "(got %d)", o.sequence_length);
  if ((int)o.initializer < 0 || o.initializer >= ST_INIT_COUNT)
    return st_error(ST_ERR_INVALID, "PositionEmbedding: invalid initializer %d",
                    (int)o.initializer);
  pos_config cf = {.o = o};
  cf.o.name = NULL;
  return st__layer_new(&pos_vtable, &cf, sizeof cf, o.name, out);
}

st_status st_position_embedding(int sequence_length, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_position_embedding: out is NULL");
  return st_position_embedding_ex(st_position_embedding_default_options(sequence_length), out);
}
