/* global_clipnorm under the pipeline strategy (pipeline.h): the L2 norm of
 * the whole gradient formed across the stages in the order one device forms
 * it (st__clip_grads: the squares of grads[0 .. n_params) added in offset
 * order into one double), so the factor, and the clipped gradients, are the
 * bytes one_device --threads M gives.
 *
 * The net's trainable floats fall into segments, each held by one stage: a
 * stage's range, and the tied table (the head's stage holds its gradient;
 * the lookup's stage's range starts after it). The running sum passes from
 * segment to segment in offset order: in one process the caller's thread
 * walks the stages' buffers once every stage has its gradient; across
 * processes each segment's stage receives the sum (a double, as two floats)
 * from the previous segment's stage (the same data-parallel replica), adds
 * its squares and sends it on, and the last sends the total to every other
 * stage; every process then scales its own gradients by the same factor.
 * Replicas of a stage hold the same (all-reduced) gradients, so each
 * replica's chain forms the same sum. The messages go over the pipeline's
 * point-to-point transport, in the order both ends make them (a pair's
 * messages keep their order). Caller's thread (the stage's, or the step's
 * once the stages are done). */
#include <stdlib.h>
#include <string.h>

#include "distribute/collective/collective.h"
#include "distribute/pipeline.h"

/* acc + the squares of g[0..n) (the backend's memory), added in order: the
 * loop of st__clip_grads. */
static double add_squares(st_backend_ctx *ctx, const float *g, size_t n, double ss) {
  const float *h = g;
  float *copy = NULL;
  if (ctx->be->to_device) { /* device memory: read a host copy */
    copy = malloc(n * sizeof(float) + 1);
    ST_ASSERT(copy);
    st__be_to_host(ctx, copy, g, n * sizeof(float));
    h = copy;
  }
  for (size_t i = 0; i < n; i++) ss += (double)h[i] * (double)h[i];
  free(copy);
  return ss;
}

int st__pipe_clip_segments(const st_net *m, int S, const int *first, const st_pipe_tie *tie,
                           st_pipe_seg *seg) {
  int J = 0;
  for (int i = 0; i < S; i++) {
    size_t off, n;
    st__pipe_var_range(m, first[i], first[i + 1], true, &off, &n);
    if (tie->layer >= 0 && i == tie->src) off += tie->n, n -= tie->n; /* its first variable */
    if (n) seg[J++] = (st_pipe_seg){off, n, i};
  }
  if (tie->layer >= 0 && tie->n) seg[J++] = (st_pipe_seg){tie->off, tie->n, tie->dst};
  for (int j = 1; j < J; j++) /* offset order (insertion sort: S + 1 at most) */
    for (int i = j; i > 0 && seg[i].off < seg[i - 1].off; i--) {
      st_pipe_seg t = seg[i];
      seg[i] = seg[i - 1], seg[i - 1] = t;
    }
  size_t at = 0;
  for (int j = 0; j < J; j++) {
    if (seg[j].off != at) return -1;
    at += seg[j].n;
  }
  return at == m->n_params ? J : -1;
}

/* Segment g's gradient in stage st (which holds it). */
static float *seg_grads(const st_pipe_stage *st, const st_pipe_seg *g) {
  if (st->tie_dst && g->off == st->tie.off) return st->tgrad;
  return st->grads + (g->off - st->poff);
}

/* The stage's gradients (its range, the tied table on its dst) times f. */
static void scale_stage(const st_net *m, st_pipe_stage *st, float f) {
  if (f == 1.0f) return;
  if (st->np) m->be->scale(st->ctx, st->np, f, st->grads);
  if (st->tie_dst) m->be->scale(st->ctx, st->tie.n, f, st->tgrad);
}

static st_status no_tiling(const st_net *m) {
  return st_error(ST_ERR_INVALID, "pipeline: global_clipnorm: the stages' variables do not "
                  "tile the net's %zu trainable floats", m->n_params);
}

st_status st__pipe_clip_stages(const st_net *m, st_pipe_stage *const *stages, int S) {
  int first[ST_MAX_REPLICAS + 1];
  for (int i = 0; i < S; i++) first[i] = stages[i]->lo;
  first[S] = m->nlayers;
  st_pipe_seg seg[ST_MAX_REPLICAS + 1];
  int J = st__pipe_clip_segments(m, S, first, &stages[0]->tie, seg);
  if (J < 0) return no_tiling(m);
  double ss = 0.0;
  for (int j = 0; j < J; j++) {
    const st_pipe_stage *st = stages[seg[j].stage];
    ss = add_squares(st->ctx, seg_grads(st, &seg[j]), seg[j].n, ss);
  }
  float f = st_optimizer_clip_factor(&m->optimizer, ss);
  for (int i = 0; i < S; i++) scale_stage(m, stages[i], f);
  return ST_OK;
}

/* The running sum to or from stage `peer` (this replica's process). */
static st_status pass_sum(const st_pipe_clip_procs *c, double *ss, int peer, bool send) {
  float msg[2];
  int rank = peer * c->D + c->rep, h = -1;
  st_collective *p2p = c->p2p;
  st_status s;
  if (send) {
    memcpy(msg, ss, sizeof msg);
    s = p2p->vt->send(p2p, msg, 2, rank, &h);
    if (s == ST_OK) s = p2p->vt->wait(p2p, h);
  } else if ((s = p2p->vt->recv(p2p, msg, 2, rank)) == ST_OK) {
    memcpy(ss, msg, sizeof msg);
  }
  if (s == ST_OK) return s;
  return st_error_prefix(s, "pipeline stage %d (rank %d), the gradient norm (global_clipnorm), "
                         "%s stage %d (rank %d): ", c->st->index, c->st->index * c->D + c->rep,
                         send ? "sending to" : "receiving from", peer, rank);
}

st_status st__pipe_clip_across(const st_net *m, const st_pipe_clip_procs *c) {
  st_pipe_seg seg[ST_MAX_REPLICAS + 1];
  int J = st__pipe_clip_segments(m, c->S, c->first, &c->st->tie, seg), me = c->st->index;
  if (J < 0) return no_tiling(m);
  double ss = 0.0;
  st_status s = ST_OK;
  for (int j = 0; j < J && s == ST_OK; j++) {
    if (seg[j].stage != me) continue;
    if (j > 0 && seg[j - 1].stage != me && (s = pass_sum(c, &ss, seg[j - 1].stage, false)) != ST_OK)
      break;
    ss = add_squares(c->st->ctx, seg_grads(c->st, &seg[j]), seg[j].n, ss);
    if (j + 1 < J && seg[j + 1].stage != me) s = pass_sum(c, &ss, seg[j + 1].stage, true);
  }
  int last = J ? seg[J - 1].stage : 0; /* holds the total: tells every other stage */
  for (int i = 0; i < c->S && s == ST_OK; i++)
    if (me == last && i != me) s = pass_sum(c, &ss, i, true);
    else if (me != last && i == last) s = pass_sum(c, &ss, last, false);
  if (s == ST_OK) scale_stage(m, c->st, st_optimizer_clip_factor(&m->optimizer, ss));
  return s;
}
