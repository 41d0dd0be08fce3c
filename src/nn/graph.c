/* The graph executor: forward and backward over a range of the net's nodes
 * (every node for a replica, a stage's range for the pipeline), with the
 * gradient of each tensor summed over the nodes that read it, weights shared
 * by the calls of one layer, and gradient buffers reused once a tensor's
 * producer has read its gradient (a chain needs two: the ping-pong of a
 * Sequential model). Also the net's graph bookkeeping. The caller's thread;
 * one st_exec at a time per thread. */
#include <stdlib.h>
#include <string.h>

#include "nn/net.h"

st_status st__net_add_node(st_net *m, int layer, const int *in, int n) {
  if (m->nnodes == m->node_cap) {
    int cap = m->node_cap ? m->node_cap * 2 : 8;
    st_net_node *grown = realloc(m->nodes, (size_t)cap * sizeof *grown);
    if (!grown) return st_error(ST_ERR_NOMEM, "model: out of memory");
    m->nodes = grown;
    m->node_cap = cap;
  }
  st_layer *l = m->layers[layer];
  if (l->calls++ == 0) l->first_node = m->nnodes;
  st_net_node *d = &m->nodes[m->nnodes++];
  memset(d, 0, sizeof *d);
  d->layer = layer;
  d->n_in = n;
  for (int j = 0; j < n; j++) d->in[j] = in[j];
  return ST_OK;
}

st_shape st__net_tensor_shape(const st_net *m, int t) {
  if (t < 0) return m->inputs[-1 - t];
  return m->layers[m->nodes[t].layer]->out_shape;
}

bool st__net_is_chain(const st_net *m) {
  bool chain = m->nnodes == m->nlayers && m->n_inputs == 1;
  for (int k = 0; chain && k < m->nnodes; k++)
    chain = m->nodes[k].layer == k && m->nodes[k].n_in == 1 &&
            m->nodes[k].in[0] == (k ? k - 1 : st__net_input_tensor(0));
  return chain;
}

bool st__net_shares_layers(const st_net *m) {
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i]->calls > 1 || m->layers[i]->tied) return true;
  return false;
}

/* Trainable floats of layer l and the offset of the first (its trainable
 * variables are contiguous). */
static size_t layer_trainable(const st_layer *l, size_t *first) {
  size_t n = 0;
  *first = 0;
  for (int p = 0; p < l->nparams; p++)
    if (l->params[p].trainable) {
      if (!n) *first = l->params[p].offset;
      n += st_shape_size(l->params[p].shape);
    }
  return n;
}

size_t st__net_max_layer_params(const st_net *m, int lo, int hi) {
  size_t mx = 0, first;
  for (int k = lo; k < hi; k++) {
    size_t n = layer_trainable(st__layer_vars(m->layers[m->nodes[k].layer]), &first);
    if (n > mx) mx = n;
  }
  return mx;
}

/* ---- forward ------------------------------------------------------------ */

static int find_ext(const st_exec *e, int t) {
  for (int i = 0; i < e->n_ext; i++)
    if (e->ext_id[i] == t) return i;
  return -1;
}

static const float *tensor(const st_exec *e, int t) {
  if (t >= e->lo && t < e->hi) return e->acts[t - e->lo];
  int i = find_ext(e, t);
  ST_ASSERT(i >= 0); /* a range reads only its own nodes and its inputs */
  return e->ext[i];
}

