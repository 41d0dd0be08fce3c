/* How much memory training a compiled model takes, estimated before the
 * first step allocates it, and the check that refuses a batch this process
 * cannot hold (Linux overcommits: malloc succeeds and the OOM killer ends
 * the run later, when the pages are touched). The estimate is a count of
 * the buffers the code allocates, not a measurement:
 *
 *   weights  = n_params x (1 + optimizer slots)  the net's variables (compile)
 *            + n_state                           non-trainable (BatchNorm)
 *            + R x n_params                      each replica's gradients
 *            + (R - 1) x (n_params x (1 + slots) + n_state)
 *                                                mirrored: the replicas' copies
 *   activations = R x per-replica buffers for ceil(B_local / R) examples:
 *              activations (own buffers + shared slots, memplan_train.c),
 *              layer caches, gradient slots, the largest workspace, loss
 *              rows (st__replica_plan_floats, mirroring replica.c)
 *   input    = B_local x (features + labels)  the batch being trained, as
 *              a pipeline that gathers or converts it holds it (in-memory
 *              slices handed out as views take none: an over-estimate there)
 *
 * B_local is the global batch B over the workers (multi-worker: each trains
 * its share). The pipeline counts its stages instead (pipeline_stage.c: per
 * stage its variables, slots and gradients, and per micro-batch in flight
 * its layers' activations and caches; across processes this process's one
 * stage). Left out: the dataset (already in memory when the check runs, so
 * in MemAvailable), BLAS and thread buffers, the allocator's slack, the
 * optimizer slots a sharded optimizer does not keep (counted whole: an
 * over-estimate). The check compares what is still to allocate, the
 * estimate less its weights (compile allocated and mostly touched them:
 * already out of MemAvailable and the limits), with what is available.
 * Counted but often not resident: buffers allocated and
 * never touched (the gradient slot sized for a model input's gradient that
 * nothing asks for, a workspace only partly used), so small nets measure
 * below the estimate (0.6-0.8 of it; large activations close to 1). tests/test_memory_estimate.c holds it to the measured
 * peak RSS of real runs. Caller's thread. */
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "base/sysinfo.h"
#include "distribute/pipeline.h"
#include "distribute/replica_group.h"
#include "model/model.h"

/* Replicas over the net's variables (one_device, mirrored, central storage,
 * multi-worker): what the group allocates. */
static st_status group_plan(const st_model *m, int64_t local, st_memory_estimate *out) {
  const st_net *n = &m->net;
  const st_strategy *s = m->strategy;
  int R = s->group ? s->group->n : 1;
  int64_t per = (local + R - 1) / R;
  if (per > 0x7fffffff) per = 0x7fffffff;
  size_t fixed, batch;
  st_status st = st__replica_plan_floats(n, (int)(per > 0 ? per : 1), &fixed, &batch);
  if (st != ST_OK) return st;
  uint64_t vars = (uint64_t)n->n_params * (1u + (unsigned)n->n_slots) + n->n_state;
  out->replicas = R;
  out->replica_batch = per;
  out->weight_bytes = 4 * (vars + (uint64_t)R * fixed);
  if (s->mirrored_vars) out->weight_bytes += 4 * (uint64_t)(R - 1) * vars;
  out->activation_bytes = 4 * (uint64_t)R * batch;
  return ST_OK;
}

st_status st_memory_estimate_training(const st_model *m, int64_t batch, st_memory_estimate *out) {
  ST_REQUIRE(m);
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  st_status s = st__model_check(m, __func__, true);
  if (s != ST_OK) return s;
  if (batch < 1)
    return st_error(ST_ERR_INVALID, "%s: batch %lld (must be >= 1)", __func__, (long long)batch);
  const st_net *n = &m->net;
  const st_strategy *st = m->strategy;
  int workers = st_strategy_worker_count(st);
  bool pipe = st_strategy_pipeline_stages(st) > 0;
  int64_t local = pipe ? batch : (batch + workers - 1) / workers;
  out->batch = batch;
  out->device = !st__be_is_host(n->be);
  out->optimizer_slots = n->n_slots;
  if (pipe) {
    int cap = 1;
    st__pipeline_plan_bytes(st, n, batch, &out->weight_bytes, &out->activation_bytes,
                            &out->replicas, &cap);
    out->replica_batch = cap;
  } else if ((s = group_plan(m, local, out)) != ST_OK) {
    return s;
  }
  out->input_bytes = 4 * (uint64_t)local *
                     (st_shape_size(n->input_shape) + st__net_label_size(n));
  out->total_bytes = out->weight_bytes + out->activation_bytes + out->input_bytes;
  return ST_OK;
}

st_status st_memory_available(uint64_t *bytes, const char **source) {
  ST_REQUIRE(bytes);
  const char *w = NULL;
  if (!st__memory_available(bytes, &w))
    return st_error(ST_ERR_IO, "%s: cannot read /proc/meminfo nor a memory limit", __func__);
  if (source) *source = w;
  return ST_OK;
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

st_status st_model_check_training_memory(const st_model *m, int64_t batch,
                                         st_memory_estimate *est, uint64_t *available) {
  ST_REQUIRE(m);
  st_memory_estimate e;
  st_status s = st_memory_estimate_training(m, batch, &e);
  if (est) *est = e;
  if (available) *available = 0;
  if (s != ST_OK) return s;
  uint64_t have = 0;
  const char *w = NULL;
  if (e.device || !st__memory_available(&have, &w)) return ST_OK; /* nothing to compare */
  if (available) *available = have;
  if (e.total_bytes - e.weight_bytes <= have) return ST_OK; /* the weights are allocated */
  return st_error(ST_ERR_NOMEM, "the model needs about %.1f GiB for training at batch %lld "
                  "(activations %.1f GiB, weights+gradients+optimizer slots %.1f GiB, input "
                  "batches %.1f GiB); this process has %.1f GiB available besides the weights (%s)",
                  gib(e.total_bytes), (long long)batch, gib(e.activation_bytes),
                  gib(e.weight_bytes), gib(e.input_bytes), gib(have), w);
}
