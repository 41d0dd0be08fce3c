/* The chief of a parameter-server job (`strata train --strategy
 * parameter_server`): it sends the JOB to every server, hands out closures
 * (steps_per_execution steps each, the batches of a per-epoch permutation so
 * that every epoch visits each training example exactly once), re-queues the
 * closure of a worker that missed 3 heartbeats, and at the end gathers the
 * ps's counters and variables, evaluates, saves and reports (ps.h has the
 * protocol). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps.h"
#include "report.h"

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
  const ps_train_args *a;
  st_ps_cluster cluster;
  st_ps_transport *t;
  st_ps_socket *hb;          /* ROUTER at the chief's address */
  st_ps_socket **ps;         /* [nps] */
  double *ps_seen;           /* [nps] last heartbeat of each ps */
  wstate *w;                 /* [nw] */
  int nw, nps;
  ps_job job;
  uint32_t incarnation;
  cli_data d;
  bool have_data;
  st_strategy *strategy;
  st_model *model;
  ps_layout layout;
  int64_t steps_per_epoch, scheduled, retried, lost, rejoined;
  char *job_text;            /* the JOB payload, kept to re-send to lost workers */
  uint32_t *perm;            /* [n_train] this epoch's order */
  double last_ping;
} coord;

static volatile sig_atomic_t g_ps_stop;
static void on_stop(int sig) { (void)sig, g_ps_stop = 1; }

static st_status send_to(coord *c, st_ps_socket *s, int type, uint64_t closure, const void *p, size_t n) {
  st_ps_header h = ps_header(&c->cluster, c->job.job_id, c->incarnation, type);
  h.closure = closure;
  return st__ps_send(s, NULL, &h, p, n, 2000);
}

static void ping_servers(coord *c);

/* Wait for a reply of `type` from task (role, index) on s (heartbeats to the
 * servers go on meanwhile). */
static st_status await_reply(coord *c, st_ps_socket *s, int type, int role, int index, double timeout,
                             st_ps_msg *m) {
  double deadline = st_now_seconds() + timeout;
  while (st_now_seconds() < deadline && !g_ps_stop) {
    ping_servers(c);
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
  st_ps_transport_options to = {&c->cluster, c->a->keys, c->a->insecure, 0, NULL};
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
  char *text = c->job_text = ps_job_encode(&c->job);
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
  int64_t n = c->d.n_train;
  for (int64_t i = 0; i < n; i++) c->perm[i] = (uint32_t)i;
  st_rng r = st_rng_make((uint64_t)c->job.seed, 0x5053u + (uint64_t)epoch);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)st_rng_below(&r, (uint64_t)i + 1);
    uint32_t t = c->perm[i];
    c->perm[i] = c->perm[j], c->perm[j] = t;
  }
}

/* RUN of closure k of the epoch to worker w. */
static st_status run_closure(coord *c, int epoch, int k, closure *cl, int w) {
  int64_t B = c->job.batch, n = c->d.n_train;
  size_t bytes = 8;
  for (int s = 0; s < cl->n; s++) {
    int64_t lo = (cl->first + s) * B, hi = lo + B < n ? lo + B : n;
    bytes += 16 + 8 * (size_t)(hi - lo);
  }
  uint8_t *p = malloc(bytes), *q = p;
  if (!p) return st_error(ST_ERR_NOMEM, "out of memory");
  ps_put_u64(q, (uint64_t)cl->n), q += 8;
  for (int s = 0; s < cl->n; s++) {
    int64_t b = cl->first + s, lo = b * B, hi = lo + B < n ? lo + B : n;
    ps_put_u64(q, (uint64_t)(epoch * c->steps_per_epoch + b)), ps_put_u64(q + 8, (uint64_t)(hi - lo));
    q += 16;
    for (int64_t i = lo; i < hi; i++, q += 8) ps_put_u64(q, c->perm[i]);
  }
  uint64_t id = (uint64_t)epoch * 1000000007ULL + (uint64_t)k;
  st_status st = send_to(c, c->w[w].sock, ST_PS_MSG_RUN, id, p, bytes);
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
    fprintf(stderr, "strata train: worker:%d lost (no heartbeat for %.2f s)%s\n", i, now - w->last_seen,
            w->busy >= 0 ? "; its closure goes to another worker" : "");
    if (w->busy >= 0) {
      cls[w->busy].state = 0;
      c->retried++;
    }
    w->busy = -1;
    for (int p = 0; p < c->nps; p++) { /* fence it: its late pushes are refused */
      st_ps_header h = ps_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_FENCE);
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
      st_ps_header h = ps_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_FENCE);
      st__ps_send(c->hb, &m, &h, NULL, 0, 0); /* a lost worker came back: tell it */
    }
    st__ps_msg_free(&m);
  }
}

