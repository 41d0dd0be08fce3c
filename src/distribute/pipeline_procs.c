/* The pipeline strategy across the processes of an MPI job: P = S x D
 * processes, rank r runs stage r / D as data-parallel replica r % D. Every
 * process reads the same global batch (same seed); replica d takes its share
 * st__split(B, D, d) and runs it as M micro-batches (dropout keyed by slice
 * d*M + k, as one device's thread d*M + k), in the GPipe or 1F1B order of
 * pipeline.c. Activations go to the same replica of the next stage and input
 * gradients back with the collective table's point-to-point send/recv (MPI:
 * sends are posted and completed before their buffer is reused, receives
 * wait, so the 1F1B exchange cannot deadlock); a peer that does not answer
 * within --collective-timeout fails the step with ST_ERR_TIMEOUT naming both
 * stages. After the micro-batches, a stage's D replicas all-reduce (SUM, in
 * replica order) its gradients and average its non-trainable state, then
 * (global_clipnorm: the norm passed from stage to stage, pipeline_clip.c)
 * each applies the optimizer to the stage's variables and slots.
 *
 * Memory: a process holds only its stage's share. Its variable placement
 * (st__procs_placement, placement.h) does what follows. compile calls its
 * place instead of allocating: the net's variables, state and optimizer
 * slots are reserved address space (base/vmem.h: every offset stays valid)
 * of which only the stage's ranges are memory, initialised with the values
 * one device gives them (st__net_init_layers). Nothing is gathered while
 * training. --save and checkpoints (ModelCheckpoint, backups) are written
 * by the chief as the tensors arrive: every other stage's first replica
 * sends its variables (and slots) one tensor at a time (serve /
 * read), so the chief holds one tensor of another stage at a time; the
 * files are the bytes one process writes. get_weights (gather_vars)
 * broadcasts every stage's variables to every process, whose whole layout
 * is then memory until the next step. A restore or load commits the whole
 * layout on every process (expose) and publish keeps the share.
 * The loss and metric sums of the last stage's replicas and every stage's
 * figures are all-gathered, so fit and its callbacks see the same numbers on
 * every process.
 *
 * A table tied across stages (pipeline.h, GPT's wte and its head): the
 * lookup's stage (src) keeps the table's values, not its slots; the head's
 * stage (dst) commits values and slots of the table beside its own range,
 * serves them in a save and restores them from a checkpoint (st_net tie_p).
 * Per micro-batch src sends dst the gradient of the lookup's output (after
 * its input gradient, in the order dst receives them: the messages of a
 * pair keep their order); after the step dst sends src the new values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fpenv.h"
#include "base/split.h"
#include "base/vmem.h"
#include "distribute/collective/collective.h"
#include "distribute/pipeline.h"

typedef struct procs {
  int S, D, M, stage, rep, rank, prev, next; /* prev/next: neighbour ranks or -1 */
  st_pipeline_schedule sched;
  int first_layer[ST_MAX_REPLICAS + 1];      /* stage i: [first_layer[i], first_layer[i+1]) */
  int first;                                 /* the net's first trainable layer */
  st_pipe_tie tie;                           /* a table tied across stages, or layer -1 */
  int tie_peer;                              /* the tie's other stage's rank (this replica's) */
  st_pipe_stage *st;
  st_collective *p2p, *world, *group;        /* group: this stage's replicas, or NULL */
  int act_send[ST_MAX_REPLICAS * 64], dx_send[ST_MAX_REPLICAS * 64]; /* [nslots] handles */
  int tdy_send[ST_MAX_REPLICAS * 64];        /* the tie's src: its tdy messages */
  double step_seconds;
  st_pipeline_stage_stats table[ST_MAX_REPLICAS];
  bool gathered;                             /* the whole layout is memory */
  int *log, nlog;                            /* [2M] the passes this stage ran */
  float *all_log;                            /* [P * 2M]: every process's */
  double idle[ST_MAX_REPLICAS];
  int in_flight[ST_MAX_REPLICAS];
  bool replayed;
  bool stepped;                              /* a training step ran (the micro-batch check) */
  int asked[ST_MAX_REPLICAS], owed[ST_MAX_REPLICAS]; /* a streamed save: per stage */
  /* the current step */
  const st_batch *b;
  st_batch mine;                             /* this replica's examples of b */
  st_step_stats stats;
} procs;

enum { MAX_SLOTS = ST_MAX_REPLICAS * 64 };
enum { MAX_LOGGED = 4096 }; /* micro-batches up to which the schedule is replayed */

/* ---- life ------------------------------------------------------------- */

static void free_procs(procs *p, const st_net *m, const char *why) {
  if (!p) return;
  if (p->world) st__collective_mpi_leave(p->world, why);
  st__collective_destroy(p->group);
  st__collective_destroy(p->world);
  st__collective_destroy(p->p2p);
  st__pipe_stage_destroy(m, p->st);
  free(p->log);
  free(p->all_log);
  free(p);
}

