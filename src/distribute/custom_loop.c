/* Custom training loops: st_strategy_run and the replica context. The replica
 * functions reuse the strategy's replica group: its replicas (buffers,
 * variables), its thread pool and its collective, so a hand-written step
 * computes exactly what fit's step computes.
 *
 * Leaving: a replica whose function returns (failed or not) aborts the
 * group's collective. A replica that made the same calls as the others has
 * passed every barrier they wait in, so the abort changes nothing for them;
 * one that failed or returned early wakes every replica waiting for it, and
 * they return ST_ERR_PEER. st_strategy_run then reports the first replica to
 * fail (in time: the cause, not the replicas woken by it) and resets the
 * collective, so the strategy can run again.
 *
 * Across workers (multi_worker_mirrored under mpirun): every worker calls
 * st_strategy_run the same number of times; its local replicas run fn and
 * the group's collective (hier.c) spans the processes, so
 * st_replica_apply_gradients sums every replica of every worker as fit's step
 * does (local replicas in order, then the workers in rank order) and
 * st_replica_all_reduce reduces over all of them. st_replica_slice takes the
 * worker's share of the global batch first, as fit. A worker that fails or
 * leaves is not seen by the local abort: its peers wait in the process
 * transport until it reports (when its model is destroyed) or the collective
 * timeout, then fail with ST_ERR_PEER naming its rank. st_strategy_reduce and
 * st_strategy_reduce_tensor gather every worker's per-replica values over the
 * control transport and add them worker-major, in replica order, so every
 * worker gets the same bits.
 *
 * One device on several threads (OneDeviceStrategy on a multi-core CPU runs
 * fit's batches as per-thread slices: one_device.c): the one replica's
 * forward, loss gradient, backward and compute_gradients run over the same
 * slices on the group's thread replicas and sum their gradients into
 * replica 0 in fit's order, so a custom loop computes fit's step: the same
 * Dropout masks (keyed by step, layer and slice), the same gradient bytes,
 * every core busy. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error_slot.h"
#include "distribute/replica_group.h"
#include "distribute/strategy.h"

struct st_replica_context {
  st_strategy *s;
  st_net *m;
  int rank, count;
  int total; /* replicas of every worker */
  bool applied;
  st_status status;
  st_replica_fn fn;
  void *arg;
  /* st_replica_forward's batch, read by st_replica_backward (n < 0: none) */
  const float *fwd_x;
  int fwd_n;
  float *cat;     /* thread slices: the forward's outputs [fwd_n, outputs] */
  size_t cat_cap; /* floats allocated at cat */
};

typedef struct run_state {
  st_replica_context ctx[ST_MAX_REPLICAS];
  atomic_int first_left;   /* id + 1 of the first replica to return; 0: none */
  atomic_int first_failed; /* id + 1 of the first replica to fail; 0: none */
  st_error_slot failure;   /* its failure (written by that replica only) */
} run_state;

static void run_task(void *arg, int i) {
  run_state *rs = arg;
  st_replica_context *c = &rs->ctx[i];
  c->status = c->fn(c, c->arg);
  if (c->count == 1) return;
  int none = 0;
  atomic_compare_exchange_strong(&rs->first_left, &none, i + 1);
  none = 0;
  if (c->status != ST_OK && atomic_compare_exchange_strong(&rs->first_failed, &none, i + 1))
    st__error_keep(&rs->failure, c->status);
  st__collective_abort(c->s->group->coll); /* after the failure is kept */
}

/* The run's verdict: the first failure, or what made the peers fail. */
static st_status run_result(run_state *rs, int n) {
  int failed = atomic_load(&rs->first_failed), left = atomic_load(&rs->first_left);
  if (n == 1) return rs->ctx[0].status;
  if (!failed) return ST_OK;
  if (rs->failure.status == ST_ERR_PEER && left && rs->ctx[left - 1].status == ST_OK)
    return st_error(ST_ERR_INVALID,
                    "st_strategy_run: replica %d returned while replica %d still waited in a "
                    "collective (every replica must make the same calls in the same order, "
                    "st_replica_apply_gradients included): %s",
                    left - 1, failed - 1, rs->failure.msg);
  return st__error_raise(&rs->failure);
}

