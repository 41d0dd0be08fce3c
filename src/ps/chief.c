/* The chief of a parameter-server job, its side of the cluster (ps/chief.h):
 * connections and the JOB, heartbeats both ways, workers lost and rejoining,
 * the replies of workers, and at the end the counters and variables of every
 * ps. Lines go to the caller's on_message, never to stdout. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/chief.h"

void st__ps_chief_say(const st__ps_chief *c, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (c->cfg.on_message) c->cfg.on_message(c->cfg.user, line);
  else st_log(ST_LOG_INFO, "%s", line);
}

/* A warning line (refused connections): on_message, or st_log at warning. */
static void warn(void *user, const char *line) {
  const st__ps_chief *c = user;
  if (c->cfg.on_message) c->cfg.on_message(c->cfg.user, line);
  else st_log(ST_LOG_WARN, "%s", line);
}

void st__ps_chief_log_refusals(st__ps_chief *c) {
  if (c->t) st__ps_transport_report_refusals(c->t, "chief:0", warn, c); /* issue 29 D13 */
}

bool st__ps_chief_stop_asked(const st__ps_chief *c) { return c->cfg.should_stop && c->cfg.should_stop(c->cfg.user); }

st_status st__ps_chief_send(st__ps_chief *c, st_ps_socket *s, int type, uint64_t closure, const void *p, size_t n) {
  st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, type);
  h.closure = closure;
  return st__ps_send(s, NULL, &h, p, n, 2000);
}

/* Wait for a reply of `type` from task (role, index) on s (heartbeats to the
 * servers go on meanwhile). A ps that misses 3 heartbeats meanwhile fails
 * the wait at once (c->ps_lost_in_wait names it). */
