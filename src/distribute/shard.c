/* Sharded optimizer state (ZeRO stage 1): the shard plan, the sharded update
 * and the gather/scatter of the slots for checkpoints (see shard.h). */
#include "distribute/shard.h"

#include <stdlib.h>
#include <string.h>

struct st_shard {
  st_net *m;
  st_replica_group *g;
  int L, G, first;   /* local replicas, every process's, global rank of local 0 */
  size_t n, q, tail; /* floats: all, per shard, in the shared tail */
  float *slots[ST_MAX_REPLICAS][4]; /* local replica i: [q] shard then [tail] */
};

size_t st__shard_floats(const st_shard *sh) { return sh->q + sh->tail; }

static void free_model_slots(st_net *m) {
  for (int k = 0; k < m->n_slots; k++) {
    m->be->free(m->be_ctx, m->slots[k]);
    m->slots[k] = NULL;
  }
}

void st__shard_destroy(st_shard *sh) {
  if (!sh) return;
  for (int i = 0; i < sh->L; i++)
    for (int k = 0; k < 4; k++)
      if (sh->slots[i][k]) sh->g->reps[i]->be->free(sh->g->reps[i]->ctx, sh->slots[i][k]);
  free(sh);
}

st_status st__shard_create(st_net *m, st_replica_group *g, st_shard **out) {
  *out = NULL;
  st_shard *sh = calloc(1, sizeof *sh);
  if (!sh) return st_error(ST_ERR_NOMEM, "shard_optimizer: out of memory");
  sh->m = m;
  sh->g = g;
  sh->L = g->n;
  sh->G = g->n * (g->net ? g->net->size : 1);
  sh->first = g->net ? g->net->self * g->n : 0;
  sh->n = m->n_params;
  sh->q = sh->n / (size_t)sh->G;
  sh->tail = sh->n - sh->q * (size_t)sh->G;
  size_t floats = sh->q + sh->tail;
  for (int i = 0; i < sh->L; i++)
    for (int k = 0; k < m->n_slots; k++) {
      st_backend_ctx *ctx = g->reps[i]->ctx;
      if (!(sh->slots[i][k] = ctx->be->alloc(ctx, (floats ? floats : 1) * sizeof(float)))) {
        st__shard_destroy(sh);
        return st_error(ST_ERR_NOMEM, "shard_optimizer: out of memory for replica %d's slots", i);
      }
      ctx->be->fill(ctx, floats, 0.0f, sh->slots[i][k]);
    }
  st__shard_scatter(sh);
  *out = sh;
  return ST_OK;
}

/* The optimizer on [lo, lo + len) of replica i's variables, with slot floats
 * from `at` in its shard buffers. */
static void apply(st_shard *sh, int i, size_t lo, size_t len, size_t at) {
  st_net *m = sh->m;
  st_replica *r = sh->g->reps[i];
  if (len) st__apply_range(m, r->ctx, r->params + lo, r->grads + lo, sh->slots[i], at, len);
}

st_status st__shard_step(st_shard *sh, int i) {
  st_collective *c = sh->g->coll;
  st_replica *r = sh->g->reps[i];
  size_t q = sh->q, mine = (size_t)(sh->first + i) * q, rest = (size_t)sh->G * q;
  st_status s = c->vt->reduce_scatter(c, i, r->grads, r->grads + mine, q, ST_REDUCE_SUM);
  if (s == ST_OK && sh->tail)
    s = c->vt->all_reduce(c, i, r->grads + rest, sh->tail, ST_REDUCE_SUM);
  if (s != ST_OK) return s;
  apply(sh, i, mine, q, 0);
  apply(sh, i, rest, sh->tail, q); /* every replica: the same bytes */
  return c->vt->all_gather(c, i, r->params + mine, q, r->params);
}

void st__shard_release_model_slots(st_shard *sh) {
  if (sh->m->n_slots && sh->m->slots[0]) free_model_slots(sh->m);
}

st_status st__shard_gather(st_shard *sh) {
  st_net *m = sh->m;
  st_collective *net = sh->g->net;
  bool chief = !net || net->self == 0;
  size_t bytes = (sh->n ? sh->n : 1) * sizeof(float), q = sh->q;
  st_status s = ST_OK;
  for (int k = 0; k < m->n_slots && s == ST_OK; k++) {
    if (chief && !m->slots[k] && !(m->slots[k] = m->be->alloc(m->be_ctx, bytes)))
      return st_error(ST_ERR_NOMEM, "shard_optimizer: out of memory gathering the slots");
    float *dst = chief ? m->slots[k] : malloc(bytes);
    if (!dst) return st_error(ST_ERR_NOMEM, "shard_optimizer: out of memory gathering the slots");
    for (int i = 0; i < sh->L; i++)
      memcpy(dst + (size_t)(sh->first + i) * q, sh->slots[i][k], q * sizeof(float));
    if (net && net->size > 1)
      s = net->vt->all_gather(net, net->self, dst + (size_t)sh->first * q, (size_t)sh->L * q, dst);
    memcpy(dst + (size_t)sh->G * q, sh->slots[0][k] + q, sh->tail * sizeof(float));
    if (!chief) free(dst);
  }
  return s;
}

void st__shard_scatter(st_shard *sh) {
  st_net *m = sh->m;
  if (!m->n_slots || !m->slots[0]) return;
  size_t q = sh->q;
  for (int i = 0; i < sh->L; i++)
    for (int k = 0; k < m->n_slots; k++) {
      memcpy(sh->slots[i][k], m->slots[k] + (size_t)(sh->first + i) * q, q * sizeof(float));
      memcpy(sh->slots[i][k] + q, m->slots[k] + (size_t)sh->G * q, sh->tail * sizeof(float));
    }
  free_model_slots(m);
}
