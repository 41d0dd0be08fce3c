/* The activation memory of a net (issue 28: peak activation memory vs the
 * sum of all activations): what the replica executor (replica.c, graph.c)
 * allocates for a training batch, the inference peak when every activation
 * is freed after its last reader, and the plan that does it for evaluate /
 * predict (st__net_infer_offsets, used by replica_infer.c). Any thread;
 * reads the net only. */
#include <stdlib.h>
#include <string.h>

#include "nn/net.h"

/* The last node reading tensor t (node outputs t >= 0; model inputs t < 0 at
 * index nnodes + (-1 - t)); the model's output is read "after" the last
 * node (nnodes), as are the outputs of a model of several. */
static void last_readers(const st_net *m, int *last) {
  for (int t = 0; t < m->nnodes + m->n_inputs; t++) last[t] = -1;
  for (int k = 0; k < m->nnodes; k++)
    for (int j = 0; j < m->nodes[k].n_in; j++) {
      int t = m->nodes[k].in[j];
      last[t >= 0 ? t : m->nnodes + (-1 - t)] = k;
    }
  last[m->output] = m->nnodes;
  for (int j = 0; j < m->n_outputs; j++) last[m->outputs[j]] = m->nnodes;
}

/* First fit: the lowest offset where `size` floats overlap none of the live
 * blocks (off[q], size of node q for q < k with live[q]). */
static size_t first_fit(const st_net *m, const size_t *off, const bool *live, int k,
                        size_t size) {
  size_t at = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (int q = 0; q < k; q++) {
      size_t qs = st_shape_size(st__net_tensor_shape(m, q));
      if (live[q] && at < off[q] + qs && off[q] < at + size) at = off[q] + qs, moved = true;
    }
  }
  return at;
}

st_status st__net_infer_offsets(const st_net *m, size_t *off, size_t *total) {
  int *last = malloc((size_t)(m->nnodes + m->n_inputs) * sizeof *last);
  bool *live = calloc((size_t)m->nnodes + 1, sizeof *live);
  if (!last || !live) {
    free(last), free(live);
    return st_error(ST_ERR_NOMEM, "inference plan: out of memory");
  }
  last_readers(m, last);
  *total = 0;
  for (int k = 0; k < m->nnodes; k++) {
    size_t size = st_shape_size(st__net_tensor_shape(m, k));
    off[k] = first_fit(m, off, live, k, size);
    if (off[k] + size > *total) *total = off[k] + size;
    live[k] = true;
    for (int q = 0; q <= k; q++) /* read for the last time by k, or by no node */
      if (last[q] == k || (q == k && last[q] < 0)) live[q] = false;
  }
  free(last), free(live);
  return ST_OK;
}

/* Inference peak in floats per example: the inputs live until their last
 * reader; node k's output is made while its inputs are live and freed after
 * its last reader (an output nothing reads is freed at once). */
static size_t inference_peak(const st_net *m, const int *last) {
  size_t live = 0, peak = 0;
  for (int j = 0; j < m->n_inputs; j++) live += st_shape_size(m->inputs[j]);
  peak = live;
  for (int k = 0; k < m->nnodes; k++) {
    live += st_shape_size(st__net_tensor_shape(m, k));
    if (live > peak) peak = live;
    for (int t = 0; t < m->nnodes + m->n_inputs; t++) {
      int id = t < m->nnodes ? t : -1 - (t - m->nnodes);
      bool dead = last[t] == k || (t == k && last[t] < 0);
      if (dead) live -= st_shape_size(st__net_tensor_shape(m, id));
    }
  }
  return peak;
}

st_status st__net_memplan(const st_net *m, int batch, st_memplan *out) {
  memset(out, 0, sizeof *out);
  if (!m || batch < 1 || m->nnodes < 1)
    return st_error(ST_ERR_INVALID, "st__net_memplan: %s",
                    !m ? "no net" : batch < 1 ? "batch < 1" : "net without nodes");
  int *last = malloc((size_t)(m->nnodes + m->n_inputs) * sizeof *last);
  if (!last) return st_error(ST_ERR_NOMEM, "st__net_memplan: out of memory");
  size_t n = (size_t)batch, acts = 0, caches = 0;
  for (int k = 0; k < m->nnodes; k++) {
    const st_layer *l = m->layers[m->nodes[k].layer];
    acts += st_shape_size(l->out_shape);
    caches += l->cache_per_example;
  }
  last_readers(m, last);
  out->nnodes = m->nnodes;
  out->batch = batch;
  out->activation_floats = n * acts;
  out->cache_floats = n * caches;
  out->grad_slots = st__net_grad_slots(m, 0, m->nnodes);
  size_t *gf = calloc((size_t)out->grad_slots + 1, sizeof *gf), gsum = 0;
  if (!gf) {
    free(last);
    return st_error(ST_ERR_NOMEM, "st__net_memplan: out of memory");
  }
  st__net_grad_slot_floats(m, gf); /* the replica's slots, each its own size */
  for (int s = 0; s < out->grad_slots; s++) gsum += gf[s];
  free(gf);
  out->grad_floats = n * gsum;
  out->grad_per_tensor_floats = n * acts;
  out->inference_peak_floats = n * inference_peak(m, last);
  free(last);
  size_t *off = malloc((size_t)m->nnodes * sizeof *off), total = 0, cmax = 0;
  if (!off || st__net_infer_offsets(m, off, &total) != ST_OK) {
    free(off);
    return st_error(ST_ERR_NOMEM, "st__net_memplan: out of memory");
  }
  free(off);
  for (int k = 0; k < m->nnodes; k++)
    if (m->layers[m->nodes[k].layer]->cache_per_example > cmax)
      cmax = m->layers[m->nodes[k].layer]->cache_per_example;
  size_t train = 0;
  if (st__net_train_activation_floats(m, &train) != ST_OK) return ST_ERR_NOMEM;
  out->train_activation_floats = n * train;
  out->infer_block_floats = n * total;
  out->infer_cache_floats = n * cmax;
  return ST_OK;
}

/* What alloc_buffers (replica.c) and st__replica_create allocate on a host
 * backend, counted instead of allocated. */
st_status st__replica_plan_floats(const st_net *m, int n, size_t *fixed, size_t *batch) {
  *fixed = *batch = 0;
  if (!m || n < 1 || m->nnodes < 1)
    return st_error(ST_ERR_INVALID, "st__replica_plan_floats: %s",
                    !m ? "no net" : n < 1 ? "batch < 1" : "net without nodes");
  st_memplan p;
  st_status s = st__net_memplan(m, n, &p);
  if (s != ST_OK) return s;
  size_t ws = 1, in = 0;
  for (int k = 0; k < m->nnodes; k++) {
    const st_layer *l = m->layers[m->nodes[k].layer];
    size_t w = l->vt->workspace_floats ? l->vt->workspace_floats(l, n) : 0;
    if (w > ws) ws = w;
  }
  for (int j = 0; m->n_inputs > 1 && j < m->n_inputs; j++) in += st_shape_size(m->inputs[j]);
  *fixed = m->n_params + (st__net_shares_layers(m) ? st__net_max_layer_params(m, 0, m->nnodes) : 0);
  *batch = p.train_activation_floats + p.cache_floats + p.grad_floats + ws +
           (size_t)n * (in + st__net_loss_positions(m));
  return ST_OK;
}