/* The arguments of node k's call (inputs and gradients set by the caller). */
static st_layer_args node_args(const st_net *m, const st_exec *e, int k, int n, bool training,
                               int64_t step) {
  const st_layer *l = st__layer_vars(m->layers[m->nodes[k].layer]);
  st_layer_args c;
  memset(&c, 0, sizeof c);
  c.be = e->be;
  c.ctx = e->ctx;
  c.batch = n;
  c.training = training;
  c.cache = e->caches[k - e->lo];
  c.workspace = e->workspace;
  c.seed = m->seed;
  /* dropout stream: distinct per (step, node, replica or micro-batch) */
  c.stream = ((uint64_t)step << 24) ^ ((uint64_t)k << 12) ^ e->stream_key;
  c.global_batch = n;
  c.all_reduce_sum = e->all_reduce_sum;
  c.all_reduce_ctx = e->all_reduce_ctx;
  for (int p = 0; p < l->nparams; p++) {
    c.w[p] = st__var_ptr(l, p, e->params, e->state);
    size_t o = l->params[p].offset;
    bool tied = e->tied_dw && o >= e->tied_off && o < e->tied_off + e->tied_n;
    c.dw[p] = !l->params[p].trainable ? NULL
              : tied ? e->tied_dw + (o - e->tied_off) : e->grads + (o - e->grads_base);
  }
  for (int j = 0; j < m->nodes[k].n_in; j++) c.xs[j] = tensor(e, m->nodes[k].in[j]);
  c.x = c.xs[0];
  c.y = e->acts[k - e->lo];
  return c;
}

const float *st__exec_forward(const st_net *m, st_exec *e, int n, bool training, int64_t step) {
  for (int k = e->lo; k < e->hi; k++) {
    st_layer_args c = node_args(m, e, k, n, training, step);
    const st_layer *l = m->layers[m->nodes[k].layer];
    l->vt->forward(l, &c);
  }
  return e->acts[e->hi - 1 - e->lo];
}

/* ---- backward ------------------------------------------------------------ */

/* The state of one backward pass: which tensors need a gradient, where each
 * gradient lives, which slots are free. With e->gslots NULL it only counts
 * the slots (st__net_grad_slots). */
typedef struct walk {
  const st_net *m;
  st_exec *e;
  int n;                 /* examples */
  size_t floats;         /* one slot: n * max activation */
  bool *needs;           /* [hi - lo]: node output depends on a trainable variable */
  float **gbuf;          /* [hi - lo]: its gradient's buffer (NULL: not yet written) */
  int *gslot;            /* [hi - lo]: its slot, -1 none */
  bool *ext_written;     /* [n_ext] */
  bool *layer_done;      /* [nlayers]: a call of the layer wrote its gradients */
  int nslots, *free_slots, nfree, used, peak;
  size_t *high;          /* [slots]: the most floats per example a slot held */
} walk;

/* A slot for a gradient of `need` floats per example: of the free slots the
 * one that held the fewest floats at least that many, else the one that held
 * the most (a new slot when none is free). Every slot can hold the largest
 * tensor; the choice keeps the large gradients in the same slots, so the
 * others' pages (2 MiB huge pages) are never touched beyond what they hold:
 * the peak memory of backward, not its values (which slot holds a gradient
 * changes no sum's order). */
static int slot_get(walk *w, size_t need) {
  int s, best = -1;
  for (int i = 0; i < w->nfree; i++) {
    size_t h = w->high[w->free_slots[i]], hb = best < 0 ? 0 : w->high[w->free_slots[best]];
    bool fits = h >= need, best_fits = best >= 0 && hb >= need;
    if (best < 0 || (fits && (!best_fits || h < hb)) || (!fits && !best_fits && h > hb)) best = i;
  }
  if (best >= 0) {
    s = w->free_slots[best];
    w->free_slots[best] = w->free_slots[--w->nfree];
  } else {
    s = w->nslots++;
    w->high[s] = 0;
  }
  if (need > w->high[s]) w->high[s] = need;
  if (++w->used > w->peak) w->peak = w->used;
  return s;
}

static size_t tensor_floats(const walk *w, int t) {
  return st_shape_size(st__net_tensor_shape(w->m, t));
}
static void slot_put(walk *w, int s) {
  w->free_slots[w->nfree++] = s;
  w->used--;
}
static float *slot_buf(const walk *w, int s) { return w->e->gslots ? w->e->gslots[s] : NULL; }

static bool tensor_needs(const walk *w, int t) {
  if (t >= w->e->lo && t < w->e->hi) return w->needs[t - w->e->lo];
  int i = find_ext(w->e, t);
  return i >= 0 && w->e->ext_dx[i];
}

