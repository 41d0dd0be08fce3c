/* Training activations that need no buffer of their own (issue 28's peak
 * memory): a node output read by no backward (its producer's backward does
 * not read its output, no reader's backward reads its input: layer vtable
 * backward_reads) and not a model output lives only from its node to its
 * last reader in forward, so such outputs share a few slot buffers (resnet20:
 * BatchNormalization's and Add's outputs, 3 of the 7 tensors of a block; a
 * transformer block: MultiHeadAttention's and the second Dense's outputs).
 * So does an output its producer can rebuild from what its backward keeps
 * (vtable rematerialize: Dense with GELU) when every node whose backward
 * reads it takes one input: the executor rebuilds it into one scratch buffer
 * (st__net_remat_floats) before such a backward (graph.c). The replica
 * (replica.c) allocates the slots. Any thread; reads the net. */
#include <stdlib.h>

#include "nn/net.h"

static bool is_output(const st_net *m, int t) {
  if (t == m->output) return true;
  for (int j = 0; j < m->n_outputs; j++)
    if (m->outputs[j] == t) return true;
  return false;
}

/* Some node's backward reads tensor t (>= 0); *multi: one of those nodes
 * takes several inputs. */
static bool read_back(const st_net *m, int t, bool *multi) {
  bool read = false;
  *multi = false;
  for (int q = t + 1; q < m->nnodes; q++)
    for (int j = 0; j < m->nodes[q].n_in; j++)
      if (m->nodes[q].in[j] == t && st__layer_backward_reads(m->layers[m->nodes[q].layer], false)) {
        read = true;
        *multi |= m->nodes[q].n_in > 1;
      }
  return read;
}

static bool rebuildable(const st_net *m, int t) {
  const st_layer *l = m->layers[m->nodes[t].layer];
  return l->vt->rematerialize && l->vt->rematerialize(l, NULL);
}

/* Tensor t (a node output) needs a buffer of its own in training. */
static bool kept(const st_net *m, int t) {
  if (is_output(m, t)) return true;
  if (st__layer_backward_reads(m->layers[m->nodes[t].layer], true)) return true;
  bool multi;
  return read_back(m, t, &multi) && (multi || !rebuildable(m, t));
}

bool st__net_rematerialized(const st_net *m, int t) {
  bool multi;
  return t >= 0 && t < m->nnodes && !kept(m, t) && read_back(m, t, &multi);
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

st_status st__net_transient_slots(const st_net *m, int *slot_of, int *nslots,
                                  size_t *slot_floats) {
  int n = m->nnodes, *last = malloc(((size_t)n + 1) * sizeof *last);
  int *holder = malloc(((size_t)n + 1) * sizeof *holder); /* [slot]: tensor, -1 free */
  *nslots = 0, *slot_floats = 0;
  if (!last || !holder) {
    free(last), free(holder);
    return st_error(ST_ERR_NOMEM, "st__net_transient_slots: out of memory");
  }
  for (int k = 0; k < n; k++) {
    slot_of[k] = kept(m, k) ? -1 : 0;
    last[k] = last_reader(m, k);
  }
  for (int k = 0; k < n; k++) {
    for (int s = 0; s < *nslots; s++) /* free the slots whose readers all ran */
      if (holder[s] >= 0 && last[holder[s]] < k) holder[s] = -1;
    if (slot_of[k] < 0) continue;
    int s = 0;
    while (s < *nslots && holder[s] >= 0) s++;
    if (s == *nslots) (*nslots)++;
    holder[s] = k;
    slot_of[k] = s;
    size_t size = st_shape_size(st__net_tensor_shape(m, k));
    if (size > *slot_floats) *slot_floats = size;
  }
  free(last), free(holder);
  return ST_OK;
}

st_status st__net_train_activation_floats(const st_net *m, size_t *floats) {
  int *slot_of = malloc(((size_t)m->nnodes + 1) * sizeof *slot_of), ns;
  size_t per, total = 0;
  if (!slot_of || st__net_transient_slots(m, slot_of, &ns, &per) != ST_OK) {
    free(slot_of);
    return st_error(ST_ERR_NOMEM, "st__net_train_activation_floats: out of memory");
  }
  for (int k = 0; k < m->nnodes; k++)
    if (slot_of[k] < 0) total += st_shape_size(st__net_tensor_shape(m, k));
  free(slot_of);
  *floats = total + (size_t)ns * per + st__net_remat_floats(m);
  return ST_OK;
}