static st_status make_transports(procs *p, st_strategy *s, st_net *m) {
  double t = st__cluster_timeout(s->cluster);
  st_status st = st__collective_mpi_create(t, &m->step, &p->p2p);
  if (st == ST_OK) st = st__collective_mpi_create(t, &m->step, &p->world);
  if (st == ST_OK && p->D > 1) st = st__collective_mpi_create_group(p->stage, t, &m->step, &p->group);
  return st;
}

st_status st__pipeline_procs_attach(st_strategy *s, st_net *m) {
  int P = st__cluster_size(s->cluster), S = s->pipeline_stages;
  st_status st = st__cluster_open(s->cluster, m);
  if (st != ST_OK) return st;
  procs *p = calloc(1, sizeof *p);
  if (!p) {
    st = st_error(ST_ERR_NOMEM, "pipeline: out of memory");
    goto fail;
  }
  p->S = S, p->D = P / S, p->rank = st__cluster_rank(s->cluster);
  p->stage = p->rank / p->D, p->rep = p->rank % p->D;
  p->prev = p->stage > 0 ? p->rank - p->D : -1;
  p->next = p->stage < S - 1 ? p->rank + p->D : -1;
  p->M = s->opts.micro_batches ? s->opts.micro_batches : S;
  p->sched = s->opts.pipeline_schedule;
  p->first = st__pipe_first_trainable(m);
  if ((st = st__pipe_partition(m, S, s->pipeline_bounds, p->first_layer)) != ST_OK) goto fail;
  p->first_layer[S] = m->nlayers;
  if ((st = st__pipe_tie_find(m, S, p->first_layer, &p->tie)) != ST_OK) goto fail;
  p->tie_peer = p->tie.layer < 0 ? -1
                : (p->stage == p->tie.src ? p->tie.dst : p->tie.src) * p->D + p->rep;
  /* the flags that size every message agree before any buffer is sized */
  if ((st = st__pipe_procs_agree(s->cluster, S, p->M, p->sched, p->first_layer)) != ST_OK) goto fail;
  int slots = p->sched == ST_PIPELINE_GPIPE ? p->M : (S - p->stage < p->M ? S - p->stage : p->M);
  if (slots > MAX_SLOTS) {
    st = st_error(ST_ERR_INVALID, "pipeline: %d micro-batches in flight across processes (at "
                  "most %d)", slots, MAX_SLOTS);
    goto fail;
  }
  for (int i = 0; i < MAX_SLOTS; i++) p->act_send[i] = p->dx_send[i] = p->tdy_send[i] = -1;
  p->log = malloc(sizeof(int) * 2 * (size_t)p->M);
  p->all_log = p->M <= MAX_LOGGED ? malloc(sizeof(float) * 2 * (size_t)p->M * (size_t)P) : NULL;
  if (!p->log || (p->M <= MAX_LOGGED && !p->all_log)) {
    st = st_error(ST_ERR_NOMEM, "pipeline: out of memory");
    goto fail;
  }
  st = st__pipe_stage_create(m, p->stage, p->first_layer[p->stage], p->first_layer[p->stage + 1],
                             slots, p->stage == S - 1, true, &p->tie, &p->st);
  if (st == ST_OK) st = make_transports(p, s, m);
  if (st != ST_OK) goto fail;
  st_blas_set_threads(1);
  s->impl = p;
  s->net = m;
  return ST_OK;
fail:
  free_procs(p, m, st_last_error());
  st__cluster_close(s->cluster, st_last_error());
  return st;
}

void st__pipeline_procs_detach(st_strategy *s) {
  char why[512];
  snprintf(why, sizeof why, "%s", st_last_error());
  free_procs(s->impl, s->net, why);
  st__cluster_close(s->cluster, why);
  s->impl = NULL;
  s->net = NULL;
}

/* ---- messages ------------------------------------------------------------ */

/* A failed exchange with rank `peer`, named by stages. */
static st_status exchange_failed(const procs *p, st_status s, int peer, const char *what) {
  return st_error_prefix(s, "pipeline stage %d (rank %d), %s stage %d (rank %d): ", p->stage,
                         p->rank, what, peer / p->D, peer);
}

static st_status send_to(procs *p, const float *buf, size_t n, int peer, int *handle) {
  st_status s = p->p2p->vt->wait(p->p2p, *handle); /* buf's previous message */
  *handle = -1;
  if (s == ST_OK && n) s = p->p2p->vt->send(p->p2p, buf, n, peer, handle);
  return s == ST_OK ? s : exchange_failed(p, s, peer, "sending to");
}

static st_status recv_from(procs *p, float *buf, size_t n, int peer) {
  st_status s = n ? p->p2p->vt->recv(p->p2p, buf, n, peer) : ST_OK;
  return s == ST_OK ? s : exchange_failed(p, s, peer, "receiving from");
}

/* Drop the handles of pending sends without waiting: after a failure the
 * transport has given their requests up (waiting again would time out once
 * per message and overwrite the first error's message). */
static void forget_sends(procs *p) {
  for (int i = 0; i < p->st->nslots; i++) p->act_send[i] = p->dx_send[i] = p->tdy_send[i] = -1;
}