static void mark_needs(walk *w) {
  const st_exec *e = w->e;
  for (int k = e->lo; k < e->hi; k++) {
    size_t first;
    bool nd = layer_trainable(st__layer_vars(w->m->layers[w->m->nodes[k].layer]), &first) > 0;
    for (int j = 0; j < w->m->nodes[k].n_in && !nd; j++) nd = tensor_needs(w, w->m->nodes[k].in[j]);
    w->needs[k - e->lo] = nd;
  }
}

/* Where input t's gradient goes in this call: its home when nothing wrote it
 * yet (then it is written), else a temporary slot added to home afterwards
 * (*tmp = that slot). */
static float *grad_target(walk *w, int t, int *tmp) {
  *tmp = -1;
  st_exec *e = w->e;
  if (t >= e->lo && t < e->hi) {
    int i = t - e->lo;
    if (w->gslot[i] < 0 && !w->gbuf[i]) {
      w->gslot[i] = slot_get(w, tensor_floats(w, t));
      w->gbuf[i] = slot_buf(w, w->gslot[i]);
      if (!e->gslots) w->gbuf[i] = (float *)w; /* counting: any non-NULL mark */
      return w->gbuf[i];
    }
  } else {
    int i = find_ext(e, t);
    if (!w->ext_written[i]) {
      w->ext_written[i] = true;
      return e->ext_dx[i];
    }
  }
  *tmp = slot_get(w, tensor_floats(w, t));
  return slot_buf(w, *tmp);
}

static float *grad_home(const walk *w, int t) {
  if (t >= w->e->lo && t < w->e->hi) return w->gbuf[t - w->e->lo];
  return w->e->ext_dx[find_ext(w->e, t)];
}

/* Node k's input that shares a slot and whose producer rebuilds it
 * (e->remat_of), rebuilt into e->remat when k's backward reads its inputs
 * (memplan_train.c: k takes no other such tensor; it may take that one
 * twice). */
static void rebuild_inputs(const walk *w, int k, st_layer_args *c, int64_t step) {
  const st_net *m = w->m;
  const st_exec *e = w->e;
  const st_net_node *d = &m->nodes[k];
  if (!e->remat_of || !st__layer_backward_reads(m->layers[d->layer], false)) return;
  for (int j = 0; j < d->n_in; j++) {
    int t = d->in[j];
    if (t < e->lo || t >= e->hi || !e->remat_of[t - e->lo]) continue;
    bool done = false;
    for (int i = 0; i < j; i++) done |= d->in[i] == t;
    if (!done) {
      const st_layer *p = m->layers[m->nodes[t].layer];
      st_layer_args pc = node_args(m, e, t, w->n, true, step);
      pc.y = e->remat;
      p->vt->rematerialize(p, &pc);
    }
    c->xs[j] = e->remat;
  }
  c->x = c->xs[0];
}

