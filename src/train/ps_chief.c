/* The chief of a parameter-server job (st_ps_train, strata/ps.h; moved from
 * the CLI's tools/ps_coord.c, which `strata train --strategy
 * parameter_server` now wraps): it sends the JOB to every server, hands out closures
 * (steps_per_execution steps each, the batches of a per-epoch permutation so
 * that every epoch visits each training example exactly once), re-queues the
 * closure of a worker that missed 3 heartbeats, and at the end gathers the
 * ps's counters and variables (docs/PARAMETER_SERVER.md has the protocol).
 * Lines go to the caller's on_message / on_progress, never to stdout. It
 * lives in src/train because it uses checkpoints (src/io) and the training
 * callbacks and history (src/train). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "strata/ps.h"
#include "train/ps_job.h"

typedef struct closure {
  int64_t first;  /* batch index in the epoch */
  int n;          /* steps */
  int state;      /* 0 queued, 1 running, 2 done */
  int worker;
} closure;

typedef struct wstate {
  st_ps_socket *sock;
  bool alive;
  int busy;         /* closure index or -1 */
  uint32_t incarnation; /* from its JOB_OK */
  double last_seen;
} wstate;

typedef struct coord {
  const st_ps_train_options *a;
  st_ps_cluster cluster;
  st_ps_transport *t;
  st_ps_socket *hb;          /* ROUTER at the chief's address */
  st_ps_socket **ps;         /* [nps] */
  double *ps_seen;           /* [nps] last heartbeat of each ps */
  wstate *w;                 /* [nw] */
  int nw, nps;
  st__ps_job job;
  uint32_t incarnation;
  int64_t n_train;
  st_dataset *val;           /* borrowed: validation at epoch ends (NULL: none) */
  st_strategy *strategy;
  st_model *model;
  st__ps_layout layout;
  int64_t steps_per_epoch, scheduled, retried, lost, rejoined;
  char *job_text;            /* the JOB payload, kept to re-send to lost workers */
  uint32_t *perm;            /* [n_train] this epoch's order */
  double last_ping;
  /* BackupAndRestore (--backup-dir) */
  uint64_t generation;       /* bumped by every rollback to a backup (closure ids carry it) */
  st_history *h;             /* the epochs finished so far (saved in backups) */
  st_train_position pos;     /* the position of the backup restored last (owned logs) */
  bool rewind;               /* a ps was lost and every ps reloaded the backup: go to pos */
  int64_t every_closures;    /* --backup-every in closures (0: epoch ends only) */
  int64_t ps_lost, rollbacks, steps_rolled_back, backups, done_since_backup;
  int64_t resumed_step;      /* the global step a rerun resumed from (-1: a fresh start) */
  int64_t backup_step;       /* the global step of the latest backup */
  int ps_lost_in_wait;       /* the ps await_reply saw lost (-1: none) */
  int64_t snapshot_step;     /* the chief's model holds every ps's state at this step (-1: not) */
  double *results;           /* coordinator API: [4 * total_steps] loss, examples, correct, metric count */
} coord;

/* One line to the caller (a->on_message, else st_log). */
static void say(const coord *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const coord *c, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (c->a->on_message) c->a->on_message(c->a->message_user, line);
  else st_log(ST_LOG_INFO, "%s", line);
}

static bool stop_asked(const coord *c) { return c->a->should_stop && c->a->should_stop(c->a->stop_user); }

static st_status send_to(coord *c, st_ps_socket *s, int type, uint64_t closure, const void *p, size_t n) {
  st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, type);
  h.closure = closure;
  return st__ps_send(s, NULL, &h, p, n, 2000);
}

static void ping_servers(coord *c);
static void drain_heartbeats(coord *c);

/* Wait for a reply of `type` from task (role, index) on s (heartbeats to the
 * servers go on meanwhile). A ps that misses 3 heartbeats meanwhile fails
 * the wait at once (c->ps_lost_in_wait names it). */
static st_status await_reply(coord *c, st_ps_socket *s, int type, int role, int index, double timeout,
                             st_ps_msg *m) {
  double deadline = st_now_seconds() + timeout;
  while (st_now_seconds() < deadline && !stop_asked(c)) {
    ping_servers(c);
    drain_heartbeats(c);
    double silent = role == ST_PS_PS && c->ps_seen[index] > 0 ? st_now_seconds() - c->ps_seen[index] : 0;
    if (silent > 3 * c->job.heartbeat_interval) {
      c->ps_lost_in_wait = index;
      return st_error(ST_ERR_PEER, "ps:%d lost (no heartbeat for %.2f s) before it answered %s", index,
                      silent, st__ps_msg_name(type - 1));
    }
    if (st__ps_recv(s, c->job.job_id, 50, m) != ST_OK) continue;
    if (m->h.sender_role == role && m->h.sender_index == index) {
      if (m->h.type == type) return ST_OK;
      if (m->h.type == ST_PS_MSG_ERROR) {
        st_status e = st_error(ST_ERR_INVALID, "%s:%d: %.*s", st__ps_role_name((st_ps_role)role), index,
                               (int)m->h.payload_len, (const char *)m->payload);
        st__ps_msg_free(m);
        return e;
      }
    }
    st__ps_msg_free(m);
  }
  return st_error(ST_ERR_PEER, "%s:%d did not answer %s within %.0f s",
                  st__ps_role_name((st_ps_role)role), index, st__ps_msg_name(type - 1), timeout);
}

static st_status connect_all(coord *c) {
  st_ps_transport_options to = {&c->cluster, c->a->keys_dir, c->a->insecure, 0, NULL};
  st_status s = st__ps_transport_create(&to, &c->t);
  if (s == ST_OK) s = st__ps_listen(c->t, st__ps_cluster_task(&c->cluster, ST_PS_CHIEF, 0), &c->hb);
  c->nw = c->cluster.count[ST_PS_WORKER], c->nps = c->cluster.count[ST_PS_PS];
  c->ps = calloc((size_t)c->nps, sizeof *c->ps);
  c->w = calloc((size_t)c->nw, sizeof *c->w);
  c->ps_seen = calloc((size_t)c->nps, sizeof *c->ps_seen);
  if (s == ST_OK && (!c->ps || !c->w || !c->ps_seen)) s = st_error(ST_ERR_NOMEM, "out of memory");
  for (int p = 0; s == ST_OK && p < c->nps; p++)
    s = st__ps_connect(c->t, st__ps_cluster_task(&c->cluster, ST_PS_PS, p), &c->ps[p]);
  for (int i = 0; s == ST_OK && i < c->nw; i++)
    s = st__ps_connect(c->t, st__ps_cluster_task(&c->cluster, ST_PS_WORKER, i), &c->w[i].sock);
  return s;
}

/* JOB to every server, JOB_OK from each (servers may still be starting, and
 * workers load the data first: up to 120 s, or the coordinator timeout when
 * longer). */
static st_status send_jobs(coord *c) {
  char *text = c->job_text = st__ps_job_encode(&c->job);
  if (!text) return st_error(ST_ERR_NOMEM, "out of memory");
  st_status s = ST_OK;
  for (int p = 0; s == ST_OK && p < c->nps; p++) s = send_to(c, c->ps[p], ST_PS_MSG_JOB, 0, text, strlen(text));
  for (int i = 0; s == ST_OK && i < c->nw; i++) s = send_to(c, c->w[i].sock, ST_PS_MSG_JOB, 0, text, strlen(text));
  st_ps_msg m;
  double wait = c->job.coordinator_timeout > 120 ? c->job.coordinator_timeout : 120;
  for (int p = 0; s == ST_OK && p < c->nps; p++)
    if ((s = await_reply(c, c->ps[p], ST_PS_MSG_JOB_OK, ST_PS_PS, p, wait, &m)) == ST_OK) {
      st__ps_msg_free(&m);
      c->ps_seen[p] = st_now_seconds();
    }
  for (int i = 0; s == ST_OK && i < c->nw; i++)
    if ((s = await_reply(c, c->w[i].sock, ST_PS_MSG_JOB_OK, ST_PS_WORKER, i, wait, &m)) == ST_OK) {
      c->w[i].incarnation = m.h.incarnation;
      st__ps_msg_free(&m);
      c->w[i].alive = true, c->w[i].busy = -1, c->w[i].last_seen = st_now_seconds();
    }
  return s;
}

