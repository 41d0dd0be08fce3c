/* One pipeline stage: its buffers, the forward and backward passes of a
 * micro-batch over its layer range (the per-layer calls st__replica_forward
 * and st__replica_loss_backward make, restricted to [lo, hi)), and the
 * partition of a net's layers into stages by estimated cost. A stage is used
 * by one thread at a time. */
#include <stdlib.h>
#include <string.h>

#include "distribute/pipeline.h"

/* ---- partition -------------------------------------------------------- */

/* Estimated cost of layer l per example: 2 FLOPs per trainable weight per
 * output position (a Dense kernel is applied once, a Conv2D kernel at every
 * output pixel; a tied head: the table it reads), one per output element for
 * layers without weights and for Embedding lookups, plus the bytes of its
 * parameters (the memory the stage must hold). */
static double layer_cost(const st_layer *l) {
  size_t outs = st_shape_size(l->out_shape), w = 0, bytes = 0;
  int last = l->out_shape.rank > 0 ? l->out_shape.dims[l->out_shape.rank - 1] : 1;
  const st_layer *v = st__layer_vars(l); /* a tied head: the table it reads */
  for (int p = 0; p < v->nparams; p++) {
    size_t sz = st_shape_size(v->params[p].shape);
    bytes += sz * sizeof(float);
    if (v->params[p].trainable) w += sz;
  }
  double positions = last > 0 ? (double)outs / last : 1.0;
  bool lookup = !strcmp(l->vt->class_name, "Embedding"); /* reads one row per position */
  double flops = w && !lookup ? 2.0 * (double)w * positions : (double)outs;
  return flops + (double)bytes;
}

/* Contiguous split of cost[0..n) into k non-empty parts minimising the
 * largest part (dynamic programming; n is a model's layer count), parts
 * starting only where ok[c]. */
static st_status balance(const double *cost, const bool *ok, int n, int k, int *first) {
  double *best = malloc(sizeof(double) * (size_t)(n + 1) * (size_t)(k + 1));
  int *cut = malloc(sizeof(int) * (size_t)(n + 1) * (size_t)(k + 1));
  double *pre = malloc(sizeof(double) * (size_t)(n + 1));
  if (!best || !cut || !pre) {
    free(best), free(cut), free(pre);
    return st_error(ST_ERR_NOMEM, "pipeline: out of memory");
  }
  pre[0] = 0;
  for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + cost[i];
#define B(i, j) best[(size_t)(i) * (size_t)(k + 1) + (size_t)(j)]
#define C(i, j) cut[(size_t)(i) * (size_t)(k + 1) + (size_t)(j)]
  for (int i = 1; i <= n; i++) B(i, 1) = pre[i], C(i, 1) = 0;
  for (int j = 2; j <= k; j++)
    for (int i = j; i <= n; i++) {
      B(i, j) = -1;
      for (int c = j - 1; c < i; c++) { /* last part [c, i) */
        if (!ok[c] || B(c, j - 1) < 0) continue;
        double v = B(c, j - 1) > pre[i] - pre[c] ? B(c, j - 1) : pre[i] - pre[c];
        if (B(i, j) < 0 || v < B(i, j)) B(i, j) = v, C(i, j) = c;
      }
    }
  bool found = B(n, k) >= 0;
  for (int j = k, i = n; found && j >= 1; j--) {
    first[j - 1] = C(i, j);
    i = C(i, j);
  }
#undef B
#undef C
  free(best), free(cut), free(pre);
  if (!found)
    return st_error(ST_ERR_INVALID, "pipeline: the model's graph has fewer than %d places where "
                    "exactly one tensor crosses between consecutive layers: it cannot be cut into "
                    "%d stages", k - 1, k);
  return ST_OK;
}

/* Can a stage start at layer b (0 < b < nlayers)? ST_ERR_INVALID naming
 * the layer and what crosses otherwise. */
