/* The per-replica executor: buffers for one device's share of a batch and the
 * forward / loss / backward passes over the model's layers. A replica is used
 * by one thread at a time; several replicas of one model run in parallel on
 * disjoint buffers (the layers themselves are read-only once built). */
#include <stdlib.h>
#include <string.h>

#include "nn/net.h"

static void free_buffers(st_replica *r, int nlayers) {
  const st_backend *be = r->be;
  if (r->acts)
    for (int i = 0; i < nlayers; i++) be->free(r->ctx, r->acts[i]);
  if (r->caches)
    for (int i = 0; i < nlayers; i++) be->free(r->ctx, r->caches[i]);
  be->free(r->ctx, r->workspace);
  be->free(r->ctx, r->dbuf[0]);
  be->free(r->ctx, r->dbuf[1]);
  be->free(r->ctx, r->loss_rows);
  r->workspace = r->dbuf[0] = r->dbuf[1] = r->loss_rows = NULL;
  if (r->acts) memset(r->acts, 0, (size_t)nlayers * sizeof *r->acts);
  if (r->caches) memset(r->caches, 0, (size_t)nlayers * sizeof *r->caches);
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

static st_status alloc_buffers(const st_net *m, st_replica *r, int n) {
  st_backend_ctx *ctx = r->ctx;
  size_t ws = 1;
  for (int i = 0; i < m->nlayers; i++) {
    const st_layer *l = m->layers[i];
    if (alloc_floats(ctx, st_shape_size(l->out_shape), n, &r->acts[i]) ||
        alloc_floats(ctx, l->cache_per_example, n, &r->caches[i]))
      return ST_ERR_NOMEM;
    size_t w = l->vt->workspace_floats ? l->vt->workspace_floats(l, n) : 0;
    if (w > ws) ws = w;
  }
  size_t mx = st__net_max_activation(m);
  if (alloc_floats(ctx, ws, 1, &r->workspace) || alloc_floats(ctx, mx, n, &r->dbuf[0]) ||
      alloc_floats(ctx, mx, n, &r->dbuf[1]) || alloc_floats(ctx, 1, n, &r->loss_rows))
    return ST_ERR_NOMEM;
  r->max_batch = n;
  return ST_OK;
}

st_status st__replica_reserve(const st_net *m, st_replica *r, int n) {
  if (n <= r->max_batch) return ST_OK;
  free_buffers(r, m->nlayers);
  st_status s = alloc_buffers(m, r, n);
  if (s != ST_OK) {
    free_buffers(r, m->nlayers);
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
  r->nlayers = m->nlayers;
  r->be = be;
  st_status s = st_backend_ctx_create(be, index, 0, &r->ctx);
  if (s != ST_OK) {
    free(r);
    return s;
  }
  r->acts = calloc((size_t)m->nlayers + 1, sizeof *r->acts);
  r->caches = calloc((size_t)m->nlayers + 1, sizeof *r->caches);
  if (!r->acts || !r->caches) goto fail;
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
  free_buffers(r, r->nlayers);
  if (r->owns_vars) {
    if (!r->params_borrowed) be->free(r->ctx, r->params);
    be->free(r->ctx, r->state);
  }
  be->free(r->ctx, r->grads);
  free(r->acts);
  free(r->caches);
  st_backend_ctx_destroy(r->ctx);
  free(r);
}

/* The arguments every layer call shares. */
static st_layer_args make_call(const st_net *m, st_replica *r, int i, int n,
                               bool training, int64_t step) {
  const st_layer *l = m->layers[i];
  st_layer_args c;
  memset(&c, 0, sizeof c);
  c.be = r->be;
  c.ctx = r->ctx;
  c.batch = n;
  c.training = training;
  c.cache = r->caches[i];
  c.workspace = r->workspace;
  c.seed = m->seed;
  /* dropout stream: distinct per (step, layer, replica) */
  c.stream = ((uint64_t)step << 24) ^ ((uint64_t)i << 12) ^ (uint64_t)r->index;
  c.global_batch = n;
  c.all_reduce_sum = r->all_reduce_sum;
  c.all_reduce_ctx = r->all_reduce_ctx;
  for (int p = 0; p < l->nparams; p++) {
    c.w[p] = st__var_ptr(l, p, r->params, r->state);
    c.dw[p] = l->params[p].trainable ? r->grads + l->params[p].offset : NULL;
  }
  return c;
}

const float *st__replica_forward(const st_net *m, st_replica *r,
                                 const float *x, int n, bool training,
                                 int64_t step) {
  ST_ASSERT(n <= r->max_batch);
  const float *in = x;
  for (int i = 0; i < m->nlayers; i++) {
    st_layer_args c = make_call(m, r, i, n, training, step);
    c.x = in;
    c.y = r->acts[i];
    m->layers[i]->vt->forward(m->layers[i], &c);
    in = r->acts[i];
  }
  return in;
}

double st__replica_loss(const st_net *m, st_replica *r, const float *y, int n) {
  if (n == 0) return 0.0;
  const float *out = m->nlayers ? r->acts[m->nlayers - 1] : NULL;
  int cols = (int)st__net_output_size(m);
  r->be->loss(r->ctx, m->loss, n, cols, out, y, 1.0f, r->loss_rows, NULL);
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += r->loss_rows[i];
  return sum;
}

/* The first layer with a trainable variable (nlayers when none): no layer
 * before it needs a gradient, so its input gradient (e.g. Dense after
 * Flatten: a [batch, 784] x [784, 256] gemm, ~30% of an mlp step) and the
 * backward passes before it are skipped. */
static int first_trainable_layer(const st_net *m) {
  for (int i = 0; i < m->nlayers; i++)
    for (int p = 0; p < m->layers[i]->nparams; p++)
      if (m->layers[i]->params[p].trainable) return i;
  return m->nlayers;
}

double st__replica_loss_backward(const st_net *m, st_replica *r,
                                 const float *x, const float *y, int n,
                                 int64_t global_batch, int64_t step,
                                 st_grads_ready_fn ready, void *ready_ctx) {
  const st_backend *be = r->be;
  bool must_run = r->all_reduce_sum && st__net_uses_collectives(m);
  if ((n == 0 && !must_run) || m->nlayers == 0) {
    be->fill(r->ctx, m->n_params, 0.0f, r->grads);
    for (int i = m->nlayers - 1; i >= 0; i--)
      if (ready) ready(ready_ctx, i);
    return 0.0;
  }
  int cols = (int)st__net_output_size(m);
  const float *out = r->acts[m->nlayers - 1];
  if (n == 0) be->fill(r->ctx, m->n_params, 0.0f, r->grads); /* runs only for the collectives */
  be->loss(r->ctx, m->loss, n, cols, out, y, 1.0f / (float)global_batch,
           r->loss_rows, r->dbuf[0]);
  st__net_apply_example_weights(m, r, y, n, cols, r->loss_rows, r->dbuf[0]);
  int cur = 0, first = first_trainable_layer(m);
  for (int i = m->nlayers - 1; i >= 0; i--) {
    if (i >= first) {
      st_layer_args c = make_call(m, r, i, n, true, step);
      c.x = i > 0 ? r->acts[i - 1] : x;
      c.y = r->acts[i];
      c.dy = r->dbuf[cur];
      c.dy_writable = true;
      c.dx = i > first ? r->dbuf[1 - cur] : NULL;
      m->layers[i]->vt->backward(m->layers[i], &c);
    }
    if (ready) ready(ready_ctx, i);
    cur = 1 - cur;
  }
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += r->loss_rows[i];
  return sum;
}
