/* MirroredStrategy: one copy of every variable (and optimizer slot) per
 * replica, replica 0's being the model's own. Variables are initialised on
 * replica 0 and broadcast. Each step, every replica runs forward and backward
 * on its slice of the global batch (loss scaled by 1/global batch), the
 * gradients are all-reduced (SUM) through the collective table, and every
 * replica applies the same update to its own copy, so the copies stay
 * bit-identical. BatchNorm moving statistics are averaged after each step. */
#include <stdlib.h>
#include <string.h>

#include "base/error_slot.h"
#include "distribute/collective/collective.h"
#include "distribute/devices.h"
#include "distribute/mirrored.h"
#include "distribute/reducer.h"
#include "distribute/replica_group.h"
#include "distribute/shard.h"

typedef struct mirrored {
  st_replica_group *g;
  st_collective *coll; /* = g->coll */
  st_reducer *red;      /* gradient buckets and their all-reduce */
  st_shard *shard;      /* shard_optimizer: the sharded slots (then red, slots NULL) */
  float *slots[ST_MAX_REPLICAS][4]; /* replica i's optimizer slots; [0] = the model's */
  /* the current step's arguments, read by the replica tasks */
  const st_batch *b;
  int global;          /* examples in the global batch (loss scale) */
  st_step_stats stats[ST_MAX_REPLICAS];
  st_error_slot status[ST_MAX_REPLICAS]; /* replica i's failure, message included */
} mirrored;

/* Replica i's slots were made with its context: freed with it. */
static void free_impl(mirrored *mi) {
  if (!mi) return;
  for (int i = 1; mi->g && i < mi->g->n; i++)
    for (int k = 0; k < 4; k++) mi->g->reps[i]->be->free(mi->g->reps[i]->ctx, mi->slots[i][k]);
  st__reducer_destroy(mi->red);
  st__shard_destroy(mi->shard);
  st__group_destroy(mi->g);
  free(mi);
}

/* Task: replica i takes the model's (replica 0's) params, state and slots. */
static void broadcast_task(void *arg, int i) {
  st_strategy *s = arg;
  mirrored *mi = s->impl;
  st_net *m = s->net;
  st_replica *r = mi->g->reps[i];
  mi->status[i].status = ST_OK;
  st_status st = mi->coll->vt->broadcast(mi->coll, i, r->params, m->n_params, 0);
  if (st == ST_OK && m->n_state) st = mi->coll->vt->broadcast(mi->coll, i, r->state, m->n_state, 0);
  for (int k = 0; k < m->n_slots && st == ST_OK && !mi->shard; k++) /* restored slots */
    st = mi->coll->vt->broadcast(mi->coll, i, mi->slots[i][k], m->n_params, 0);
  st__error_keep(&mi->status[i], st);
}

static st_status first_error(const mirrored *mi) {
  for (int i = 0; i < mi->g->n; i++)
    if (mi->status[i].status != ST_OK) return st__error_raise(&mi->status[i]);
  return ST_OK;
}

static st_status alloc_slots(st_net *m, mirrored *mi) {
  size_t bytes = (m->n_params ? m->n_params : 1) * sizeof(float);
  for (int k = 0; k < m->n_slots; k++) mi->slots[0][k] = m->slots[k];
  for (int i = 1; i < mi->g->n; i++)
    for (int k = 0; k < m->n_slots; k++) {
      st_backend_ctx *ctx = mi->g->reps[i]->ctx;
      if (!(mi->slots[i][k] = ctx->be->alloc(ctx, bytes)))
        return st_error(ST_ERR_NOMEM, "mirrored: out of memory for replica %d's slots", i);
      ctx->be->fill(ctx, m->n_params, 0.0f, mi->slots[i][k]);
    }
  return ST_OK;
}

static float **mr_slots(st_strategy *s, int rank) {
  mirrored *mi = s->impl;
  return mi->slots[rank];
}

static st_status mr_gather_slots(st_strategy *s, st_net *m) {
  (void)m;
  return st__shard_gather(((mirrored *)s->impl)->shard);
}

st_status st__mirrored_attach(st_strategy *s, st_net *m, st_collective *net_group,
                              st_collective *net_reducer) {
  mirrored *mi = calloc(1, sizeof *mi);
  if (!mi) return st_error(ST_ERR_NOMEM, "mirrored: out of memory");
  st_status st = st__group_create(m, s->local_replicas, true,
                                  (st_cross_device_ops)s->cross_device_ops, net_group, &mi->g);
  if (st == ST_OK) mi->coll = mi->g->coll;
  if (st == ST_OK && s->opts.shard_optimizer) st = st__shard_create(m, mi->g, &mi->shard);
  if (st == ST_OK && !mi->shard) st = alloc_slots(m, mi);
  if (st == ST_OK && !mi->shard) {
    float *grads[ST_MAX_REPLICAS];
    st_backend_ctx *ctxs[ST_MAX_REPLICAS];
    for (int i = 0; i < mi->g->n; i++) grads[i] = mi->g->reps[i]->grads, ctxs[i] = mi->g->reps[i]->ctx;
    bool device = !st__be_is_host(m->be); /* GPUs: reduced after backward, staged */
    st = st__reducer_create(m, mi->g->n, grads, s->opts.bytes_per_pack,
                            !s->opts.no_overlap && !device,
                            (st_cross_device_ops)s->cross_device_ops, net_reducer,
                            device ? ctxs : NULL, &mi->red);
  }
  s->impl = mi;
  s->net = m;
  if (st == ST_OK) {
    st__group_run(mi->g, broadcast_task, s);
    st = first_error(mi);
  }
  if (st != ST_OK) {
    free_impl(mi);
    s->impl = NULL;
    s->net = NULL;
    return st;
  }
  st__group_set_blas_threads(s->local_replicas, s->opts.threads);
  s->group = mi->g;
  s->mirrored_vars = true;
  return ST_OK;
}