/* Backward of node k (its output's gradient in gbuf). */
static void node_backward(walk *w, int k, int64_t step) {
  const st_net *m = w->m;
  st_exec *e = w->e;
  const st_net_node *d = &m->nodes[k];
  const st_layer *l = m->layers[d->layer];
  int tmp[ST_LAYER_MAX_INPUTS];
  float *dxs[ST_LAYER_MAX_INPUTS];
  for (int j = 0; j < d->n_in; j++) {
    tmp[j] = -1;
    dxs[j] = tensor_needs(w, d->in[j]) ? grad_target(w, d->in[j], &tmp[j]) : NULL;
  }
  const st_layer *vl = st__layer_vars(l);
  int vi = l->tied ? m->nodes[vl->first_node].layer : d->layer; /* whose gradients */
  size_t base, nt = layer_trainable(vl, &base);
  bool tied = e->tied_dw && nt && base >= e->tied_off && base < e->tied_off + e->tied_n;
  bool adds = nt && !tied && (e->accumulate || w->layer_done[vi]); /* tied: written whole */
  bool scratch = adds && !l->vt->accumulates_dw; /* else it adds in place */
  if (e->gslots) {
    st_layer_args c = node_args(m, e, k, w->n, true, step);
    c.dw_accumulate = adds && !scratch;
    if (scratch)
      for (int p = 0; p < vl->nparams; p++)
        if (c.dw[p]) c.dw[p] = e->gscratch + (vl->params[p].offset - base);
    c.dy = w->gbuf[k - e->lo];
    c.dy_writable = true;
    for (int j = 0; j < d->n_in; j++) c.dxs[j] = dxs[j];
    c.dx = dxs[0];
    rebuild_inputs(w, k, &c, step);
    l->vt->backward(l, &c);
    if (scratch) e->be->axpy(e->ctx, nt, 1.0f, e->gscratch, e->grads + (base - e->grads_base));
    for (int j = 0; j < d->n_in; j++)
      if (tmp[j] >= 0)
        e->be->axpy(e->ctx, (size_t)w->n * st_shape_size(st__net_tensor_shape(m, d->in[j])),
                    1.0f, dxs[j], grad_home(w, d->in[j]));
  }
  for (int j = 0; j < d->n_in; j++)
    if (tmp[j] >= 0) slot_put(w, tmp[j]);
  w->layer_done[vi] = true;
}

/* The pass itself (dy NULL: counting). Returns the slots used at most. */
static int run_backward(const st_net *m, st_exec *e, float *dy, int n, int64_t step,
                        st_grads_ready_fn ready, void *ready_ctx) {
  int len = e->hi - e->lo, extra = len + ST_LAYER_MAX_INPUTS + 1;
  walk w = {.m = m, .e = e, .n = n};
  /* one block: high [extra], gbuf [len], gslot [len], free_slots [extra], then the flags
   * needs [len], ext_written [ST_NET_MAX_IO], layer_done [nlayers] */
  size_t ints = (size_t)len + (size_t)extra, flags = (size_t)len + ST_NET_MAX_IO +
                                                      (size_t)m->nlayers + 1;
  char *mem = calloc(1, (size_t)extra * sizeof(size_t) + (size_t)len * sizeof(float *) +
                            ints * sizeof(int) + flags);
  ST_ASSERT(mem);
  w.high = (size_t *)mem;
  w.gbuf = (float **)(w.high + extra);
  w.gslot = (int *)(w.gbuf + len);
  w.free_slots = w.gslot + len;
  w.needs = (bool *)(w.free_slots + extra);
  w.ext_written = w.needs + len;
  w.layer_done = w.ext_written + ST_NET_MAX_IO;
  for (int i = 0; i < len; i++) w.gslot[i] = -1;
  mark_needs(&w);
  if (dy) {
    w.gbuf[len - 1] = dy;
  } else { /* dy is in slot 0 (or counting); several seeds in slots 0.. */
    for (int j = 0; j < (e->n_seed ? e->n_seed : 1); j++) {
      int i = e->n_seed ? e->seed_id[j] - e->lo : len - 1;
      w.gslot[i] = slot_get(&w, tensor_floats(&w, e->n_seed ? e->seed_id[j] : e->hi - 1));
      w.gbuf[i] = e->gslots ? e->gslots[w.gslot[i]] : (float *)&w;
    }
  }
  for (int k = e->hi - 1; k >= e->lo; k--) {
    int i = k - e->lo, layer = m->nodes[k].layer;
    if (w.needs[i]) {
      if (!w.gbuf[i]) { /* read by no node: a zero gradient */
        w.gslot[i] = slot_get(&w, tensor_floats(&w, k));
        w.gbuf[i] = e->gslots ? slot_buf(&w, w.gslot[i]) : (float *)&w;
        if (e->gslots)
          e->be->fill(e->ctx, (size_t)n * st_shape_size(st__net_tensor_shape(m, k)), 0.0f,
                      w.gbuf[i]);
      }
      node_backward(&w, k, step);
    }
    if (w.gslot[i] >= 0) slot_put(&w, w.gslot[i]);
    if (ready && m->layers[layer]->first_node == k) ready(ready_ctx, layer);
  }
  if (!e->gslots && e->slot_high) /* counting: what each slot held */
    for (int s = 0; s < w.nslots; s++)
      if (w.high[s] > e->slot_high[s]) e->slot_high[s] = w.high[s];
  free(mem);
  return w.nslots;
}