st_status st_strategy_run(st_strategy *s, st_replica_fn fn, void *arg) {
  if (!s) return st_error(ST_ERR_INVALID, "st_strategy_run: s is NULL");
  if (!fn) return st_error(ST_ERR_INVALID, "st_strategy_run: fn is NULL");
  if (s->destroyed)
    return st_error(ST_ERR_INVALID, "st_strategy_run: the strategy was destroyed (its models "
                    "refuse every verb; only st_model_destroy is left to call)");
  st_status e = st__strategy_reentry(s, "st_strategy_run", false); /* before any state */
  if (e != ST_OK) return e;
  if (!s->net || !s->group)
    return st_error(ST_ERR_INVALID, "st_strategy_run: the strategy is not bound to a compiled "
                    "model");
  if (s->on_gpus) /* the replica calls hand host pointers to the layers */
    return st_error(ST_ERR_NOT_BUILT, "st_strategy_run: custom training loops do not run on "
                    "GPUs in this version (fit, evaluate and predict do); use cpu devices");
  if (s->cluster && s->opts.kind != ST_STRATEGY_MULTI_WORKER_MIRRORED)
    return st_error(ST_ERR_NOT_BUILT, "st_strategy_run: custom training loops are not "
                    "supported by %s across workers (use fit)", s->vt->name);
  if ((e = st__strategy_enter(s, ST__BUSY_RUN, "st_strategy_run")) != ST_OK) return e;
  run_state *rs = calloc(1, sizeof *rs);
  if (!rs) {
    st__strategy_leave(s);
    return st_error(ST_ERR_NOMEM, "st_strategy_run: out of memory");
  }
  int n = s->local_replicas, total = n * (s->cluster ? st__cluster_size(s->cluster) : 1);
  for (int i = 0; i < n; i++)
    rs->ctx[i] = (st_replica_context){s, s->net, i, n, total, false, ST_OK, fn, arg, NULL, -1,
                                      NULL, 0};
  if (n == 1)
    run_task(rs, 0);
  else
    st__group_run(s->group, run_task, rs);
  if (n > 1) st__collective_reset(s->group->coll); /* every replica has left */
  st_status st = run_result(rs, n);
  if (st == ST_OK && rs->ctx[0].applied) {
    st__group_sync_state(s->group, s->net);
    s->net->step++;
  }
  for (int i = 0; i < n; i++) free(rs->ctx[i].cat);
  free(rs);
  st__strategy_leave(s);
  return st;
}

/* Every worker's per-replica values (flat [L*n], or L pointers), gathered
 * over the control transport after their counts, then added worker-major in
 * replica order: ((w0 r0 + w0 r1) + w1 r0) + ...; MEAN multiplies by
 * 1 / (replicas of every worker), as one process does with its own. */
static st_status reduce_workers(const st_strategy *s, st_reduce_op op, const char *fn,
                                const float *flat, const float *const *ptrs, size_t n,
                                float *out) {
  struct st_cluster *cl = s->cluster;
  int w = st__cluster_size(cl), r = s->local_replicas;
  /* n as the bits of a uint64 (two floats' worth) per worker */
  float counts[2 * ST_MAX_WORKERS], mine[2];
  uint64_t n64 = n, theirs;
  memcpy(mine, &n64, sizeof n64);
  st_status st = st__cluster_all_gather(cl, mine, 2, counts);
  if (st != ST_OK) return st_error_prefix(st, "%s: ", fn);
  for (int k = 0; k < w; k++) {
    memcpy(&theirs, counts + 2 * k, sizeof theirs);
    if (theirs != n64)
      return st_error(ST_ERR_INVALID, "%s: rank %d reduces %llu values per replica, this worker "
                      "(rank %d) %zu: every worker must reduce the same shape", fn, k,
                      (unsigned long long)theirs, st__cluster_rank(cl), n);
  }
  if (n == 0) return ST_OK;
  size_t per = (size_t)r * n;
  float *send = malloc(per * sizeof *send), *all = malloc((size_t)w * per * sizeof *all);
  if (!send || !all) st = st_error(ST_ERR_NOMEM, "%s: out of memory for %zu values", fn, per);
  for (int i = 0; st == ST_OK && i < r; i++)
    memcpy(send + (size_t)i * n, flat ? flat + (size_t)i * n : ptrs[i], n * sizeof *send);
  if (st == ST_OK && (st = st__cluster_all_gather(cl, send, per, all)) != ST_OK)
    st = st_error_prefix(st, "%s: ", fn);
  for (size_t j = 0; st == ST_OK && j < n; j++) {
    float acc = all[j];
    for (size_t i = 1; i < (size_t)w * (size_t)r; i++) acc += all[i * n + j];
    out[j] = op == ST_REDUCE_MEAN ? acc * (1.0f / (float)(w * r)) : acc;
  }
  free(send);
  free(all);
  return st;
}

