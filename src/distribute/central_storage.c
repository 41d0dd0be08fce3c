/* CentralStorageStrategy: the variables and optimizer slots exist once (the
 * model's, in host memory); every replica reads them, computes the gradients
 * of its slice of the global batch, the gradients are summed into one buffer
 * (in replica order) and the optimizer runs once per step. Replicas keep their
 * own BatchNorm moving statistics during a step; they are averaged after it.
 * The step functions (st__shared_*) also serve one_device.c, whose per-core
 * workers share the model's variables the same way. */
#include <stdlib.h>

#include "distribute/devices.h"
#include "distribute/replica_group.h"
#include "distribute/strategy.h"

/* devices or replicas, cross_device_ops. */
static st_status cs_check(const st_strategy_options *o, st__strategy_setup *out) {
  out->vars = &st__shared_placement;
  return st__check_replicas(o, &out->local_replicas, &out->cross_device_ops);
}

static st_status cs_attach(st_strategy *s, st_net *m) {
  st_replica_group *g = NULL;
  st_status st = st__group_create(m, s->local_replicas, false,
                                  (st_cross_device_ops)s->cross_device_ops, NULL, &g);
  if (st != ST_OK) return st;
  st__group_set_blas_threads(s->local_replicas, s->opts.threads);
  s->impl = g;
  s->group = g;
  s->net = m;
  return ST_OK;
}

void st__shared_detach(st_strategy *s) {
  st__group_destroy(s->impl);
  s->impl = NULL;
  s->group = NULL;
  s->net = NULL;
}

st_status st__shared_train_step(st_strategy *s, st_net *m, const st_batch *b,
                               const st__side_task *side, st_step_stats *out) {
  st_replica_group *g = s->impl;
  st_status st = st__group_train(g, m, b, out, side);
  if (st != ST_OK) return st;
  st__group_sync_state(g, m);
  return ST_OK;
}

st_status st__shared_eval_step(st_strategy *s, st_net *m, const st_batch *b,
                              st_step_stats *out, float *pred) {
  return st__group_eval(s->impl, m, b, out, pred);
}

/* Weights were loaded into the model: refresh the replicas' state copies. */
static void shared_publish(st_strategy *s, st_net *m) {
  st_replica_group *g = s->impl;
  for (int i = 1; i < g->n && m->n_state; i++)
    st__be_to_device(g->reps[i]->ctx, g->reps[i]->state, m->state, m->n_state * sizeof(float));
}

/* The net's own buffers: replicas keep copies of the state only. */
const st_var_placement st__shared_placement = {
    .name = "the net's buffers",
    .publish = shared_publish,
};

const st_strategy_vtable st__central_storage_vtable = {
    .name = "central_storage",
    .check = cs_check,
    .attach = cs_attach,
    .detach = st__shared_detach,
    .train_step = st__shared_train_step,
    .eval_step = st__shared_eval_step,
};