static st_status cut_at(const st_net *m, int b) {
  int crossing, n = st__net_cut(m, m->layers[b]->first_node, &crossing);
  if (n == 1 && crossing >= 0) return ST_OK;
  if (n < 0)
    return st_error(ST_ERR_INVALID, "pipeline: a stage cannot start at layer %d ('%s'): a layer "
                    "called before it is called again after it (shared weights stay in one "
                    "stage)", b, m->layers[b]->name);
  if (n == 1)
    return st_error(ST_ERR_INVALID, "pipeline: a stage cannot start at layer %d ('%s'): the "
                    "model input is read after it", b, m->layers[b]->name);
  return st_error(ST_ERR_INVALID, "pipeline: a stage cannot start at layer %d ('%s'): %d tensors "
                  "cross the cut (one of them the output of '%s'); a stage boundary must cut "
                  "exactly one tensor", b, m->layers[b]->name, n,
                  m->layers[m->nodes[crossing].layer]->name);
}

st_status st__pipe_partition(const st_net *m, int stages, const int *bounds, int *first) {
  if (stages > m->nlayers)
    return st_error(ST_ERR_INVALID, "pipeline: %d stages for a model of %d layers (each stage "
                    "needs at least one layer)", stages, m->nlayers);
  if (m->n_inputs > 1 && stages > 1)
    return st_error(ST_ERR_INVALID, "pipeline: the model has %d inputs (the pipeline runs models "
                    "of one input)", m->n_inputs);
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i]->uses_collectives)
      return st_error(ST_ERR_INVALID, "pipeline: layer %d ('%s', %s) synchronizes its batch "
                      "statistics across replicas, which the pipeline's micro-batches cannot "
                      "do (they are normalised one by one): build it with synchronized=false",
                      i, m->layers[i]->name, m->layers[i]->vt->class_name);
  if (stages > 1 && bounds[0] >= 0) {
    first[0] = 0;
    for (int i = 1; i < stages; i++) {
      int b = bounds[i - 1];
      if (b <= first[i - 1] || b >= m->nlayers)
        return st_error(ST_ERR_INVALID, "pipeline: stage boundary %d is not a layer index where "
                        "stage %d can start (expected %d..%d: the model has layers 0..%d and "
                        "boundaries must increase)", b, i, first[i - 1] + 1, m->nlayers - 1,
                        m->nlayers - 1);
      st_status s = cut_at(m, b);
      if (s != ST_OK) return s;
      first[i] = b;
    }
    return ST_OK;
  }
  double *cost = malloc(sizeof(double) * (size_t)m->nlayers);
  bool *ok = malloc(sizeof(bool) * (size_t)m->nlayers);
  if (!cost || !ok) {
    free(cost), free(ok);
    return st_error(ST_ERR_NOMEM, "pipeline: out of memory");
  }
  for (int i = 0; i < m->nlayers; i++) {
    cost[i] = layer_cost(m->layers[i]) * (m->layers[i]->calls > 1 ? m->layers[i]->calls : 1);
    ok[i] = i == 0 || cut_at(m, i) == ST_OK;
  }
  st_status s = balance(cost, ok, m->nlayers, stages, first);
  free(cost), free(ok);
  return s;
}

/* ---- buffers ------------------------------------------------------------ */

static float *alloc_floats(st_pipe_stage *st, size_t n) {
  size_t bytes = (n ? n : 1) * sizeof(float);
  float *p = st->ctx->be->alloc(st->ctx, bytes);
  if (p) st->buffer_bytes += bytes;
  return p;
}

static void free_slots(st_pipe_stage *st) {
  const st_backend *be = st->ctx->be;
  size_t nl = (size_t)(st->nhi - st->nlo), per = (size_t)st->nslots * nl;
  for (size_t i = 0; st->acts && i < per; i++) be->free(st->ctx, st->acts[i]);
  for (size_t i = 0; st->caches && i < per; i++) be->free(st->ctx, st->caches[i]);
  for (int i = 0; i < st->nslots; i++) {
    if (st->recv) be->free(st->ctx, st->recv[i]);
    if (st->in) be->free(st->ctx, st->in[i]);
    if (st->dxs) be->free(st->ctx, st->dxs[i]);
    if (st->tdy) be->free(st->ctx, st->tdy[i]);
  }
  be->free(st->ctx, st->tdyin);
  be->free(st->ctx, st->tids);
  be->free(st->ctx, st->tcompact);
  free(st->trow);
  st->tdyin = st->tids = st->tcompact = NULL;
  st->trow = NULL;
  st->tcap = 0;
  for (int i = 0; st->gslots && i < st->n_gslots; i++) be->free(st->ctx, st->gslots[i]);
  be->free(st->ctx, st->workspace);
  be->free(st->ctx, st->loss_rows);
  if (st->acts) memset(st->acts, 0, per * sizeof *st->acts);
  if (st->caches) memset(st->caches, 0, per * sizeof *st->caches);
  if (st->recv) memset(st->recv, 0, (size_t)st->nslots * sizeof *st->recv);
  if (st->in) memset(st->in, 0, (size_t)st->nslots * sizeof *st->in);
  if (st->dxs) memset(st->dxs, 0, (size_t)st->nslots * sizeof *st->dxs);
  if (st->tdy) memset(st->tdy, 0, (size_t)st->nslots * sizeof *st->tdy);
  if (st->gslots) memset(st->gslots, 0, (size_t)st->n_gslots * sizeof *st->gslots);
  st->workspace = st->loss_rows = NULL;
  st->cap = 0;
}