/* This epoch's order of the training examples (seeded by seed and epoch). */
static void permute(coord *c, int epoch) {
  int64_t n = c->n_train;
  for (int64_t i = 0; i < n; i++) c->perm[i] = (uint32_t)i;
  st_rng r = st_rng_make((uint64_t)c->job.seed, 0x5053u + (uint64_t)epoch);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)st_rng_below(&r, (uint64_t)i + 1);
    uint32_t t = c->perm[i];
    c->perm[i] = c->perm[j], c->perm[j] = t;
  }
}

/* The id of closure k of an epoch in this generation. */
static uint64_t closure_id(const coord *c, int epoch, int k) {
  return c->generation << ST__PS_GENERATION_SHIFT | ((uint64_t)epoch * 1000000007ULL + (uint64_t)k);
}

/* RUN of closure k of the epoch to worker w. */
static st_status run_closure(coord *c, int epoch, int k, closure *cl, int w) {
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
  st_status st = send_to(c, c->w[w].sock, ST_PS_MSG_RUN, closure_id(c, epoch, k), p, bytes);
  free(p);
  cl->state = 1, cl->worker = w, c->w[w].busy = k;
  c->scheduled++;
  return st;
}

/* A worker silent for 3 heartbeat intervals is lost; its closure is queued again. */
static void check_workers(coord *c, closure *cls) {
  double now = st_now_seconds(), limit = 3 * c->job.heartbeat_interval;
  for (int i = 0; i < c->nw; i++) {
    wstate *w = &c->w[i];
    if (!w->alive || now - w->last_seen <= limit) continue;
    w->alive = false;
    c->lost++;
    say(c, "worker:%d lost (no heartbeat for %.2f s)%s", i, now - w->last_seen,
            w->busy >= 0 ? "; its closure goes to another worker" : "");
    if (w->busy >= 0 && cls) {
      cls[w->busy].state = 0;
      c->retried++;
    }
    w->busy = -1;
    for (int p = 0; p < c->nps; p++) { /* fence it: its late pushes are refused */
      st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_FENCE);
      h.closure = (uint64_t)i, h.step = w->incarnation;
      st__ps_send(c->ps[p], NULL, &h, NULL, 0, 1000);
    }
    st__ps_socket_close(w->sock); /* drop what was queued for it */
    w->sock = NULL;
  }
}

static void drain_heartbeats(coord *c) {
  st_ps_msg m;
  while (st__ps_recv(c->hb, c->job.job_id, 0, &m) == ST_OK) {
    wstate *w = m.h.sender_role == ST_PS_WORKER ? &c->w[m.h.sender_index] : NULL;
    if (m.h.type == ST_PS_MSG_HEARTBEAT && m.h.sender_role == ST_PS_PS) c->ps_seen[m.h.sender_index] = st_now_seconds();
    if (m.h.type == ST_PS_MSG_HEARTBEAT && w && w->alive) w->last_seen = st_now_seconds();
    if (m.h.type == ST_PS_MSG_HEARTBEAT && w && !w->alive && m.h.incarnation == w->incarnation) {
      st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_FENCE);
      st__ps_send(c->hb, &m, &h, NULL, 0, 0); /* a lost worker came back: tell it */
    }
    st__ps_msg_free(&m);
  }
}

/* The first ps silent for 3 heartbeat intervals, or -1. */
static int lost_ps(const coord *c) {
  double now = st_now_seconds(), limit = 3 * c->job.heartbeat_interval;
  for (int p = 0; p < c->nps; p++)
    if (now - c->ps_seen[p] > limit) return p;
  return -1;
}

static void ping_servers(coord *c) {
  double now = st_now_seconds();
  if (now - c->last_ping < c->job.heartbeat_interval) return;
  c->last_ping = now;
  for (int p = 0; p < c->nps; p++) send_to(c, c->ps[p], ST_PS_MSG_HEARTBEAT, 0, NULL, 0);
  for (int i = 0; i < c->nw; i++) {
    wstate *w = &c->w[i];
    if (w->alive) {
      send_to(c, w->sock, ST_PS_MSG_HEARTBEAT, 0, NULL, 0);
      continue;
    }
    /* a lost worker: offer the JOB again, on a fresh connection, so that a
     * restarted process of that task (a new incarnation) can rejoin */
    if (!w->sock && st__ps_connect(c->t, st__ps_cluster_task(&c->cluster, ST_PS_WORKER, i), &w->sock) != ST_OK)
      continue;
    st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_JOB);
    if (c->job_text) st__ps_send(w->sock, NULL, &h, c->job_text, strlen(c->job_text), 0); /* never wait */
  }
}

/* JOB_OK from lost worker i: a new incarnation of the task rejoins. */
static void rejoin(coord *c, int i, const st_ps_msg *m) {
  wstate *w = &c->w[i];
  if (w->alive || m->h.incarnation == w->incarnation) return; /* the fenced process itself */
  w->alive = true, w->busy = -1, w->last_seen = st_now_seconds(), w->incarnation = m->h.incarnation;
  c->rejoined++;
  say(c, "worker:%d rejoined (a new process of the task); it gets work again", i);
}

/* DONE or ERROR from worker i; sums += the closure's figures. */
static st_status read_worker(coord *c, int epoch, int i, closure *cls, int *done, double *sums) {
  st_ps_msg m;
  while (c->w[i].sock && st__ps_recv(c->w[i].sock, c->job.job_id, 0, &m) == ST_OK) {
    int k = c->w[i].busy;
    uint64_t want = closure_id(c, epoch, k);
    if (m.h.type == ST_PS_MSG_JOB_OK) rejoin(c, i, &m);
    /* errors of its current closure (or of its job); one of a closure from
     * before a rollback is old news */
    bool current = m.h.closure == 0 || (k >= 0 && m.h.closure == want);
    if (m.h.type == ST_PS_MSG_ERROR && c->w[i].alive && current && k >= 0 && c->a->backup_dir &&
        m.h.step == (uint64_t)ST_ERR_TIMEOUT) {
      /* a ps did not answer it: the closure goes back to the queue (a ps that
       * applied part of it skips that part); whether the ps is lost is the
       * heartbeats' call (then every ps reloads the backup) */
      say(c, "worker:%d: %.*s; its closure is queued again", i, (int)m.h.payload_len,
              (const char *)m.payload);
      cls[k].state = 0, c->w[i].busy = -1, c->retried++;
    } else if (m.h.type == ST_PS_MSG_ERROR && c->w[i].alive && current) {
      st_status e = st_error(ST_ERR_PEER, "worker:%d: %.*s", i, (int)m.h.payload_len, (const char *)m.payload);
      st__ps_msg_free(&m);
      return e;
    }
    if (m.h.type == ST_PS_MSG_DONE && k >= 0 && m.h.closure == want && m.h.payload_len == 32) {
      double v[4];
      uint64_t bits = st__ps_get_u64(m.payload);
      memcpy(&v[0], &bits, 8);
      for (int f = 1; f < 4; f++) v[f] = (double)st__ps_get_u64(m.payload + 8 * f);
      for (int f = 0; f < 4; f++) sums[f] += v[f];
      if (c->results) memcpy(c->results + 4 * (size_t)k, v, sizeof v); /* the coordinator API's fetch */
      cls[k].state = 2;
      c->w[i].busy = -1;
      c->done_since_backup += cls[k].n;
      (*done)++;
    }
    st__ps_msg_free(&m);
  }
  return ST_OK;
}

static st_status write_backup(coord *c, const st_train_position *pos);
static st_status recover_ps(coord *c, int p, closure *cls);

/* A backup; a ps lost while it is taken (after a first backup exists) is
 * recovered as one lost while training (every ps reloads the previous
 * backup, c->rewind). */
static st_status snapshot_all(coord *c, int64_t b);
static st_status snapshot_or_recover(coord *c, int64_t b) {
  c->ps_lost_in_wait = -1;
  st_status s = snapshot_all(c, b);
  if (s == ST_ERR_PEER && c->ps_lost_in_wait >= 0 && c->a->backup_dir && c->backups > 0) {
    st_clear_error();
    s = recover_ps(c, c->ps_lost_in_wait, NULL);
  }
  return s;
}

static st_status backup_or_recover(coord *c, const st_train_position *pos, closure *cls) {
  c->ps_lost_in_wait = -1;
  st_status s = write_backup(c, pos);
  if (s == ST_ERR_PEER && c->ps_lost_in_wait >= 0 && c->backups > 0) {
    st_clear_error();
    s = recover_ps(c, c->ps_lost_in_wait, cls);
  }
  return s;
}