/* A ps silent for 3 heartbeat intervals is lost: its variables cannot be
 * recovered yet (no backup for this strategy), so the job ends (exit 3). */
static st_status check_ps(coord *c) {
  double now = st_now_seconds(), limit = 3 * c->job.heartbeat_interval;
  for (int p = 0; p < c->nps; p++)
    if (now - c->ps_seen[p] > limit)
      return st_error(ST_ERR_PEER, "ps:%d lost (no heartbeat for %.2f s); parameter_server cannot "
                      "recover a ps yet (no --backup-dir for this strategy): rerun the job", p,
                      now - c->ps_seen[p]);
  return ST_OK;
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
    st_ps_header h = ps_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_JOB);
    if (c->job_text) st__ps_send(w->sock, NULL, &h, c->job_text, strlen(c->job_text), 0); /* never wait */
  }
}

/* JOB_OK from lost worker i: a new incarnation of the task rejoins. */
static void rejoin(coord *c, int i, const st_ps_msg *m) {
  wstate *w = &c->w[i];
  if (w->alive || m->h.incarnation == w->incarnation) return; /* the fenced process itself */
  w->alive = true, w->busy = -1, w->last_seen = st_now_seconds(), w->incarnation = m->h.incarnation;
  c->rejoined++;
  fprintf(stderr, "strata train: worker:%d rejoined (a new process of the task); it gets work again\n", i);
}

/* DONE or ERROR from worker i; sums += the closure's figures. */
static st_status read_worker(coord *c, int epoch, int i, closure *cls, int *done, double *sums) {
  st_ps_msg m;
  while (c->w[i].sock && st__ps_recv(c->w[i].sock, c->job.job_id, 0, &m) == ST_OK) {
    int k = c->w[i].busy;
    uint64_t want = (uint64_t)epoch * 1000000007ULL + (uint64_t)k;
    if (m.h.type == ST_PS_MSG_JOB_OK) rejoin(c, i, &m);
    if (m.h.type == ST_PS_MSG_ERROR && c->w[i].alive) {
      st_status e = st_error(ST_ERR_PEER, "worker:%d: %.*s", i, (int)m.h.payload_len, (const char *)m.payload);
      st__ps_msg_free(&m);
      return e;
    }
    if (m.h.type == ST_PS_MSG_DONE && k >= 0 && m.h.closure == want && m.h.payload_len == 32) {
      double loss;
      uint64_t bits = ps_get_u64(m.payload);
      memcpy(&loss, &bits, 8);
      sums[0] += loss;
      for (int f = 1; f < 4; f++) sums[f] += (double)ps_get_u64(m.payload + 8 * f);
      cls[k].state = 2;
      c->w[i].busy = -1;
      (*done)++;
    }
    st__ps_msg_free(&m);
  }
  return ST_OK;
}

