/* OneDeviceStrategy (the default): one replica on one device, using the
 * model's variables directly. On a multi-core CPU the device's cores are used
 * by splitting each batch into per-thread slices (one BLAS thread each) and
 * summing their gradients in a fixed order, which keeps every core busy in the
 * elementwise kernels too; the update equals the whole-batch gradient up to
 * float rounding and is bit-identical from run to run for a given thread
 * count. Models with non-trainable state (BatchNormalization) run whole
 * batches on one replica instead, so batch statistics are those of the whole
 * batch; its backend context gets the threads (the cpu backend splits the
 * direct convolution, batch normalization and elementwise kernels over
 * them, and large gemms by rows on a single-threaded BLAS: the same bytes
 * for any count). */
#include <stdlib.h>
#include <string.h>

#include "distribute/devices.h"
#include "distribute/gpu_devices.h"
#include "distribute/replica_group.h"
#include "distribute/strategy.h"

/* o->device: cpu, cpu:N or a GPU. */
static st_status od_check(const st_strategy_options *o, st__strategy_setup *out) {
  out->vars = &st__shared_placement;
  if (!o->device) return ST_OK;
  bool gpu = false;
  return st__check_device(o->device, (int)strlen(o->device), o->logical_gpus, &gpu);
}

static int worker_count(const st_strategy *s, const st_net *m) {
  int n = s->opts.threads > 0 ? s->opts.threads : st__cpu_count();
  if (m->n_state > 0 || s->on_gpus) return 1; /* a GPU runs whole batches */
  return n > ST_MAX_REPLICAS ? ST_MAX_REPLICAS : n;
}

static st_status od_attach(st_strategy *s, st_net *m) {
  int n = worker_count(s, m);
  st_replica_group *g = NULL;
  st_status st = st__group_create(m, n, false, ST_CROSS_ALL_REDUCE, NULL, &g);
  if (st != ST_OK) return st;
  st__group_set_blas_threads(n, s->opts.threads);
  /* one replica (whole batches): its context's kernels get the threads
   * (the cpu backend's pool; a no-op elsewhere) */
  int kt = s->opts.threads > 0 ? s->opts.threads : st__cpu_count();
  if (n == 1 && !s->on_gpus && kt > 1 && (st = st__be_set_threads(g->reps[0]->ctx, kt)) == ST_OK &&
      st__be_is_host(m->be))
    st_blas_set_threads(1); /* the cpu backend splits large gemms over its own threads */
  if (st != ST_OK) {
    st__group_destroy(g);
    return st;
  }
  s->impl = g;
  s->group = g;
  s->net = m;
  return ST_OK;
}

const st_strategy_vtable st__one_device_vtable = {
    .name = "one_device",
    .check = od_check,
    .attach = od_attach,
    .detach = st__shared_detach,
    .train_step = st__shared_train_step,
    .eval_step = st__shared_eval_step,
};