st_status st_strategy_reduce(const st_strategy *s, st_reduce_op op, const float *per_replica,
                             size_t n, float *out) {
  if (!s) return st_error(ST_ERR_INVALID, "st_strategy_reduce: s is NULL");
  if (s->destroyed) return st_error(ST_ERR_INVALID, "st_strategy_reduce: the strategy was destroyed");
  if ((unsigned)op >= ST_REDUCE_COUNT)
    return st_error(ST_ERR_INVALID, "st_strategy_reduce: op %d out of range", (int)op);
  if (n && (!per_replica || !out))
    return st_error(ST_ERR_INVALID, "st_strategy_reduce: %s is NULL (n = %zu)",
                    per_replica ? "out" : "per_replica", n);
  int r = s->local_replicas;
  if (s->cluster && st__cluster_size(s->cluster) > 1)
    return reduce_workers(s, op, "st_strategy_reduce", per_replica, NULL, n, out);
  for (size_t j = 0; j < n; j++) {
    float acc = per_replica[j];
    for (int i = 1; i < r; i++) acc += per_replica[(size_t)i * n + j];
    out[j] = op == ST_REDUCE_MEAN ? acc * (1.0f / (float)r) : acc;
  }
  return ST_OK;
}

st_status st_strategy_reduce_tensor(const st_strategy *s, st_reduce_op op,
                                    const float *const *per_replica, size_t n, float *out) {
  const char *fn = "st_strategy_reduce_tensor";
  if (!s) return st_error(ST_ERR_INVALID, "%s: s is NULL", fn);
  if (s->destroyed) return st_error(ST_ERR_INVALID, "%s: the strategy was destroyed", fn);
  if ((unsigned)op >= ST_REDUCE_COUNT)
    return st_error(ST_ERR_INVALID, "%s: op %d out of range", fn, (int)op);
  if (n == 0) return ST_OK;
  if (!per_replica || !out)
    return st_error(ST_ERR_INVALID, "%s: %s is NULL (n = %zu)", fn,
                    per_replica ? "out" : "per_replica", n);
  int r = s->local_replicas;
  for (int i = 0; i < r; i++)
    if (!per_replica[i])
      return st_error(ST_ERR_INVALID, "%s: per_replica[%d] is NULL (n = %zu)", fn, i, n);
  if (s->cluster && st__cluster_size(s->cluster) > 1)
    return reduce_workers(s, op, fn, NULL, per_replica, n, out);
  for (size_t j = 0; j < n; j++) {
    float acc = per_replica[0][j];
    for (int i = 1; i < r; i++) acc += per_replica[i][j];
    out[j] = op == ST_REDUCE_MEAN ? acc * (1.0f / (float)r) : acc;
  }
  return ST_OK;
}

int st_replica_id(const st_replica_context *c) { return c ? c->rank : 0; }
int st_replica_count(const st_replica_context *c) { return c ? c->count : 0; }

st_batch st_replica_slice(const st_replica_context *c, const st_batch *global) {
  if (!c || !global) return (st_batch){0, NULL, NULL};
  st_batch mine = *global; /* this worker's examples (all of them in one process) */
  if (c->s->cluster) st__cluster_shard_batch(c->s->cluster, c->m, global, &mine);
  st_batch slice = st__batch_slice(c->m, &mine, c->count, c->rank, NULL);
  if (!mine.x) return (st_batch){slice.size, NULL, NULL};
  return slice; /* y NULL stays NULL: a batch without labels */
}

