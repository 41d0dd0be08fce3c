/* Embedding (Keras "Embedding"): y[b, s..., :] = embeddings[id, :] for each
 * integer id x[b, s...] (stored as a float), embeddings [input_dim,
 * output_dim] (random_uniform in [-0.05, 0.05], as Keras).
 *
 * Ids are data, not differentiable values: an id that is not an integer in
 * [0, input_dim) is refused before use by check_input (the executor runs it
 * on the layer's input as it checks sparse labels), naming the id, its
 * example and position. forward does not trust that: such an id gets a row
 * of NaN (never a read outside the table) and backward skips it.
 *
 * The gradient is sparse: dembeddings is zeroed, then each (example,
 * position) adds its dy row to its id's row; nothing else touches the
 * [input_dim, output_dim] table. When the executor sums the table's gradient
 * over several uses (a tied ReversibleEmbedding head, a shared call) the rows
 * are added in place (dw_accumulate), so a 50257-row table is not zeroed and
 * added whole for the few rows a batch reads. dx (when asked for) is zeroed: the ids have
 * no gradient. Host-memory loops (valid for the host backends cpu and
 * reference; a device backend needs a gather/scatter-add kernel). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "nn/layer.h"

typedef struct emb_config {
  st_embedding_options o;
} emb_config;

typedef struct emb_pair {
  long id, i; /* a table row and the position that reads it */
} emb_pair;

static st_status emb_build(st_layer *l) {
  const emb_config *cf = l->config;
  char buf[64];
  if (l->in_shape.rank >= ST_MAX_RANK)
    return st_error(ST_ERR_INVALID, "Embedding: input %s has rank %d (at most %d: the "
                    "output adds an axis)", st_shape_format(l->in_shape, buf, sizeof buf),
                    l->in_shape.rank, ST_MAX_RANK - 1);
  l->out_shape = l->in_shape;
  l->out_shape.dims[l->out_shape.rank++] = cf->o.output_dim;
  st__layer_add_param(l, "embeddings", (st_shape){2, {cf->o.input_dim, cf->o.output_dim}},
                      cf->o.embeddings_init, true);
  return ST_OK;
}

/* The row of id value v, or -1 when v is not an integer in [0, input_dim). */
static long emb_row(const emb_config *cf, float v) {
  if (!(v >= 0.0f && v < (float)cf->o.input_dim)) return -1; /* NaN too */
  long id = (long)v;
  return (float)id == v && id < cf->o.input_dim ? id : -1;
}

static st_status emb_check_input(const st_layer *l, const float *x, int n, int64_t first) {
  const emb_config *cf = l->config;
  size_t seq = st_shape_size(l->in_shape);
  for (size_t i = 0; i < (size_t)n * seq; i++)
    if (emb_row(cf, x[i]) < 0)
      return st_error(ST_ERR_INVALID, "Embedding '%s': id %g of example %lld at position "
                      "%zu is not an integer in [0, %d) (input_dim)", l->name, (double)x[i],
                      (long long)(first + (int64_t)(i / seq)), i % seq, cf->o.input_dim);
  return ST_OK;
}

/* y[n*seq, D] = gathered rows (NaN rows for invalid ids). */
static void emb_forward(const st_layer *l, st_layer_args *c) {
  const emb_config *cf = l->config;
  const size_t D = (size_t)cf->o.output_dim, n = (size_t)c->batch * st_shape_size(l->in_shape);
  const float *table = c->w[0];
  if (!st__args_host(c)) { /* host loops only (see layer.h host_loops) */
    c->be->fill(c->ctx, n * D, NAN, c->y);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    long id = emb_row(cf, c->x[i]);
    float *yr = c->y + i * D;
    if (id >= 0) {
      memcpy(yr, table + (size_t)id * D, D * sizeof(float));
    } else {
      for (size_t j = 0; j < D; j++) yr[j] = NAN;
    }
  }
}

/* Workspace (dw_accumulate only): pairs [n] (id, position), then one row [D]. */
static size_t emb_workspace(const st_layer *l, int batch) {
  const emb_config *cf = l->config;
  size_t n = (size_t)batch * st_shape_size(l->in_shape);
  return n * (sizeof(emb_pair) / sizeof(float)) + (size_t)cf->o.output_dim;
}

static int pair_cmp(const void *a, const void *b) {
  const emb_pair *p = a, *q = b;
  return p->id != q->id ? (p->id < q->id ? -1 : 1) : (p->i > q->i) - (p->i < q->i);
}