/* The tie's dst: its fold buffers for micro-batches of cap examples
 * (pipeline_tie.c). */
static bool tie_reserve(const st_net *m, st_pipe_stage *st, int cap) {
  size_t ids = st_shape_size(m->layers[st->tie.layer]->in_shape) * (size_t)cap;
  const st_backend *be = st->ctx->be;
  st->trow = malloc(ids * sizeof(int) + 1);
  st->tids = be->alloc(st->ctx, ids * sizeof(float) + 1);
  st->tcompact = be->alloc(st->ctx, st->tie.dy * (size_t)cap * sizeof(float) + 1);
  if (!st->trow || !st->tids || !st->tcompact) return false;
  st->buffer_bytes += ids * (sizeof(int) + sizeof(float)) + st->tie.dy * (size_t)cap * sizeof(float);
  st->tcap = cap;
  return true;
}

static st_status alloc_slots(const st_net *m, st_pipe_stage *st, int cap) {
  size_t nl = (size_t)(st->nhi - st->nlo), ws = 1;
  size_t in = st__pipe_stage_in_size(m, st), mx = in;
  for (int s = 0; s < st->nslots; s++)
    for (int k = st->nlo; k < st->nhi; k++) {
      const st_layer *l = m->layers[m->nodes[k].layer];
      size_t i = (size_t)s * nl + (size_t)(k - st->nlo);
      if (!(st->acts[i] = alloc_floats(st, st_shape_size(l->out_shape) * (size_t)cap)) ||
          !(st->caches[i] = alloc_floats(st, l->cache_per_example * (size_t)cap)))
        return ST_ERR_NOMEM;
    }
  for (int k = st->nlo; k < st->nhi; k++) {
    const st_layer *l = m->layers[m->nodes[k].layer];
    size_t w = l->vt->workspace_floats ? l->vt->workspace_floats(l, cap) : 0;
    if (w > ws) ws = w;
    if (st_shape_size(l->out_shape) > mx) mx = st_shape_size(l->out_shape);
  }
  size_t out = st__pipe_stage_out_size(m, st) * (size_t)cap;
  for (int s = 0; s < st->nslots; s++)
    if ((st->recv && !(st->recv[s] = alloc_floats(st, out))) ||
        (st->in && !(st->in[s] = alloc_floats(st, in * (size_t)cap))) ||
        (st->dxs && !(st->dxs[s] = alloc_floats(st, in * (size_t)cap))) ||
        (st->tdy && !(st->tdy[s] = alloc_floats(st, st->tie.dy * (size_t)cap))))
      return ST_ERR_NOMEM;
  if (st->tie_dst && st->in && !(st->tdyin = alloc_floats(st, st->tie.dy * (size_t)cap)))
    return ST_ERR_NOMEM;
  if (st->tie_dst && !tie_reserve(m, st, cap)) return ST_ERR_NOMEM;
  for (int i = 0; i < st->n_gslots; i++)
    if (!(st->gslots[i] = alloc_floats(st, mx * (size_t)cap))) return ST_ERR_NOMEM;
  if (!(st->workspace = alloc_floats(st, ws)) ||
      !(st->loss_rows = alloc_floats(st, (size_t)cap * st__net_loss_positions(m))))
    return ST_ERR_NOMEM;
  st->cap = cap;
  return ST_OK;
}

