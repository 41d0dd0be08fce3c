/* The per-replica executor: buffers for one device's share of a batch and the
 * forward / loss / backward passes over the model's graph (graph.c runs the
 * nodes). A replica is used by one thread at a time; several replicas of one
 * model run in parallel on disjoint buffers (the layers themselves are
 * read-only once built). */
#include <stdlib.h>
#include <string.h>

#include "nn/net.h"

static void free_buffers(st_replica *r) {
  const st_backend *be = r->be;
  for (int i = 0; r->acts && i < r->nnodes; i++)
    if (!r->tslot_of || r->tslot_of[i] < 0) be->free(r->ctx, r->acts[i]);
  for (int i = 0; r->tslots && i < r->n_tslots; i++) be->free(r->ctx, r->tslots[i]);
  r->remat = NULL; /* one of the slots */
  free(r->tslots);
  r->tslots = NULL, r->n_tslots = 0;
  for (int i = 0; r->caches && i < r->nnodes; i++) be->free(r->ctx, r->caches[i]);
  for (int i = 0; r->gslots && i < r->n_gslots; i++) be->free(r->ctx, r->gslots[i]);
  for (int j = 0; j < ST_NET_MAX_IO; j++) be->free(r->ctx, r->inbuf[j]), r->inbuf[j] = NULL;
  be->free(r->ctx, r->workspace);
  be->free(r->ctx, r->gscratch);
  be->free(r->ctx, r->loss_rows);
  be->free(r->ctx, r->xdev);
  be->free(r->ctx, r->ydev);
  be->free(r->ctx, r->outkeep);
  free(r->hout);
  free(r->hloss);
  free(r->hsplit);
  r->workspace = r->gscratch = r->loss_rows = r->xdev = r->ydev = r->outkeep = NULL;
  r->hout = r->hloss = r->hsplit = NULL;
  st__replica_outputs_free(r);
  if (r->acts) memset(r->acts, 0, (size_t)r->nnodes * sizeof *r->acts);
  if (r->caches) memset(r->caches, 0, (size_t)r->nnodes * sizeof *r->caches);
  if (r->gslots) memset(r->gslots, 0, (size_t)r->n_gslots * sizeof *r->gslots);
}

/* Allocate floats*n (n >= 1 so every pointer is valid), or fail. */
static st_status alloc_floats(st_backend_ctx *ctx, size_t per, int n, float **out) {
  size_t bytes;
  if (!st_mul_size(per, (size_t)(n > 0 ? n : 1), &bytes) ||
      !st_mul_size(bytes, sizeof(float), &bytes))
    return st_error(ST_ERR_NOMEM, "replica buffer size overflows");
  *out = ctx->be->alloc(ctx, bytes ? bytes : sizeof(float));
  return *out ? ST_OK : ST_ERR_NOMEM;
}

/* A device backend's staging: the inputs and labels on the device, the
 * output and losses (and a split input) on the host. */
static st_status alloc_staging(const st_net *m, st_replica *r, int n) {
  size_t rows = (size_t)(n > 0 ? n : 1), in = st_shape_size(m->input_shape);
  size_t out = st__net_output_size(m), mx = 1;
  for (int j = 0; j < m->n_inputs; j++)
    if (st_shape_size(m->inputs[j]) > mx) mx = st_shape_size(m->inputs[j]);
  if (alloc_floats(r->ctx, in, n, &r->xdev) ||
      alloc_floats(r->ctx, st__net_label_size(m), n, &r->ydev) ||
      alloc_floats(r->ctx, out ? out : 1, n, &r->outkeep))
    return ST_ERR_NOMEM;
  r->hout = calloc(rows * (out ? out : 1), sizeof(float));
  r->hloss = calloc(rows, sizeof(float));
  r->hsplit = m->n_inputs > 1 ? calloc(rows * mx, sizeof(float)) : NULL;
  return r->hout && r->hloss && (m->n_inputs == 1 || r->hsplit) ? ST_OK : ST_ERR_NOMEM;
}