/* The arguments of st_replica_compute_gradients. */
static st_status check_local(const st_replica_context *c, const st_batch *local,
                             int64_t global_batch) {
  const char *fn = "st_replica_compute_gradients";
  if (!c) return st_error(ST_ERR_INVALID, "%s: c is NULL", fn);
  if (!local) return st_error(ST_ERR_INVALID, "%s: local is NULL", fn);
  if (local->size < 0)
    return st_error(ST_ERR_INVALID, "%s: local->size %d is negative", fn, local->size);
  if (local->size && (!local->x || !local->y))
    return st_error(ST_ERR_INVALID, "%s: replica %d: local->%s is NULL with %d examples", fn,
                    c->rank, local->x ? "y" : "x", local->size);
  if (global_batch < local->size)
    return st_error(ST_ERR_INVALID, "%s: global_batch %lld is smaller than the replica's %d "
                    "examples", fn, (long long)global_batch, local->size);
  if (global_batch < 1)
    return st_error(ST_ERR_INVALID, "%s: global_batch %lld must be positive", fn,
                    (long long)global_batch);
  return ST_OK;
}

/* ---- one device on several threads (see the top comment) ---------------- */

static bool thread_slices(const st_replica_context *c) {
  return c->count == 1 && c->s->group->n > 1 && !c->s->cluster;
}

/* One pass over the thread slices of the replica's batch b. */
typedef struct slices {
  st_replica_context *c;
  st_batch b;
  bool training;         /* forward */
  int64_t global_batch;  /* compute_gradients */
  const float *dy;       /* backward: [b.size, outputs] */
  float *dx;             /* backward: [b.size, input] or NULL */
  st_step_stats stats[ST_MAX_REPLICAS]; /* compute_gradients, per slice */
} slices;

static st_status reserve_slices(const st_replica_context *c, int n) {
  st_replica_group *g = c->s->group;
  for (int i = 0; i < g->n; i++) {
    int start, count;
    st__split(n, g->n, i, &start, &count);
    st_status s = st__replica_reserve(c->m, g->reps[i], count);
    if (s != ST_OK) return s;
  }
  return ST_OK;
}

static void forward_task(void *arg, int i) {
  slices *p = arg;
  const st_net *m = p->c->m;
  st_replica *r = p->c->s->group->reps[i];
  int start;
  st_batch sl = st__batch_slice(m, &p->b, p->c->s->group->n, i, &start);
  if (!sl.size) return;
  size_t outs = st__net_output_size(m);
  const float *o = st__replica_forward(m, r, sl.x, sl.size, p->training, m->step);
  o = st__replica_output_host(m, r, o, sl.size);
  memcpy(p->c->cat + (size_t)start * outs, o, (size_t)sl.size * outs * sizeof(float));
}

static void backward_task(void *arg, int i) {
  slices *p = arg;
  const st_net *m = p->c->m;
  int start;
  st_batch sl = st__batch_slice(m, &p->b, p->c->s->group->n, i, &start);
  size_t outs = st__net_output_size(m), in = st_shape_size(m->input_shape);
  st__replica_backward_dy(m, p->c->s->group->reps[i], sl.x, p->dy + (size_t)start * outs,
                          sl.size, m->step, p->dx ? p->dx + (size_t)start * in : NULL);
}

static void step_task(void *arg, int i) {
  slices *p = arg;
  st_replica_group *g = p->c->s->group;
  st_batch sl = st__batch_slice(p->c->m, &p->b, g->n, i, NULL);
  st__replica_step(p->c->m, g->reps[i], &sl, p->global_batch, false, NULL, NULL, &p->stats[i]);
}

/* The variables cut into one chunk per thread (16-float aligned), as fit's
 * update is: element-wise work, the same bytes as one call. */
typedef struct chunks {
  st_replica_context *c;
  size_t chunk;
} chunks;

static chunks make_chunks(st_replica_context *c) {
  size_t n = c->m->n_params, parts = (size_t)c->s->group->n;
  size_t per = ((n + parts - 1) / parts + 15) & ~(size_t)15;
  return (chunks){c, per ? per : 16};
}

static size_t chunk_len(const chunks *a, int t, size_t *lo) {
  size_t n = a->c->m->n_params;
  *lo = (size_t)t * a->chunk;
  return *lo >= n ? 0 : (n - *lo < a->chunk ? n - *lo : a->chunk);
}