/* The position of a backup inside epoch `epoch`: closures [0, k) done, with
 * these sums. */
static st_train_position mid_epoch(const coord *c, int epoch, int k, const double *sums) {
  st_train_position pos = {0};
  pos.epoch = epoch, pos.step_in_epoch = (int64_t)k * c->job.steps_per_execution;
  pos.loss_sum = sums[0], pos.examples = (int64_t)sums[1], pos.correct = (int64_t)sums[2];
  pos.metric_count = (int64_t)sums[3];
  pos.nlogs = c->h->epochs, pos.logs = c->h->logs;
  return pos;
}

/* One epoch from closure k0 on (the ones before are done: a resumed
 * backup's position): every closure done once. sums: loss, examples,
 * correct, metric count. With --backup-every, closures are handed out up to
 * the next backup point only; when all before it are done (a quiescent
 * point: no closure runs) the backup is written. A lost ps with
 * --backup-dir: every ps reloads the backup and c->rewind is set. */
static st_status run_epoch(coord *c, int epoch, int k0, double *sums) {
  int64_t spe = c->job.steps_per_execution;
  int nc = (int)((c->steps_per_epoch + spe - 1) / spe), done = k0;
  closure *cls = calloc((size_t)nc, sizeof *cls);
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
    if (stop_asked(c)) {
      s = st_error(ST_ERR_STOPPED, "stopped by a signal");
      break;
    }
    if (done == barrier) { /* every closure before the backup point done, none running */
      st_train_position pos = mid_epoch(c, epoch, barrier, sums);
      if ((s = backup_or_recover(c, &pos, cls)) != ST_OK || c->rewind) break;
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
    st_ps_socket *socks[64];
    bool ready[64];
    int n = 0;
    socks[n++] = c->hb;
    for (int i = 0; i < c->nw && n < 64; i++) socks[n++] = c->w[i].sock;
    st__ps_poll(socks, n, 20, ready);
    drain_heartbeats(c);
    for (int i = 0; i < c->nw && s == ST_OK; i++) s = read_worker(c, epoch, i, cls, &done, sums);
    check_workers(c, cls);
    int p = s == ST_OK ? lost_ps(c) : -1;
    if (p >= 0 && !c->a->backup_dir)
      s = st_error(ST_ERR_PEER, "ps:%d lost (no heartbeat for %.2f s); without --backup-dir a lost ps "
                   "cannot be recovered: rerun the job (with --backup-dir it waits for the ps to "
                   "return and reloads the latest backup)", p, st_now_seconds() - c->ps_seen[p]);
    else if (p >= 0)
      s = recover_ps(c, p, cls);
    ping_servers(c);
    int alive = 0;
    for (int i = 0; i < c->nw; i++) alive += c->w[i].alive;
    /* no worker left: wait up to the coordinator timeout for one to rejoin */
    if (alive) none_since = 0;
    else if (!none_since) none_since = st_now_seconds();
    else if (s == ST_OK && st_now_seconds() - none_since > c->job.coordinator_timeout)
      s = st_error(ST_ERR_PEER, "every worker was lost (none rejoined within %.0f s)",
                   c->job.coordinator_timeout);
  }
  free(cls);
  return s;
}

/* ---- BackupAndRestore ---- */

/* The global step of a position. */
static int64_t pos_step(const coord *c, const st_train_position *pos) {
  return pos->epoch * c->steps_per_epoch + pos->step_in_epoch;
}

/* Floats per SNAPSHOT / RESTORE chunk: 64 MiB (a frame carries at most 256
 * MiB; a model's variables and Adam slots on one ps pass that above ~22M
 * parameters); tests lower it with STRATA_PS_TEST_CHUNK_BYTES. */
static size_t chunk_floats(void) {
  const char *v = getenv("STRATA_PS_TEST_CHUNK_BYTES");
  long long b = v ? atoll(v) : 0;
  if (b < (long long)sizeof(float) || b > (64LL << 20)) b = 64LL << 20;
  return (size_t)b / sizeof(float);
}

/* Every float of ps p's variables and slots (n * (1 + ns)) into buf, chunk
 * by chunk; *applied / *version: its counters (the same in every chunk). */
static st_status snapshot_ps(coord *c, int p, float *buf, size_t total, uint64_t *applied, uint64_t *version) {
  size_t chunk = chunk_floats();
  for (size_t off = 0; off < total || off == 0; off += chunk) {
    st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_SNAPSHOT);
    h.version_seen = off, h.step = chunk;
    st_status s = st__ps_send(c->ps[p], NULL, &h, NULL, 0, 2000);
    st_ps_msg m;
    if (s == ST_OK) s = await_reply(c, c->ps[p], ST_PS_MSG_SNAPSHOT_OK, ST_PS_PS, p, 30, &m);
    if (s != ST_OK) return st_error_prefix(s, "backup: ");
    size_t want = total - off < chunk ? total - off : chunk;
    bool ok = m.h.payload_len == want * sizeof(float) && m.h.version_seen == off &&
              (off == 0 || (m.h.closure == *applied && m.h.step == *version));
    if (ok) memcpy(buf + off, m.payload, want * sizeof(float));
    *applied = m.h.closure, *version = m.h.step;
    st__ps_msg_free(&m);
    if (!ok) return st_error(ST_ERR_FORMAT, "backup: ps:%d sent a snapshot of the wrong size", p);
    if (total == 0) break;
  }
  return ST_OK;
}

/* At a quiescent point (no closure running, global step b): every ps's
 * variables and slots (SNAPSHOT, in chunks) into the chief's model, each ps
 * checked to have applied exactly the steps before b; the model's step
 * becomes b. */
static st_status snapshot_all(coord *c, int64_t b) {
  st_net *net = &c->model->net;
  size_t ns = (size_t)net->n_slots, maxf = 0;
  for (int p = 0; p < c->nps; p++) maxf = c->layout.ps_floats[p] > maxf ? c->layout.ps_floats[p] : maxf;
  float *buf = malloc((maxf * (1 + ns) + c->layout.n_state + 1) * sizeof(float));
  if (!buf) return st_error(ST_ERR_NOMEM, "out of memory");
  for (int p = 0; p < c->nps; p++) {
    size_t n = c->layout.ps_floats[p], nst = p == 0 ? c->layout.n_state : 0;
    uint64_t applied = 0, version = 0;
    st_status s = snapshot_ps(c, p, buf, n * (1 + ns) + nst, &applied, &version);
    bool exact = applied == (uint64_t)b && version == (uint64_t)b;
    if (s == ST_OK && exact) {
      st__ps_unpack(&c->layout, p, buf, net->params);
      for (size_t k = 0; k < ns; k++) st__ps_unpack(&c->layout, p, buf + n * (1 + k), net->slots[k]);
      if (nst) memcpy(net->state, buf + n * (1 + ns), nst * sizeof(float));
    }
    if (s == ST_OK && !exact)
      s = st_error(ST_ERR_INTERNAL, "backup: ps:%d applied %llu updates at step %lld (expected %lld)",
                   p, (unsigned long long)applied, (long long)b, (long long)b);
    if (s != ST_OK) {
      free(buf);
      return s;
    }
  }
  free(buf);
  net->step = b;
  c->snapshot_step = b;
  return ST_OK;
}

/* At a quiescent point: the snapshot (unless the model holds it already),
 * then the usual checkpoint (src/io/checkpoint.c: variables, slots, step,
 * position, identity) into --backup-dir. */
static st_status write_backup(coord *c, const st_train_position *pos) {
  if (!c->a->backup_dir) return ST_OK;
  int64_t b = pos_step(c, pos);
  for (int i = 0; i < pos->nlogs; i++)
    if (pos->logs[i].examples != c->n_train)
      return st_error(ST_ERR_INTERNAL, "backup: epoch %d trained on %lld examples, not the %lld of the "
                      "training set: not written", i + 1, (long long)pos->logs[i].examples,
                      (long long)c->n_train);
  st_status s = c->snapshot_step == b ? ST_OK : snapshot_all(c, b);
  if (s != ST_OK) return s;
  st_checkpoint_options o = st_checkpoint_default_options();
  st__run_identity id = {c->job.batch, c->a->data_fingerprint, false};
  s = st__checkpoint_save_at(c->model, c->a->backup_dir, &o, pos, &id);
  if (s != ST_OK) return st_error_prefix(s, "backup: ");
  c->backups++, c->done_since_backup = 0, c->backup_step = b;
  return ST_OK;
}