/* The shared slots of the outputs no backward reads (memplan_train.c). */
static st_status alloc_transient(const st_net *m, st_replica *r, int n) {
  int ns, big = 0;
  size_t *sizes = malloc(((size_t)m->nnodes + 1) * sizeof *sizes);
  r->tslots = calloc((size_t)m->nnodes + 1, sizeof *r->tslots);
  if (!sizes || !r->tslots || st__net_transient_sizes(m, r->tslot_of, &ns, sizes) != ST_OK) {
    free(sizes);
    return ST_ERR_NOMEM;
  }
  r->n_tslots = ns;
  st_status s = ST_OK;
  for (int i = 0; i < ns && s == ST_OK; i++) {
    s = alloc_floats(r->ctx, sizes[i], n, &r->tslots[i]);
    if (sizes[i] > sizes[big]) big = i;
  }
  free(sizes);
  if (s != ST_OK) return ST_ERR_NOMEM;
  for (int k = 0; k < m->nnodes; k++) {
    if (r->tslot_of[k] >= 0) r->acts[k] = r->tslots[r->tslot_of[k]];
    r->remat_of[k] = st__net_rematerialized(m, k);
  }
  /* the rebuilt outputs are among the slots' tensors, so the largest slot
   * holds each; in backward no slot holds anything read */
  r->remat = st__net_remat_floats(m) && ns ? r->tslots[big] : NULL;
  return ST_OK;
}

static st_status alloc_buffers(const st_net *m, st_replica *r, int n) {
  st_backend_ctx *ctx = r->ctx;
  size_t ws = 1;
  if (alloc_transient(m, r, n) != ST_OK) return ST_ERR_NOMEM;
  for (int k = 0; k < m->nnodes; k++) {
    const st_layer *l = m->layers[m->nodes[k].layer];
    if ((r->tslot_of[k] < 0 && alloc_floats(ctx, st_shape_size(l->out_shape), n, &r->acts[k])) ||
        alloc_floats(ctx, l->cache_per_example, n, &r->caches[k]))
      return ST_ERR_NOMEM;
    size_t w = l->vt->workspace_floats ? l->vt->workspace_floats(l, n) : 0;
    if (w > ws) ws = w;
  }
  size_t *gf = calloc((size_t)r->n_gslots + 1, sizeof *gf);
  if (!gf) return ST_ERR_NOMEM;
  st__net_grad_slot_floats(m, gf); /* each slot sized for what it holds */
  for (int i = 0; i < r->n_gslots; i++)
    if (alloc_floats(ctx, gf[i], n, &r->gslots[i])) {
      free(gf);
      return ST_ERR_NOMEM;
    }
  free(gf);
  for (int j = 0; m->n_inputs > 1 && j < m->n_inputs; j++)
    if (alloc_floats(ctx, st_shape_size(m->inputs[j]), n, &r->inbuf[j])) return ST_ERR_NOMEM;
  if (st__net_shares_layers(m) &&
      alloc_floats(ctx, st__net_max_layer_params(m, 0, m->nnodes), 1, &r->gscratch))
    return ST_ERR_NOMEM;
  if (alloc_floats(ctx, ws, 1, &r->workspace) ||
      alloc_floats(ctx, st__net_loss_positions(m), n, &r->loss_rows) ||
      st__replica_outputs_alloc(m, r, n))
    return ST_ERR_NOMEM;
  if (!st__be_is_host(r->be) && alloc_staging(m, r, n) != ST_OK) return ST_ERR_NOMEM;
  r->max_batch = n;
  return ST_OK;
}

st_status st__replica_reserve(const st_net *m, st_replica *r, int n) {
  st__replica_infer_leave(r); /* the training buffers (replica_infer.c) */
  if (n <= r->max_batch) return ST_OK;
  free_buffers(r);
  st_status s = alloc_buffers(m, r, n);
  if (s != ST_OK) {
    free_buffers(r);
    r->max_batch = 0;
  }
  return s;
}

st_status st__replica_create(const st_net *m, const st_backend *be, int index,
                             int max_batch, float *params, float *state,
                             st_replica **out) {
  *out = NULL;
  st_replica *r = calloc(1, sizeof *r);
  if (!r) return st_error(ST_ERR_NOMEM, "replica: out of memory");
  r->index = index;
  r->nnodes = m->nnodes;
  r->be = be;
  /* a device backend: the strategy's device for this replica (the cpu
   * backend reads the index as the replica's) */
  int device = st__be_is_host(be) || index >= ST_NET_MAX_REPLICAS ? index : m->replica_device[index];
  st_status s = st_backend_ctx_create(be, device, 0, &r->ctx);
  if (s != ST_OK) {
    free(r);
    return s;
  }
  r->n_gslots = st__net_grad_slots(m, 0, m->nnodes);
  r->acts = calloc((size_t)m->nnodes + 1, sizeof *r->acts);
  r->caches = calloc((size_t)m->nnodes + 1, sizeof *r->caches);
  r->gslots = calloc((size_t)r->n_gslots + 1, sizeof *r->gslots);
  r->tslot_of = malloc(((size_t)m->nnodes + 1) * sizeof *r->tslot_of);
  r->remat_of = calloc((size_t)m->nnodes + 1, sizeof *r->remat_of);
  if (!r->acts || !r->caches || !r->gslots || !r->tslot_of || !r->remat_of) goto fail;
  for (int k = 0; k < m->nnodes; k++) r->tslot_of[k] = -1;
  r->owns_vars = params == NULL;
  if (r->owns_vars) {
    if (alloc_floats(r->ctx, m->n_params, 1, &r->params) ||
        alloc_floats(r->ctx, m->n_state, 1, &r->state))
      goto fail;
  } else {
    r->params = params;
    r->state = state;
  }
  if (alloc_floats(r->ctx, m->n_params, 1, &r->grads)) goto fail;
  if (st__replica_reserve(m, r, max_batch) != ST_OK) goto fail;
  *out = r;
  return ST_OK;
fail:
  st__replica_destroy(r);
  return st_error(ST_ERR_NOMEM, "replica %d: out of memory for batch %d", index, max_batch);
}

