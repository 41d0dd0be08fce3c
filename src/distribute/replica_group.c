/* The replica group: lock-step forward/backward over batch slices, the
 * fixed-order gradient sum, and the chunked parallel optimizer update. */
#include "distribute/replica_group.h"
#include "base/fpenv.h"

#include <stdlib.h>
#include <string.h>

/* Replica i's own state (and params when own_params), or NULL when shared. */
static st_status make_replica(st_net *m, int i, bool own_params, st_replica **out) {
  st_status s = st__replica_create(m, m->be, i, 1, m->params, m->state, out);
  if (s != ST_OK || i == 0) return s;
  st_replica *r = *out;
  size_t ps = (m->n_params ? m->n_params : 1) * sizeof(float);
  size_t ss = (m->n_state ? m->n_state : 1) * sizeof(float);
  r->owns_vars = true;
  r->params = own_params ? r->be->alloc(r->ctx, ps) : NULL;
  r->state = r->be->alloc(r->ctx, ss);
  r->params_borrowed = !own_params;
  if ((own_params && !r->params) || !r->state)
    return st_error(ST_ERR_NOMEM, "replica %d: out of memory for variables", i);
  if (!own_params) r->params = m->params;
  if (m->n_state) st__be_copy(r->ctx, r->state, m->state, m->n_state * sizeof(float));
  return ST_OK;
}

static void all_reduce_sum(void *ctx, float *buf, size_t n) {
  st_group_rank *gr = ctx;
  gr->coll->vt->all_reduce(gr->coll, gr->rank, buf, n, ST_REDUCE_SUM);
}

void st__group_set_blas_threads(int n, int threads) {
  st_blas_set_threads(n > 1 ? 1 : (threads > 0 ? threads : st__cpu_count()));
}

st_status st__group_create(st_net *m, int n, bool own_params, st_cross_device_ops algo,
                           st_collective *net, st_replica_group **out) {
  *out = NULL;
  st_replica_group *g = calloc(1, sizeof *g);
  if (!g || !(g->reps = calloc((size_t)n, sizeof *g->reps))) {
    free(g);
    return st_error(ST_ERR_NOMEM, "replica group: out of memory");
  }
  g->n = n;
  st_status s = ST_OK;
  for (int i = 0; i < n && s == ST_OK; i++)
    s = make_replica(m, i, own_params, &g->reps[i]);
  if (s == ST_OK && n > 1) s = st_threadpool_create(n - 1, &g->pool);
  g->net = net;
  st_backend_ctx *ctxs[ST_MAX_REPLICAS];
  for (int i = 0; s == ST_OK && i < n; i++) ctxs[i] = g->reps[i]->ctx;
  if (s == ST_OK && !st__be_is_host(m->be)) /* device buffers */
    s = st__collective_device_create(n, algo, net, ctxs, &g->coll);
  else if (s == ST_OK)
    s = net ? st__collective_hier_create(n, algo, net, &g->coll)
            : st__collective_threads_create(n, algo, &g->coll);
  int total = n * (net ? net->size : 1);
  for (int i = 0; s == ST_OK && i < n && total > 1; i++) {
    g->ranks[i] = (st_group_rank){g->coll, i};
    g->reps[i]->all_reduce_sum = all_reduce_sum;
    g->reps[i]->all_reduce_ctx = &g->ranks[i];
  }
  g->must_run = total > 1 && st__net_uses_collectives(m);
  if (s != ST_OK) {
    st__group_destroy(g);
    return s;
  }
  *out = g;
  return ST_OK;
}

void st__group_destroy(st_replica_group *g) {
  if (!g) return;
  st_threadpool_destroy(g->pool);
  st__collective_destroy(g->coll);
  for (int i = 0; i < g->n; i++) st__replica_destroy(g->reps[i]);
  free(g->reps);
  free(g);
}

void st__group_run(st_replica_group *g, void (*fn)(void *arg, int i), void *arg) {
  st__group_run_tasks(g, g->n, fn, arg);
}

/* The caller's thread runs tasks too: flush subnormals there for the
 * duration (the pool's threads always do), and give the caller its own
 * floating-point state back. */
void st__group_run_tasks(st_replica_group *g, int ntasks, void (*fn)(void *arg, int i),
                         void *arg) {
  unsigned fp = st__ftz_enter();
  if (g->pool)
    st_threadpool_run(g->pool, ntasks, fn, arg);
  else
    for (int t = 0; t < ntasks; t++) fn(arg, t);
  st__ftz_leave(fp);
}

