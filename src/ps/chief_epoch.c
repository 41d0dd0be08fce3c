/* The chief's closures (ps/chief.h): an epoch's permutation handed out in
 * closures of steps_per_execution steps, each done exactly once (a lost
 * worker's closure goes to another), with backups at quiescent points; and
 * one step at a time for the coordinator API. */
#include <stdlib.h>
#include <string.h>

#include "ps/chief.h"

/* This epoch's order of the training examples (seeded by seed and epoch). */
static void permute(st__ps_chief *c, int epoch) {
  int64_t n = c->n_train;
  for (int64_t i = 0; i < n; i++) c->perm[i] = (uint32_t)i;
  st_rng r = st_rng_make((uint64_t)c->job.seed, 0x5053u + (uint64_t)epoch);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)st_rng_below(&r, (uint64_t)i + 1);
    uint32_t t = c->perm[i];
    c->perm[i] = c->perm[j], c->perm[j] = t;
  }
}

/* RUN of closure k of the epoch to worker w. */
static st_status run_closure(st__ps_chief *c, int epoch, int k, st__ps_closure *cl, int w) {
  int64_t B = c->job.batch, n = c->n_train;
  size_t bytes = 8;
  for (int s = 0; s < cl->n; s++) {
    int64_t lo = (cl->first + s) * B, hi = lo + B < n ? lo + B : n;
    bytes += 16 + 8 * (size_t)(hi - lo);
  }
  uint8_t *p = malloc(bytes), *q = p;
  if (!p) return st_error(ST_ERR_NOMEM, "out of memory");
  st__ps_put_u64(q, (uint64_t)cl->n), q += 8;
  for (int s = 0; s < cl->n; s++) {
    int64_t b = cl->first + s, lo = b * B, hi = lo + B < n ? lo + B : n;
    st__ps_put_u64(q, (uint64_t)(epoch * c->steps_per_epoch + b)), st__ps_put_u64(q + 8, (uint64_t)(hi - lo));
    q += 16;
    for (int64_t i = lo; i < hi; i++, q += 8) st__ps_put_u64(q, c->perm[i]);
  }
  st_status st = st__ps_chief_send(c, c->w[w].sock, ST_PS_MSG_RUN, st__ps_chief_closure_id(c, epoch, k), p, bytes);
  free(p);
  cl->state = 1, cl->worker = w, c->w[w].busy = k;
  c->scheduled++;
  return st;
}

st_status st__ps_chief_backup_or_recover(st__ps_chief *c, int epoch, int k, const double *sums,
                                         st__ps_closure *cls) {
  c->ps_lost_in_wait = -1;
  st_status s = c->cfg.backup(c->cfg.user, epoch, k, sums);
  if (s == ST_ERR_PEER && c->ps_lost_in_wait >= 0 && c->backups > 0) {
    st_clear_error();
    s = st__ps_chief_recover(c, c->ps_lost_in_wait, cls);
  }
  return s;
}

/* Wait up to wait_ms for a message on the chief's socket or a worker's. */
static void poll_workers(st__ps_chief *c, int wait_ms) {
  st_ps_socket *socks[ST_PS_MAX_POLL];
  bool ready[ST_PS_MAX_POLL];
  int n = 0;
  socks[n++] = c->hb;
  for (int i = 0; i < c->nw && n < ST_PS_MAX_POLL; i++) socks[n++] = c->w[i].sock;
  st__ps_poll(socks, n, wait_ms, ready);
}

/* One epoch from closure k0 on (the ones before are done: a resumed
 * backup's position): every closure done once. sums: loss, examples,
 * correct, metric count. With --backup-every, closures are handed out up to
 * the next backup point only; when all before it are done (a quiescent
 * point: no closure runs) the backup is written. A lost ps with
 * --backup-dir: every ps reloads the backup and c->rewind is set. */
st_status st__ps_chief_run_epoch(st__ps_chief *c, int epoch, int k0, double *sums) {
  int64_t spe = c->job.steps_per_execution;
  int nc = (int)((c->steps_per_epoch + spe - 1) / spe), done = k0;
  st__ps_closure *cls = calloc((size_t)nc, sizeof *cls);
  if (!cls) return st_error(ST_ERR_NOMEM, "out of memory");
  for (int k = 0; k < nc; k++) {
    cls[k].first = k * spe;
    cls[k].n = (int)(cls[k].first + spe <= c->steps_per_epoch ? spe : c->steps_per_epoch - cls[k].first);
    cls[k].state = k < k0 ? 2 : 0;
  }
  int every = (int)c->every_closures, barrier = every ? (k0 / every + 1) * every : nc;
  if (barrier > nc) barrier = nc;
  permute(c, epoch);
  st_status s = ST_OK;
  int next = k0;
  double none_since = 0;
  while (s == ST_OK && done < nc && !c->rewind) {
    if (st__ps_chief_stop_asked(c)) {
      s = st_error(ST_ERR_STOPPED, "stopped by a signal");
      break;
    }
    if (done == barrier) { /* every closure before the backup point done, none running */
      if ((s = st__ps_chief_backup_or_recover(c, epoch, barrier, sums, cls)) != ST_OK || c->rewind) break;
      barrier = barrier + every < nc ? barrier + every : nc;
    }
    for (int i = 0; i < c->nw && s == ST_OK; i++) {
      if (!c->w[i].alive || c->w[i].busy >= 0) continue;
      while (next < nc && cls[next].state != 0) next++;
      int k = next;
      if (k >= barrier) /* a re-queued closure */
        for (k = 0; k < barrier && cls[k].state != 0; k++) {}
      if (k < barrier) s = run_closure(c, epoch, k, &cls[k], i);
    }
    poll_workers(c, 20);
    st__ps_chief_drain_heartbeats(c);
    for (int i = 0; i < c->nw && s == ST_OK; i++) s = st__ps_chief_read_worker(c, epoch, i, cls, &done, sums);
    st__ps_chief_check_workers(c, cls);
    int p = s == ST_OK ? st__ps_chief_lost_ps(c) : -1;
    if (p >= 0 && !c->cfg.recover)
      s = st_error(ST_ERR_PEER, "ps:%d lost (no heartbeat for %.2f s); without --backup-dir a lost ps "
                   "cannot be recovered: rerun the job (with --backup-dir it waits for the ps to "
                   "return and reloads the latest backup)", p, st_now_seconds() - c->ps_seen[p]);
    else if (p >= 0)
      s = st__ps_chief_recover(c, p, cls);
    st__ps_chief_ping(c);
    int alive = 0;
    for (int i = 0; i < c->nw; i++) alive += c->w[i].alive;
    /* no worker left: wait up to the coordinator timeout for one to rejoin */
    if (alive) none_since = 0;
    else if (!none_since) none_since = st_now_seconds();
    else if (s == ST_OK && st_now_seconds() - none_since > c->job.coordinator_timeout)
      s = st_error(ST_ERR_PEER, "every worker was lost (none rejoined within %g s)",
                   c->job.coordinator_timeout);
  }
  free(cls);
  return s;
}