void st__replica_destroy(st_replica *r) {
  if (!r) return;
  const st_backend *be = r->be;
  st__replica_infer_free(r);
  free_buffers(r);
  if (r->owns_vars) {
    if (!r->params_borrowed) be->free(r->ctx, r->params);
    be->free(r->ctx, r->state);
  }
  be->free(r->ctx, r->grads);
  free(r->acts);
  free(r->caches);
  free(r->gslots);
  free(r->tslot_of);
  free(r->remat_of);
  st_backend_ctx_destroy(r->ctx);
  free(r);
}

/* Split x [n, input] into one buffer per input (several inputs): on a
 * device backend through the host staging buffer. */
static void split_inputs(const st_net *m, st_replica *r, const float *x, int n) {
  bool host = st__be_is_host(r->be);
  size_t row = st_shape_size(m->input_shape), at = 0;
  for (int j = 0; j < m->n_inputs; j++) {
    size_t w = st_shape_size(m->inputs[j]);
    float *dst = host ? r->inbuf[j] : r->hsplit;
    for (int i = 0; i < n; i++)
      memcpy(dst + (size_t)i * w, x + (size_t)i * row + at, w * sizeof(float));
    if (!host) st__be_to_device(r->ctx, r->inbuf[j], r->hsplit, (size_t)n * w * sizeof(float));
    at += w;
  }
}

/* The executor over every node with this replica's buffers; the model's
 * inputs from x [n, input] (host memory; split into one buffer per input
 * when several, and copied to the device on a device backend, when `load`;
 * backward reads the buffers forward loaded). */
static st_exec replica_exec(const st_net *m, st_replica *r, const float *x, int n,
                            bool load) {
  st_exec e;
  memset(&e, 0, sizeof e);
  e.be = r->be;
  e.ctx = r->ctx;
  e.lo = 0, e.hi = m->nnodes;
  e.acts = r->acts, e.caches = r->caches, e.workspace = r->workspace;
  e.remat_of = r->remat_of, e.remat = r->remat;
  e.gslots = r->gslots, e.gscratch = r->gscratch;
  e.params = r->params, e.state = r->state, e.grads = r->grads;
  e.stream_key = (uint64_t)r->index;
  e.all_reduce_sum = r->all_reduce_sum;
  e.all_reduce_ctx = r->all_reduce_ctx;
  st__exec_seed_outputs(m, &e);
  bool host = st__be_is_host(r->be);
  e.n_ext = m->n_inputs;
  for (int j = 0; j < m->n_inputs; j++) {
    e.ext_id[j] = st__net_input_tensor(j);
    e.ext[j] = m->n_inputs > 1 ? r->inbuf[j] : host ? x : r->xdev;
  }
  if (load && m->n_inputs > 1) split_inputs(m, r, x, n);
  else if (load && !host && x)
    st__be_to_device(r->ctx, r->xdev, x, (size_t)n * st_shape_size(m->input_shape) * sizeof(float));
  return e;
}

/* y [n, label width] where the loss kernel reads it (the device copy on a
 * device backend). */
static const float *labels_on_device(const st_net *m, st_replica *r, const float *y, int n) {
  if (st__be_is_host(r->be) || !y) return y;
  st__be_to_device(r->ctx, r->ydev, y, (size_t)n * st__net_label_size(m) * sizeof(float));
  return r->ydev;
}

/* The per-example losses [n] in host memory. */
static const float *losses_on_host(st_replica *r, int n) {
  if (st__be_is_host(r->be)) return r->loss_rows;
  st__be_to_host(r->ctx, r->hloss, r->loss_rows, (size_t)n * sizeof(float));
  return r->hloss;
}