void st__exec_backward(const st_net *m, st_exec *e, float *dy, int n, int64_t step,
                       st_grads_ready_fn ready, void *ready_ctx) {
  ST_ASSERT(e->gslots);
  run_backward(m, e, dy, n, step, ready, ready_ctx);
}

/* The counting pass over [lo, hi): of the tensors from before lo, those
 * that are not model inputs j >= needed need their gradient (needed
 * ST_NET_MAX_IO: all, the worst case); the slots' high-water marks maxed
 * into high (NULL: not asked). */
static int count_slots(const st_net *m, int lo, int hi, int needed, size_t *high) {
  st_exec e;
  memset(&e, 0, sizeof e);
  e.lo = lo, e.hi = hi;
  e.slot_high = high;
  for (int k = lo; k < hi; k++)
    for (int j = 0; j < m->nodes[k].n_in; j++) {
      int t = m->nodes[k].in[j];
      if ((t < lo || t >= hi) && find_ext(&e, t) < 0 && e.n_ext < ST_NET_MAX_IO) {
        e.ext_id[e.n_ext] = t;
        bool need = true;
        for (int i = needed; i < m->n_inputs; i++) need &= t != st__net_input_tensor(i);
        e.ext_dx[e.n_ext++] = need ? (float *)&e : NULL;
      }
    }
  if (lo == 0 && hi == m->nnodes && m->n_outputs > 1) { /* the replica's seeds */
    e.n_seed = m->n_outputs;
    for (int j = 0; j < m->n_outputs; j++) e.seed_id[j] = m->outputs[j];
  }
  return run_backward(m, &e, NULL, 0, 0, NULL, NULL);
}

int st__net_grad_slots(const st_net *m, int lo, int hi) {
  if (hi <= lo) return 0;
  int n = 0; /* the replica: none, input 0's (st__replica_backward_dy) or all */
  for (int needed = 0; needed <= 2; needed++) {
    int c = count_slots(m, lo, hi, needed < 2 ? needed : ST_NET_MAX_IO, NULL);
    n = c > n ? c : n;
  }
  return n;
}

void st__net_grad_slot_floats(const st_net *m, size_t *floats) {
  int n = st__net_grad_slots(m, 0, m->nnodes);
  for (int s = 0; s < n; s++) floats[s] = 0;
  if (!n) return;
  for (int needed = 0; needed <= 2; needed++)
    count_slots(m, 0, m->nnodes, needed < 2 ? needed : ST_NET_MAX_IO, floats);
}

/* ---- cuts (pipeline stages) --------------------------------------------- */

int st__net_cut(const st_net *m, int k, int *crossing) {
  int n = 0;
  *crossing = k > 0 ? k - 1 : st__net_input_tensor(0);
  for (int q = k; q < m->nnodes; q++) {
    const st_net_node *d = &m->nodes[q];
    const st_layer *l = m->layers[d->layer];
    if (l->first_node < k) return -1; /* a shared layer split (a tied one may be) */
    for (int j = 0; j < d->n_in; j++) {
      int t = d->in[j];
      if (t >= k) continue;
      bool seen = false;
      for (int r = k; r < q && !seen; r++)
        for (int i = 0; i < m->nodes[r].n_in; i++) seen |= m->nodes[r].in[i] == t;
      for (int i = 0; i < j; i++) seen |= d->in[i] == t;
      if (!seen) n++, *crossing = t;
    }
  }
  return n;
}

void st__net_layer_nodes(const st_net *m, int llo, int lhi, int *nlo, int *nhi) {
  *nlo = llo < m->nlayers ? m->layers[llo]->first_node : m->nnodes;
  *nhi = lhi < m->nlayers ? m->layers[lhi]->first_node : m->nnodes;
}