/* RUN of closure (step) h to worker w. */
static st_status run_custom(st__ps_chief *c, st__ps_closure *cls, const uint32_t *idx, const int *count,
                            int64_t h, int w) {
  int n = count[h];
  size_t bytes = 8 + 16 + 8 * (size_t)n;
  uint8_t *p = malloc(bytes), *q = p;
  if (!p) return st_error(ST_ERR_NOMEM, "out of memory");
  st__ps_put_u64(q, 1), st__ps_put_u64(q + 8, (uint64_t)h), st__ps_put_u64(q + 16, (uint64_t)n);
  q += 24;
  for (int i = 0; i < n; i++, q += 8) st__ps_put_u64(q, idx[(size_t)h * (size_t)c->job.batch + (size_t)i]);
  st_status s = st__ps_chief_send(c, c->w[w].sock, ST_PS_MSG_RUN, st__ps_chief_closure_id(c, 0, (int)h), p, bytes);
  free(p);
  cls[h].state = 1, cls[h].worker = w, c->w[w].busy = (int)h;
  c->scheduled++;
  return s;
}

/* No worker alive with closures outstanding: wait up to the coordinator
 * timeout for one to rejoin (replies read meanwhile). */
static st_status await_rejoin(st__ps_chief *c, st__ps_closure *cls, int *done, double *sums) {
  st_status s = ST_OK;
  double since = st_now_seconds();
  for (int alive = 0; s == ST_OK && !alive;) {
    if (st__ps_chief_stop_asked(c)) s = st_error(ST_ERR_STOPPED, "stopped by a request");
    else if (st_now_seconds() - since > c->job.coordinator_timeout)
      s = st_error(ST_ERR_PEER, "every worker was lost (none rejoined within %g s)", c->job.coordinator_timeout);
    st__ps_poll(&c->hb, 1, 20, (bool[1]){false});
    st__ps_chief_drain_heartbeats(c);
    for (int i = 0; i < c->nw && s == ST_OK; i++) s = st__ps_chief_read_worker(c, 0, i, cls, done, sums);
    st__ps_chief_ping(c);
    for (int i = 0; i < c->nw; i++) alive += c->w[i].alive;
  }
  return s;
}

st_status st__ps_chief_pump(st__ps_chief *c, st__ps_closure *cls, int64_t scheduled, const uint32_t *idx,
                            const int *count, int64_t *ndone, int wait_ms) {
  st_status s = ST_OK;
  if (st__ps_chief_stop_asked(c)) s = st_error(ST_ERR_STOPPED, "stopped by a request");
  int64_t next = 0;
  for (int i = 0; i < c->nw && s == ST_OK; i++) {
    if (!c->w[i].alive || c->w[i].busy >= 0) continue;
    while (next < scheduled && cls[next].state != 0) next++;
    if (next < scheduled) s = run_custom(c, cls, idx, count, next, i);
  }
  if (s == ST_OK) poll_workers(c, wait_ms);
  st__ps_chief_drain_heartbeats(c);
  double sums[4] = {0};
  int done = 0;
  for (int i = 0; i < c->nw && s == ST_OK; i++) s = st__ps_chief_read_worker(c, 0, i, cls, &done, sums);
  st__ps_chief_check_workers(c, cls);
  int p = s == ST_OK ? st__ps_chief_lost_ps(c) : -1;
  if (p >= 0)
    s = st_error(ST_ERR_PEER, "ps:%d lost (no heartbeat for %.2f s); the coordinator API cannot recover a "
                 "lost ps (no backup): rerun the job", p, st_now_seconds() - c->ps_seen[p]);
  st__ps_chief_ping(c);
  int alive = 0;
  for (int i = 0; i < c->nw; i++) alive += c->w[i].alive;
  if (s == ST_OK && !alive && *ndone + done < scheduled) s = await_rejoin(c, cls, &done, sums);
  *ndone += done;
  return s;
}
