/* OneDeviceStrategy (the default): one replica on one device; the replica uses
 * the model's variables directly, the whole global batch is its slice, and the
 * optimizer applies its gradients unchanged. */
#include "distribute/strategy.h"

#include <stdlib.h>
#include <string.h>

typedef struct one_device {
  st_replica *replica;
} one_device;

static st_status od_attach(st_strategy *s, st_model *m) {
  one_device *od = calloc(1, sizeof *od);
  if (!od) return st_error(ST_ERR_NOMEM, "one_device: out of memory");
  st_status st = st__replica_create(m, m->be, 0, 1, m->params, m->state, &od->replica);
  if (st != ST_OK) {
    free(od);
    return st;
  }
  s->impl = od;
  s->model = m;
  return ST_OK;
}

static void od_detach(st_strategy *s) {
  one_device *od = s->impl;
  if (od) st__replica_destroy(od->replica);
  free(od);
  s->impl = NULL;
  s->model = NULL;
}

static st_status od_train_step(st_strategy *s, st_model *m, const st_batch *b,
                               st_step_stats *out) {
  one_device *od = s->impl;
  st_replica *r = od->replica;
  st_status st = st__replica_reserve(m, r, b->size);
  if (st != ST_OK) return st;
  const float *pred = st__replica_forward(m, r, b->x, b->size, true, m->step);
  st__step_metrics(m, pred, b->y, b->size, out);
  out->loss_sum += st__replica_loss_backward(m, r, b->x, b->y, b->size, b->size,
                                             m->step, NULL, NULL);
  out->examples += b->size;
  st_optimizer_apply(&m->compile.optimizer, m->be, m->step, m->n_params, r->params,
                     r->grads, m->slots);
  m->step++;
  return ST_OK;
}

static st_status od_eval_step(st_strategy *s, st_model *m, const st_batch *b,
                              st_step_stats *out, float *pred_out) {
  one_device *od = s->impl;
  st_replica *r = od->replica;
  st_status st = st__replica_reserve(m, r, b->size);
  if (st != ST_OK) return st;
  const float *pred = st__replica_forward(m, r, b->x, b->size, false, m->step);
  st__step_metrics(m, pred, b->y, b->size, out);
  out->loss_sum += st__replica_loss(m, r, b->y, b->size);
  out->examples += b->size;
  if (pred_out)
    m->be->to_host(pred_out, pred, (size_t)b->size * st__model_output_size(m) * sizeof(float));
  return ST_OK;
}

static void od_sync(st_strategy *s, st_model *m) { (void)s; (void)m; }

const st_strategy_vtable st__one_device_vtable = {
    .name = "one_device",
    .attach = od_attach,
    .detach = od_detach,
    .train_step = od_train_step,
    .eval_step = od_eval_step,
    .sync_to_model = od_sync,
    .sync_from_model = od_sync,
};