/* One epoch: every closure done once. sums: loss, examples, correct, metric count. */
static st_status run_epoch(coord *c, int epoch, double *sums) {
  int64_t spe = c->job.steps_per_execution;
  int nc = (int)((c->steps_per_epoch + spe - 1) / spe), done = 0;
  closure *cls = calloc((size_t)nc, sizeof *cls);
  if (!cls) return st_error(ST_ERR_NOMEM, "out of memory");
  for (int k = 0; k < nc; k++) {
    cls[k].first = k * spe;
    cls[k].n = (int)(cls[k].first + spe <= c->steps_per_epoch ? spe : c->steps_per_epoch - cls[k].first);
  }
  permute(c, epoch);
  st_status s = ST_OK;
  int next = 0;
  double none_since = 0;
  while (s == ST_OK && done < nc) {
    if (g_ps_stop) {
      s = st_error(ST_ERR_STOPPED, "stopped by a signal");
      break;
    }
    for (int i = 0; i < c->nw && s == ST_OK; i++) {
      if (!c->w[i].alive || c->w[i].busy >= 0) continue;
      while (next < nc && cls[next].state != 0) next++;
      int k = next;
      if (k >= nc) /* a re-queued closure */
        for (k = 0; k < nc && cls[k].state != 0; k++) {}
      if (k < nc) s = run_closure(c, epoch, k, &cls[k], i);
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
    if (s == ST_OK) s = check_ps(c);
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

/* Per ps: applied, duplicates, refused, dropped, staleness mean (bits), max,
 * connections refused, stale pushes answered "recompute". */
static st_status gather_stats(coord *c, uint64_t (*st)[8]) {
  for (int p = 0; p < c->nps; p++) {
    st_status s = send_to(c, c->ps[p], ST_PS_MSG_STATS, 0, NULL, 0);
    st_ps_msg m;
    if (s == ST_OK) s = await_reply(c, c->ps[p], ST_PS_MSG_STATS_OK, ST_PS_PS, p, 30, &m);
    if (s != ST_OK) return s;
    for (int f = 0; f < 8; f++) st[p][f] = m.h.payload_len == 64 ? ps_get_u64(m.payload + 8 * f) : 0;
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
    bool ok = m.h.payload_len == c->layout.ps_floats[p] * sizeof(float);
    if (ok) ps_unpack(&c->layout, p, (const float *)m.payload, c->model->net.params);
    st__ps_msg_free(&m);
    if (!ok) return st_error(ST_ERR_FORMAT, "ps:%d sent variables of the wrong size", p);
  }
  return ST_OK;
}

static char *ps_report_json(coord *c, uint64_t (*st)[8], const st_history *h, bool *exact) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  if (!f) return NULL;
  int64_t total = c->job.total_steps;
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
            "\"staleness_max\": %llu, \"connections_refused\": %llu, \"stale_pushes_recomputed\": %llu}",
            p ? ", " : "", p, c->layout.ps_floats[p],
            (unsigned long long)st[p][0], (unsigned long long)st[p][1], (unsigned long long)st[p][2],
            (unsigned long long)st[p][3], mean, (unsigned long long)st[p][5], (unsigned long long)st[p][6],
            (unsigned long long)st[p][7]);
  }
  /* examples trained on per epoch (completed closures only; a permutation
   * split in batches: n_train each when every example was visited once) */
  fprintf(f, "], \"train_examples_per_epoch\": [");
  for (int e = 0; e < h->epochs; e++) {
    fprintf(f, "%s%lld", e ? ", " : "", (long long)h->logs[e].examples);
    *exact &= h->logs[e].examples == c->d.n_train;
  }
  fprintf(f, "], \"exactly_once\": %s}", *exact ? "true" : "false");
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
  free(c->ps), free(c->w), free(c->perm), free(c->job_text), free(c->ps_seen);
  st__ps_socket_close(c->hb);
  st__ps_transport_destroy(c->t);
  ps_layout_free(&c->layout);
  st_model_destroy(c->model);
  st_strategy_destroy(c->strategy);
  if (c->have_data) cli_free_data(&c->d);
  st__ps_cluster_free(&c->cluster);
}