/* Wait for every pending send; the first failure stops the wait. */
static st_status wait_sends(procs *p) {
  st_status s = ST_OK;
  for (int i = 0; i < p->st->nslots && s == ST_OK; i++) {
    if ((s = p->p2p->vt->wait(p->p2p, p->act_send[i])) != ST_OK)
      s = exchange_failed(p, s, p->next, "sending to");
    else if ((s = p->p2p->vt->wait(p->p2p, p->dx_send[i])) != ST_OK)
      s = exchange_failed(p, s, p->prev, "sending to");
    else if ((s = p->p2p->vt->wait(p->p2p, p->tdy_send[i])) != ST_OK)
      s = exchange_failed(p, s, p->tie_peer, "sending to");
  }
  forget_sends(p);
  return s;
}

/* ---- one training step -------------------------------------------------- */

static size_t in_size(const st_net *m, const st_pipe_stage *st) {
  return st__pipe_stage_in_size(m, st);
}

static st_status forward(procs *p, st_net *m, int k) {
  st_pipe_stage *st = p->st;
  int slot = k % st->nslots;
  st_batch mb = st__batch_slice(m, &p->mine, p->M, k, NULL);
  int n = mb.size;
  const float *x = mb.x;
  st_status s = ST_OK;
  if (p->prev >= 0) {
    x = st->in[slot];
    if ((s = recv_from(p, st->in[slot], (size_t)n * in_size(m, st), p->prev)) != ST_OK) return s;
  }
  double t0 = st_now_seconds();
  if (p->next >= 0 && (s = p->p2p->vt->wait(p->p2p, p->act_send[slot])) != ST_OK)
    return exchange_failed(p, s, p->next, "sending to");
  p->act_send[slot] = -1;
  const float *out = n ? st__pipe_stage_forward(m, st, slot, p->rep * p->M + k, x, n, true, m->step)
                       : NULL;
  if (p->next < 0 && n) st__step_metrics(m, out, mb.y, n, &p->stats);
  st->busy += st_now_seconds() - t0;
  p->log[p->nlog++] = k + 1;
  if (p->next >= 0)
    s = send_to(p, out, (size_t)n * st__pipe_stage_out_size(m, st), p->next,
                &p->act_send[slot]);
  return s;
}

/* The tie's dst: micro-batch k's table gradient (src's tdy message). */
static st_status fold_tie(procs *p, st_net *m, int k) {
  st_pipe_stage *st = p->st;
  st_batch mb = st__batch_slice(m, &p->mine, p->M, k, NULL);
  st_status s = recv_from(p, st->tdyin, (size_t)mb.size * st->tie.dy, p->tie_peer);
  if (s == ST_OK) s = st__pipe_tie_fold(m, st, k, mb.x, st->tdyin, mb.size, m->step);
  return s;
}

static st_status backward(procs *p, st_net *m, int k) {
  st_pipe_stage *st = p->st;
  int slot = k % st->nslots;
  st_batch mb = st__batch_slice(m, &p->mine, p->M, k, NULL);
  int n = mb.size;
  size_t outs = st__pipe_stage_out_size(m, st);
  float *dy = p->next >= 0 ? st->recv[slot] : st->gslots[0];
  st_status s = ST_OK;
  if (p->next >= 0 && st->hi > p->first && (s = recv_from(p, dy, (size_t)n * outs, p->next)) != ST_OK)
    return s;
  if (st->tie_dst && k > 0 && (s = fold_tie(p, m, k - 1)) != ST_OK) return s;
  if (st->tie_src) { /* tdy[slot]'s previous message has left */
    if ((s = p->p2p->vt->wait(p->p2p, p->tdy_send[slot])) != ST_OK)
      return exchange_failed(p, s, p->tie_peer, "sending to");
    p->tdy_send[slot] = -1;
  }
  double t0 = st_now_seconds();
  if (p->next < 0 && n) {
    st__net_loss(m, st->ctx, n, st__pipe_stage_out(st, slot), mb.y, 1.0f / (float)p->b->size,
                 st->loss_rows, dy);
    for (int i = 0; i < n; i++) p->stats.loss_sum += st->loss_rows[i];
    p->stats.examples += n;
  }
  float *dx = NULL;
  if (p->prev >= 0 && st->lo > p->first) {
    if ((s = p->p2p->vt->wait(p->p2p, p->dx_send[slot])) != ST_OK)
      return exchange_failed(p, s, p->prev, "sending to");
    p->dx_send[slot] = -1;
    dx = st->dxs[slot];
  }
  const float *x = p->prev >= 0 ? st->in[slot] : mb.x;
  if (n) st__pipe_stage_backward(m, st, slot, p->rep * p->M + k, k > 0, x, dy, n, dx, p->first,
                                  m->step);
  else st__pipe_stage_no_examples(m, st, k);
  st->busy += st_now_seconds() - t0;
  p->log[p->nlog++] = -(k + 1);
  if (dx) s = send_to(p, dx, (size_t)n * in_size(m, st), p->prev, &p->dx_send[slot]);
  if (s == ST_OK && st->tie_src)
    s = send_to(p, st->tdy[slot], (size_t)n * st->tie.dy, p->tie_peer, &p->tdy_send[slot]);
  return s;
}

