/* Training activations that need no buffer of their own (issue 28's peak
 * memory): a node output read by no backward (its producer's backward does
 * not read its output, no reader's backward reads its input: layer vtable
 * backward_reads) and not a model output lives only from its node to its
 * last reader in forward, so such outputs share a few slot buffers (resnet20:
 * BatchNormalization's and Add's outputs, 3 of the 7 tensors of a block; a
 * transformer block: MultiHeadAttention's, the second Dense's and the
 * residual sums). So does an output its producer can rebuild from what its
 * backward keeps (vtable rematerialize: Dense with GELU from z, LayerNorm
 * from xhat) when no node whose backward reads it also takes another such
 * tensor: the executor rebuilds it into a slot (free in backward: no
 * backward reads what the slots held) before such a backward (graph.c).
 * The replica (replica.c) allocates the slots. Any thread; reads the net. */
#include <stdlib.h>

#include "nn/net.h"

static bool is_output(const st_net *m, int t) {
  if (t == m->output) return true;
  for (int j = 0; j < m->n_outputs; j++)
    if (m->outputs[j] == t) return true;
  return false;
}

static bool rebuildable(const st_net *m, int t) {
  if (t < 0) return false; /* a model input */
  const st_layer *l = m->layers[m->nodes[t].layer];
  return l->vt->rematerialize && l->vt->rematerialize(l, NULL);
}

/* Some node's backward reads tensor t (>= 0); *clash: one of those nodes
 * also takes another tensor its producer could rebuild (the executor
 * rebuilds one tensor per backward: the same tensor passed twice, as
 * self-attention's query and value, is one). */
static bool read_back(const st_net *m, int t, bool *clash) {
  bool read = false;
  *clash = false;
  for (int q = t + 1; q < m->nnodes; q++) {
    const st_net_node *d = &m->nodes[q];
    bool takes = false, other = false;
    for (int j = 0; j < d->n_in; j++) {
      takes |= d->in[j] == t;
      other |= d->in[j] != t && rebuildable(m, d->in[j]);
    }
    if (takes && st__layer_backward_reads(m->layers[d->layer], false)) {
      read = true;
      *clash |= other;
    }
  }
  return read;
}

/* Tensor t (a node output) needs a buffer of its own in training. */
static bool kept(const st_net *m, int t) {
  if (is_output(m, t)) return true;
  if (st__layer_backward_reads(m->layers[m->nodes[t].layer], true)) return true;
  bool clash;
  return read_back(m, t, &clash) && (clash || !rebuildable(m, t));
}

bool st__net_rematerialized(const st_net *m, int t) {
  bool clash;
  return t >= 0 && t < m->nnodes && !kept(m, t) && read_back(m, t, &clash);
}

size_t st__net_remat_floats(const st_net *m) {
  size_t mx = 0;
  for (int k = 0; k < m->nnodes; k++)
    if (st__net_rematerialized(m, k)) {
      size_t size = st_shape_size(st__net_tensor_shape(m, k));
      if (size > mx) mx = size;
    }
  return mx;
}

static int last_reader(const st_net *m, int t) {
  int last = t;
  for (int q = t + 1; q < m->nnodes; q++)
    for (int j = 0; j < m->nodes[q].n_in; j++)
      if (m->nodes[q].in[j] == t) last = q;
  return last;
}

/* A free slot for a tensor of `size` floats: the smallest that holds it,
 * else the largest (it grows), else a new one; so the large tensors keep to
 * the same slots and the slots get the sizes they need. */
static int pick_slot(const int *holder, const size_t *sizes, int *nslots, size_t size) {
  int best = -1;
  for (int s = 0; s < *nslots; s++) {
    if (holder[s] >= 0) continue;
    bool fits = sizes[s] >= size, best_fits = best >= 0 && sizes[best] >= size;
    if (best < 0 || (fits && (!best_fits || sizes[s] < sizes[best])) ||
        (!fits && !best_fits && sizes[s] > sizes[best]))
      best = s;
  }
  if (best < 0) best = (*nslots)++;
  return best;
}

st_status st__net_transient_sizes(const st_net *m, int *slot_of, int *nslots, size_t *sizes) {
  int n = m->nnodes, *last = malloc(((size_t)n + 1) * sizeof *last);
  int *holder = malloc(((size_t)n + 1) * sizeof *holder); /* [slot]: tensor, -1 free */
  *nslots = 0;
  if (!last || !holder) {
    free(last), free(holder);
    return st_error(ST_ERR_NOMEM, "st__net_transient_slots: out of memory");
  }
  for (int k = 0; k < n; k++) {
    slot_of[k] = kept(m, k) ? -1 : 0;
    last[k] = last_reader(m, k);
    sizes[k] = 0;
  }
  for (int k = 0; k < n; k++) {
    for (int s = 0; s < *nslots; s++) /* free the slots whose readers all ran */
      if (holder[s] >= 0 && last[holder[s]] < k) holder[s] = -1;
    if (slot_of[k] < 0) continue;
    size_t size = st_shape_size(st__net_tensor_shape(m, k));
    int s = pick_slot(holder, sizes, nslots, size);
    holder[s] = k;
    slot_of[k] = s;
    if (size > sizes[s]) sizes[s] = size;
  }
  free(last), free(holder);
  return ST_OK;
}

st_status st__net_transient_slots(const st_net *m, int *slot_of, int *nslots,
                                  size_t *slot_floats) {
  size_t *sizes = malloc(((size_t)m->nnodes + 1) * sizeof *sizes);
  *slot_floats = 0;
  if (!sizes) return st_error(ST_ERR_NOMEM, "st__net_transient_slots: out of memory");
  st_status s = st__net_transient_sizes(m, slot_of, nslots, sizes);
  for (int i = 0; s == ST_OK && i < *nslots; i++)
    if (sizes[i] > *slot_floats) *slot_floats = sizes[i];
  free(sizes);
  return s;
}

st_status st__net_train_activation_floats(const st_net *m, size_t *floats) {
  int *slot_of = malloc(((size_t)m->nnodes + 1) * sizeof *slot_of), ns;
  size_t *sizes = malloc(((size_t)m->nnodes + 1) * sizeof *sizes), total = 0;
  if (!slot_of || !sizes || st__net_transient_sizes(m, slot_of, &ns, sizes) != ST_OK) {
    free(slot_of), free(sizes);
    return st_error(ST_ERR_NOMEM, "st__net_train_activation_floats: out of memory");
  }
  for (int k = 0; k < m->nnodes; k++)
    if (slot_of[k] < 0) total += st_shape_size(st__net_tensor_shape(m, k));
  for (int s = 0; s < ns; s++) total += sizes[s];
  free(slot_of), free(sizes);
  *floats = total;
  return ST_OK;
}