/* Read the latest backup of --backup-dir into the chief's model and c->pos
 * (its checksums, names, shapes and the run's identity checked), then send
 * every ps its variables and slots (RESTORE, a new generation: pushes of
 * closures handed out before are refused). */
static st_status restore_backup(coord *c) {
  const char *dir = c->a->backup_dir;
  st_train_position at = {0};
  st__run_identity id = {c->job.batch, c->a->data_fingerprint, c->a->resume_anyway};
  st_status s = st__checkpoint_restore_at(c->model, dir, &at, &id);
  if (s != ST_OK) return st_error_prefix(s, "backup: cannot resume: ");
  st_net *net = &c->model->net;
  int64_t b = net->step, spe = c->job.steps_per_execution;
  if (b != pos_step(c, &at) || at.step_in_epoch % spe || at.epoch > c->a->epochs || b > c->job.total_steps) {
    free(at.logs);
    return st_error(ST_ERR_INVALID, "backup: %s: step %lld (epoch %lld, step %lld of it) is not a closure "
                    "boundary of this run (%lld steps per epoch, --steps-per-execution %lld)", dir,
                    (long long)b, (long long)at.epoch + 1, (long long)at.step_in_epoch,
                    (long long)c->steps_per_epoch, (long long)spe);
  }
  if (c->generation >= 0xffff) { /* closure ids carry it in 16 bits */
    free(at.logs);
    return st_error(ST_ERR_PEER, "backup: 65535 rollbacks in one run: giving up");
  }
  free(c->pos.logs);
  c->pos = at;
  c->generation++;
  c->snapshot_step = b; /* the model holds the backup: every ps's state once restored */
  size_t ns = (size_t)net->n_slots, maxf = 0;
  for (int p = 0; p < c->nps; p++) maxf = c->layout.ps_floats[p] > maxf ? c->layout.ps_floats[p] : maxf;
  float *buf = malloc((maxf * (1 + ns) + c->layout.n_state + 1) * sizeof(float));
  if (!buf) return st_error(ST_ERR_NOMEM, "out of memory");
  for (int p = 0; s == ST_OK && p < c->nps; p++) {
    size_t n = c->layout.ps_floats[p], nst = p == 0 ? c->layout.n_state : 0;
    st__ps_pack(&c->layout, p, net->params, buf);
    for (size_t k = 0; k < ns; k++) st__ps_pack(&c->layout, p, net->slots[k], buf + n * (1 + k));
    if (nst) memcpy(buf + n * (1 + ns), net->state, nst * sizeof(float));
    size_t total = n * (1 + ns) + nst, chunk = chunk_floats();
    for (size_t off = 0; s == ST_OK && (off < total || off == 0); off += chunk) { /* in chunks (snapshot_ps) */
      size_t len = total - off < chunk ? total - off : chunk;
      st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_RESTORE);
      h.closure = c->generation, h.step = (uint64_t)b, h.version_seen = off;
      st_ps_msg m;
      s = st__ps_send(c->ps[p], NULL, &h, buf + off, len * sizeof(float), 5000);
      if (s == ST_OK) s = await_reply(c, c->ps[p], ST_PS_MSG_RESTORE_OK, ST_PS_PS, p, 30, &m);
      if (s == ST_OK) {
        bool right = m.h.version_seen == off;
        st__ps_msg_free(&m);
        if (!right) s = st_error(ST_ERR_FORMAT, "backup: ps:%d acknowledged the wrong RESTORE chunk", p);
      }
      if (total == 0) break;
    }
    c->ps_seen[p] = st_now_seconds();
  }
  free(buf);
  c->done_since_backup = 0;
  return s;
}

/* ps q is lost: say so, and talk to it on a fresh connection (what was
 * queued for the lost process is dropped). */
static st_status mark_lost(coord *c, int q, bool *lost, int *nlost) {
  say(c, "ps:%d lost (no heartbeat for %.2f s); training paused: waiting up to "
          "%.0f s (--coordinator-timeout) for a new process of the task, then every ps reloads the "
          "backup at step %lld\n", q, st_now_seconds() - c->ps_seen[q], c->job.coordinator_timeout,
          (long long)c->backup_step);
  lost[q] = true, (*nlost)++, c->ps_lost++;
  st__ps_socket_close(c->ps[q]);
  c->ps[q] = NULL;
  return st__ps_connect(c->t, st__ps_cluster_task(&c->cluster, ST_PS_PS, q), &c->ps[q]);
}

/* ps p was lost and --backup-dir is set: training pauses; the JOB is offered
 * to the task every heartbeat interval (on a fresh connection) until a
 * process of it answers, for up to --coordinator-timeout (then exit 3
 * naming it); then every ps reloads the latest backup and the epoch loop
 * rewinds to it (c->rewind). Other ps lost meanwhile are waited for too. */
static st_status recover_ps(coord *c, int p, closure *cls) {
  double t0 = st_now_seconds(), last_offer = 0, limit = c->job.coordinator_timeout;
  bool *lost = calloc((size_t)c->nps, sizeof *lost);
  if (!lost) return st_error(ST_ERR_NOMEM, "out of memory");
  int nlost = 0;
  st_status s = mark_lost(c, p, lost, &nlost);
  while (s == ST_OK && nlost > 0) {
    double now = st_now_seconds();
    for (int q = 0; q < c->nps; q++)
      if (lost[q]) c->ps_seen[q] = now; /* lost_ps names another one */
    int q = lost_ps(c);
    if (q >= 0 && (s = mark_lost(c, q, lost, &nlost)) != ST_OK) break;
    if (stop_asked(c)) s = st_error(ST_ERR_STOPPED, "stopped by a signal");
    for (int q = 0; s == ST_OK && q < c->nps; q++)
      if (lost[q] && now - t0 > limit)
        s = st_error(ST_ERR_PEER, "ps:%d lost and not back within %.0f s (--coordinator-timeout)", q, limit);
    if (s != ST_OK) break;
    if (now - last_offer >= c->job.heartbeat_interval) {
      last_offer = now;
      for (int q = 0; q < c->nps; q++)
        if (lost[q]) {
          st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_JOB);
          st__ps_send(c->ps[q], NULL, &h, c->job_text, strlen(c->job_text), 0); /* never wait */
        }
    }
    st__ps_poll(&c->hb, 1, 20, (bool[1]){false});
    drain_heartbeats(c);
    for (int i = 0; i < c->nw; i++) { /* rejoins; the rest is void after the rollback */
      st_ps_msg m;
      while (c->w[i].sock && st__ps_recv(c->w[i].sock, c->job.job_id, 0, &m) == ST_OK) {
        if (m.h.type == ST_PS_MSG_JOB_OK) rejoin(c, i, &m);
        st__ps_msg_free(&m);
      }
    }
    check_workers(c, cls);
    for (int q = 0; q < c->nps; q++) {
      st_ps_msg m;
      while (lost[q] && st__ps_recv(c->ps[q], c->job.job_id, 0, &m) == ST_OK) {
        if (m.h.type == ST_PS_MSG_JOB_OK && m.h.sender_role == ST_PS_PS && m.h.sender_index == q) {
          say(c, "ps:%d is back after %.2f s", q, st_now_seconds() - t0);
          lost[q] = false, nlost--;
        }
        st__ps_msg_free(&m);
      }
      if (!lost[q]) c->ps_seen[q] = st_now_seconds();
    }
    ping_servers(c);
  }
  free(lost);
  if (s != ST_OK) return s;
  int64_t redo = c->done_since_backup;
  if ((s = restore_backup(c)) != ST_OK) return s;
  c->rollbacks++, c->steps_rolled_back += redo;
  for (int i = 0; i < c->nw; i++) c->w[i].busy = -1; /* their closures are void */
  c->rewind = true;
  say(c, "every ps reloaded the backup at step %lld (epoch %lld, step %lld of it); "
          "training goes on from there (%lld finished steps run again)\n", (long long)pos_step(c, &c->pos),
          (long long)c->pos.epoch + 1, (long long)c->pos.step_in_epoch, (long long)redo);
  return ST_OK;
}

/* Per ps: applied, duplicates, refused, dropped, staleness mean (bits), max,
 * connections refused, stale pushes answered "recompute". */