/* Everything one lock-step pass needs, shared read-only by the tasks except
 * for each task's own stats slot. */
typedef struct pass {
  st_replica_group *g;
  st_net *m;
  const st_batch *b;
  bool train;
  float *pred;
  st_step_stats stats[ST_MAX_REPLICAS];
} pass;
_Static_assert(sizeof(pass) <= 64 * 1024, "a pass (every replica's stats) fits on the stack");

static void slice_task(void *arg, int i) {
  pass *p = arg;
  st_replica *r = p->g->reps[i];
  int start;
  st_batch sl = st__batch_slice(p->m, p->b, p->g->n, i, &start); /* y NULL: predict only */
  st_step_stats *s = &p->stats[i];
  if (p->train) {
    st__replica_step(p->m, r, &sl, p->b->size, p->g->must_run, NULL, NULL, s);
    return;
  }
  if (!sl.size) return;
  size_t outs = st__net_output_size(p->m);
  const float *pred = st__replica_forward(p->m, r, sl.x, sl.size, false, p->m->step);
  if (sl.y) {
    if (p->m->nmetrics) st__step_metrics(p->m, st__replica_output_host(p->m, r, pred, sl.size), sl.y, sl.size, s);
    s->loss_sum = st__replica_loss(p->m, r, sl.y, sl.size);
  }
  if (p->pred)
    st__be_to_host(r->ctx, p->pred + (size_t)start * outs, pred,
                   (size_t)sl.size * outs * sizeof(float));
  s->examples = sl.size;
}

/* A device replica's work is done (the next reader may use another
 * context) and its errors are known: the pass's status. */
static st_status settle(st_replica_group *g, st_net *m) {
  st_status st = ST_OK;
  for (int i = 0; i < g->n && !st__be_is_host(m->be); i++) {
    st_status si = st__be_status(g->reps[i]->ctx);
    if (st == ST_OK) st = si;
  }
  return st;
}

static st_status run_pass(pass *p, st_step_stats *out) {
  st_replica_group *g = p->g;
  ST_ASSERT(g->n <= ST_MAX_REPLICAS);
  for (int i = 0; i < g->n; i++) {
    int start, count;
    st__split(p->b->size, g->n, i, &start, &count);
    st_status s = p->train ? st__replica_reserve(p->m, g->reps[i], count)
                           : st__replica_reserve_infer(p->m, g->reps[i], count);
    if (s != ST_OK) return s;
  }
  memset(p->stats, 0, sizeof p->stats);
  st__group_run(g, slice_task, p);
  for (int i = 0; i < g->n; i++) st__step_stats_add(out, &p->stats[i]); /* fixed order */
  return settle(g, p->m);
}

/* The processes' mean of the state dst (replica 0's), through host memory
 * on a device backend. */
static st_status net_mean(st_replica_group *g, st_net *m, st_backend_ctx *ctx, float *dst) {
  if (st__be_is_host(m->be))
    return g->net->vt->all_reduce(g->net, g->net->self, dst, m->n_state, ST_REDUCE_MEAN);
  float *h = malloc(m->n_state * sizeof(float));
  if (!h) return st_error(ST_ERR_NOMEM, "state mean: out of host memory");
  st__be_to_host(ctx, h, dst, m->n_state * sizeof(float));
  st_status s = g->net->vt->all_reduce(g->net, g->net->self, h, m->n_state, ST_REDUCE_MEAN);
  if (s == ST_OK) st__be_to_device(ctx, dst, h, m->n_state * sizeof(float));
  st__be_synchronize(ctx);
  free(h);
  return s;
}

void st__group_sync_state(st_replica_group *g, st_net *m) {
  int workers = g->net ? g->net->size : 1;
  if (g->n * workers == 1 || m->n_state == 0) return;
  float *dst = g->reps[0]->state;
  st_backend_ctx *ctx = g->reps[0]->ctx; /* dst is replica 0's */
  for (int i = 1; i < g->n; i++) m->be->axpy(ctx, m->n_state, 1.0f, g->reps[i]->state, dst);
  m->be->scale(ctx, m->n_state, 1.0f / (float)g->n, dst);
  /* a failure here resurfaces in the next step's first collective */
  if (workers > 1) (void)net_mean(g, m, ctx, dst);
  st__be_synchronize(ctx);
  for (int i = 1; i < g->n; i++)
    st__be_copy(g->reps[i]->ctx, g->reps[i]->state, dst, m->n_state * sizeof(float));
  for (int i = 1; i < g->n; i++) st__be_synchronize(g->reps[i]->ctx);
}

