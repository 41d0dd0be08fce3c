/* The pipeline strategy (model parallelism, GPipe / 1F1B): the model's layers
 * in S contiguous stages (pipeline_stage.c), one thread each, and every
 * global batch as M micro-batches (slice k = st__split(B, M, k), as one
 * device's compute threads slice it). Stage s runs forward of micro-batch k
 * once stage s-1 has, and backward of k once stage s+1 has; the activations
 * and input gradients pass between stages through the stages' slot buffers
 * (in one process a stage reads its neighbour's buffer: the send is a
 * hand-off of ownership signalled under one mutex). The per-example loss is
 * scaled by 1/B; each stage sums its micro-batches' gradients in micro-batch
 * order (g0 + g1 + ... with the backend's axpy, as one device sums its
 * threads' slices) and applies the optimizer to its own variables and slots
 * once per global batch.
 *
 * Arithmetic: with M micro-batches the step is the one one_device computes
 * with M threads (same slices, same dropout streams keyed by slice, same
 * summation order, one BLAS thread per GEMM): bit-identical to
 * `--strategy one_device --threads M`. Against one device's full-batch GEMM
 * (--threads 1) the weight-gradient sums over the batch are grouped
 * differently: equal within float rounding. BatchNormalization uses each
 * micro-batch's statistics (as GPipe) and updates its moving statistics once
 * per micro-batch. A table tied across stages (GPT's token embedding read
 * by its output head) is owned by the head's stage (pipeline.h, st_pipe_tie;
 * its gradient summed as one device's threads sum it). With global_clipnorm
 * the stages' updates wait for the norm of every stage's gradient, formed
 * in one device's order (pipeline_clip.c): the same bytes. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/fpenv.h"
#include "base/split.h"
#include "distribute/devices.h"
#include "distribute/pipeline.h"

typedef struct pp_state {
  int S, M;
  st_pipeline_schedule sched;
  st_pipe_stage *stages[ST_MAX_REPLICAS];
  st_threadpool *pool;     /* S-1 workers + the caller: one thread per stage */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int fwd_done[ST_MAX_REPLICAS]; /* forwards stage s finished this step */
  int bwd_done[ST_MAX_REPLICAS]; /* backwards stage s finished this step */
  int first;               /* the net's first layer with a trainable variable */
  st_pipe_tie tie;         /* a table tied across stages (pipeline.h), or layer -1 */
  st_status tie_err;       /* the tie's fold this step (its dst's thread) */
  st_net *m;
  const st_batch *b;       /* the current step's batch */
  st_step_stats stats;     /* written by the last stage */
  double step_seconds;     /* wall time of the training steps */
  int *log;                /* [S * 2M]: the passes each stage ran (pipeline_sched.c) */
  int nlog[ST_MAX_REPLICAS];
  double idle[ST_MAX_REPLICAS]; /* the last step's replay */
  int in_flight[ST_MAX_REPLICAS];
  bool replayed;
} pp_state;

st_status st_pipeline_schedule_parse(const char *name, st_pipeline_schedule *out) {
  if (!name || !out)
    return st_error(ST_ERR_INVALID, "st_pipeline_schedule_parse: %s is NULL",
                    name ? "out" : "name");
  if (!strcmp(name, "gpipe")) *out = ST_PIPELINE_GPIPE;
  else if (!strcmp(name, "1f1b")) *out = ST_PIPELINE_1F1B;
  else return st_error(ST_ERR_INVALID, "unknown pipeline schedule '%s' (expected gpipe or 1f1b)", name);
  return ST_OK;
}

/* "3,5" -> bounds {3, 5}, *n = 2; digits and commas only. */
static st_status parse_bounds(const char *v, int *bounds, int *n) {
  *n = 0;
  for (const char *p = v; *p;) {
    char *end;
    long b = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || *p == '-' || *p == '+' || b > 1 << 30)
      return st_error(ST_ERR_INVALID, "stage_boundaries '%s': '%.*s' is not a layer index", v,
                      (int)strcspn(p, ","), p);
    if (*n >= ST_MAX_REPLICAS - 1)
      return st_error(ST_ERR_INVALID, "stage_boundaries '%s': more than %d stages", v,
                      ST_MAX_REPLICAS);
    bounds[(*n)++] = (int)b;
    p = *end ? end + 1 : end;
    if (*end && !*p)
      return st_error(ST_ERR_INVALID, "stage_boundaries '%s': ends with a comma", v);
  }
  return ST_OK;
}