/* reps[0]->grads += reps[1]->grads + ... in replica order, as fit's step
 * (on the model's context, shared by the pool's threads as fit's update). */
static void sum_task(void *arg, int t) {
  chunks *a = arg;
  st_net *m = a->c->m;
  st_replica_group *g = a->c->s->group;
  size_t lo, len = chunk_len(a, t, &lo);
  for (int i = 1; len && i < g->n; i++)
    m->be->axpy(m->be_ctx, len, 1.0f, g->reps[i]->grads + lo, g->reps[0]->grads + lo);
}

static void sum_slices(st_replica_context *c) {
  chunks a = make_chunks(c);
  st__group_run_tasks(c->s->group, c->s->group->n, sum_task, &a);
}

static void apply_task(void *arg, int t) {
  chunks *a = arg;
  st_net *m = a->c->m;
  st_replica *r = a->c->s->group->reps[0];
  size_t lo, len = chunk_len(a, t, &lo);
  if (len)
    st__apply_range(m, m->be_ctx, r->params + lo, r->grads + lo,
                    st__vars_replica_slots(a->c->s, m, 0), lo, len);
}

/* The forward of every slice; their outputs side by side in c->cat. */
static st_status forward_slices(st_replica_context *c, const st_batch *local, bool training) {
  size_t need = (size_t)local->size * st__net_output_size(c->m);
  if (need > c->cat_cap) {
    float *cat = realloc(c->cat, need * sizeof *cat);
    if (!cat)
      return st_error(ST_ERR_NOMEM, "st_replica_forward: out of memory for %d outputs",
                      local->size);
    c->cat = cat;
    c->cat_cap = need;
  }
  slices p = {.c = c, .b = {local->size, local->x, NULL}, .training = training};
  st__group_run_tasks(c->s->group, c->s->group->n, forward_task, &p);
  return ST_OK;
}

st_status st_replica_compute_gradients(st_replica_context *c, const st_batch *local,
                                       int64_t global_batch, double *loss_sum,
                                       int64_t *correct) {
  st_status s = check_local(c, local, global_batch);
  if (s != ST_OK) return s;
  /* as fit: labels (and the first layer's input values: Embedding ids) are
   * checked before a kernel uses them as an index */
  if ((s = st__net_check_labels(c->m, local->y, local->size, 0)) != ST_OK ||
      (c->m->nlayers && local->x &&
       (s = st__net_check_inputs(c->m, local->x, local->size, 0)) != ST_OK))
    return st_error_prefix(s, "st_replica_compute_gradients: replica %d: local batch: ",
                           c->rank);
  st_replica *r = c->s->group->reps[c->rank];
  bool split = thread_slices(c);
  s = split ? reserve_slices(c, local->size) : st__replica_reserve(c->m, r, local->size);
  if (s != ST_OK) return s;
  st_step_stats st = {0};
  if (split) {
    slices p = {.c = c, .b = *local, .global_batch = global_batch};
    st__group_run_tasks(c->s->group, c->s->group->n, step_task, &p);
    for (int i = 0; i < c->s->group->n; i++) st__step_stats_add(&st, &p.stats[i]);
    sum_slices(c);
  } else {
    st__replica_step(c->m, r, local, global_batch, c->s->group->must_run, NULL, NULL, &st);
  }
  if (loss_sum) *loss_sum = st.loss_sum;
  if (correct) *correct = st.correct;
  return ST_OK;
}

st_status st_replica_all_reduce(st_replica_context *c, st_reduce_op op, float *buf, size_t n) {
  if (!c) return st_error(ST_ERR_INVALID, "st_replica_all_reduce: c is NULL");
  if ((unsigned)op >= ST_REDUCE_COUNT)
    return st_error(ST_ERR_INVALID, "st_replica_all_reduce: op %d out of range", (int)op);
  if (n && !buf) return st_error(ST_ERR_INVALID, "st_replica_all_reduce: buf is NULL (n = %zu)", n);
  if (c->total == 1) return ST_OK;
  st_collective *coll = c->s->group->coll;
  return coll->vt->all_reduce(coll, c->rank, buf, n, op);
}

/* Shared variables: after the all-reduce every replica holds the summed
 * gradients; each updates its own chunk of the variables. */