static st_status mr_attach(st_strategy *s, st_net *m) {
  return st__mirrored_attach(s, m, NULL, NULL);
}

void st__mirrored_detach(st_strategy *s) {
  free_impl(s->impl);
  s->impl = NULL;
  s->group = NULL;
  s->net = NULL;
}

/* Task: forward + backward on replica i's slice, all-reduce, apply. */
static void step_task(void *arg, int i) {
  st_strategy *s = arg;
  mirrored *mi = s->impl;
  st_net *m = s->net;
  st_replica *r = mi->g->reps[i];
  st_batch slice = st__batch_slice(m, mi->b, mi->g->n, i, NULL);
  st__replica_step(m, r, &slice, mi->global, mi->g->must_run,
                   mi->shard ? NULL : st__reducer_layer_done,
                   mi->shard ? NULL : st__reducer_ctx(mi->red, i), &mi->stats[i]);
  mi->status[i].status = ST_OK;
  if (mi->shard) {
    st__error_keep(&mi->status[i], st__shard_step(mi->shard, i));
    return;
  }
  if (st__error_keep(&mi->status[i], st__reducer_finish(mi->red, i)) == ST_OK) {
    st__clip_grads(m, r->ctx, r->grads); /* the all-reduced sum: the same on every replica */
    st__apply_range(m, r->ctx, r->params, r->grads, mi->slots[i], 0, m->n_params);
  }
  st__error_keep(&mi->status[i], st__be_status(r->ctx)); /* a device's error; waits for it */
}

st_status st__mirrored_train_step(st_strategy *s, st_net *m, const st_batch *b, int global,
                                  st_step_stats *out) {
  mirrored *mi = s->impl;
  for (int i = 0; i < mi->g->n; i++) {
    int start, count;
    st__split(b->size, mi->g->n, i, &start, &count);
    st_status st = st__replica_reserve(m, mi->g->reps[i], count);
    if (st != ST_OK) return st;
  }
  if (mi->shard) st__shard_release_model_slots(mi->shard);
  mi->b = b;
  mi->global = global;
  memset(mi->stats, 0, sizeof mi->stats);
  st__group_run(mi->g, step_task, s);
  st_status st = first_error(mi);
  if (st != ST_OK) return st;
  for (int i = 0; i < mi->g->n; i++) st__step_stats_add(out, &mi->stats[i]); /* replica order */
  st__group_sync_state(mi->g, m);
  return ST_OK;
}

static st_status mr_train_step(st_strategy *s, st_net *m, const st_batch *b,
                               const st__side_task *side, st_step_stats *out) {
  (void)side; /* the update runs in the replica tasks: nothing to overlap */
  return st__mirrored_train_step(s, m, b, b->size, out);
}

static st_status mr_eval_step(st_strategy *s, st_net *m, const st_batch *b,
                              st_step_stats *out, float *pred) {
  mirrored *mi = s->impl;
  return st__group_eval(mi->g, m, b, out, pred);
}

/* Weights were loaded into the model (replica 0's are the model's: nothing
 * to gather before a read): broadcast them, every process's replicas
 * taking process 0's. A failure resurfaces in the next step's first
 * collective. */
static void mr_publish(st_strategy *s, st_net *m) {
  (void)m;
  mirrored *mi = s->impl;
  st__group_run(mi->g, broadcast_task, s);
  if (mi->shard) st__shard_scatter(mi->shard); /* restored slots, if any */
  (void)first_error(mi);
}

/* Replica copies: each replica's slots are its own. */
const st_var_placement st__mirrored_placement = {
    .name = "replica copies",
    .publish = mr_publish,
    .replica_slots = mr_slots,
};

/* Replica copies with the slots sharded (--shard-optimizer): a checkpoint
 * gathers them into the chief's net first. */
const st_var_placement st__sharded_placement = {
    .name = "replica copies, sharded slots",
    .gather_slots = mr_gather_slots,
    .publish = mr_publish,
};

st_status st__mirrored_check(const st_strategy_options *o, st__strategy_setup *out) {
  out->vars = o->shard_optimizer ? &st__sharded_placement : &st__mirrored_placement;
  return st__check_replicas(o, &out->local_replicas, &out->cross_device_ops);
}

const st_strategy_vtable st__mirrored_vtable = {
    .name = "mirrored",
    .check = st__mirrored_check,
    .shards_optimizer = true,
    .attach = mr_attach,
    .detach = st__mirrored_detach,
    .train_step = mr_train_step,
    .eval_step = mr_eval_step,
};