/* The pipeline options' checks (stage count against the devices counted in
 * *stages (0: none given), boundary syntax, micro-batches, schedule);
 * *stages = the stage count (0: none given), bounds[0..stages-1) = the
 * layers where stages 1.. start, or -1 each: balanced at attach. */
static st_status check_options(const st_strategy_options *o, int bounds[ST_MAX_REPLICAS],
                               int *stages) {
  int ndev = *stages, nb = 0;
  for (int i = 0; i < ST_MAX_REPLICAS; i++) bounds[i] = -1;
  if (o->stage_boundaries) {
    st_status s = parse_bounds(o->stage_boundaries, bounds, &nb);
    if (s != ST_OK) return s;
  }
  if (o->pipeline_stages < 0 || o->pipeline_stages > ST_MAX_REPLICAS)
    return st_error(ST_ERR_INVALID, "pipeline_stages: %d given, expected 1..%d",
                    o->pipeline_stages, ST_MAX_REPLICAS);
  int n = ndev ? ndev : o->pipeline_stages ? o->pipeline_stages : nb ? nb + 1 : 0;
  if ((ndev && o->pipeline_stages && o->pipeline_stages != ndev) || (nb && nb + 1 != n))
    return st_error(ST_ERR_INVALID, "pipeline: %d devices, %d pipeline_stages and %d stage "
                    "boundaries do not agree (boundaries = stages - 1)", ndev,
                    o->pipeline_stages, nb);
  if (o->micro_batches < 0 || o->micro_batches > 1 << 20)
    return st_error(ST_ERR_INVALID, "micro_batches: %d given, expected 1..%d (0 = one per "
                    "stage)", o->micro_batches, 1 << 20);
  if ((unsigned)o->pipeline_schedule >= ST_PIPELINE_SCHEDULE_COUNT)
    return st_error(ST_ERR_INVALID, "pipeline_schedule %d out of range",
                    (int)o->pipeline_schedule);
  *stages = n;
  return ST_OK;
}

/* procs processes: *stages (0: one per process) must divide them; the
 * quotient is the data-parallel replicas of each stage. */
static st_status check_processes(int procs, int *stages) {
  if (*stages == 0) *stages = procs;
  if (procs % *stages)
    return st_error(ST_ERR_INVALID, "pipeline: %d processes are not a multiple of %d stages "
                    "(processes = stages x data-parallel replicas)", procs, *stages);
  return ST_OK;
}

/* ---- life ------------------------------------------------------------- */

static void free_pipe(pp_state *p) {
  if (!p) return;
  st_threadpool_destroy(p->pool);
  free(p->log);
  for (int s = 0; s < p->S; s++) st__pipe_stage_destroy(p->m, p->stages[s]);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p);
}

static st_status pp_attach(st_strategy *s, st_net *m) {
  if (s->cluster) return st__pipeline_procs_attach(s, m);
  int S = s->pipeline_stages ? s->pipeline_stages : 2, first[ST_MAX_REPLICAS];
  st_status st = st__pipe_partition(m, S, s->pipeline_bounds, first);
  if (st != ST_OK) return st;
  pp_state *p = calloc(1, sizeof *p);
  if (!p) return st_error(ST_ERR_NOMEM, "pipeline: out of memory");
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->m = m;
  p->S = S;
  p->M = s->opts.micro_batches ? s->opts.micro_batches : S;
  p->sched = s->opts.pipeline_schedule;
  p->first = st__pipe_first_trainable(m);
  p->log = malloc(sizeof(int) * 2 * (size_t)S * (size_t)p->M);
  if (!p->log) st = st_error(ST_ERR_NOMEM, "pipeline: out of memory");
  if (st == ST_OK) st = st__pipe_tie_find(m, S, first, &p->tie);
  for (int i = 0; i < S && st == ST_OK; i++) {
    int slots = p->sched == ST_PIPELINE_GPIPE ? p->M : (S - i < p->M ? S - i : p->M);
    st = st__pipe_stage_create(m, i, first[i], i + 1 < S ? first[i + 1] : m->nlayers, slots,
                               i == S - 1, false, &p->tie, &p->stages[i]);
    p->S = i + 1; /* stages made so far, for free_pipe */
  }
  if (st == ST_OK && S > 1) st = st_threadpool_create(S - 1, &p->pool);
  if (st != ST_OK) {
    free_pipe(p);
    return st;
  }
  st_blas_set_threads(1); /* one BLAS thread per stage thread */
  s->impl = p;
  s->net = m;
  return ST_OK;
}

static void pp_detach(st_strategy *s) {
  if (s->cluster) {
    st__pipeline_procs_detach(s);
    return;
  }
  free_pipe(s->impl);
  s->impl = NULL;
  s->net = NULL;
}