static st_status gather_stats(coord *c, uint64_t (*st)[9]) {
  for (int p = 0; p < c->nps; p++) {
    st_status s = send_to(c, c->ps[p], ST_PS_MSG_STATS, 0, NULL, 0);
    st_ps_msg m;
    if (s == ST_OK) s = await_reply(c, c->ps[p], ST_PS_MSG_STATS_OK, ST_PS_PS, p, 30, &m);
    if (s != ST_OK) return s;
    for (int f = 0; f < 9; f++) st[p][f] = m.h.payload_len == 72 ? st__ps_get_u64(m.payload + 8 * f) : 0;
    st__ps_msg_free(&m);
  }
  return ST_OK;
}

/* The trained variables from every ps into the model. */
static st_status pull_variables(coord *c) {
  for (int p = 0; p < c->nps; p++) {
    st_status s = send_to(c, c->ps[p], ST_PS_MSG_PULL, 0, NULL, 0);
    st_ps_msg m;
    if (s == ST_OK) s = await_reply(c, c->ps[p], ST_PS_MSG_PULL_OK, ST_PS_PS, p, 30, &m);
    if (s != ST_OK) return s;
    bool ok = m.h.payload_len == st__ps_wire_floats(&c->layout, p) * sizeof(float);
    if (ok) st__ps_unpack(&c->layout, p, (const float *)m.payload, c->model->net.params);
    if (ok && p == 0 && c->layout.n_state) /* BatchNormalization's moving statistics */
      memcpy(c->model->net.state, (const float *)m.payload + c->layout.ps_floats[0], c->layout.n_state * sizeof(float));
    st__ps_msg_free(&m);
    if (!ok) return st_error(ST_ERR_FORMAT, "ps:%d sent variables of the wrong size", p);
  }
  return ST_OK;
}

static char *ps_report_json(coord *c, uint64_t (*st)[9], const st_history *h, bool *exact) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  if (!f) return NULL;
  int64_t total = (int64_t)h->epochs * c->steps_per_epoch; /* fewer after EarlyStopping */
  fprintf(f, "{\"workers\": %d, \"ps\": %d, \"steps_per_execution\": %lld, \"steps_scheduled\": %lld, "
          "\"closures_scheduled\": %lld, \"closures_retried\": %lld, \"workers_lost\": %lld, \"workers_rejoined\": %lld, "
          "\"heartbeat_interval\": %g, \"max_staleness\": %lld, \"variable_shards\": %d, \"per_ps\": [", c->nw, c->nps, (long long)c->job.steps_per_execution,
          (long long)total, (long long)c->scheduled, (long long)c->retried, (long long)c->lost, (long long)c->rejoined,
          c->job.heartbeat_interval, (long long)c->job.max_staleness, c->layout.nvars);
  *exact = true;
  for (int p = 0; p < c->nps; p++) {
    double mean;
    memcpy(&mean, &st[p][4], 8);
    *exact &= st[p][0] == (uint64_t)total;
    fprintf(f, "%s{\"task\": \"ps:%d\", \"floats\": %zu, \"updates_applied\": %llu, \"duplicates_skipped\": %llu, "
            "\"pushes_refused\": %llu, \"frames_dropped\": %llu, \"staleness_mean\": %.4f, "
            "\"staleness_max\": %llu, \"connections_refused\": %llu, \"stale_pushes_recomputed\": %llu, "
            "\"updates_rolled_back\": %llu}",
            p ? ", " : "", p, c->layout.ps_floats[p],
            (unsigned long long)st[p][0], (unsigned long long)st[p][1], (unsigned long long)st[p][2],
            (unsigned long long)st[p][3], mean, (unsigned long long)st[p][5], (unsigned long long)st[p][6],
            (unsigned long long)st[p][7], (unsigned long long)st[p][8]);
  }
  /* examples trained on per epoch (completed closures only; a permutation
   * split in batches: n_train each when every example was visited once) */
  fprintf(f, "], \"train_examples_per_epoch\": [");
  for (int e = 0; e < h->epochs; e++) {
    fprintf(f, "%s%lld", e ? ", " : "", (long long)h->logs[e].examples);
    *exact &= h->logs[e].examples == c->n_train;
  }
  char why[512];
  int64_t dropped = st__ps_drops_text(st__ps_socket_counters(c->hb), why, sizeof why);
  if (dropped) say(c, "chief:0: %lld frames dropped (%s)", (long long)dropped, why);
  fprintf(f, "], \"chief_frames_dropped\": %lld", (long long)dropped);
  fprintf(f, ", \"backups_written\": %lld, \"ps_lost\": %lld, \"rollbacks\": %lld, "
          "\"steps_rolled_back\": %lld, \"resumed_from_step\": %lld", (long long)c->backups,
          (long long)c->ps_lost, (long long)c->rollbacks, (long long)c->steps_rolled_back,
          (long long)c->resumed_step);
  fprintf(f, ", \"exactly_once\": %s}", *exact ? "true" : "false");
  fclose(f);
  return s;
}

static void stop_servers(coord *c) {
  for (int p = 0; c->ps && p < c->nps; p++)
    if (c->ps[p]) send_to(c, c->ps[p], ST_PS_MSG_STOP, 0, NULL, 0);
  for (int i = 0; c->w && i < c->nw; i++)
    if (c->w[i].sock) send_to(c, c->w[i].sock, ST_PS_MSG_STOP, 0, NULL, 0);
  if (c->t) usleep(100000); /* let the STOPs leave before the sockets close (linger 0) */
}

static void coord_free(coord *c) {
  for (int p = 0; c->ps && p < c->nps; p++) st__ps_socket_close(c->ps[p]);
  for (int i = 0; c->w && i < c->nw; i++) st__ps_socket_close(c->w[i].sock);
  free(c->ps), free(c->w), free(c->perm), free(c->job_text), free(c->ps_seen), free(c->pos.logs);
  free(c->results);
  st__ps_socket_close(c->hb);
  st__ps_transport_destroy(c->t);
  st__ps_layout_free(&c->layout);
  st_model_destroy(c->model);
  st_strategy_destroy(c->strategy);
  st__ps_cluster_free(&c->cluster);
}

static void fill_job(coord *c) {
  const st_ps_train_options *a = c->a;
  st__ps_job *j = &c->job;
  j->job_id = st__ps_random_u64();
  snprintf(j->model, sizeof j->model, "%s", a->model);
  snprintf(j->data, sizeof j->data, "%s", a->data);
  j->seed = a->seed, j->batch = a->batch, j->train_examples = a->train_examples;
  j->val_split = a->val_split;
  j->steps_per_execution = a->steps_per_execution > 0 ? a->steps_per_execution : 1;
  j->heartbeat_interval = a->heartbeat_interval > 0 ? a->heartbeat_interval : 1.0;
  j->coordinator_timeout = a->coordinator_timeout > 0 ? a->coordinator_timeout : 60.0;
  j->opt = a->optimizer;
  j->max_staleness = a->max_staleness;
  j->ps_shards = a->ps_shards, j->ps_min_shard_bytes = a->ps_min_shard_bytes;
}

/* " - val_loss: X - val_accuracy: Y" when the epoch was validated. */
static const char *val_text(const st_epoch_logs *l) {
  static char buf[96];
  buf[0] = '\0';
  if (l->has_validation)
    snprintf(buf, sizeof buf, " - val_loss: %.4f - val_accuracy: %.4f", l->val_loss, l->val_accuracy);
  return buf;
}

/* Go to c->pos (a backup just restored): its epoch, closure and sums, the
 * epochs it had finished. */
static void rewind_to(coord *c, st_history *h, int *e, int *k0, double *sums) {
  const st_train_position *p = &c->pos;
  *e = (int)p->epoch, *k0 = (int)(p->step_in_epoch / c->job.steps_per_execution);
  sums[0] = p->loss_sum, sums[1] = (double)p->examples, sums[2] = (double)p->correct;
  sums[3] = (double)p->metric_count;
  int n = p->nlogs < c->a->epochs ? p->nlogs : (int)c->a->epochs;
  if (n) memcpy(h->logs, p->logs, (size_t)n * sizeof *h->logs);
  /* state.json's history has no example counts: an epoch-end backup is
   * written only once its epoch trained on each example exactly once
   * (write_backup), so each finished epoch of a backup did */
  for (int i = 0; i < n; i++) h->logs[i].examples = c->n_train;
  h->epochs = n;
  h->train_samples = 0;
  for (int i = 0; i < n; i++) h->train_samples += h->logs[i].examples;
}