const float *st__replica_output_host(const st_net *m, st_replica *r, const float *out, int n) {
  if (st__be_is_host(r->be) || !out) return out;
  st__be_to_host(r->ctx, r->hout, out, (size_t)n * st__net_output_size(m) * sizeof(float));
  return r->hout;
}

const float *st__replica_keep_output(const st_net *m, st_replica *r, const float *out, int n) {
  if (st__be_is_host(r->be) || !r->be->copy || !out || !r->outkeep || m->n_outputs > 1)
    return NULL;
  r->be->copy(r->ctx, r->outkeep, out, (size_t)n * st__net_output_size(m) * sizeof(float));
  return r->outkeep;
}

const float *st__replica_forward(const st_net *m, st_replica *r,
                                 const float *x, int n, bool training,
                                 int64_t step) {
  if (training) st__replica_infer_leave(r);
  ST_ASSERT(n <= r->max_batch);
  if (m->nnodes == 0) return x;
  st_exec e = replica_exec(m, r, x, n, true);
  const float *out = st__exec_forward(m, &e, n, training, step);
  return m->n_outputs > 1 ? st__replica_outputs_gather(m, r, n) : out;
}

double st__replica_loss(const st_net *m, st_replica *r, const float *y, int n) {
  if (n == 0) return 0.0;
  if (m->n_outputs > 1) return st__replica_outputs_loss(m, r, y, n, 1.0f, false);
  const float *out = m->nnodes ? r->acts[m->output] : NULL;
  st__net_loss(m, r->ctx, n, out, labels_on_device(m, r, y, n), 1.0f, r->loss_rows, NULL);
  const float *rows = losses_on_host(r, n);
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += rows[i];
  return sum;
}

void st__replica_backward_dy(const st_net *m, st_replica *r, const float *x, const float *dy,
                             int n, int64_t step, float *dx) {
  bool must_run = r->all_reduce_sum && st__net_uses_collectives(m);
  if ((n == 0 && !must_run) || m->nnodes == 0) {
    r->be->fill(r->ctx, m->n_params, 0.0f, r->grads);
    return;
  }
  if (n == 0) r->be->fill(r->ctx, m->n_params, 0.0f, r->grads);
  size_t bytes = (size_t)n * st__net_output_size(m) * sizeof(float);
  if (m->n_outputs > 1) st__replica_outputs_scatter_dy(m, r, dy, n);
  else st__be_to_device(r->ctx, r->gslots[0], dy, bytes);
  st_exec e = replica_exec(m, r, x, n, false);
  e.ext_dx[0] = dx;
  st__exec_backward(m, &e, NULL, n, step, NULL, NULL);
}

double st__replica_loss_backward(const st_net *m, st_replica *r,
                                 const float *x, const float *y, int n,
                                 int64_t global_batch, int64_t step,
                                 st_grads_ready_fn ready, void *ready_ctx) {
  const st_backend *be = r->be;
  bool must_run = r->all_reduce_sum && st__net_uses_collectives(m);
  if ((n == 0 && !must_run) || m->nnodes == 0) {
    be->fill(r->ctx, m->n_params, 0.0f, r->grads);
    for (int i = m->nlayers - 1; i >= 0; i--)
      if (ready) ready(ready_ctx, i);
    return 0.0;
  }
  int cols = (int)st__net_output_size(m);
  const float *out = r->acts[m->output];
  float *dy = r->gslots[0];
  if (n == 0) be->fill(r->ctx, m->n_params, 0.0f, r->grads); /* runs only for the collectives */
  if (m->n_outputs > 1) {
    double sum = st__replica_outputs_loss(m, r, y, n, 1.0f / (float)global_batch, true);
    st_exec e = replica_exec(m, r, x, n, false);
    st__exec_backward(m, &e, NULL, n, step, ready, ready_ctx);
    return sum;
  }
  st__net_loss(m, r->ctx, n, out, labels_on_device(m, r, y, n), 1.0f / (float)global_batch,
               r->loss_rows, dy);
  st__net_apply_example_weights(m, r, y, n, cols, NULL, dy);
  st_exec e = replica_exec(m, r, x, n, false);
  st__exec_backward(m, &e, NULL, n, step, ready, ready_ctx);
  float *rows = (float *)losses_on_host(r, n); /* the replica's own buffer */
  st__net_apply_example_weights(m, r, y, n, cols, rows, NULL);
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += rows[i];
  return sum;
}