/* The stage's schedule (pipeline.c's order). */
static st_status run_schedule(procs *p, st_net *m) {
  int M = p->M, warm = p->sched == ST_PIPELINE_GPIPE ? M : (p->S - p->stage - 1 < M ? p->S - p->stage - 1 : M);
  st_status s = ST_OK;
  p->nlog = 0;
  for (int k = 0; k < warm && s == ST_OK; k++) s = forward(p, m, k);
  for (int k = 0; k < M && s == ST_OK; k++) {
    if (k + warm < M) s = forward(p, m, k + warm);
    if (s == ST_OK) s = backward(p, m, k);
  }
  if (s == ST_OK && p->st->tie_dst) s = fold_tie(p, m, M - 1);
  if (s != ST_OK) {
    forget_sends(p);
    return s;
  }
  return wait_sends(p);
}

/* The tie's dst updates the table and sends its new values to src, which
 * takes them before its next forward. */
static st_status share_table(procs *p, st_net *m) {
  st_pipe_stage *st = p->st;
  float *table = m->params + st->tie.off;
  int h = -1;
  st_status s = ST_OK;
  if (st->tie_dst) {
    st__pipe_tie_apply(m, st);
    if ((s = send_to(p, table, st->tie.n, p->tie_peer, &h)) == ST_OK &&
        (s = p->p2p->vt->wait(p->p2p, h)) != ST_OK)
      s = exchange_failed(p, s, p->tie_peer, "sending to");
  } else if (st->tie_src) {
    s = recv_from(p, table, st->tie.n, p->tie_peer);
  }
  return s;
}

/* The replicas' gradient sum and state mean, then the update of the stage. */
static st_status reduce_apply(procs *p, st_net *m) {
  st_pipe_stage *st = p->st;
  st_status s = ST_OK;
  double t0 = st_now_seconds();
  if (p->group && st->np) s = p->group->vt->all_reduce(p->group, p->group->self, st->grads, st->np, ST_REDUCE_SUM);
  if (s == ST_OK && p->group && st->tie_dst)
    s = p->group->vt->all_reduce(p->group, p->group->self, st->tgrad, st->tie.n, ST_REDUCE_SUM);
  if (s == ST_OK && p->group && st->ns)
    s = p->group->vt->all_reduce(p->group, p->group->self, m->state + st->soff, st->ns, ST_REDUCE_MEAN);
  if (s != ST_OK) return st_error_prefix(s, "pipeline stage %d (rank %d), replicas: ", p->stage, p->rank);
  st_pipe_clip_procs clip = {st, p->S, p->D, p->rep, p->first_layer, p->p2p};
  if (m->optimizer.global_clipnorm > 0.0f && (s = st__pipe_clip_across(m, &clip)) != ST_OK)
    return s; /* the norm over every stage (pipeline_clip.c) */
  if (st->np)
    st__apply_range(m, st->ctx, m->params + st->poff, st->grads, m->slots, st->poff, st->np);
  st->busy += st_now_seconds() - t0;
  return share_table(p, m);
}

/* Stage i's variables and state: the ranges gather_vars broadcasts. */
static int stage_ranges(const procs *p, st_net *m, int i, float **ptr, size_t *len) {
  size_t po, pn, so, sn;
  st__pipe_var_range(m, p->first_layer[i], p->first_layer[i + 1], true, &po, &pn);
  st__pipe_var_range(m, p->first_layer[i], p->first_layer[i + 1], false, &so, &sn);
  ptr[0] = m->params + po, len[0] = pn;
  ptr[1] = m->state + so, len[1] = sn;
  return 2;
}

/* Make the whole layout of the net's variables (and slots) memory. */
static st_status commit_all(procs *p, st_net *m, bool with_slots) {
  st_status s = st__vm_commit(m->params, m->n_params, 0, m->n_params, "the whole model's variables");
  if (s == ST_OK) s = st__vm_commit(m->state, m->n_state, 0, m->n_state, "the whole model's state");
  for (int j = 0; s == ST_OK && with_slots && j < m->n_slots; j++)
    s = st__vm_commit(m->slots[j], m->n_params, 0, m->n_params, "the whole model's optimizer slots");
  p->gathered = true;
  return s;
}

/* The trainable floats a process of stage `stage` keeps: values pr[0..1]
 * (offset, length) and pr[2..3], slots sr[] alike: its stage's range, plus
 * the tied table's values and slots on the tie's dst, less the table's
 * slots on its src (which holds the table's values only). */
static void share_of(const st_net *m, const st_pipe_tie *t, int stage, size_t pr[4], size_t sr[4]) {
  pr[0] = sr[0] = m->own_p, pr[1] = sr[1] = m->own_np, pr[2] = sr[2] = 0, pr[3] = sr[3] = 0;
  if (t->layer < 0) return;
  if (stage == t->src) sr[0] += t->n, sr[1] -= t->n;
  if (stage == t->dst) pr[2] = sr[2] = t->off, pr[3] = sr[3] = t->n;
}

/* A net whose whole layout was committed (gather, expose): give back all
 * but the stage's share (base/vmem.h). */