/* --backup-dir: resume from its backup when there is one (a rerun after the
 * chief was lost: every ps reloads it), else write one of the start (so a
 * ps lost in the first epoch rolls back to it). No `latest` file is a fresh
 * start; a damaged one is an error (as fit's BackupAndRestore). */
static st_status start_backup(coord *c, st_history *h, int *e, int *k0, double *sums) {
  const char *dir = c->a->backup_dir;
  c->resumed_step = -1;
  if (!dir) return ST_OK;
  int64_t spe = c->job.steps_per_execution, every = c->a->backup_every;
  c->every_closures = every > 0 ? (every + spe - 1) / spe : 0;
  char latest[4096];
  st_status s = st_checkpoint_latest(dir, latest, sizeof latest);
  if (s != ST_OK) {
    char path[4200];
    snprintf(path, sizeof path, "%s/latest", dir);
    if (access(path, F_OK) == 0) return st_error_prefix(s, "backup: cannot resume: ");
    st_clear_error();
    st_train_position pos = {0};
    return write_backup(c, &pos);
  }
  if ((s = restore_backup(c)) != ST_OK) return s;
  c->resumed_step = c->backup_step = pos_step(c, &c->pos);
  rewind_to(c, h, e, k0, sums);
  if (!c->a->quiet)
    say(c, "resuming from %s at epoch %d, step %lld of it (global step %lld); "
            "every ps reloaded it\n", latest, *e + 1, (long long)c->pos.step_in_epoch,
            (long long)c->resumed_step);
  return ST_OK;
}

/* Everything after the cluster is known: train, then the counters and the
 * variables of every ps into c->model; out gets the results. */
static st_status train_job(coord *c, st_ps_train_result *out) {
  const st_ps_train_options *a = c->a;
  c->n_train = a->n_train, c->val = a->validation;
  st_status s = st__ps_build_model(&c->job, &c->strategy, &c->model);
  if (s == ST_OK && a->prepare) s = a->prepare(a->prepare_user, c->model, &c->val);
  if (s == ST_OK) s = st__ps_layout_make(&c->model->net, c->cluster.count[ST_PS_PS], &c->job, &c->layout);
  c->steps_per_epoch = (c->n_train + a->batch - 1) / a->batch;
  c->job.total_steps = c->steps_per_epoch * a->epochs;
  c->perm = malloc((size_t)c->n_train * sizeof *c->perm);
  if (s == ST_OK && !c->perm) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = connect_all(c);
  if (s == ST_OK) s = send_jobs(c);
  if (s == ST_OK && !a->quiet)
    say(c, "parameter_server job %016llx: %d workers, %d ps, %lld steps of %lld "
        "examples (%s)", (unsigned long long)c->job.job_id, c->nw, c->nps,
        (long long)c->job.total_steps, (long long)a->batch, a->insecure ? "insecure" : "CURVE");
  st_history h = {0};
  h.logs = calloc((size_t)a->epochs + 1, sizeof *h.logs);
  if (s == ST_OK && !h.logs) s = st_error(ST_ERR_NOMEM, "out of memory");
  c->h = &h;
  double train0 = st_now_seconds(), sums[4] = {0};
  int e = 0, k0 = 0, begun = -1;
  bool stop = false;
  if (s == ST_OK) s = start_backup(c, &h, &e, &k0, sums);
  while (s == ST_OK && e < a->epochs && !stop) {
    double te = st_now_seconds();
    for (int i = 0; i < a->ncallbacks && s == ST_OK && e > begun && k0 == 0; i++)
      if (a->callbacks[i].on_epoch_begin) s = a->callbacks[i].on_epoch_begin(a->callbacks[i].user, c->model, e);
    begun = e > begun ? e : begun;
    if (s == ST_OK) s = run_epoch(c, e, k0, sums);
    if (s == ST_OK && c->rewind) { /* a ps was lost: every ps reloaded the backup */
      c->rewind = false;
      rewind_to(c, &h, &e, &k0, sums);
      continue;
    }
    if (s != ST_OK) break;
    st_epoch_logs *l = &h.logs[h.epochs++];
    l->epoch = e, l->loss = sums[1] ? sums[0] / sums[1] : 0, l->accuracy = sums[3] ? sums[2] / sums[3] : 0;
    l->lr = a->optimizer.lr.initial, l->seconds = st_now_seconds() - te, l->steps = c->steps_per_epoch;
    l->examples = (int64_t)sums[1];
    h.train_samples += l->examples;
    /* the chief's model gets every ps's variables (and, for callbacks that
     * checkpoint and for the backup, their slots) */
    if ((a->ncallbacks || a->backup_dir) && (s = snapshot_or_recover(c, (int64_t)(e + 1) * c->steps_per_epoch)) == ST_OK && c->rewind) {
      c->rewind = false;
      rewind_to(c, &h, &e, &k0, sums);
      continue;
    }
    if (s == ST_OK && c->val) { /* validation at epoch end, on the variables of every ps */
      st_eval_result v = {0};
      if (c->snapshot_step != (int64_t)(e + 1) * c->steps_per_epoch) s = pull_variables(c);
      if (s == ST_OK) s = st_model_evaluate(c->model, c->val, &v);
      l->has_validation = true, l->val_loss = v.loss, l->val_accuracy = v.accuracy;
    }
    for (int i = 0; i < a->ncallbacks && s == ST_OK; i++) /* epoch-level callbacks, as TF's */
      if (a->callbacks[i].on_epoch_end) s = a->callbacks[i].on_epoch_end(a->callbacks[i].user, c->model, l);
    if (s != ST_OK) break;
    stop = c->model->stop_training; /* EarlyStopping */
    if (!a->quiet && a->on_progress) {
      char line[512];
      snprintf(line, sizeof line, "Epoch %d/%lld - %.1fs - loss: %.4f - accuracy: %.4f%s - closures: %lld (retried %lld)",
               e + 1, (long long)a->epochs, l->seconds, l->loss, l->accuracy, val_text(l), (long long)c->scheduled,
               (long long)c->retried);
      a->on_progress(a->message_user, line);
    }
    e++, k0 = 0;
    memset(sums, 0, sizeof sums);
    st_train_position pos = {0};
    pos.epoch = e, pos.nlogs = h.epochs, pos.logs = h.logs;
    if (e < a->epochs && !stop) s = backup_or_recover(c, &pos, NULL); /* the last one: deleted when done */
  }
  h.train_seconds = st_now_seconds() - train0;
  h.samples_per_sec = h.train_seconds > 0 ? (double)h.train_samples / h.train_seconds : 0;
  uint64_t(*stats)[9] = calloc((size_t)c->nps + 1, sizeof *stats);
  if (s == ST_OK && !stats) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = gather_stats(c, stats);
  if (s == ST_OK) s = pull_variables(c);
  bool exact = false;
  char *pj = s == ST_OK ? ps_report_json(c, stats, &h, &exact) : NULL;
  if (s == ST_OK && !pj) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) out->per_ps = calloc((size_t)c->nps + 1, sizeof *out->per_ps);
  if (s == ST_OK && !out->per_ps) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s != ST_OK) {
    free(pj);
    free(stats);
    st_history_destroy(&h);
    return s;
  }
  for (int p = 0; p < c->nps; p++) {
    st_ps_stats *ps = &out->per_ps[p];
    ps->updates_applied = (int64_t)stats[p][0], ps->duplicates_skipped = (int64_t)stats[p][1];
    ps->pushes_refused = (int64_t)stats[p][2], ps->frames_dropped = (int64_t)stats[p][3];
    memcpy(&ps->staleness_mean, &stats[p][4], 8);
    ps->staleness_max = (int64_t)stats[p][5], ps->connections_refused = (int64_t)stats[p][6];
    ps->stale_pushes_recomputed = (int64_t)stats[p][7], ps->updates_rolled_back = (int64_t)stats[p][8];
  }
  free(stats);
  out->history = h;
  out->report_json = pj;
  out->exactly_once = exact;
  out->workers = c->nw, out->nps = c->nps, out->steps_per_epoch = c->steps_per_epoch;
  out->model = c->model, out->strategy = c->strategy;
  c->model = NULL, c->strategy = NULL;
  if (exact && a->backup_dir && !a->keep_backup) st__checkpoint_remove_all(a->backup_dir); /* as fit */
  return ST_OK;
}