st_status st__ps_chief_await(st__ps_chief *c, st_ps_socket *s, int type, int role, int index, double timeout,
                             st_ps_msg *m) {
  double deadline = st_now_seconds() + timeout;
  while (st_now_seconds() < deadline && !st__ps_chief_stop_asked(c)) {
    st__ps_chief_ping(c);
    st__ps_chief_drain_heartbeats(c);
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
  if (st__ps_chief_stop_asked(c)) /* not a timeout (issue 29 D16) */
    return st_error(ST_ERR_STOPPED, "stopped on request while waiting for %s:%d's answer to %s",
                    st__ps_role_name((st_ps_role)role), index, st__ps_msg_name(type - 1));
  return st_error(ST_ERR_PEER, "%s:%d did not answer %s within %g s",
                  st__ps_role_name((st_ps_role)role), index, st__ps_msg_name(type - 1), timeout);
}

static st_status connect_all(st__ps_chief *c) {
  st_ps_transport_options to = {&c->cluster, c->cfg.keys_dir, c->cfg.insecure, 0, NULL};
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
 * workers load the data first): up to the coordinator timeout, the limit
 * the caller chose (--coordinator-timeout; 60 s by default). */
static st_status send_jobs(st__ps_chief *c) {
  char *text = c->job_text = st__ps_job_encode(&c->job);
  if (!text) return st_error(ST_ERR_NOMEM, "out of memory");
  st_status s = ST_OK;
  for (int p = 0; s == ST_OK && p < c->nps; p++) s = st__ps_chief_send(c, c->ps[p], ST_PS_MSG_JOB, 0, text, strlen(text));
  for (int i = 0; s == ST_OK && i < c->nw; i++) s = st__ps_chief_send(c, c->w[i].sock, ST_PS_MSG_JOB, 0, text, strlen(text));
  st_ps_msg m;
  double wait = c->job.coordinator_timeout;
  for (int p = 0; s == ST_OK && p < c->nps; p++)
    if ((s = st__ps_chief_await(c, c->ps[p], ST_PS_MSG_JOB_OK, ST_PS_PS, p, wait, &m)) == ST_OK) {
      st__ps_msg_free(&m);
      c->ps_seen[p] = st_now_seconds();
    }
  for (int i = 0; s == ST_OK && i < c->nw; i++)
    if ((s = st__ps_chief_await(c, c->w[i].sock, ST_PS_MSG_JOB_OK, ST_PS_WORKER, i, wait, &m)) == ST_OK) {
      c->w[i].incarnation = m.h.incarnation;
      st__ps_msg_free(&m);
      c->w[i].alive = true, c->w[i].busy = -1, c->w[i].last_seen = st_now_seconds();
    }
  return s;
}

st_status st__ps_chief_open(st__ps_chief *c) {
  st_status s = connect_all(c);
  return s == ST_OK ? send_jobs(c) : s;
}

/* A worker silent for 3 heartbeat intervals is lost; its closure is queued again. */
void st__ps_chief_check_workers(st__ps_chief *c, st__ps_closure *cls) {
  double now = st_now_seconds(), limit = 3 * c->job.heartbeat_interval;
  for (int i = 0; i < c->nw; i++) {
    st__ps_wstate *w = &c->w[i];
    if (!w->alive || now - w->last_seen <= limit) continue;
    w->alive = false;
    c->lost++;
    st__ps_chief_say(c, "worker:%d lost (no heartbeat for %.2f s)%s", i, now - w->last_seen,
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

void st__ps_chief_drain_heartbeats(st__ps_chief *c) {
  st_ps_msg m;
  while (st__ps_recv(c->hb, c->job.job_id, 0, &m) == ST_OK) {
    st__ps_wstate *w = m.h.sender_role == ST_PS_WORKER ? &c->w[m.h.sender_index] : NULL;
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
int st__ps_chief_lost_ps(const st__ps_chief *c) {
  double now = st_now_seconds(), limit = 3 * c->job.heartbeat_interval;
  for (int p = 0; p < c->nps; p++)
    if (now - c->ps_seen[p] > limit) return p;
  return -1;
}

void st__ps_chief_ping(st__ps_chief *c) {
  double now = st_now_seconds();
  if (now - c->last_ping < c->job.heartbeat_interval) return;
  c->last_ping = now;
  st__ps_chief_log_refusals(c);
  for (int p = 0; p < c->nps; p++) st__ps_chief_send(c, c->ps[p], ST_PS_MSG_HEARTBEAT, 0, NULL, 0);
  for (int i = 0; i < c->nw; i++) {
    st__ps_wstate *w = &c->w[i];
    if (w->alive) {
      st__ps_chief_send(c, w->sock, ST_PS_MSG_HEARTBEAT, 0, NULL, 0);
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
void st__ps_chief_rejoin(st__ps_chief *c, int i, const st_ps_msg *m) {
  st__ps_wstate *w = &c->w[i];
  if (w->alive || m->h.incarnation == w->incarnation) return; /* the fenced process itself */
  w->alive = true, w->busy = -1, w->last_seen = st_now_seconds(), w->incarnation = m->h.incarnation;
  c->rejoined++;
  st__ps_chief_say(c, "worker:%d rejoined (a new process of the task); it gets work again", i);
}

/* DONE or ERROR from worker i; sums += the closure's figures. */
st_status st__ps_chief_read_worker(st__ps_chief *c, int epoch, int i, st__ps_closure *cls, int *done, double *sums) {
  st_ps_msg m;
  while (c->w[i].sock && st__ps_recv(c->w[i].sock, c->job.job_id, 0, &m) == ST_OK) {
    int k = c->w[i].busy;
    uint64_t want = st__ps_chief_closure_id(c, epoch, k);
    if (m.h.type == ST_PS_MSG_JOB_OK) st__ps_chief_rejoin(c, i, &m);
    /* errors of its current closure (or of its job); one of a closure from
     * before a rollback is old news */
    bool current = m.h.closure == 0 || (k >= 0 && m.h.closure == want);
    if (m.h.type == ST_PS_MSG_ERROR && c->w[i].alive && current && k >= 0 && c->cfg.recover &&
        m.h.step == (uint64_t)ST_ERR_TIMEOUT) {
      /* a ps did not answer it: the closure goes back to the queue (a ps that
       * applied part of it skips that part); whether the ps is lost is the
       * heartbeats' call (then every ps reloads the backup) */
      st__ps_chief_say(c, "worker:%d: %.*s; its closure is queued again", i, (int)m.h.payload_len,
              (const char *)m.payload);
      cls[k].state = 0, c->w[i].busy = -1, c->retried++;
    } else if (m.h.type == ST_PS_MSG_ERROR && c->w[i].alive && current) {
      /* the worker's own status when it is about the input (a label that is
       * not a class: ValueError / exit 2, not a lost peer; issue 29 D10) */
      uint64_t ws = m.h.step;
      st_status code = ws == ST_ERR_INVALID || ws == ST_ERR_FORMAT || ws == ST_ERR_NONFINITE
                           ? (st_status)ws : ST_ERR_PEER;
      st_status e = st_error(code, "worker:%d: %.*s", i, (int)m.h.payload_len, (const char *)m.payload);
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

/* The id of closure k of an epoch in this generation. */
uint64_t st__ps_chief_closure_id(const st__ps_chief *c, int epoch, int k) {
  return c->generation << ST__PS_GENERATION_SHIFT | ((uint64_t)epoch * 1000000007ULL + (uint64_t)k);
}

/* Per ps: applied, duplicates, refused, dropped, staleness mean (bits), max,
 * connections refused, stale pushes answered "recompute". */
st_status st__ps_chief_gather_stats(st__ps_chief *c, uint64_t (*st)[9]) {
  for (int p = 0; p < c->nps; p++) {
    st_status s = st__ps_chief_send(c, c->ps[p], ST_PS_MSG_STATS, 0, NULL, 0);
    st_ps_msg m;
    if (s == ST_OK) s = st__ps_chief_await(c, c->ps[p], ST_PS_MSG_STATS_OK, ST_PS_PS, p, 30, &m);
    if (s != ST_OK) return s;
    for (int f = 0; f < 9; f++) st[p][f] = m.h.payload_len == 72 ? st__ps_get_u64(m.payload + 8 * f) : 0;
    st__ps_msg_free(&m);
  }
  return ST_OK;
}

/* The trained variables from every ps into the model. */
st_status st__ps_chief_pull(st__ps_chief *c) {
  for (int p = 0; p < c->nps; p++) {
    st_status s = st__ps_chief_send(c, c->ps[p], ST_PS_MSG_PULL, 0, NULL, 0);
    st_ps_msg m;
    if (s == ST_OK) s = st__ps_chief_await(c, c->ps[p], ST_PS_MSG_PULL_OK, ST_PS_PS, p, 30, &m);
    if (s != ST_OK) return s;
    bool ok = m.h.payload_len == st__ps_wire_floats(&c->layout, p) * sizeof(float);
    if (ok) st__ps_unpack(&c->layout, p, (const float *)m.payload, c->model.net->params);
    if (ok && p == 0 && c->layout.n_state) /* BatchNormalization's moving statistics */
      memcpy(c->model.net->state, (const float *)m.payload + c->layout.ps_floats[0], c->layout.n_state * sizeof(float));
    st__ps_msg_free(&m);
    if (!ok) return st_error(ST_ERR_FORMAT, "ps:%d sent variables of the wrong size", p);
  }
  return ST_OK;
}

void st__ps_chief_stop_servers(st__ps_chief *c) {
  for (int p = 0; c->ps && p < c->nps; p++)
    if (c->ps[p]) st__ps_chief_send(c, c->ps[p], ST_PS_MSG_STOP, 0, NULL, 0);
  for (int i = 0; c->w && i < c->nw; i++)
    if (c->w[i].sock) st__ps_chief_send(c, c->w[i].sock, ST_PS_MSG_STOP, 0, NULL, 0);
  if (c->t) usleep(100000); /* let the STOPs leave before the sockets close (linger 0) */
}

void st__ps_chief_free(st__ps_chief *c) {
  for (int p = 0; c->ps && p < c->nps; p++) st__ps_socket_close(c->ps[p]);
  for (int i = 0; c->w && i < c->nw; i++) st__ps_socket_close(c->w[i].sock);
  free(c->ps), free(c->w), free(c->perm), free(c->job_text), free(c->ps_seen);
  free(c->results);
  st__ps_socket_close(c->hb);
  st__ps_transport_destroy(c->t);
  st__ps_layout_free(&c->layout);
  st__ps_model_free(&c->model);
  st__ps_cluster_free(&c->cluster);
}