static void keep_share(st_strategy *s, st_net *m) {
  procs *p = s->impl;
  if (!p || !p->gathered || !m->reserved) return;
  size_t pr[4], sr[4];
  share_of(m, &p->tie, p->stage, pr, sr);
  st__vm_keep_two(m->params, m->n_params, pr[0], pr[1], pr[2], pr[3]);
  st__vm_keep_only(m->state, m->n_state, m->own_s, m->own_ns);
  for (int j = 0; j < m->n_slots; j++)
    st__vm_keep_two(m->slots[j], m->n_params, sr[0], sr[1], sr[2], sr[3]);
  p->gathered = false;
}

/* place (placement.h): reserve the layout, commit and initialise the
 * share of this process's stage. */
static st_status procs_place_vars(st_strategy *s, st_net *m) {
  int S = s->pipeline_stages, D = st__cluster_size(s->cluster) / S, first[ST_MAX_REPLICAS + 1];
  int stage = st__cluster_rank(s->cluster) / D;
  st_status st = st__pipe_partition(m, S, s->pipeline_bounds, first);
  if (st != ST_OK) return st;
  first[S] = m->nlayers;
  int lo = first[stage], hi = first[stage + 1];
  st_pipe_tie tie;
  if ((st = st__pipe_tie_find(m, S, first, &tie)) != ST_OK) return st;
  st__pipe_var_range(m, lo, hi, true, &m->own_p, &m->own_np);
  st__pipe_var_range(m, lo, hi, false, &m->own_s, &m->own_ns);
  m->reserved = true;
  m->n_slots = st_optimizer_slot_count(&m->optimizer);
  if (!(m->params = st__vm_reserve(m->n_params, "the variables")) ||
      !(m->state = st__vm_reserve(m->n_state, "the state")))
    return ST_ERR_NOMEM;
  for (int j = 0; j < 4; j++)
    if (!(m->slots[j] = st__vm_reserve(m->n_params, "the optimizer slots"))) return ST_ERR_NOMEM;
  char what[160];
  snprintf(what, sizeof what, "pipeline stage %d's variables (layers %d..%d, %zu parameters, "
           "%d optimizer slots)", stage, lo, hi - 1, m->own_np, m->n_slots);
  size_t pr[4], sr[4];
  share_of(m, &tie, stage, pr, sr);
  st = st__vm_commit(m->params, m->n_params, pr[0], pr[1], what);
  if (st == ST_OK) st = st__vm_commit(m->params, m->n_params, pr[2], pr[3], what);
  if (st == ST_OK) st = st__vm_commit(m->state, m->n_state, m->own_s, m->own_ns, what);
  for (int j = 0; st == ST_OK && j < m->n_slots; j++)
    if ((st = st__vm_commit(m->slots[j], m->n_params, sr[0], sr[1], what)) == ST_OK)
      st = st__vm_commit(m->slots[j], m->n_params, sr[2], sr[3], what);
  if (st != ST_OK) return st_error_prefix(st, "compile: ");
  st__net_init_layers(m, lo, hi, m->params, m->state);
  if (tie.layer >= 0 && stage == tie.dst) /* its copy of the table: the same values */
    st__net_init_layers(m, tie.layer, tie.layer + 1, m->params, m->state);
  bool tied = tie.layer >= 0 && (stage == tie.src || stage == tie.dst);
  m->tie_p = tie.off, m->tie_np = tied ? tie.n : 0, m->tie_slots = stage == tie.dst;
  return ST_OK;
}

/* gather_vars (placement.h): the first replica of every stage broadcasts its
 * variables and state. */
static st_status procs_gather_vars(st_strategy *s, st_net *m) {
  procs *p = s->impl;
  if (!p) return st_error(ST_ERR_INVALID, "pipeline: the strategy is not attached");
  float *ptr[2];
  size_t len[2];
  st_status st = commit_all(p, m, false);
  for (int i = 0; i < p->S && st == ST_OK; i++) {
    int n = stage_ranges(p, m, i, ptr, len);
    for (int j = 0; j < n && st == ST_OK; j++)
      if (len[j]) st = p->world->vt->broadcast(p->world, p->world->self, ptr[j], len[j], i * p->D);
  }
  return st;
}

/* expose (placement.h). */
static st_status procs_expose_vars(st_strategy *s, st_net *m) {
  procs *p = s->impl;
  if (!p) return st_error(ST_ERR_INVALID, "pipeline: the strategy is not attached");
  return commit_all(p, m, true);
}

/* One variable (slot -1) or optimizer slot of this process's net. */
static float *var_of(st_net *m, int layer, int param, int slot) {
  const st_layer *l = m->layers[layer];
  return slot < 0 ? st__var_ptr(l, param, m->params, m->state)
                  : m->slots[slot] + l->params[param].offset;
}

/* The markers of a streamed save, chief to stage: send the next tensor, or
 * stop (the chief could not write the file). */
#define ASK_NEXT 1.0f
#define ASK_STOP -1.0f

/* The stage that serves layer l's tensors in a save: its own, or for the
 * tied table the tie's dst (which holds its slots). */