static int fail_rc(st_status s) {
  if (s == ST_ERR_PEER || s == ST_ERR_TIMEOUT) return EXIT_PEER;
  if (s == ST_ERR_STOPPED) return EXIT_STOPPED;
  if (s == ST_ERR_NOMEM || s == ST_ERR_INTERNAL || s == ST_ERR_IO) return EXIT_FAIL;
  return EXIT_USAGE;
}

static void fill_job(coord *c) {
  const ps_train_args *a = c->a;
  ps_job *j = &c->job;
  j->job_id = ps_random_u64();
  snprintf(j->model, sizeof j->model, "%s", a->model);
  snprintf(j->data, sizeof j->data, "%s", a->data);
  j->seed = a->seed, j->batch = a->batch, j->train_examples = a->train_examples;
  j->val_split = a->val_split;
  j->steps_per_execution = a->steps_per_execution > 0 ? a->steps_per_execution : 1;
  j->heartbeat_interval = a->heartbeat_interval > 0 ? a->heartbeat_interval : 1.0;
  j->coordinator_timeout = a->coordinator_timeout > 0 ? a->coordinator_timeout : 60.0;
  j->opt = a->opt;
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

/* Everything after the cluster is known; returns the exit code. */
static int train_job(coord *c, double t0) {
  const ps_train_args *a = c->a;
  int rc = cli_load_data("train", a->data, a->val_split, a->train_examples, (int)a->batch,
                         (uint64_t)a->seed, false, &c->d);
  if (rc) return rc;
  c->have_data = true;
  st_status s = ps_build_model(&c->job, &c->strategy, &c->model);
  if (s == ST_OK && (rc = cli_match_model_input("train", &c->d, st_model_input_shape(c->model))))
    return rc;
  if (s == ST_OK) s = ps_layout_make(&c->model->net, c->cluster.count[ST_PS_PS], &c->job, &c->layout);
  c->steps_per_epoch = (c->d.n_train + a->batch - 1) / a->batch;
  c->job.total_steps = c->steps_per_epoch * a->epochs;
  c->perm = malloc((size_t)c->d.n_train * sizeof *c->perm);
  if (s == ST_OK && !c->perm) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = connect_all(c);
  if (s == ST_OK) s = send_jobs(c);
  if (s == ST_OK && !a->quiet)
    fprintf(stderr, "strata train: parameter_server job %016llx: %d workers, %d ps, %lld steps of %ld "
            "examples (%s)\n", (unsigned long long)c->job.job_id, c->nw, c->nps,
            (long long)c->job.total_steps, a->batch, a->insecure ? "insecure" : "CURVE");
  st_history h = {0};
  h.logs = calloc((size_t)a->epochs, sizeof *h.logs);
  if (s == ST_OK && !h.logs) s = st_error(ST_ERR_NOMEM, "out of memory");
  double train0 = st_now_seconds();
  for (int e = 0; s == ST_OK && e < a->epochs; e++) {
    double sums[4] = {0}, te = st_now_seconds();
    s = run_epoch(c, e, sums);
    if (s != ST_OK) break;
    st_epoch_logs *l = &h.logs[h.epochs++];
    l->epoch = e, l->loss = sums[1] ? sums[0] / sums[1] : 0, l->accuracy = sums[3] ? sums[2] / sums[3] : 0;
    l->lr = a->opt.lr.initial, l->seconds = st_now_seconds() - te, l->steps = c->steps_per_epoch;
    l->examples = (int64_t)sums[1];
    h.train_samples += l->examples;
    if (c->d.val) { /* validation at epoch end, on the variables of every ps */
      st_eval_result v = {0};
      if ((s = pull_variables(c)) == ST_OK) s = st_model_evaluate(c->model, c->d.val, &v);
      if (s != ST_OK) break;
      l->has_validation = true, l->val_loss = v.loss, l->val_accuracy = v.accuracy;
    }
    if (!a->quiet)
      fprintf(stderr, "Epoch %d/%ld - %.1fs - loss: %.4f - accuracy: %.4f%s - closures: %lld (retried %lld)\n",
              e + 1, a->epochs, l->seconds, l->loss, l->accuracy, val_text(l), (long long)c->scheduled,
              (long long)c->retried);
  }
  h.train_seconds = st_now_seconds() - train0;
  h.samples_per_sec = h.train_seconds > 0 ? (double)h.train_samples / h.train_seconds : 0;
  uint64_t(*stats)[8] = calloc((size_t)c->nps, sizeof *stats);
  if (s == ST_OK && !stats) s = st_error(ST_ERR_NOMEM, "out of memory");
  if (s == ST_OK) s = gather_stats(c, stats);
  if (s == ST_OK) s = pull_variables(c);
  st_eval_result test = {0};
  if (s == ST_OK) s = st_model_evaluate(c->model, c->d.test, &test);
  bool exact = false;
  char *pj = s == ST_OK ? ps_report_json(c, stats, &h, &exact) : NULL;
  if (s == ST_OK) {
    for (int p = 0; p < c->nps; p++)
      fprintf(stderr, "parameter_server: ps:%d applied %llu of %lld steps (%llu duplicates skipped, "
              "%llu frames dropped)\n", p, (unsigned long long)stats[p][0], (long long)c->job.total_steps,
              (unsigned long long)stats[p][1], (unsigned long long)stats[p][3]);
    printf("test_loss: %.4f - test_accuracy: %.4f - samples/s: %.0f\n", test.loss, test.accuracy,
           h.samples_per_sec);
    if (!exact) {
      fprintf(stderr, "strata train: parameter_server: a ps did not apply every step exactly once\n");
      rc = EXIT_FAIL;
    }
  }
  if (s == ST_OK && a->save && st_model_save_weights(c->model, a->save) != ST_OK) {
    fprintf(stderr, "strata train: --save: %s\n", st_last_error());
    rc = EXIT_WRITE;
  }
  report_info ri = {a->model, "parameter_server", st_optimizer_name(a->opt.kind), c->nw, (int)a->batch,
                    (uint64_t)a->seed, a->lr, c->d.n_train, c->d.n_val, &h, test, st_now_seconds() - t0,
                    NULL};
  if (s == ST_OK && rc == EXIT_OK && a->report &&
      report_write_extra(a->report, &ri, "parameter_server", pj) != 0) {
    fprintf(stderr, "strata train: --report %s: could not write the file\n", a->report);
    rc = EXIT_WRITE;
  }
  if (s != ST_OK) {
    fprintf(stderr, "strata train: %s\n", st_last_error());
    rc = fail_rc(s);
  }
  free(pj);
  free(stats);
  st_history_destroy(&h);
  return rc;
}

int ps_train(const ps_train_args *a) {
  double t0 = st_now_seconds();
  coord c;
  memset(&c, 0, sizeof c);
  c.a = a;
  int rc = ps_load_cluster("train", a->cluster_file, a->task, &c.cluster);
  if (rc) return rc;
  if (c.cluster.self_role != ST_PS_CHIEF) {
    fprintf(stderr, "strata train: task %s:%d: --strategy parameter_server runs on the chief; start "
            "workers and ps with 'strata server'\n", st__ps_role_name(c.cluster.self_role),
            c.cluster.self_index);
    st__ps_cluster_free(&c.cluster);
    return EXIT_USAGE;
  }
  if (a->insecure)
    fprintf(stderr, "strata train: warning: --insecure: no encryption or authentication; any "
            "process that reaches the cluster's ports can change the model\n");
  fill_job(&c);
  c.incarnation = (uint32_t)ps_random_u64();
  struct sigaction sa, old_term, old_int;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);
  rc = train_job(&c, t0);
  stop_servers(&c);
  coord_free(&c);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGINT, &old_int, NULL);
  return rc;
}