st_status st_replica_apply_gradients(st_replica_context *c) {
  if (!c) return st_error(ST_ERR_INVALID, "st_replica_apply_gradients: c is NULL");
  if (c->s->opts.shard_optimizer)
    return st_error(ST_ERR_INVALID, "st_replica_apply_gradients: the strategy has "
                    "shard_optimizer set (the custom loop needs every slot on every replica)");
  st_net *m = c->m;
  st_replica *r = c->s->group->reps[c->rank];
  st_status s = st_replica_all_reduce(c, ST_REDUCE_SUM, r->grads, m->n_params);
  if (s != ST_OK) return s;
  size_t lo = 0, len = m->n_params;
  if (thread_slices(c)) { /* the update in one chunk per thread, as fit's */
    chunks a = make_chunks(c);
    st__group_run_tasks(c->s->group, c->s->group->n, apply_task, &a);
    len = 0;
  } else if (!c->s->mirrored_vars) {
    size_t chunk = ((m->n_params + (size_t)c->count - 1) / (size_t)c->count + 15) & ~(size_t)15;
    lo = chunk * (size_t)c->rank;
    len = lo >= m->n_params ? 0 : (m->n_params - lo < chunk ? m->n_params - lo : chunk);
  }
  if (len)
    st__apply_range(m, r->ctx, r->params + lo, r->grads + lo,
                    st__vars_replica_slots(c->s, m, c->rank), lo, len);
  c->applied = true;
  /* no replica may read the shared variables of the next step before all
   * chunks are written */
  return c->total > 1 ? c->s->group->coll->vt->barrier(c->s->group->coll, c->rank) : ST_OK;
}

/* ---- the model as a differentiable step ---------------------------------- */

st_status st_replica_forward(st_replica_context *c, const st_batch *local, bool training,
                             const float **out) {
  const char *fn = "st_replica_forward";
  if (!c) return st_error(ST_ERR_INVALID, "%s: c is NULL", fn);
  if (!local) return st_error(ST_ERR_INVALID, "%s: local is NULL", fn);
  if (!out) return st_error(ST_ERR_INVALID, "%s: out is NULL", fn);
  *out = NULL;
  if (local->size < 0 || (local->size && !local->x))
    return st_error(ST_ERR_INVALID, "%s: replica %d: local has %d examples and %s x", fn,
                    c->rank, local->size, local->x ? "an" : "no");
  st_status s = local->size ? st__net_check_inputs(c->m, local->x, local->size, 0) : ST_OK;
  if (s != ST_OK) return st_error_prefix(s, "%s: replica %d: ", fn, c->rank);
  st_replica *r = c->s->group->reps[c->rank];
  bool split = thread_slices(c);
  s = split ? reserve_slices(c, local->size) : st__replica_reserve(c->m, r, local->size);
  if (s != ST_OK) return s;
  c->fwd_n = -1;
  if (split && local->size) {
    if ((s = forward_slices(c, local, training)) != ST_OK) return s;
    *out = c->cat;
  } else if (local->size || c->s->group->must_run) {
    *out = st__replica_forward(c->m, r, local->x, local->size, training, c->m->step);
  }
  c->fwd_x = local->x;
  c->fwd_n = local->size;
  return ST_OK;
}

static st_status after_forward(const st_replica_context *c, const char *fn) {
  if (!c) return st_error(ST_ERR_INVALID, "%s: c is NULL", fn);
  if (c->fwd_n < 0 || (!c->fwd_x && c->fwd_n))
    return st_error(ST_ERR_INVALID, "%s: replica %d: no st_replica_forward before it in this "
                    "run", fn, c->rank);
  return ST_OK;
}

/* fit's loss gradient dy [n, outputs] of r's last forward (n > 0 examples)
 * against y, scaled by 1/global_batch; returns the unscaled loss sum. */
static double slice_loss_gradient(const st_net *m, st_replica *r, const float *y, int n,
                                  int64_t global_batch, float *dy) {
  double sum = 0.0;
  if (m->n_outputs > 1) { /* each output's gradient, concatenated */
    sum = st__replica_outputs_loss(m, r, y, n, 1.0f / (float)global_batch, true);
    st__replica_outputs_grads_out(m, r, dy, n);
    return sum;
  }
  int cols = (int)st__net_output_size(m);
  st__net_loss(m, r->ctx, n, r->acts[m->output], y, 1.0f / (float)global_batch, r->loss_rows,
               r->gslots[0]); /* sparse over [T, classes]: every position */
  st__be_to_host(r->ctx, dy, r->gslots[0], (size_t)n * (size_t)cols * sizeof(float));
  for (int i = 0; i < n; i++) sum += r->loss_rows[i];
  return sum;
}

