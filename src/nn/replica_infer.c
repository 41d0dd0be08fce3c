/* Forward-only buffers of a replica (evaluate / predict): when a batch is
 * larger than the training buffers hold, the replica does not grow every
 * activation, cache and gradient buffer to it; it switches to one block
 * where each activation lives from its node until its last reader
 * (st__net_infer_offsets), one cache shared by all nodes (in inference a
 * layer's cache is written and read within its own forward), and its own
 * workspace, input and loss buffers for that batch. The training pointers
 * are kept aside and put back by st__replica_infer_leave (st__replica_reserve
 * calls it). The replica's thread. */
#include <stdlib.h>
#include <string.h>

#include "nn/net.h"

struct st__infer {
  int batch;                  /* examples the buffers hold */
  bool active;                /* the replica's pointers are these */
  float **acts, **caches;     /* [nnodes]: into block / cache */
  float *block;               /* [batch * plan total] */
  float *cache;               /* [batch * max cache_per_example] */
  float *workspace, *loss_rows, *inbuf[ST_NET_MAX_IO];
  float *outcat, *ylab, *out_rows;
  /* the training buffers while active */
  float **t_acts, **t_caches, *t_workspace, *t_loss_rows, *t_inbuf[ST_NET_MAX_IO];
  float *t_outcat, *t_ylab, *t_out_rows;
  int t_max_batch;
};

static void swap_in(st_replica *r, struct st__infer *f) {
  f->t_acts = r->acts, f->t_caches = r->caches, f->t_workspace = r->workspace;
  f->t_loss_rows = r->loss_rows, f->t_max_batch = r->max_batch;
  f->t_outcat = r->outcat, f->t_ylab = r->ylab, f->t_out_rows = r->out_rows;
  memcpy(f->t_inbuf, r->inbuf, sizeof f->t_inbuf);
  r->acts = f->acts, r->caches = f->caches, r->workspace = f->workspace;
  r->loss_rows = f->loss_rows, r->max_batch = f->batch;
  r->outcat = f->outcat, r->ylab = f->ylab, r->out_rows = f->out_rows;
  memcpy(r->inbuf, f->inbuf, sizeof r->inbuf);
  f->active = true;
}

void st__replica_infer_leave(st_replica *r) {
  struct st__infer *f = r->infer;
  if (!f || !f->active) return;
  r->acts = f->t_acts, r->caches = f->t_caches, r->workspace = f->t_workspace;
  r->loss_rows = f->t_loss_rows, r->max_batch = f->t_max_batch;
  r->outcat = f->t_outcat, r->ylab = f->t_ylab, r->out_rows = f->t_out_rows;
  memcpy(r->inbuf, f->t_inbuf, sizeof r->inbuf);
  f->active = false;
}

void st__replica_infer_free(st_replica *r) {
  struct st__infer *f = r->infer;
  if (!f) return;
  st__replica_infer_leave(r);
  st_backend_ctx *c = r->ctx;
  float *bufs[] = {f->block, f->cache, f->workspace, f->loss_rows, f->outcat, f->ylab,
                   f->out_rows};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) r->be->free(c, bufs[i]);
  for (int j = 0; j < ST_NET_MAX_IO; j++) r->be->free(c, f->inbuf[j]);
  free(f->acts), free(f->caches), free(f);
  r->infer = NULL;
}

/* floats * n of backend memory (at least one float), or NULL. */
static float *alloc_n(st_replica *r, size_t floats, int n) {
  size_t count = floats * (size_t)(n > 0 ? n : 1);
  return r->be->alloc(r->ctx, (count ? count : 1) * sizeof(float));
}

/* The block's plan and the buffers sized by the batch. */
static st_status fill(const st_net *m, st_replica *r, struct st__infer *f, int n) {
  size_t *off = calloc((size_t)m->nnodes + 1, sizeof *off), total = 0, cache = 0, ws = 1;
  if (!off || st__net_infer_offsets(m, off, &total) != ST_OK) {
    free(off);
    return ST_ERR_NOMEM;
  }
  for (int k = 0; k < m->nnodes; k++) {
    const st_layer *l = m->layers[m->nodes[k].layer];
    if (l->cache_per_example > cache) cache = l->cache_per_example;
    size_t w = l->vt->workspace_floats ? l->vt->workspace_floats(l, n) : 0;
    if (w > ws) ws = w;
  }
  f->block = alloc_n(r, total, n), f->cache = alloc_n(r, cache, n);
  f->workspace = alloc_n(r, ws, 1), f->loss_rows = alloc_n(r, st__net_loss_positions(m), n);
  bool ok = f->block && f->cache && f->workspace && f->loss_rows;
  for (int k = 0; ok && k < m->nnodes; k++) {
    f->acts[k] = f->block + off[k] * (size_t)n;
    f->caches[k] = f->cache;
  }
  free(off);
  for (int j = 0; ok && m->n_inputs > 1 && j < m->n_inputs; j++)
    ok = (f->inbuf[j] = alloc_n(r, st_shape_size(m->inputs[j]), n)) != NULL;
  return ok ? ST_OK : ST_ERR_NOMEM;
}

st_status st__replica_reserve_infer(const st_net *m, st_replica *r, int n) {
  if (r->infer && r->infer->active && n <= r->infer->batch) return ST_OK;
  st__replica_infer_leave(r);
  if (n <= r->max_batch || m->nnodes == 0) return ST_OK; /* the training buffers hold it */
  if (!st__be_is_host(r->be)) /* a device's staging buffers grow with the training ones */
    return st__replica_reserve(m, r, n);
  st__replica_infer_free(r);
  struct st__infer *f = calloc(1, sizeof *f);
  if (!f) return st_error(ST_ERR_NOMEM, "replica %d: out of memory", r->index);
  r->infer = f;
  f->batch = n;
  f->acts = calloc((size_t)m->nnodes, sizeof *f->acts);
  f->caches = calloc((size_t)m->nnodes, sizeof *f->caches);
  st_status s = f->acts && f->caches ? fill(m, r, f, n) : ST_ERR_NOMEM;
  if (s == ST_OK && m->n_outputs > 1) { /* net_outputs.c's buffers, for n */
    float *o[3] = {r->outcat, r->ylab, r->out_rows};
    s = st__replica_outputs_alloc(m, r, n);
    f->outcat = r->outcat, f->ylab = r->ylab, f->out_rows = r->out_rows;
    r->outcat = o[0], r->ylab = o[1], r->out_rows = o[2];
  }
  if (s != ST_OK) {
    st__replica_infer_free(r);
    return st_error(ST_ERR_NOMEM, "replica %d: out of memory for a forward pass of %d examples",
                    r->index, n);
  }
  swap_in(r, f);
  return ST_OK;
}
