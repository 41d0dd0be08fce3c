/* ReversibleEmbedding's reverse call (keras_hub "ReversibleEmbedding" with
 * tie_weights=True, called with reverse=True): the logits of a language
 * model's head tied to its token embedding. Input x [batch, T, d], output
 * y [batch, T, vocab] = x . embeddings^T, where embeddings [vocab, d] is the
 * table of an Embedding layer of the same model (st_layer.tied): one
 * variable, read by both layers, whose gradient is the sum of both uses (the
 * graph executor adds this layer's dembeddings = dy^T x to the Embedding's
 * scatter, as for a layer called twice). It declares no variable of its own.
 * Backend GEMMs only: any backend. */
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "nn/layer.h"

static int vocab(const st_layer *l) { return l->tied->params[0].shape.dims[0]; }
static int width(const st_layer *l) { return l->tied->params[0].shape.dims[1]; }

static st_status rev_build(st_layer *l) {
  char buf[64];
  if (!l->tied->nparams)
    return st_error(ST_ERR_INVALID, "ReversibleEmbedding: its Embedding '%s' is not built "
                    "(call it on the token ids first)", l->tied->name);
  if (l->in_shape.rank < 1 || l->in_shape.dims[l->in_shape.rank - 1] != width(l))
    return st_error(ST_ERR_INVALID, "ReversibleEmbedding: input %s does not end in the "
                    "embedding width %d", st_shape_format(l->in_shape, buf, sizeof buf),
                    width(l));
  l->out_shape = l->in_shape;
  l->out_shape.dims[l->out_shape.rank - 1] = vocab(l);
  return ST_OK;
}

static int rows(const st_layer *l, int batch) {
  return batch * (int)(st_shape_size(l->in_shape) / (size_t)width(l));
}

/* y [n, V] = x [n, d] . E^T, E [V, d]. */
static void rev_forward(const st_layer *l, st_layer_args *c) {
  int n = rows(l, c->batch), V = vocab(l), d = width(l);
  if (n) c->be->gemm(c->ctx, false, true, n, V, d, 1.0f, c->x, d, c->w[0], d, 0.0f, c->y, V);
}

/* dE [V, d] = dy^T [V, n] . x [n, d] (overwrite); dx [n, d] = dy . E. */
static void rev_backward(const st_layer *l, st_layer_args *c) {
  int n = rows(l, c->batch), V = vocab(l), d = width(l);
  if (!n) {
    if (c->dw[0]) c->be->fill(c->ctx, (size_t)V * (size_t)d, 0.0f, c->dw[0]);
    return;
  }
  if (c->dw[0]) c->be->gemm(c->ctx, true, false, V, d, n, 1.0f, c->dy, V, c->x, d, 0.0f, c->dw[0], d);
  if (c->dx) c->be->gemm(c->ctx, false, false, n, d, V, 1.0f, c->dy, V, c->w[0], d, 0.0f, c->dx, d);
}

static const st_layer_vtable rev_vtable = {
    .class_name = "ReversibleEmbedding",
    .base_name = "reversible_embedding",
    .build = rev_build,
    .forward = rev_forward,
    .backward = rev_backward,
};

st_status st_reversible_embedding(st_layer *embedding, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_reversible_embedding: out is NULL");
  *out = NULL;
  if (!embedding)
    return st_error(ST_ERR_INVALID, "st_reversible_embedding: embedding is NULL");
  if (strcmp(embedding->vt->class_name, "Embedding") != 0)
    return st_error(ST_ERR_INVALID, "st_reversible_embedding: '%s' is a %s layer, not an "
                    "Embedding", embedding->name, embedding->vt->class_name);
  st_status s = st__layer_new(&rev_vtable, NULL, 0, NULL, out);
  if (s == ST_OK) (*out)->tied = embedding;
  return s;
}