/* dembeddings += the scatter-add of the dy rows, each id's rows summed from 0
 * in position order first (the floats emb_backward writes, then added): the
 * positions sorted by (id, position), one row of sums at a time. Touches only
 * the rows of the ids present, not the whole table. */
static void emb_backward_add(const emb_config *cf, st_layer_args *c, size_t n) {
  const size_t D = (size_t)cf->o.output_dim;
  emb_pair *pairs = (emb_pair *)c->workspace;
  float *restrict sum = c->workspace + n * (sizeof(emb_pair) / sizeof(float));
  size_t np = 0;
  for (size_t i = 0; i < n; i++) {
    long id = emb_row(cf, c->x[i]);
    if (id >= 0) pairs[np++] = (emb_pair){.id = id, .i = (long)i};
  }
  qsort(pairs, np, sizeof *pairs, pair_cmp);
  for (size_t a = 0, b; a < np; a = b) {
    memset(sum, 0, D * sizeof(float));
    for (b = a; b < np && pairs[b].id == pairs[a].id; b++) {
      const float *restrict g = c->dy + (size_t)pairs[b].i * D;
      for (size_t j = 0; j < D; j++) sum[j] += g[j];
    }
    float *restrict dr = c->dw[0] + (size_t)pairs[a].id * D;
    for (size_t j = 0; j < D; j++) dr[j] += sum[j];
  }
}

/* dembeddings = 0, then scatter-add of the dy rows (with dw_accumulate:
 * added to dembeddings); dx (if any) = 0. */
static void emb_backward(const st_layer *l, st_layer_args *c) {
  const emb_config *cf = l->config;
  const size_t D = (size_t)cf->o.output_dim, n = (size_t)c->batch * st_shape_size(l->in_shape);
  float *dt = c->dw[0];
  if (!st__args_host(c)) { /* host loops only (see layer.h host_loops) */
    c->be->fill(c->ctx, (size_t)cf->o.input_dim * D, NAN, dt);
    if (c->dx) c->be->fill(c->ctx, n, 0.0f, c->dx);
    return;
  }
  if (c->dw_accumulate) {
    emb_backward_add(cf, c, n);
    if (c->dx) memset(c->dx, 0, n * sizeof(float));
    return;
  }
  memset(dt, 0, (size_t)cf->o.input_dim * D * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    long id = emb_row(cf, c->x[i]);
    if (id < 0) continue;
    float *restrict dr = dt + (size_t)id * D;
    const float *restrict g = c->dy + i * D;
    for (size_t j = 0; j < D; j++) dr[j] += g[j];
  }
  if (c->dx) memset(c->dx, 0, n * sizeof(float));
}

static void emb_options(const st_layer *l, st_layer_options *out) {
  out->embedding = ((const emb_config *)l->config)->o;
  out->embedding.name = NULL;
}

static const st_layer_vtable emb_vtable = {
    .class_name = "Embedding",
    .base_name = "embedding",
    .build = emb_build,
    .forward = emb_forward,
    .backward = emb_backward,
    .workspace_floats = emb_workspace,
    .get_options = emb_options,
    .check_input = emb_check_input,
    .host_loops = true,
    .accumulates_dw = true,
};

st_embedding_options st_embedding_default_options(int input_dim, int output_dim) {
  return (st_embedding_options){.input_dim = input_dim, .output_dim = output_dim,
                                .embeddings_init = ST_INIT_RANDOM_UNIFORM, .name = NULL};
}

/* New unbuilt Embedding layer (caller owns it until st_model_add), or NULL +
 * error naming the option. */
st_status st_embedding_ex(st_embedding_options o, st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_embedding_ex: out is NULL");
  *out = NULL;
  if (o.input_dim <= 0 || o.output_dim <= 0)
    return st_error(ST_ERR_INVALID, "Embedding: %s must be positive (input_dim %d, "
                    "output_dim %d)", o.input_dim <= 0 ? "input_dim" : "output_dim",
                    o.input_dim, o.output_dim);
  if ((int)o.embeddings_init < 0 || o.embeddings_init >= ST_INIT_COUNT)
    return st_error(ST_ERR_INVALID, "Embedding: invalid embeddings_init %d",
                    (int)o.embeddings_init);
  emb_config cf = {.o = o};
  cf.o.name = NULL; /* the config copy must not point at the caller's string */
  return st__layer_new(&emb_vtable, &cf, sizeof cf, o.name, out);
}

st_status st_embedding(int input_dim, int output_dim, st_layer **out) {
  ST_REQUIRE(out);
  return st_embedding_ex(st_embedding_default_options(input_dim, output_dim), out);
}