static int serving_stage(const procs *p, int l) {
  if (l == p->tie.layer) return p->tie.dst;
  int stage = 0;
  while (l >= p->first_layer[stage + 1]) stage++;
  return stage;
}

/* The tensors stage i sends in a streamed save. */
static int stage_tensors(const procs *p, const st_net *m, int i, bool with_slots) {
  int n = 0;
  for (int l = 0; l < m->nlayers; l++)
    for (int q = 0; q < m->layers[l]->nparams && serving_stage(p, l) == i; q++)
      n += 1 + (with_slots && m->layers[l]->params[q].trainable ? m->n_slots : 0);
  return n;
}

/* Serve layer i's tensors of pass k (-1: the variables, else slot k). */
static st_status serve_layer(procs *p, st_net *m, int i, int k) {
  st_status st = ST_OK;
  for (int q = 0; q < m->layers[i]->nparams && st == ST_OK; q++) {
    const st_layer *l = m->layers[i];
    if (k >= 0 && !l->params[q].trainable) continue;
    int h = -1;
    float ask = 0;
    if ((st = recv_from(p, &ask, 1, 0)) != ST_OK) break;
    if (ask != ASK_NEXT)
      return st_error(ST_ERR_PEER, "pipeline stage %d (rank %d): the chief (rank 0) stopped "
                      "the save: it could not write the file (its error is on its stderr)",
                      p->stage, p->rank);
    st = send_to(p, var_of(m, i, q, k), st_shape_size(l->params[q].shape), 0, &h);
    if (st == ST_OK && (st = p->p2p->vt->wait(p->p2p, h)) != ST_OK)
      st = exchange_failed(p, st, 0, "sending to");
  }
  return st;
}

/* serve (placement.h): every process but the chief serves (the first
 * replica of each stage sends its layers' variables, layer by layer, each
 * layer's parameters in order, then (with_slots) for each slot its
 * trainable ones in the same order; the other replicas send nothing), each
 * tensor when the chief asks for it. */
static st_status procs_serve(st_strategy *s, st_net *m, bool with_slots, bool *served) {
  procs *p = s->impl;
  if (!p) return st_error(ST_ERR_INVALID, "pipeline: the strategy is not attached");
  *served = p->rank != 0;
  if (p->rank == 0 || p->rep) return ST_OK;
  st_status st = ST_OK;
  for (int k = -1; k < (with_slots ? m->n_slots : 0) && st == ST_OK; k++) {
    if (p->st->tie_dst) st = serve_layer(p, m, p->tie.layer, k); /* file order: it comes first */
    for (int i = p->st->lo; i < p->st->hi && st == ST_OK; i++)
      if (serving_stage(p, i) == p->stage) st = serve_layer(p, m, i, k);
  }
  return st;
}

/* read (placement.h): the chief's own stage from its memory, the others'
 * asked for and received into buf. */
static st_status procs_read(st_strategy *s, st_net *m, int layer, int param, int slot,
                                float *buf, const float **data) {
  procs *p = s->impl;
  if (!p) return st_error(ST_ERR_INVALID, "pipeline: the strategy is not attached");
  int stage = serving_stage(p, layer), h = -1;
  if (stage == p->stage) { /* the chief's own stage */
    *data = var_of(m, layer, param, slot);
    return ST_OK;
  }
  *data = buf;
  const float ask = ASK_NEXT;
  st_status st = send_to(p, &ask, 1, stage * p->D, &h);
  if (st == ST_OK && (st = p->p2p->vt->wait(p->p2p, h)) != ST_OK)
    st = exchange_failed(p, st, stage * p->D, "sending to");
  if (st != ST_OK) return st;
  p->asked[stage]++;
  return recv_from(p, buf, st_shape_size(m->layers[layer]->params[param].shape), stage * p->D);
}

/* begin (placement.h): what each stage owes. */
static void procs_begin_vars(st_strategy *s, st_net *m, bool with_slots) {
  procs *p = s->impl;
  for (int i = 0; p && i < p->S; i++) {
    p->asked[i] = 0;
    p->owed[i] = i ? stage_tensors(p, m, i, with_slots) : 0;
  }
}

/* end (placement.h): ASK_STOP to every stage still owed a question
 * (best effort: a stage that is gone times out on its own). */
static void procs_end_vars(st_strategy *s, st_net *m, st_status failed) {
  procs *p = s->impl;
  (void)m;
  char keep[1024];
  snprintf(keep, sizeof keep, "%s", st_last_error());
  bool stopped = false;
  for (int i = 1; p && i < p->S; i++) {
    if (p->asked[i] >= p->owed[i]) continue;
    const float stop = ASK_STOP;
    int h = -1;
    if (p->p2p->vt->send(p->p2p, &stop, 1, i * p->D, &h) == ST_OK) p->p2p->vt->wait(p->p2p, h);
    p->asked[i] = p->owed[i];
    stopped = true;
  }
  if (failed != ST_OK && stopped) st_error(failed, "%s", keep);
}

/* publish (placement.h): after a restore or load wrote every variable,
 * keep only the stage's share in memory. */
static void procs_publish(st_strategy *s, st_net *m) { keep_share(s, m); }