st_ps_train_options st_ps_train_default_options(void) {
  st_ps_train_options o;
  memset(&o, 0, sizeof o);
  o.epochs = 1, o.batch = 32, o.steps_per_execution = 1;
  o.heartbeat_interval = 1.0, o.coordinator_timeout = 60.0, o.max_staleness = -1;
  o.optimizer = st_optimizer_default_options(ST_OPT_ADAM);
  return o;
}

void st_ps_train_result_free(st_ps_train_result *r) {
  if (!r) return;
  st_model_destroy(r->model);
  st_strategy_destroy(r->strategy);
  st_history_destroy(&r->history);
  free(r->per_ps);
  free(r->report_json);
  memset(r, 0, sizeof *r);
}

static st_status load_cluster(const st_ps_train_options *o, st_ps_cluster *c) {
  if (o->tf_config) return st__ps_cluster_parse_tf_config(o->tf_config, strlen(o->tf_config), "tf_config", c);
  if (o->cluster_file || o->task) {
    if (!o->cluster_file || !o->task)
      return st_error(ST_ERR_INVALID, "st_ps_train_options: cluster_file and task go together");
    return st__ps_cluster_parse_file(o->cluster_file, o->task, c);
  }
  return st__ps_cluster_from_env(c);
}

/* The options a job cannot run with, named. */
static st_status check_options(const st_ps_train_options *o) {
  if (!o->model || !o->model[0]) return st_error(ST_ERR_INVALID, "st_ps_train_options.model: not set");
  if (!o->data) return st_error(ST_ERR_INVALID, "st_ps_train_options.data: not set");
  if (o->n_train < 1 || o->n_train > UINT32_MAX)
    return st_error(ST_ERR_INVALID, "st_ps_train_options.n_train: %lld (must be 1..2^32-1)", (long long)o->n_train);
  if (o->epochs < 1) return st_error(ST_ERR_INVALID, "st_ps_train_options.epochs: %lld (must be >= 1)", (long long)o->epochs);
  if (o->batch < 1) return st_error(ST_ERR_INVALID, "st_ps_train_options.batch: %lld (must be >= 1)", (long long)o->batch);
  if (o->max_staleness < -1)
    return st_error(ST_ERR_INVALID, "st_ps_train_options.max_staleness: %lld (must be >= -1)", (long long)o->max_staleness);
  if (o->ncallbacks > 0 && !o->callbacks)
    return st_error(ST_ERR_INVALID, "st_ps_train_options.callbacks: NULL with ncallbacks %d", o->ncallbacks);
  return ST_OK;
}

st_status st_ps_train(const st_ps_train_options *a, st_ps_train_result *out) {
  if (!a || !out) return st_error(ST_ERR_INVALID, "st_ps_train: %s is NULL", a ? "out" : "options");
  memset(out, 0, sizeof *out);
  st_status s = check_options(a);
  if (s != ST_OK) return s;
  coord c;
  memset(&c, 0, sizeof c);
  c.a = a;
  if ((s = load_cluster(a, &c.cluster)) != ST_OK) return s;
  if (c.cluster.self_role != ST_PS_CHIEF) {
    s = st_error(ST_ERR_INVALID, "task %s:%d: the parameter_server job runs on the chief; workers and ps "
                 "run st_ps_server_run ('strata server')", st__ps_role_name(c.cluster.self_role),
                 c.cluster.self_index);
    st__ps_cluster_free(&c.cluster);
    return s;
  }
  fill_job(&c);
  c.incarnation = (uint32_t)st__ps_random_u64();
  c.snapshot_step = -1, c.ps_lost_in_wait = -1;
  s = train_job(&c, out);
  if (s != ST_OK) st_ps_train_result_free(out);
  stop_servers(&c);
  coord_free(&c);
  return s;
}

/* ---- The coordinator API (st_ps_coordinator_*): closures scheduled one
 * step at a time by the caller, as TensorFlow's ClusterCoordinator ---- */

struct st_ps_coordinator {
  coord c;
  st_ps_train_options o;  /* a copy (its strings borrowed) */
  closure *cls;           /* [total_steps]: closure k is step k (handle k) */
  uint32_t *idx;          /* [total_steps * batch]: the examples of each */
  int *count;             /* [total_steps] */
  int64_t scheduled, done;
  st_status failed;       /* a failure of the job: every later call returns it */
  char failure[512];
  bool stopped;
};

/* The failure of the job, kept: the API's later calls report it again. */
static st_status coordinator_fail(st_ps_coordinator *k, st_status s) {
  if (k->failed == ST_OK) {
    k->failed = s;
    snprintf(k->failure, sizeof k->failure, "%s", st_last_error());
  }
  return st_error(k->failed, "%s", k->failure);
}

/* RUN of closure (step) h to worker w. */
static st_status run_custom(st_ps_coordinator *k, int64_t h, int w) {
  coord *c = &k->c;
  int n = k->count[h];
  size_t bytes = 8 + 16 + 8 * (size_t)n;
  uint8_t *p = malloc(bytes), *q = p;
  if (!p) return st_error(ST_ERR_NOMEM, "out of memory");
  st__ps_put_u64(q, 1), st__ps_put_u64(q + 8, (uint64_t)h), st__ps_put_u64(q + 16, (uint64_t)n);
  q += 24;
  for (int i = 0; i < n; i++, q += 8) st__ps_put_u64(q, k->idx[(size_t)h * (size_t)c->job.batch + (size_t)i]);
  st_status s = send_to(c, c->w[w].sock, ST_PS_MSG_RUN, closure_id(c, 0, (int)h), p, bytes);
  free(p);
  k->cls[h].state = 1, k->cls[h].worker = w, c->w[w].busy = (int)h;
  c->scheduled++;
  return s;
}

/* One round: queued closures to free workers, replies, heartbeats, losses
 * (as run_epoch does for an epoch). */
static st_status pump(st_ps_coordinator *k, int wait_ms) {
  coord *c = &k->c;
  if (k->failed != ST_OK) return coordinator_fail(k, k->failed);
  st_status s = ST_OK;
  if (stop_asked(c)) s = st_error(ST_ERR_STOPPED, "stopped by a request");
  int64_t next = 0;
  for (int i = 0; i < c->nw && s == ST_OK; i++) {
    if (!c->w[i].alive || c->w[i].busy >= 0) continue;
    while (next < k->scheduled && k->cls[next].state != 0) next++;
    if (next < k->scheduled) s = run_custom(k, next, i);
  }
  st_ps_socket *socks[64];
  bool ready[64];
  int n = 0;
  socks[n++] = c->hb;
  for (int i = 0; i < c->nw && n < 64; i++) socks[n++] = c->w[i].sock;
  if (s == ST_OK) st__ps_poll(socks, n, wait_ms, ready);
  drain_heartbeats(c);
  double sums[4] = {0};
  int done = 0;
  for (int i = 0; i < c->nw && s == ST_OK; i++) s = read_worker(c, 0, i, k->cls, &done, sums);
  k->done += done;
  check_workers(c, k->cls);
  int p = s == ST_OK ? lost_ps(c) : -1;
  if (p >= 0)
    s = st_error(ST_ERR_PEER, "ps:%d lost (no heartbeat for %.2f s); the coordinator API cannot recover a "
                 "lost ps (no backup): rerun the job", p, st_now_seconds() - c->ps_seen[p]);
  ping_servers(c);
  int alive = 0;
  for (int i = 0; i < c->nw; i++) alive += c->w[i].alive;
  if (s == ST_OK && !alive && k->done < k->scheduled) {
    double since = st_now_seconds();
    while (s == ST_OK && !alive) { /* wait up to the coordinator timeout for one to rejoin */
      if (stop_asked(c)) s = st_error(ST_ERR_STOPPED, "stopped by a request");
      else if (st_now_seconds() - since > c->job.coordinator_timeout)
        s = st_error(ST_ERR_PEER, "every worker was lost (none rejoined within %.0f s)", c->job.coordinator_timeout);
      st__ps_poll(socks, 1, 20, ready);
      drain_heartbeats(c);
      for (int i = 0; i < c->nw && s == ST_OK; i++) s = read_worker(c, 0, i, k->cls, &done, sums);
      ping_servers(c);
      for (int i = 0; i < c->nw; i++) alive += c->w[i].alive;
    }
  }
  return s == ST_OK ? ST_OK : coordinator_fail(k, s);
}