/* The gradient buffer cut into chunks, and the step's side task (task 0
 * when there is one). */
typedef struct chunked {
  st_replica_group *g;
  st_net *m;
  size_t chunk;
  const st__side_task *side;
  unsigned caller_fp; /* the caller's floating-point state, for the side task */
  bool summed;        /* global_clipnorm: reps[0] already holds the (clipped) sum */
} chunked;

/* Floats summed and updated at a time on host memory: the summed gradient is
 * still in L2 when the optimizer reads it (a whole chunk is ~0.5 MB per
 * thread on the mlp), and few enough calls that the per-call set-up does not
 * show. On a device the whole chunk at once: each call is a kernel launch
 * (the cnn's 103 Adam launches of 4096 floats took a third of its step on an
 * H200). The update is element-wise: the same bytes either way. */
#define APPLY_BLOCK 4096

/* Sum the replicas' gradients into reps[0] over chunk t, then apply the
 * optimizer to it, block by block. The update is host-side work on the
 * model's variables: the model's context, shared by the pool's threads on
 * disjoint chunks (backend/impl.h: cpu and reference contexts allow it). */
static void reduce_apply_task(void *arg, int t) {
  chunked *c = arg;
  if (c->side) {
    if (t == 0) {
      unsigned fp = st__fp_state();
      st__fp_set_state(c->caller_fp);
      c->side->fn(c->side->arg);
      st__fp_set_state(fp);
      return;
    }
    t--;
  }
  st_net *m = c->m;
  size_t lo = (size_t)t * c->chunk, n = m->n_params;
  if (lo >= n) return;
  size_t end = n - lo < c->chunk ? n : lo + c->chunk;
  size_t block = st__be_is_host(m->be) ? APPLY_BLOCK : c->chunk;
  for (size_t b = lo; b < end; b += block) {
    size_t len = end - b < block ? end - b : block;
    float *dst = c->g->reps[0]->grads + b;
    for (int i = 1; i < c->g->n && !c->summed; i++)
      m->be->axpy(m->be_ctx, len, 1.0f, c->g->reps[i]->grads + b, dst);
    st__apply_range(m, m->be_ctx, m->params + b, dst, m->slots, b, len);
  }
}

/* `parts` chunks aligned to 16 floats. */
static chunked make_chunks(st_replica_group *g, st_net *m, int parts) {
  size_t per = (m->n_params + (size_t)parts - 1) / (size_t)parts;
  per = (per + 15) & ~(size_t)15;
  return (chunked){g, m, per ? per : 16, NULL, 0, false};
}

/* Chunks per thread when a side task shares the update. */
#define SIDE_CHUNKS_PER_THREAD 4

st_status st__group_train(st_replica_group *g, st_net *m, const st_batch *b,
                          st_step_stats *out, const st__side_task *side) {
  pass p = {.g = g, .m = m, .b = b, .train = true};
  st_status s = run_pass(&p, out);
  if (s != ST_OK) return s;
  bool with_side = side && side->fn;
  int parts = with_side && g->n > 1 ? g->n * SIDE_CHUNKS_PER_THREAD : g->n;
  if (!st__be_is_host(m->be)) parts = 1; /* one stream: the update in one task */
  chunked c = make_chunks(g, m, parts);
  if (m->optimizer.global_clipnorm > 0.0f) { /* the norm needs the whole sum first */
    for (int i = 1; i < g->n; i++)
      m->be->axpy(m->be_ctx, m->n_params, 1.0f, g->reps[i]->grads, g->reps[0]->grads);
    st__clip_grads(m, m->be_ctx, g->reps[0]->grads);
    c.summed = true;
  }
  int ntasks = parts;
  if (with_side) {
    c.side = side;
    c.caller_fp = st__fp_state();
    ntasks++;
  }
  st__group_run_tasks(g, ntasks, reduce_apply_task, &c);
  return st__be_status(m->be_ctx); /* waits for a device's update */
}

st_status st__group_eval(st_replica_group *g, st_net *m, const st_batch *b,
                         st_step_stats *out, float *pred) {
  pass p = {.g = g, .m = m, .b = b, .train = false, .pred = pred};
  return run_pass(&p, out);
}