/* The most trainable floats of one layer among [lo, hi): the size of dw
 * (skip: a tied table whose gradient the stage does not hold, or -1). */
static size_t largest_layer(const st_net *m, int lo, int hi, int skip) {
  size_t mx = 0, off, n;
  for (int i = lo; i < hi; i++) {
    if (i == skip) continue;
    st__pipe_var_range(m, i, i + 1, true, &off, &n);
    if (n > mx) mx = n;
  }
  return mx;
}

/* The stage's nodes and the tensor it reads (st__net_cut made sure it is one). */
static void stage_nodes(const st_net *m, st_pipe_stage *st) {
  st__net_layer_nodes(m, st->lo, st->hi, &st->nlo, &st->nhi);
  st->in_tensor = st__net_input_tensor(0);
  if (st->nlo > 0) (void)st__net_cut(m, st->nlo, &st->in_tensor);
}

/* Bytes of the variables, slots and gradients: fixed for the stage's life
 * (a tie's src: the table's values; dst: values, slots, tgrad and tsum). */
static size_t fixed_bytes(const st_net *m, const st_pipe_stage *st) {
  size_t tie = st->tie_src ? st->tie.n : st->tie_dst ? st->tie.n * (size_t)(3 + m->n_slots) : 0;
  return (st->np * (size_t)(1 + m->n_slots) + st->ns + tie) * sizeof(float);
}

static int skip_layer(const st_pipe_stage *st) { return st->tie_src ? st->tie.layer : -1; }

st_status st__pipe_stage_reserve(const st_net *m, st_pipe_stage *st, int cap) {
  if (cap <= st->cap) return ST_OK;
  free_slots(st);
  size_t dw = largest_layer(m, st->lo, st->hi, skip_layer(st));
  st->buffer_bytes = fixed_bytes(m, st) + ((st->np ? st->np : 1) + (dw ? dw : 1)) * sizeof(float);
  st_status s = alloc_slots(m, st, cap);
  if (s != ST_OK) {
    free_slots(st);
    return st_error(ST_ERR_NOMEM, "pipeline stage %d: out of memory for micro-batches of %d "
                    "examples", st->index, cap);
  }
  return ST_OK;
}

/* The variable range of layers [lo, hi): offsets are assigned in layer order. */
void st__pipe_var_range(const st_net *m, int lo, int hi, bool trainable, size_t *off,
                      size_t *n) {
  size_t a = 0, b = 0;
  bool seen = false;
  for (int i = lo; i < hi; i++)
    for (int p = 0; p < m->layers[i]->nparams; p++) {
      const st_param_spec *ps = &m->layers[i]->params[p];
      if (ps->trainable != trainable) continue;
      if (!seen) a = ps->offset, seen = true;
      b = ps->offset + st_shape_size(ps->shape);
    }
  *off = a;
  *n = seen ? b - a : 0;
}

/* The tie's share of stage st: src holds the table's values only (its
 * trainable range starts after the table), dst tgrad, tsum and tmap. */
static bool tie_setup(const st_net *m, st_pipe_stage *st, const st_pipe_tie *tie) {
  st->tie.layer = -1;
  if (!tie || tie->layer < 0) return true;
  st->tie = *tie;
  st->tie_src = tie->src == st->index, st->tie_dst = tie->dst == st->index;
  if (st->tie_src) {
    st->poff += tie->n, st->np -= tie->n; /* the table is the stage's first variable */
    st->tdy = calloc((size_t)st->nslots, sizeof *st->tdy);
    if (!st->tdy) return false;
  }
  size_t V = (size_t)m->layers[tie->layer]->params[0].shape.dims[0];
  return !st->tie_dst || ((st->tgrad = alloc_floats(st, tie->n)) && (st->tsum = alloc_floats(st, tie->n)) &&
                          (st->tmap = malloc(V * sizeof(int) + 1)) && memset(st->tmap, 0xff, V * sizeof(int)));
}