const st_var_placement st__procs_placement = {
    .name = "pipeline stages across processes",
    .place = procs_place_vars,
    .gather_vars = procs_gather_vars,
    .expose = procs_expose_vars,
    .publish = procs_publish,
    .serve = procs_serve,
    .begin = procs_begin_vars,
    .read = procs_read,
    .end = procs_end_vars,
};

enum { REC = 20 }; /* floats per process in the all-gathered record */
enum { DIGEST_AT = 18 }; /* rec[18..19]: the batch's digest (pipeline_agree.c) */

static void put(float *rec, int at, const void *v) { memcpy(rec + at, v, 8); }
static void get(const float *rec, int at, void *v) { memcpy(v, rec + at, 8); }

/* Every process's stats and stage figures to every process: out gets the sum
 * of the last stage's replicas (in replica order); the table the figures of
 * every stage's first replica. */
static st_status share_stats(procs *p, const st_net *m, const st_batch *b, st_step_stats *out,
                             bool table) {
  float rec[REC] = {0}, *all = malloc(sizeof(float) * REC * (size_t)(p->S * p->D));
  if (!all) return st_error(ST_ERR_NOMEM, "pipeline: out of memory");
  int64_t bytes = (int64_t)p->st->buffer_bytes, params = (int64_t)(p->st->np + p->st->ns);
  if (p->st->tie_dst) params += (int64_t)p->st->tie.n; /* it trains the tied table */
  put(rec, 0, &p->stats.loss_sum), put(rec, 2, &p->stats.examples);
  put(rec, 4, &p->stats.correct), put(rec, 6, &p->stats.metric_count);
  put(rec, 8, &p->st->busy), put(rec, 10, &bytes), put(rec, 12, &params);
  rec[14] = (float)p->st->lo, rec[15] = (float)p->st->hi;
  int64_t rss = (int64_t)st_peak_rss_bytes();
  put(rec, 16, &rss);
  uint32_t digest[2];
  st__pipe_batch_digest(m, b, digest);
  memcpy(rec + DIGEST_AT, digest, sizeof digest);
  st_status s = p->world->vt->all_gather(p->world, p->world->self, rec, REC, all);
  st_status same = s == ST_OK ? st__pipe_compare_digests(all, p->S * p->D, REC, DIGEST_AT, m->step)
                              : ST_OK;
  for (int r = 0; s == ST_OK && r < p->S * p->D; r++) {
    const float *q = all + (size_t)r * REC;
    if (r / p->D == p->S - 1) {
      st_step_stats x = {0};
      get(q, 0, &x.loss_sum), get(q, 2, &x.examples), get(q, 4, &x.correct), get(q, 6, &x.metric_count);
      st__step_stats_add(out, &x);
    }
    if (!table || r % p->D) continue;
    st_pipeline_stage_stats *t = &p->table[r / p->D];
    get(q, 8, &t->busy_seconds), get(q, 10, &bytes), get(q, 12, &t->params);
    t->peak_bytes = (size_t)bytes;
    t->first_layer = (int)q[14], t->end_layer = (int)q[15];
    get(q, 16, &rss);
    t->peak_rss_bytes = (size_t)rss;
    t->schedule_bubble = p->replayed ? p->idle[r / p->D] : -1.0;
    t->max_in_flight = p->replayed ? p->in_flight[r / p->D] : 0;
    t->step_seconds = p->step_seconds;
    t->bubble_fraction = p->step_seconds > 0 ? 1.0 - t->busy_seconds / p->step_seconds : 0;
    if (t->bubble_fraction < 0) t->bubble_fraction = 0;
  }
  free(all);
  if (s != ST_OK) return st_error_prefix(s, "pipeline stage %d (rank %d), step figures: ", p->stage, p->rank);
  return same;
}

/* Every process's pass order to every process, replayed (pipeline_sched.c);
 * skipped for more than MAX_LOGGED micro-batches. */
static st_status replay(procs *p) {
  if (!p->all_log) return ST_OK;
  int M2 = 2 * p->M;
  float *mine = malloc(sizeof(float) * (size_t)M2);
  int *logs = malloc(sizeof(int) * (size_t)M2 * (size_t)p->S);
  st_status s = mine && logs ? ST_OK : st_error(ST_ERR_NOMEM, "pipeline: out of memory");
  for (int i = 0; s == ST_OK && i < M2; i++) mine[i] = (float)p->log[i];
  if (s == ST_OK) s = p->world->vt->all_gather(p->world, p->world->self, mine, (size_t)M2, p->all_log);
  for (int i = 0; s == ST_OK && i < p->S; i++) /* each stage's first replica */
    for (int j = 0; j < M2; j++) logs[(size_t)i * (size_t)M2 + (size_t)j] = (int)p->all_log[(size_t)i * (size_t)p->D * (size_t)M2 + (size_t)j];
  if (s == ST_OK) s = st__pipe_replay(p->S, p->M, logs, p->idle, p->in_flight);
  if (s == ST_OK) p->replayed = true;
  free(mine), free(logs);
  return s == ST_OK ? s : st_error_prefix(s, "pipeline stage %d (rank %d), schedule: ", p->stage, p->rank);
}