/* ---- one training step -------------------------------------------------- */

static void wait_for(pp_state *p, const int *counter, int above) {
  pthread_mutex_lock(&p->mu);
  while (*counter <= above) pthread_cond_wait(&p->cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

static void mark_done(pp_state *p, int *counter) {
  pthread_mutex_lock(&p->mu);
  (*counter)++;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

/* Forward of micro-batch k on stage s (after stage s-1's). */
static void run_forward(pp_state *p, int s, int k) {
  st_net *m = p->m;
  st_pipe_stage *st = p->stages[s];
  st_batch mb = st__batch_slice(m, p->b, p->M, k, NULL);
  int n = mb.size;
  if (s > 0) wait_for(p, &p->fwd_done[s - 1], k);
  double t0 = st_now_seconds();
  const float *x = s == 0 ? mb.x
                          : st__pipe_stage_out(p->stages[s - 1], k % p->stages[s - 1]->nslots);
  if (n) {
    const float *out = st__pipe_stage_forward(m, st, k % st->nslots, k, x, n, true, m->step);
    if (s == p->S - 1) st__step_metrics(m, out, mb.y, n, &p->stats);
  }
  st->busy += st_now_seconds() - t0;
  p->log[(size_t)s * 2 * (size_t)p->M + (size_t)p->nlog[s]++] = k + 1;
  mark_done(p, &p->fwd_done[s]);
}

/* The tie's dst: micro-batch k's table gradient, once src's backward k ran. */
static void fold_tie(pp_state *p, int k) {
  st_pipe_stage *src = p->stages[p->tie.src], *dst = p->stages[p->tie.dst];
  wait_for(p, &p->bwd_done[p->tie.src], k);
  st_batch mb = st__batch_slice(p->m, p->b, p->M, k, NULL);
  st_status s = st__pipe_tie_fold(p->m, dst, k, mb.x, src->tdy[k % src->nslots], mb.size,
                                  p->m->step);
  if (s != ST_OK && p->tie_err == ST_OK) p->tie_err = s;
}

/* Backward of micro-batch k on stage s (after stage s+1's), its gradient
 * added to the stage's sum. The last stage starts from the loss; the tie's
 * dst first folds micro-batch k-1's table gradient. */
static void run_backward(pp_state *p, int s, int k) {
  st_net *m = p->m;
  st_pipe_stage *st = p->stages[s];
  int slot = k % st->nslots;
  st_batch mb = st__batch_slice(m, p->b, p->M, k, NULL);
  int n = mb.size;
  if (s < p->S - 1) wait_for(p, &p->bwd_done[s + 1], k);
  if (st->tie_dst && k > 0) fold_tie(p, k - 1);
  double t0 = st_now_seconds();
  float *dy = s < p->S - 1 ? st->recv[slot] : st->gslots[0];
  if (n && s == p->S - 1) {
    st__net_loss(m, st->ctx, n, st__pipe_stage_out(st, slot), mb.y, 1.0f / (float)p->b->size,
                 st->loss_rows, dy);
    for (int i = 0; i < n; i++) p->stats.loss_sum += st->loss_rows[i];
    p->stats.examples += n;
  }
  float *dx = NULL;
  if (s > 0 && st->lo > p->first)
    dx = p->stages[s - 1]->recv[k % p->stages[s - 1]->nslots];
  const float *x = s == 0 ? mb.x
                          : st__pipe_stage_out(p->stages[s - 1], k % p->stages[s - 1]->nslots);
  if (n) st__pipe_stage_backward(m, st, slot, k, k > 0, x, dy, n, dx, p->first, m->step);
  else st__pipe_stage_no_examples(m, st, k);
  st->busy += st_now_seconds() - t0;
  p->log[(size_t)s * 2 * (size_t)p->M + (size_t)p->nlog[s]++] = -(k + 1);
  mark_done(p, &p->bwd_done[s]);
}

/* Stage s's optimizer update: its range, and the tied table on its dst. */
static void apply_task(void *arg, int s) {
  pp_state *p = arg;
  st_net *m = p->m;
  st_pipe_stage *st = p->stages[s];
  double t0 = st_now_seconds();
  if (st->np)
    st__apply_range(m, st->ctx, m->params + st->poff, st->grads, m->slots, st->poff, st->np);
  if (st->tie_dst) st__pipe_tie_apply(m, st);
  st->busy += st_now_seconds() - t0;
}

/* global_clipnorm: the update waits for every stage's gradient (the norm). */
static bool clipping(const st_net *m) { return m->optimizer.global_clipnorm > 0.0f; }

/* Task: stage s's schedule for the step, then (without clipping) its
 * optimizer update. */
static void stage_task(void *arg, int s) {
  pp_state *p = arg;
  st_pipe_stage *st = p->stages[s];
  int M = p->M;
  int warm = p->sched == ST_PIPELINE_GPIPE ? M : (p->S - s - 1 < M ? p->S - s - 1 : M);
  for (int k = 0; k < warm; k++) run_forward(p, s, k);
  for (int k = 0; k < M; k++) {
    if (k + warm < M) run_forward(p, s, k + warm);
    run_backward(p, s, k);
  }
  if (st->tie_dst) fold_tie(p, M - 1);
  if (!clipping(p->m)) apply_task(p, s);
}

/* Every stage's gradient clipped by their global norm (pipeline_clip.c),
 * then the stages' updates, one thread each. */
static st_status clip_apply(pp_state *p) {
  st_status s = st__pipe_clip_stages(p->m, p->stages, p->S);
  if (s != ST_OK) return s;
  if (p->pool) st_threadpool_run(p->pool, p->S, apply_task, p);
  else apply_task(p, 0);
  return ST_OK;
}

static st_status pp_train_step(st_strategy *s, st_net *m, const st_batch *b,
                               const st__side_task *side, st_step_stats *out) {
  (void)side; /* each stage updates its variables in its own thread */
  if (s->cluster) return st__pipeline_procs_train_step(s, m, b, out);
  pp_state *p = s->impl;
  int cap = (b->size + p->M - 1) / p->M;
  for (int i = 0; i < p->S; i++) {
    st_status st = st__pipe_stage_reserve(m, p->stages[i], cap);
    if (st != ST_OK) return st;
  }
  memset(&p->stats, 0, sizeof p->stats);
  memset(p->fwd_done, 0, sizeof p->fwd_done);
  memset(p->bwd_done, 0, sizeof p->bwd_done);
  memset(p->nlog, 0, sizeof p->nlog);
  p->b = b;
  p->tie_err = ST_OK;
  double t0 = st_now_seconds();
  unsigned fp = st__ftz_enter();
  if (p->pool) st_threadpool_run(p->pool, p->S, stage_task, p);
  else stage_task(p, 0);
  st_status cs = p->tie_err == ST_OK && clipping(m) ? clip_apply(p) : ST_OK;
  st__ftz_leave(fp);
  if (p->tie_err != ST_OK) /* (its message stayed with the stage's thread) */
    return st_error(p->tie_err, "pipeline stage %d: the tied table's gradient: out of memory",
                    p->tie.dst);
  if (cs != ST_OK) return cs;
  p->step_seconds += st_now_seconds() - t0;
  st_status rs = st__pipe_replay(p->S, p->M, p->log, p->idle, p->in_flight);
  if (rs != ST_OK) return rs;
  p->replayed = true;
  st__step_stats_add(out, &p->stats);
  return ST_OK;
}

/* Inference: chunks of up to a slot's examples through every stage in turn
 * on the caller's thread (slot 0). */
static st_status pp_eval_step(st_strategy *s, st_net *m, const st_batch *b,
                              st_step_stats *out, float *pred) {
  if (s->cluster) return st__pipeline_procs_eval_step(s, m, b, out, pred);
  pp_state *p = s->impl;
  int cap = p->stages[0]->cap > 1 ? p->stages[0]->cap : (b->size < 256 ? b->size : 256);
  for (int i = 0; i < p->S; i++) {
    st_status st = st__pipe_stage_reserve(m, p->stages[i], cap);
    if (st != ST_OK) return st;
  }
  size_t xs = st_shape_size(m->input_shape), outs = st__net_output_size(m);
  size_t ys = st__net_label_width(m);
  st_pipe_stage *last = p->stages[p->S - 1];
  unsigned fp = st__ftz_enter();
  for (int start = 0; start < b->size; start += cap) {
    int n = b->size - start < cap ? b->size - start : cap;
    const float *x = b->x + (size_t)start * xs;
    for (int i = 0; i < p->S; i++)
      x = st__pipe_stage_forward(m, p->stages[i], 0, 0, x, n, false, m->step);
    const float *y = b->y ? b->y + (size_t)start * ys : NULL;
    if (y) {
      st__step_metrics(m, x, y, n, out);
      st__net_loss(m, last->ctx, n, x, y, 1.0f, last->loss_rows, NULL);
      for (int i = 0; i < n; i++) out->loss_sum += last->loss_rows[i];
    }
    if (pred) st__be_to_host(last->ctx, pred + (size_t)start * outs, x, (size_t)n * outs * sizeof(float));
    out->examples += n;
  }
  st__ftz_leave(fp);
  return ST_OK;
}

/* In one process the stages use the net's buffers (each its own range):
 * nothing to move before a read or after a write. */
static const st_var_placement stages_placement = {.name = "pipeline stages' ranges"};

/* The stage count (devices, pipeline_stages or boundaries) and boundaries,
 * micro-batches and schedule; under an MPI launcher the processes (a
 * multiple of the stages), each stage's variables in its own process. */
static st_status pp_check(const st_strategy_options *o, st__strategy_setup *out) {
  int stages = 0;
  st_status s = o->devices ? st__replica_count(o, &stages) : ST_OK; /* one stage per device */
  if (s == ST_OK) s = check_options(o, out->pipeline_bounds, &stages);
  /* under an MPI launcher with more than one process: one stage per process */
  bool launched = st__process_launched_by_mpi();
  int tf_workers = s == ST_OK && !launched ? st__tf_config_training_tasks() : 0;
  if (tf_workers > 1)
    s = st_error(ST_ERR_INVALID, "pipeline: TF_CONFIG names %d workers, but the pipeline "
                 "across processes runs under an MPI launcher only (mpirun -np N); "
                 "TF_CONFIG launches are for multi_worker_mirrored", tf_workers);
  if (s == ST_OK && launched) s = st__cluster_create(o, 1, &out->cluster);
  if (s == ST_OK && out->cluster)
    s = check_processes(st__cluster_size(out->cluster), &stages);
  out->pipeline_stages = stages;
  /* data-parallel copies of the pipeline */
  out->num_replicas = out->cluster && stages ? st__cluster_size(out->cluster) / stages : 1;
  out->vars = out->cluster ? &st__procs_placement : &stages_placement;
  return s;
}

int st_strategy_pipeline_stages(const st_strategy *s) {
  if (!s || s->vt != &st__pipeline_vtable || !s->impl) return 0;
  return s->cluster ? s->pipeline_stages : ((const pp_state *)s->impl)->S;
}

st_status st_strategy_pipeline_stage_stats(const st_strategy *s, int i,
                                           st_pipeline_stage_stats *out) {
  ST_REQUIRE(s);
  ST_REQUIRE(out);
  int S = st_strategy_pipeline_stages(s);
  if (i < 0 || i >= S)
    return st_error(ST_ERR_INVALID, "st_strategy_pipeline_stage_stats: stage %d of %d (the "
                    "strategy must be a pipeline bound to a compiled model)", i, S);
  if (s->cluster) return st__pipeline_procs_stats(s, i, out);
  const pp_state *p = s->impl;
  const st_pipe_stage *st = p->stages[i];
  memset(out, 0, sizeof *out);
  out->first_layer = st->lo;
  out->end_layer = st->hi;
  out->params = (int64_t)(st->np + st->ns + (st->tie_dst ? st->tie.n : 0)); /* it trains the table */
  out->peak_bytes = st->buffer_bytes;
  out->busy_seconds = st->busy;
  out->step_seconds = p->step_seconds;
  out->bubble_fraction = p->step_seconds > 0 ? 1.0 - st->busy / p->step_seconds : 0.0;
  if (out->bubble_fraction < 0) out->bubble_fraction = 0;
  out->schedule_bubble = p->replayed ? p->idle[i] : -1.0;
  out->max_in_flight = p->replayed ? p->in_flight[i] : 0;
  return ST_OK;
}

const st_strategy_vtable st__pipeline_vtable = {
    .name = "pipeline",
    .check = pp_check,
    .attach = pp_attach,
    .detach = pp_detach,
    .train_step = pp_train_step,
    .eval_step = pp_eval_step,
};

void st__pipeline_plan_bytes(const st_strategy *s, const st_net *m, int64_t batch,
                             uint64_t *fixed, uint64_t *acts, int *stages, int *cap) {
  *fixed = *acts = 0;
  if (s->cluster) {
    *stages = 1;
    st__pipeline_procs_plan_bytes(s, m, batch, fixed, acts, cap);
    return;
  }
  const pp_state *p = s->impl;
  *stages = p->S;
  *cap = (int)((batch + p->M - 1) / p->M); /* the largest slice st__split gives */
  for (int i = 0; i < p->S; i++) {
    size_t f, a;
    st__pipe_stage_plan_bytes(m, p->stages[i], *cap, &f, &a);
    *fixed += f, *acts += a;
  }
}