st_status st__pipe_stage_create(const st_net *m, int index, int lo, int hi, int nslots,
                                bool last, bool procs, const st_pipe_tie *tie,
                                st_pipe_stage **out) {
  *out = NULL;
  st_pipe_stage *st = calloc(1, sizeof *st);
  if (!st) return st_error(ST_ERR_NOMEM, "pipeline: out of memory");
  st->index = index, st->lo = lo, st->hi = hi, st->nslots = nslots;
  st_status s = st_backend_ctx_create(m->be, index, 0, &st->ctx);
  if (s != ST_OK) {
    free(st);
    return s;
  }
  st__pipe_var_range(m, lo, hi, true, &st->poff, &st->np);
  st__pipe_var_range(m, lo, hi, false, &st->soff, &st->ns);
  stage_nodes(m, st);
  st->n_gslots = st__net_grad_slots(m, st->nlo, st->nhi);
  st->gslots = calloc((size_t)st->n_gslots + 1, sizeof *st->gslots);
  size_t per = (size_t)nslots * (size_t)(st->nhi - st->nlo);
  st->acts = calloc(per, sizeof *st->acts);
  st->caches = calloc(per, sizeof *st->caches);
  st->recv = last ? NULL : calloc((size_t)nslots, sizeof *st->recv);
  bool extra = procs && lo > 0;
  st->in = extra ? calloc((size_t)nslots, sizeof *st->in) : NULL;
  st->dxs = extra ? calloc((size_t)nslots, sizeof *st->dxs) : NULL;
  if (!tie_setup(m, st, tie)) goto fail;
  if (st->tie_src) { /* its backward skips the lookup: its range's slots may differ */
    int n = st__net_grad_slots(m, st->nlo + 1, st->nhi) + 1;
    if (n > st->n_gslots) {
      free(st->gslots);
      st->n_gslots = n;
      st->gslots = calloc((size_t)n + 1, sizeof *st->gslots);
    }
  }
  if (!st->gslots || !st->acts || !st->caches || (!last && !st->recv) || (extra && (!st->in || !st->dxs)) || !(st->grads = alloc_floats(st, st->np)) ||
      !(st->dw = alloc_floats(st, largest_layer(m, lo, hi, skip_layer(st)))))
    goto fail;
  if (st__pipe_stage_reserve(m, st, 1) != ST_OK) goto fail;
  *out = st;
  return ST_OK;
fail:;
  size_t bytes = (st->np + largest_layer(m, lo, hi, skip_layer(st))) * sizeof(float);
  st__pipe_stage_destroy(m, st);
  return st_error(ST_ERR_NOMEM, "pipeline stage %d (layers %d..%d): out of memory for its "
                  "gradients and buffers (%zu bytes and more)", index, lo, hi - 1, bytes);
}

void st__pipe_stage_destroy(const st_net *m, st_pipe_stage *st) {
  (void)m;
  if (!st) return;
  if (st->ctx) {
    free_slots(st);
    st->ctx->be->free(st->ctx, st->grads);
    st->ctx->be->free(st->ctx, st->dw);
    st->ctx->be->free(st->ctx, st->tgrad);
    st->ctx->be->free(st->ctx, st->tsum);
    st_backend_ctx_destroy(st->ctx);
  }
  free(st->acts);
  free(st->caches);
  free(st->gslots);
  free(st->recv);
  free(st->in);
  free(st->dxs);
  free(st->tdy);
  free(st->tmap);
  free(st);
}

/* ---- passes ------------------------------------------------------------- */

/* The executor over the stage's nodes with slot `slot`'s buffers (dropout
 * keyed as one device's slice mb). Gradients go to grads, or, with
 * accumulate, through dw into grads. */
static st_exec stage_exec(const st_net *m, st_pipe_stage *st, int slot, int mb, bool accumulate) {
  size_t per = (size_t)(st->nhi - st->nlo);
  st_exec e;
  memset(&e, 0, sizeof e);
  e.be = st->ctx->be;
  e.ctx = st->ctx;
  e.lo = st->nlo, e.hi = st->nhi;
  e.acts = st->acts + (size_t)slot * per;
  e.caches = st->caches + (size_t)slot * per;
  e.workspace = st->workspace;
  e.gslots = st->gslots;
  e.gscratch = st->dw;
  e.params = m->params, e.state = m->state;
  e.grads = st->grads, e.grads_base = st->poff;
  e.accumulate = accumulate;
  e.stream_key = (uint64_t)mb;
  e.n_ext = 1;
  e.ext_id[0] = st->in_tensor;
  return e;
}