st_status st__pipeline_procs_train_step(st_strategy *s, st_net *m, const st_batch *b,
                                        st_step_stats *out) {
  procs *p = s->impl;
  keep_share(s, m); /* after a save: only the share again */
  p->mine = st__batch_slice(m, b, p->D, p->rep, NULL);
  if (!p->stepped && b->size / p->D < p->M) /* the run's first (full) batch: every rank alike */
    return st_error(ST_ERR_INVALID, "pipeline: %d micro-batches for a batch of %d examples per "
                    "replica: %d of them would be empty (--micro-batches at most the batch per "
                    "replica)", p->M, b->size / p->D, p->M - b->size / p->D);
  p->stepped = true;
  st_status st = st__pipe_stage_reserve(m, p->st, (p->mine.size + p->M - 1) / p->M);
  if (st != ST_OK) return st;
  memset(&p->stats, 0, sizeof p->stats);
  p->b = b;
  double t0 = st_now_seconds();
  unsigned fp = st__ftz_enter();
  st = run_schedule(p, m);
  if (st == ST_OK) st = reduce_apply(p, m);
  st__ftz_leave(fp);
  p->step_seconds += st_now_seconds() - t0;
  if (st == ST_OK) st = replay(p);
  if (st == ST_OK) st = share_stats(p, m, b, out, true);
  return st;
}

/* Inference: each replica's share through its chain of stages, in chunks of
 * a slot's examples; the last stage's sums to everyone, and (pred) its rows
 * broadcast from each last-stage replica in turn. */
st_status st__pipeline_procs_eval_step(st_strategy *s, st_net *m, const st_batch *b,
                                       st_step_stats *out, float *pred) {
  procs *p = s->impl;
  keep_share(s, m);
  st_pipe_stage *st = p->st;
  int start0, share;
  st__split(b->size, p->D, p->rep, &start0, &share);
  int cap = st->cap > 1 ? st->cap : (share < 256 ? (share > 0 ? share : 1) : 256);
  st_status r = st__pipe_stage_reserve(m, st, cap);
  size_t xs = st_shape_size(m->input_shape), outs = st__net_output_size(m);
  size_t ys = st__net_label_width(m), ins = in_size(m, st);
  size_t os = st__pipe_stage_out_size(m, st);
  memset(&p->stats, 0, sizeof p->stats);
  unsigned fp = st__ftz_enter();
  for (int start = start0; r == ST_OK && start < start0 + share; start += cap) {
    int n = start0 + share - start < cap ? start0 + share - start : cap;
    const float *x = b->x + (size_t)start * xs;
    if (p->prev >= 0 && (r = recv_from(p, st->in[0], (size_t)n * ins, p->prev)) != ST_OK) break;
    if (p->prev >= 0) x = st->in[0];
    const float *o = st__pipe_stage_forward(m, st, 0, 0, x, n, false, m->step);
    if (p->next >= 0) {
      int h = -1;
      if ((r = send_to(p, o, (size_t)n * os, p->next, &h)) == ST_OK && (r = p->p2p->vt->wait(p->p2p, h)) != ST_OK)
        r = exchange_failed(p, r, p->next, "sending to");
      continue;
    }
    const float *y = b->y ? b->y + (size_t)start * ys : NULL;
    if (y) {
      st__step_metrics(m, o, y, n, &p->stats);
      st__net_loss(m, st->ctx, n, o, y, 1.0f, st->loss_rows, NULL);
      for (int i = 0; i < n; i++) p->stats.loss_sum += st->loss_rows[i];
    }
    p->stats.examples += n;
    if (pred) st__be_to_host(st->ctx, pred + (size_t)start * outs, o, (size_t)n * outs * sizeof(float));
  }
  st__ftz_leave(fp);
  if (r != ST_OK) return r;
  if ((r = share_stats(p, m, b, out, false)) != ST_OK || !pred) return r;
  for (int d = 0; d < p->D && r == ST_OK; d++) {
    int s0, c;
    st__split(b->size, p->D, d, &s0, &c);
    if (c) r = p->world->vt->broadcast(p->world, p->world->self, pred + (size_t)s0 * outs,
                                       (size_t)c * outs, (p->S - 1) * p->D + d);
  }
  return r;
}

st_status st__pipeline_procs_stats(const st_strategy *s, int i, st_pipeline_stage_stats *out) {
  const procs *p = s->impl;
  *out = p->table[i];
  return ST_OK;
}

/* This process's stage: its replica's share of the batch (st__split over
 * the D replicas of a stage) in M micro-batches. */
void st__pipeline_procs_plan_bytes(const st_strategy *s, const st_net *m, int64_t batch,
                                   uint64_t *fixed, uint64_t *acts, int *cap) {
  const procs *p = s->impl;
  int64_t mine = (batch + p->D - 1) / p->D;
  *cap = (int)((mine + p->M - 1) / p->M);
  size_t f, a;
  st__pipe_stage_plan_bytes(m, p->st, *cap, &f, &a);
  *fixed = f, *acts = a;
}
