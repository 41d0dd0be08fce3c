/* A table tied across pipeline stages (pipeline.h, st_pipe_tie): where it
 * is, and its gradient on the head's stage (dst).
 *
 * Micro-batch k's gradient of the table is h_k (the head's, written over
 * tsum, or tgrad for k = 0) plus e_k (the lookup's: zero but on the rows of
 * the micro-batch's ids). One device's thread adds e to h in place on the
 * rows its ids read (the Embedding's dw_accumulate: each row's dy rows summed
 * from 0 in position order, then added). The fold does the same: the
 * lookup's own backward runs on a compact table of the distinct ids (an
 * Embedding of input_dim u, the ids renumbered in order of first use: each
 * row sums the same dy rows in the same order) and each compact row is added
 * to its row of the target. Then tgrad += tsum (k > 0).
 * The stage's thread. */
#include <stdlib.h>
#include <string.h>

#include "distribute/pipeline.h"

static int stage_of(const st_net *m, int S, const int *first, int node) {
  int s = 0;
  while (s + 1 < S && m->layers[first[s + 1]]->first_node <= node) s++;
  return s;
}

st_status st__pipe_tie_find(const st_net *m, int S, const int *first, st_pipe_tie *out) {
  memset(out, 0, sizeof *out);
  out->layer = -1;
  for (int i = 0; i < m->nlayers; i++) {
    const st_layer *h = m->layers[i], *t = h->tied;
    if (!t) continue;
    int tl = m->nodes[t->first_node].layer;
    int src = stage_of(m, S, first, t->first_node), dst = stage_of(m, S, first, h->first_node);
    if (src == dst) continue;
    if (out->layer >= 0 || t->calls > 1 || h->calls > 1 || first[src] != tl ||
        strcmp(t->vt->class_name, "Embedding") != 0)
      return st_error(ST_ERR_INVALID, "pipeline: layer '%s' reads the variables of layer '%s' "
                      "(tied) from stage %d: the pipeline runs a tied Embedding table only when "
                      "it is called once, as the first layer of its stage, and read by one "
                      "layer of a later stage", h->name, t->name, src);
    size_t off, n;
    st__pipe_var_range(m, tl, tl + 1, true, &off, &n);
    *out = (st_pipe_tie){.layer = tl, .node = t->first_node, .src = src, .dst = dst, .off = off,
                         .n = n, .dy = st_shape_size(t->out_shape)};
  }
  return ST_OK;
}

/* The row of id value v in a table of V rows, or -1 (the Embedding's rule:
 * an integer in [0, V); its backward skips the others). */
static long row_of(float v, int V) {
  if (!(v >= 0.0f && v < (float)V)) return -1;
  long id = (long)v;
  return (float)id == v && id < V ? id : -1;
}

/* ids [cnt] renumbered into st->tids (first use order; -1 kept for ids the
 * lookup skips); st->trow[j] = the table row of compact row j. Returns u. */
static int renumber(st_pipe_stage *st, const float *ids, size_t cnt, int V) {
  int u = 0;
  for (size_t i = 0; i < cnt; i++) {
    long r = row_of(ids[i], V);
    if (r >= 0 && st->tmap[r] < 0) st->trow[u] = (int)r, st->tmap[r] = u++;
    st->tids[i] = r >= 0 ? (float)st->tmap[r] : -1.0f;
  }
  for (int j = 0; j < u; j++) st->tmap[st->trow[j]] = -1; /* ready for the next fold */
  return u;
}

/* e_k added to target: the lookup's backward on the compact table. */
static st_status add_lookup_grad(const st_net *m, st_pipe_stage *st, const float *ids,
                                 const float *dy, int n, float *target) {
  const st_layer *t = m->layers[st->tie.layer];
  int V = t->params[0].shape.dims[0], C = t->params[0].shape.dims[1];
  int u = renumber(st, ids, st_shape_size(t->in_shape) * (size_t)n, V);
  if (!u) return ST_OK;
  st_layer_options o;
  st_layer *cl = NULL;
  st_status s = st_layer_get_options(t, &o);
  o.embedding.input_dim = u;
  if (s == ST_OK) s = st_embedding_ex(o.embedding, &cl);
  if (s == ST_OK) s = st__layer_build(cl, t->in_shape);
  if (s == ST_OK) {
    st_layer_args c;
    memset(&c, 0, sizeof c);
    c.be = st->ctx->be, c.ctx = st->ctx, c.batch = n, c.training = true;
    c.x = c.xs[0] = st->tids, c.dy = dy;
    c.dw[0] = st->tcompact;
    c.workspace = st->workspace;
    cl->vt->backward(cl, &c);
    for (int j = 0; j < u; j++)
      m->be->axpy(st->ctx, (size_t)C, 1.0f, st->tcompact + (size_t)j * (size_t)C,
                  target + (size_t)st->trow[j] * (size_t)C);
  }
  st_layer_destroy(cl);
  return s;
}

st_status st__pipe_tie_fold(const st_net *m, st_pipe_stage *st, int k, const float *ids,
                            float *dy, int n, int64_t step) {
  (void)step;
  float *target = k ? st->tsum : st->tgrad;
  st_status s = ST_OK;
  if (n) {
    s = add_lookup_grad(m, st, ids, dy, n, target);
  } else if (k) {
    m->be->fill(st->ctx, st->tie.n, 0.0f, st->tsum);
  }
  if (k) m->be->axpy(st->ctx, st->tie.n, 1.0f, st->tsum, st->tgrad);
  return s;
}

void st__pipe_tie_apply(const st_net *m, st_pipe_stage *st) {
  st__apply_range(m, st->ctx, m->params + st->tie.off, st->tgrad, m->slots, st->tie.off,
                  st->tie.n);
}