st_status st_replica_loss_gradient(st_replica_context *c, const float *y, int64_t global_batch,
                                   float *dy, double *loss_sum) {
  const char *fn = "st_replica_loss_gradient";
  ST_REQUIRE(c);
  ST_REQUIRE(y);
  ST_REQUIRE(dy);
  st_status s = after_forward(c, fn);
  if (s != ST_OK) return s;
  int n = c->fwd_n;
  if (global_batch < (n > 0 ? n : 1))
    return st_error(ST_ERR_INVALID, "%s: global_batch %lld is below the replica's %d examples",
                    fn, (long long)global_batch, n);
  if (n && (s = st__net_check_labels(c->m, y, n, 0)) != ST_OK)
    return st_error_prefix(s, "%s: replica %d: ", fn, c->rank);
  double sum = 0.0;
  if (n && thread_slices(c)) { /* each slice on the replica that ran its forward */
    st_replica_group *g = c->s->group;
    st_batch b = {n, c->fwd_x, y};
    size_t outs = st__net_output_size(c->m);
    for (int i = 0; i < g->n; i++) {
      int start;
      st_batch sl = st__batch_slice(c->m, &b, g->n, i, &start);
      if (sl.size)
        sum += slice_loss_gradient(c->m, g->reps[i], sl.y, sl.size, global_batch,
                                   dy + (size_t)start * outs);
    }
  } else if (n) {
    sum = slice_loss_gradient(c->m, c->s->group->reps[c->rank], y, n, global_batch, dy);
  }
  if (loss_sum) *loss_sum = sum;
  return ST_OK;
}

st_status st_replica_backward(st_replica_context *c, const float *dy, float *dx) {
  const char *fn = "st_replica_backward";
  ST_REQUIRE(c);
  ST_REQUIRE(dy);
  st_status s = after_forward(c, fn);
  if (s != ST_OK) return s;
  st_replica *r = c->s->group->reps[c->rank];
  if (dx && (c->m->n_inputs > 1 || r->be->to_device))
    return st_error(ST_ERR_INVALID, "%s: dx (the input's gradient) is available for a model "
                    "of one input on a host backend", fn);
  if (thread_slices(c)) {
    slices p = {.c = c, .b = {c->fwd_n, c->fwd_x, NULL}, .dy = dy, .dx = dx};
    st__group_run_tasks(c->s->group, c->s->group->n, backward_task, &p);
    sum_slices(c);
    return ST_OK;
  }
  st__replica_backward_dy(c->m, r, c->fwd_x, dy, c->fwd_n, c->m->step, dx);
  return ST_OK;
}

/* The replica's gradient buffer's size check (n floats; the callers check
 * their pointers). */
static st_status check_grads(const st_replica_context *c, size_t n, const char *fn) {
  if (n != c->m->n_params)
    return st_error(ST_ERR_INVALID, "%s: n = %zu, the model has %zu trainable parameters", fn, n,
                    c->m->n_params);
  return ST_OK;
}

st_status st_replica_gradients(st_replica_context *c, float *out, size_t n) {
  const char *fn = "st_replica_gradients";
  ST_REQUIRE(c);
  ST_REQUIRE(out);
  st_status s = check_grads(c, n, fn);
  if (s != ST_OK) return s;
  st_replica *r = c->s->group->reps[c->rank];
  st__be_to_host(r->ctx, out, r->grads, n * sizeof(float));
  return ST_OK;
}

st_status st_replica_set_gradients(st_replica_context *c, const float *g, size_t n) {
  const char *fn = "st_replica_set_gradients";
  ST_REQUIRE(c);
  ST_REQUIRE(g);
  st_status s = check_grads(c, n, fn);
  if (s != ST_OK) return s;
  st_replica *r = c->s->group->reps[c->rank];
  st__be_to_device(r->ctx, r->grads, g, n * sizeof(float));
  return ST_OK;
}