const float *st__pipe_stage_forward(const st_net *m, st_pipe_stage *st, int slot, int mb,
                                    const float *x, int n, bool training, int64_t step) {
  ST_ASSERT(n <= st->cap && slot < st->nslots);
  st_exec e = stage_exec(m, st, slot, mb, false);
  e.ext[0] = x;
  return st__exec_forward(m, &e, n, training, step);
}

void st__pipe_stage_backward(const st_net *m, st_pipe_stage *st, int slot, int mb,
                             bool to_dw, const float *x, float *dy, int n, float *dx, int first,
                             int64_t step) {
  st_exec e = stage_exec(m, st, slot, mb, to_dw);
  e.ext[0] = x;
  e.ext_dx[0] = st->lo > first ? dx : NULL;
  if (st->tie_src) { /* not the lookup: the gradient of its output to tdy (for dst) */
    ST_ASSERT(st->nlo == st->tie.node);
    e.lo++, e.acts++, e.caches++;
    e.n_ext = 2;
    e.ext_id[1] = st->tie.node;
    e.ext[1] = st->acts[(size_t)slot * (size_t)(st->nhi - st->nlo)];
    e.ext_dx[1] = st->tdy[slot];
  }
  if (st->tie_dst) { /* the head's part of the table's gradient */
    e.tied_off = st->tie.off, e.tied_n = st->tie.n;
    e.tied_dw = to_dw ? st->tsum : st->tgrad;
  }
  st__exec_backward(m, &e, dy == st->gslots[0] ? NULL : dy, n, step, NULL, NULL);
}

void st__pipe_stage_no_examples(const st_net *m, st_pipe_stage *st, int k) {
  if (st->tie_dst && !k) m->be->fill(st->ctx, st->tie.n, 0.0f, st->tgrad);
  if (!k) {
    if (st->np) m->be->fill(st->ctx, st->np, 0.0f, st->grads);
    return;
  }
  for (int i = st->lo; i < st->hi; i++) { /* add zeros, as a micro-batch of examples adds */
    size_t off, nv;
    st__pipe_var_range(m, i, i + 1, true, &off, &nv);
    if (!nv) continue;
    m->be->fill(st->ctx, nv, 0.0f, st->dw);
    m->be->axpy(st->ctx, nv, 1.0f, st->dw, st->grads + (off - st->poff));
  }
}

int st__pipe_first_trainable(const st_net *m) {
  for (int i = 0; i < m->nlayers; i++)
    for (int q = 0; q < m->layers[i]->nparams; q++)
      if (m->layers[i]->params[q].trainable) return i;
  return m->nlayers;
}

void st__pipe_stage_plan_bytes(const st_net *m, const st_pipe_stage *st, int cap, size_t *fixed,
                               size_t *acts) {
  size_t c = (size_t)(cap > 0 ? cap : 1), per = 0, mx = st__pipe_stage_in_size(m, st), ws = 1;
  for (int k = st->nlo; k < st->nhi; k++) { /* alloc_slots' buffers, counted */
    const st_layer *l = m->layers[m->nodes[k].layer];
    per += st_shape_size(l->out_shape) + l->cache_per_example;
    size_t w = l->vt->workspace_floats ? l->vt->workspace_floats(l, (int)c) : 0;
    if (w > ws) ws = w;
    if (st_shape_size(l->out_shape) > mx) mx = st_shape_size(l->out_shape);
  }
  size_t in = st__pipe_stage_in_size(m, st), dy = st->tie.layer >= 0 ? st->tie.dy : 0;
  per += (st->recv ? st__pipe_stage_out_size(m, st) : 0) + (st->in ? 2 * in : 0) +
         (st->tdy ? dy : 0);
  size_t f = (size_t)st->nslots * per * c + (size_t)st->n_gslots * mx * c + ws +
             c * st__net_loss_positions(m);
  if (st->tie_dst) {
    size_t ids = st_shape_size(m->layers[st->tie.layer]->in_shape) * c;
    f += ids * 2 + dy * c * (st->in ? 2 : 1); /* trow, tids, tcompact (and tdyin) */
  }
  size_t dw = largest_layer(m, st->lo, st->hi, skip_layer(st));
  *fixed = fixed_bytes(m, st) + ((st->np ? st->np : 1) + (dw ? dw : 1)) * sizeof(float);
  *acts = f * sizeof(float);
}