st_status st_ps_coordinator_create(const st_ps_train_options *o, st_ps_coordinator **out) {
  if (!o || !out) return st_error(ST_ERR_INVALID, "st_ps_coordinator_create: %s is NULL", o ? "out" : "options");
  *out = NULL;
  st_status s = check_options(o);
  if (s != ST_OK) return s;
  if (o->backup_dir || o->ncallbacks)
    return st_error(ST_ERR_INVALID, "st_ps_train_options.%s: not supported by the coordinator API (st_ps_train has it)",
                    o->backup_dir ? "backup_dir" : "callbacks");
  st_ps_coordinator *k = calloc(1, sizeof *k);
  if (!k) return st_error(ST_ERR_NOMEM, "out of memory");
  k->o = *o;
  k->o.steps_per_execution = 1;
  coord *c = &k->c;
  c->a = &k->o;
  c->n_train = o->n_train, c->val = o->validation;
  if ((s = load_cluster(o, &c->cluster)) != ST_OK) {
    free(k);
    return s;
  }
  if (c->cluster.self_role != ST_PS_CHIEF)
    s = st_error(ST_ERR_INVALID, "task %s:%d: the coordinator runs on the chief; workers and ps run "
                 "st_ps_server_run ('strata server')", st__ps_role_name(c->cluster.self_role), c->cluster.self_index);
  fill_job(c);
  c->incarnation = (uint32_t)st__ps_random_u64();
  c->snapshot_step = -1, c->ps_lost_in_wait = -1, c->resumed_step = -1;
  if (s == ST_OK) s = st__ps_build_model(&c->job, &c->strategy, &c->model);
  if (s == ST_OK && o->prepare) s = o->prepare(o->prepare_user, c->model, &c->val);
  if (s == ST_OK) s = st__ps_layout_make(&c->model->net, c->cluster.count[ST_PS_PS], &c->job, &c->layout);
  c->steps_per_epoch = (c->n_train + o->batch - 1) / o->batch;
  c->job.total_steps = c->steps_per_epoch * o->epochs;
  size_t total = (size_t)c->job.total_steps;
  if (s == ST_OK && total > 1000000000) s = st_error(ST_ERR_INVALID, "st_ps_train_options.epochs: %lld steps in all (at most 10^9 with the coordinator API)", (long long)total);
  if (s == ST_OK) {
    k->cls = calloc(total, sizeof *k->cls);
    k->idx = malloc(total * (size_t)o->batch * sizeof *k->idx);
    k->count = calloc(total, sizeof *k->count);
    c->results = calloc(total * 4, sizeof *c->results);
    if (!k->cls || !k->idx || !k->count || !c->results) s = st_error(ST_ERR_NOMEM, "out of memory");
  }
  if (s == ST_OK) s = connect_all(c);
  if (s == ST_OK) s = send_jobs(c);
  if (s == ST_OK && !o->quiet)
    say(c, "parameter_server job %016llx: %d workers, %d ps, up to %lld closures of one step (coordinator API, %s)",
        (unsigned long long)c->job.job_id, c->nw, c->nps, (long long)c->job.total_steps,
        o->insecure ? "insecure" : "CURVE");
  if (s != ST_OK) {
    st_ps_coordinator_destroy(k);
    return s;
  }
  *out = k;
  return ST_OK;
}

st_status st_ps_coordinator_schedule(st_ps_coordinator *k, const uint32_t *idx, int64_t n, int64_t *handle) {
  if (!k || !idx || !handle)
    return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: %s is NULL", !k ? "coordinator" : !idx ? "idx" : "handle");
  if (k->failed != ST_OK) return coordinator_fail(k, k->failed);
  coord *c = &k->c;
  if (k->stopped) return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: the job was finished");
  if (n < 1 || n > c->job.batch)
    return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: n %lld (must be 1..%lld, the batch size)",
                    (long long)n, (long long)c->job.batch);
  if (k->scheduled >= c->job.total_steps)
    return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: the job has %lld steps (epochs x steps per "
                    "epoch), all scheduled", (long long)c->job.total_steps);
  for (int64_t i = 0; i < n; i++)
    if (idx[i] >= (uint64_t)c->n_train)
      return st_error(ST_ERR_INVALID, "st_ps_coordinator_schedule: idx[%lld] = %u (the training set has %lld)",
                      (long long)i, idx[i], (long long)c->n_train);
  int64_t h = k->scheduled++;
  memcpy(k->idx + (size_t)h * (size_t)c->job.batch, idx, (size_t)n * sizeof *idx);
  k->count[h] = (int)n;
  k->cls[h].first = h, k->cls[h].n = 1, k->cls[h].state = 0, k->cls[h].worker = -1;
  *handle = h;
  return pump(k, 0); /* hand it to a free worker now, if any */
}

st_status st_ps_coordinator_join(st_ps_coordinator *k) {
  if (!k) return st_error(ST_ERR_INVALID, "st_ps_coordinator_join: coordinator is NULL");
  st_status s = ST_OK;
  while (s == ST_OK && k->done < k->scheduled) s = pump(k, 20);
  return s == ST_OK && k->failed ? coordinator_fail(k, k->failed) : s;
}

st_status st_ps_coordinator_fetch(st_ps_coordinator *k, int64_t handle, st_ps_closure_result *out) {
  if (!k || !out) return st_error(ST_ERR_INVALID, "st_ps_coordinator_fetch: %s is NULL", k ? "out" : "coordinator");
  if (handle < 0 || handle >= k->scheduled)
    return st_error(ST_ERR_INVALID, "st_ps_coordinator_fetch: handle %lld was not scheduled", (long long)handle);
  st_status s = ST_OK;
  while (s == ST_OK && k->cls[handle].state != 2) s = pump(k, 20);
  if (s != ST_OK) return s;
  const double *v = k->c.results + 4 * (size_t)handle;
  out->loss = v[1] > 0 ? v[0] / v[1] : 0;
  out->examples = (int64_t)v[1], out->correct = (int64_t)v[2];
  out->accuracy = v[3] > 0 ? v[2] / v[3] : 0;
  return ST_OK;
}

st_status st_ps_coordinator_finish(st_ps_coordinator *k, st_ps_train_result *out) {
  if (!k || !out) return st_error(ST_ERR_INVALID, "st_ps_coordinator_finish: %s is NULL", k ? "out" : "coordinator");
  memset(out, 0, sizeof *out);
  st_status s = st_ps_coordinator_join(k);
  coord *c = &k->c;
  uint64_t(*stats)[9] = NULL;
  if (s == ST_OK && !(stats = calloc((size_t)c->nps + 1, sizeof *stats))) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = gather_stats(c, stats);
  if (s == ST_OK) s = pull_variables(c);
  if (s == ST_OK && !(out->per_ps = calloc((size_t)c->nps + 1, sizeof *out->per_ps)))
    s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s != ST_OK) {
    free(stats);
    free(out->per_ps);
    out->per_ps = NULL;
    return coordinator_fail(k, s);
  }
  out->exactly_once = true;
  for (int p = 0; p < c->nps; p++) {
    st_ps_stats *ps = &out->per_ps[p];
    ps->updates_applied = (int64_t)stats[p][0], ps->duplicates_skipped = (int64_t)stats[p][1];
    ps->pushes_refused = (int64_t)stats[p][2], ps->frames_dropped = (int64_t)stats[p][3];
    memcpy(&ps->staleness_mean, &stats[p][4], 8);
    ps->staleness_max = (int64_t)stats[p][5], ps->connections_refused = (int64_t)stats[p][6];
    ps->stale_pushes_recomputed = (int64_t)stats[p][7], ps->updates_rolled_back = (int64_t)stats[p][8];
    out->exactly_once &= ps->updates_applied == k->scheduled;
  }
  free(stats);
  out->workers = c->nw, out->nps = c->nps, out->steps_per_epoch = c->steps_per_epoch;
  out->model = c->model, out->strategy = c->strategy;
  c->model = NULL, c->strategy = NULL;
  stop_servers(c);
  k->stopped = true;
  return ST_OK;
}

int64_t st_ps_coordinator_closures_retried(const st_ps_coordinator *k) { return k ? k->c.retried : 0; }

void st_ps_coordinator_destroy(st_ps_coordinator *k) {
  if (!k) return;
  if (!k->stopped) stop_servers(&k->c);
  coord_free(&k->c);
  free(k->cls), free(k->idx), free(k->count);
  free(k);
}
