/* The server loop of a parameter-server job's worker and ps tasks
 * (st__ps_serve, ps/server.h; behind st_ps_server_run, train/ps_server.c).
 * It binds the task's address, waits for the chief's JOB, builds the model
 * (the caller's builder) and then serves until STOP, a stop request, or the
 * chief's silence past the job's coordinator timeout (ST_ERR_PEER). Lines go
 * to the caller's on_message, never to stdout. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distribute/strategy.h"
#include "ps/server.h"
#include "ps/test_hooks.h"

/* What one server process holds. */
typedef struct server {
  const st__ps_server_config *o;
  int stop_code;         /* 1: STOP from the chief; 2: a failure already reported */
  char failure[512];     /* with stop_code 2: what it was */
  st_ps_cluster cluster;
  st_ps_transport *t;
  st_ps_socket *sock;    /* ROUTER at our address */
  uint32_t incarnation;
  st__ps_job job;
  bool have_job;
  st__ps_model model;    /* the job's model (o->build) */
  st__ps_layout layout;
  double chief_seen;     /* last message from the chief */
  /* ps */
  uint8_t *applied;      /* [total_steps] 1 once applied */
  int64_t version, napplied, duplicates, refused;
  double staleness_sum;
  int64_t staleness_max;
  int64_t stale;         /* pushes over --max-staleness, answered "recompute" */
  uint64_t generation;   /* from the last RESTORE: pushes of closures of older ones are refused */
  int64_t rolled_back;   /* updates applied, then undone by a RESTORE */
  uint32_t fenced[ST_PS_MAX_TASKS]; /* per worker: a lost incarnation (0: none) */
  float *restore_buf;    /* RESTORE chunks staged (floats [0, restore_have)) */
  float *state0;         /* worker: the state as pulled for this step (BatchNormalization) */
  size_t restore_have;
  /* worker */
  const st_tensor *train_x, *train_y; /* from o->data, borrowed */
  int64_t n_train;
  st_ps_socket **ps_socks; /* [nps] */
  st_replica *rep;
  float *x, *y, *packed;   /* one batch; one ps's variables */
  int64_t fault_step;      /* test hook fault (ps/test_hooks.h) */
  int fault_sig;           /* SIGKILL or SIGSTOP, raised once */
  int step_delay_ms;       /* test hook step_delay_ms: slower steps */
  uint64_t pull_id;        /* this worker's PULL requests */
  bool abandoned;          /* a ps answered a push "rolled back": the closure is void */
} server;

/* One line to the caller (o->on_message, else st_log). */
static void say(server *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(server *sv, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (sv->o->on_message) sv->o->on_message(sv->o->user, line);
  else st_log(ST_LOG_INFO, "%s", line);
}

/* A warning line (refused connections): on_message, or st_log at warning. */
static void warn(void *user, const char *line) {
  server *sv = user;
  if (sv->o->on_message) sv->o->on_message(sv->o->user, line);
  else st_log(ST_LOG_WARN, "%s", line);
}

static bool stopped(server *sv) {
  return sv->stop_code || (sv->o->should_stop && sv->o->should_stop(sv->o->user));
}

static st_status reply(server *sv, const st_ps_msg *to, int type, uint64_t closure, uint64_t step,
                       const void *payload, size_t len) {
  st_ps_header h = st__ps_make_header(&sv->cluster, sv->job.job_id, sv->incarnation, type);
  h.closure = closure;
  h.step = step;
  return st__ps_send(sv->sock, to, &h, payload, len, 5000);
}

/* ---- ps ---- */

static void ps_pull(server *sv, const st_ps_msg *m) {
  int me = sv->cluster.self_index;
  size_t n = sv->layout.ps_floats[me];
  st__ps_pack(&sv->layout, me, sv->model.net->params, sv->packed);
  if (me == 0 && sv->layout.n_state) memcpy(sv->packed + n, sv->model.net->state, sv->layout.n_state * sizeof(float));
  n = st__ps_wire_floats(&sv->layout, me);
  reply(sv, m, ST_PS_MSG_PULL_OK, m->h.closure, (uint64_t)sv->version, sv->packed, n * sizeof(float));
}

/* Apply the gradients of one global step once; a repeat is acknowledged as a
 * duplicate and changes nothing. */
static void ps_push(server *sv, const st_ps_msg *m) {
  int me = sv->cluster.self_index;
  uint8_t applied = 0;
  if (m->h.sender_role == ST_PS_WORKER && sv->fenced[m->h.sender_index] &&
      sv->fenced[m->h.sender_index] == m->h.incarnation) {
    sv->refused++; /* a worker the chief declared lost: its late pushes change nothing */
    const char *e = "this worker was declared lost by the chief (missed heartbeats); its pushes are refused";
    reply(sv, m, ST_PS_MSG_ERROR, m->h.closure, m->h.step, e, strlen(e));
    return;
  }
  if (m->h.sender_role == ST_PS_WORKER && st__ps_closure_generation(m->h.closure) < sv->generation) {
    applied = 3; /* a closure from before the last RESTORE (the job rolled back): void */
    reply(sv, m, ST_PS_MSG_ACK, m->h.closure, m->h.step, &applied, 1);
    return;
  }
  if (m->h.sender_role != ST_PS_WORKER || m->h.step >= (uint64_t)sv->job.total_steps ||
      m->h.payload_len != st__ps_wire_floats(&sv->layout, me) * sizeof(float) ||
      m->h.version_seen > (uint64_t)sv->version) {
    sv->refused++;
    return;
  }
  int64_t lag = sv->version - (int64_t)m->h.version_seen;
  if (sv->applied[m->h.step]) {
    sv->duplicates++;
  } else if (sv->job.max_staleness >= 0 && lag > sv->job.max_staleness) {
    sv->stale++; /* bounded delay: computed from variables too old; pull and recompute */
    applied = 2;
  } else {
    st_net *net = sv->model.net;
    const float *g = (const float *)m->payload;
    for (int i = 0; i < sv->layout.nvars; i++) {
      const st__ps_var *v = &sv->layout.vars[i];
      if (v->ps != me) continue;
      float *slots[4];
      for (int k = 0; k < net->n_slots; k++) slots[k] = net->slots[k] + v->offset;
      st_optimizer_apply(&net->optimizer, net->be_ctx, sv->version, v->size,
                         net->params + v->offset, g, slots);
      g += v->size;
    }
    for (size_t i = 0; me == 0 && i < sv->layout.n_state; i++) net->state[i] += g[i]; /* the step's state change */
    sv->staleness_sum += (double)lag;
    if (lag > sv->staleness_max) sv->staleness_max = lag;
    sv->applied[m->h.step] = 1;
    sv->version++;
    sv->napplied++;
    applied = 1;
  }
  reply(sv, m, ST_PS_MSG_ACK, m->h.closure, m->h.step, &applied, 1);
}

static void ps_stats(server *sv, const st_ps_msg *m) {
  st_ps_counters c = st__ps_socket_counters(sv->sock);
  int64_t dropped = 0;
  for (int i = 1; i < ST_PS_DROP_COUNT; i++) dropped += c.dropped[i];
  uint8_t p[9 * 8];
  double mean = sv->napplied ? sv->staleness_sum / (double)sv->napplied : 0;
  uint64_t mean_bits;
  memcpy(&mean_bits, &mean, 8);
  uint64_t v[9] = {(uint64_t)sv->napplied, (uint64_t)sv->duplicates, (uint64_t)sv->refused,
                   (uint64_t)dropped, mean_bits, (uint64_t)sv->staleness_max,
                   (uint64_t)st__ps_transport_refused(sv->t), (uint64_t)sv->stale,
                   (uint64_t)sv->rolled_back};
  for (int i = 0; i < 9; i++) st__ps_put_u64(p + 8 * i, v[i]);
  reply(sv, m, ST_PS_MSG_STATS_OK, 0, 0, p, sizeof p);
}

/* SNAPSHOT: the variables, then each optimizer slot, of this ps (packed),
 * in chunks: the request asks for the floats from version_seen on, at most
 * step of them (0: all); the reply echoes the offset in version_seen. A
 * RESTORE or SNAPSHOT of a large model with its slots exceeds one frame's
 * 256 MiB: the chief asks chunk by chunk (at a quiescent point: nothing
 * changes in between). */
static void ps_snapshot(server *sv, const st_ps_msg *m) {
  int me = sv->cluster.self_index;
  st_net *net = sv->model.net;
  size_t n = sv->layout.ps_floats[me], ns = (size_t)net->n_slots, total = n * (1 + ns);
  size_t nst = me == 0 ? sv->layout.n_state : 0;
  total += nst;
  size_t off = (size_t)m->h.version_seen, len = m->h.step ? (size_t)m->h.step : total;
  if (off > total) off = total;
  if (len > total - off) len = total - off;
  float *buf = malloc((total + 1) * sizeof(float));
  if (!buf) {
    reply(sv, m, ST_PS_MSG_ERROR, 0, 0, "out of memory", 13);
    return;
  }
  st__ps_pack(&sv->layout, me, net->params, buf);
  for (size_t k = 0; k < ns; k++) st__ps_pack(&sv->layout, me, net->slots[k], buf + n * (1 + k));
  if (nst) memcpy(buf + n * (1 + ns), net->state, nst * sizeof(float));
  st_ps_header h = st__ps_make_header(&sv->cluster, sv->job.job_id, sv->incarnation, ST_PS_MSG_SNAPSHOT_OK);
  h.closure = (uint64_t)sv->napplied, h.step = (uint64_t)sv->version, h.version_seen = off;
  st__ps_send(sv->sock, m, &h, buf + off, len * sizeof(float), 5000);
  free(buf);
}

/* RESTORE: variables and slots of a backup, in chunks (version_seen: the
 * chunk's offset in floats; each answered RESTORE_OK with it) staged until
 * the last one; then steps below the backup's count as applied, the others
 * not; closures of older generations are void. */
static void ps_restore(server *sv, const st_ps_msg *m) {
  int me = sv->cluster.self_index;
  st_net *net = sv->model.net;
  size_t n = sv->layout.ps_floats[me], ns = (size_t)net->n_slots, total = n * (1 + ns);
  size_t nst = me == 0 ? sv->layout.n_state : 0;
  total += nst;
  size_t off = (size_t)m->h.version_seen, len = m->h.payload_len / sizeof(float);
  if (off == 0) sv->restore_have = 0;
  if (m->h.payload_len % sizeof(float) || off != sv->restore_have || len > total - off ||
      (len == 0 && total) || m->h.step > (uint64_t)sv->job.total_steps) {
    const char *e = "RESTORE of the wrong size or step";
    sv->restore_have = 0;
    reply(sv, m, ST_PS_MSG_ERROR, 0, 0, e, strlen(e));
    return;
  }
  if (!sv->restore_buf && !(sv->restore_buf = malloc((total + 1) * sizeof(float)))) {
    reply(sv, m, ST_PS_MSG_ERROR, 0, 0, "out of memory", 13);
    return;
  }
  memcpy(sv->restore_buf + off, m->payload, len * sizeof(float));
  sv->restore_have = off + len;
  st_ps_header h = st__ps_make_header(&sv->cluster, sv->job.job_id, sv->incarnation, ST_PS_MSG_RESTORE_OK);
  h.closure = m->h.closure, h.step = m->h.step, h.version_seen = off;
  if (sv->restore_have < total) { /* more chunks to come */
    st__ps_send(sv->sock, m, &h, NULL, 0, 5000);
    return;
  }
  const float *buf = sv->restore_buf;
  st__ps_unpack(&sv->layout, me, buf, net->params);
  for (size_t k = 0; k < ns; k++) st__ps_unpack(&sv->layout, me, buf + n * (1 + k), net->slots[k]);
  if (nst) memcpy(net->state, buf + n * (1 + ns), nst * sizeof(float));
  sv->restore_have = 0;
  int64_t b = (int64_t)m->h.step;
  if (sv->napplied > b) sv->rolled_back += sv->napplied - b;
  for (int64_t i = 0; i < sv->job.total_steps; i++) sv->applied[i] = i < b;
  sv->version = sv->napplied = b;
  sv->generation = m->h.closure;
  say(sv, "ps:%d: restored from the backup at step %lld (generation %llu)", me,
      (long long)b, (unsigned long long)sv->generation);
  st__ps_send(sv->sock, m, &h, NULL, 0, 5000);
}

/* ---- worker ---- */

static st_status worker_connect(server *sv) {
  int nps = sv->cluster.count[ST_PS_PS];
  sv->ps_socks = calloc((size_t)nps, sizeof *sv->ps_socks);
  if (!sv->ps_socks) return st_error(ST_ERR_NOMEM, "out of memory");
  for (int p = 0; p < nps; p++) {
    st_status s = st__ps_connect(sv->t, st__ps_cluster_task(&sv->cluster, ST_PS_PS, p), &sv->ps_socks[p]);
    if (s != ST_OK) return s;
  }
  return ST_OK;
}

/* The batch of indices idx[0..n) of the training set into sv->x, sv->y. */
static void gather(server *sv, const uint8_t *idx, int n) {
  const st_tensor *tx = sv->train_x, *ty = sv->train_y;
  size_t per = st_tensor_count(tx) / (size_t)tx->dims[0];
  for (int i = 0; i < n; i++) {
    uint32_t k = (uint32_t)st__ps_get_u64(idx + 8 * i);
    float *dst = sv->x + (size_t)i * per;
    if (tx->dtype == ST_U8)
      for (size_t e = 0; e < per; e++) dst[e] = ((const uint8_t *)tx->data)[k * per + e] * (1.0f / 255.0f);
    else
      memcpy(dst, (const float *)tx->data + k * per, per * sizeof(float));
    sv->y[i] = ((const uint8_t *)ty->data)[k];
  }
}

/* One request to ps p and its reply of `type` whose closure field is
 * `closure` (and, for ACK, whose step is `step`): the request is sent again
 * every 0.2 s until then (a frame may be lost: the ps answers a repeated
 * PULL again and acknowledges a repeated PUSH as a duplicate), for up to the
 * job's coordinator timeout (then the ps is lost). Replies to earlier
 * requests are skipped. */
static st_status request(server *sv, int p, st_ps_header *h, const void *payload, size_t len, int type,
                         uint64_t closure, uint64_t step, st_ps_msg *m) {
  st_ps_socket *s = sv->ps_socks[p];
  double deadline = st_now_seconds() + sv->job.coordinator_timeout, resend = 0;
  while (st_now_seconds() < deadline && !stopped(sv)) {
    if (st_now_seconds() >= resend) {
      st_ps_header copy = *h;
      st_status st = st__ps_send(s, NULL, &copy, payload, len, 5000);
      if (st != ST_OK) return st;
      resend = st_now_seconds() + 0.2;
    }
    if (st__ps_recv(s, sv->job.job_id, 50, m) != ST_OK) continue;
    bool from_p = m->h.sender_role == ST_PS_PS && m->h.sender_index == p;
    bool mine = m->h.closure == closure && (type != ST_PS_MSG_ACK || m->h.step == step);
    if (from_p && mine && m->h.type == type) return ST_OK;
    if (from_p && mine && m->h.type == ST_PS_MSG_ERROR) {
      st_status e = st_error(ST_ERR_PEER, "ps:%d: %.*s", p, (int)m->h.payload_len, (const char *)m->payload);
      st__ps_msg_free(m);
      return e;
    }
    st__ps_msg_free(m);
  }
  if (stopped(sv)) /* not a timeout (issue 29 D16) */
    return st_error(ST_ERR_STOPPED, "stopped on request while waiting for ps:%d's %s", p,
                    st__ps_msg_name(type));
  return st_error(ST_ERR_TIMEOUT, "ps:%d did not answer %s within %g s", p, st__ps_msg_name(type),
                  sv->job.coordinator_timeout);
}

/* Pull every ps's variables into the net; versions[p] = their versions. */
static st_status pull_all(server *sv, uint64_t *versions) {
  int nps = sv->cluster.count[ST_PS_PS];
  for (int p = 0; p < nps; p++) {
    st_ps_header h = st__ps_make_header(&sv->cluster, sv->job.job_id, sv->incarnation, ST_PS_MSG_PULL);
    h.closure = ++sv->pull_id; /* echoed by the ps: tells this pull's answer from older ones */
    st_ps_msg m;
    st_status s = request(sv, p, &h, NULL, 0, ST_PS_MSG_PULL_OK, h.closure, 0, &m);
    if (s != ST_OK) return s;
    bool ok = m.h.payload_len == st__ps_wire_floats(&sv->layout, p) * sizeof(float);
    if (ok) st__ps_unpack(&sv->layout, p, (const float *)m.payload, sv->model.net->params);
    if (ok && p == 0 && sv->layout.n_state) { /* the state, and its value before this step */
      memcpy(sv->model.net->state, (const float *)m.payload + sv->layout.ps_floats[0], sv->layout.n_state * sizeof(float));
      memcpy(sv->state0, sv->model.net->state, sv->layout.n_state * sizeof(float));
    }
    versions[p] = m.h.step;
    st__ps_msg_free(&m);
    if (!ok) return st_error(ST_ERR_FORMAT, "ps:%d sent variables of the wrong size", p);
  }
  return ST_OK;
}

/* Push each ps its part of the gradients of global step `step`; wait for the
 * ACKs. *stale: a ps refused them as over --max-staleness (recompute). */
static st_status push_all(server *sv, uint64_t closure, uint64_t step, const uint64_t *versions,
                          bool *stale) {
  *stale = false;
  int nps = sv->cluster.count[ST_PS_PS];
  for (int p = 0; p < nps; p++) {
    st__ps_pack(&sv->layout, p, sv->rep->grads, sv->packed);
    for (size_t i = 0; p == 0 && i < sv->layout.n_state; i++) /* the step's change of the state */
      sv->packed[sv->layout.ps_floats[0] + i] = sv->model.net->state[i] - sv->state0[i];
    st_ps_header h = st__ps_make_header(&sv->cluster, sv->job.job_id, sv->incarnation, ST_PS_MSG_PUSH);
    h.closure = closure, h.step = step, h.version_seen = versions[p];
    st_ps_msg m;
    st_status s = request(sv, p, &h, sv->packed, st__ps_wire_floats(&sv->layout, p) * sizeof(float), ST_PS_MSG_ACK,
                          closure, step, &m);
    if (s != ST_OK) return s;
    if (m.h.payload_len == 1 && m.payload[0] == 2) *stale = true;
    if (m.h.payload_len == 1 && m.payload[0] == 3) sv->abandoned = true;
    st__ps_msg_free(&m);
    /* test hook: kill -9 or SIGSTOP this worker after the first ps applied
     * this step, before the others did (a closure applied in part) */
    if (sv->fault_sig && step == (uint64_t)sv->fault_step && p == 0) {
      int sig = sv->fault_sig;
      sv->fault_sig = 0;
      say(sv, "worker:%d: test hook: %s at step %lld", sv->cluster.self_index,
              sig == SIGKILL ? "SIGKILL" : "SIGSTOP", (long long)step);
      raise(sig);
    }
  }
  return ST_OK;
}

/* One step: forward, metrics, backward, push. sums: loss, examples, correct,
 * metric count, staleness sum, staleness max. */
static st_status worker_step(server *sv, uint64_t closure, uint64_t step, const uint8_t *idx, int n,
                             double *sums) {
  uint64_t versions[ST_PS_MAX_TASKS];
  gather(sv, idx, n);
  st_net *net = sv->model.net;
  st_status s = st__net_check_labels(net, sv->y, n, 0);
  if (s == ST_OK && net->nlayers) s = st__net_check_inputs(net, sv->x, n, 0);
  /* with --max-staleness a ps may refuse gradients of too old variables:
   * pull fresh ones and compute again (a ps that applied the step already
   * skips the repeat) */
  for (int attempt = 0; s == ST_OK && attempt < 100000; attempt++) {
    if ((s = pull_all(sv, versions)) != ST_OK) return s;
    const float *out = st__replica_forward(net, sv->rep, sv->x, n, true, (int64_t)step);
    st_step_stats st = {0};
    st__step_metrics(net, out, sv->y, n, &st);
    double loss = st__replica_loss_backward(net, sv->rep, sv->x, sv->y, n, n, (int64_t)step, NULL, NULL);
    if (sv->step_delay_ms > 0) usleep((useconds_t)sv->step_delay_ms * 1000);
    bool stale = false;
    if ((s = push_all(sv, closure, step, versions, &stale)) != ST_OK || stale) continue;
    if (sv->abandoned) return ST_OK; /* the job rolled back past this closure */
    sums[0] += loss, sums[1] += n, sums[2] += (double)st.correct, sums[3] += (double)st.metric_count;
    return ST_OK;
  }
  return s != ST_OK ? s : st_error(ST_ERR_INTERNAL, "step %llu: stale 100000 times", (unsigned long long)step);
}

/* RUN: u64 nsteps, then per step u64 global step, u64 n, n x u64 index. */
static void worker_run(server *sv, const st_ps_msg *m) {
  const uint8_t *p = m->payload, *end = m->payload + m->h.payload_len;
  double sums[6] = {0};
  st_status s = ST_OK;
  uint64_t nsteps = m->h.payload_len >= 8 ? st__ps_get_u64(p) : 0;
  p += 8;
  sv->abandoned = false;
  int64_t n_train = sv->n_train;
  for (uint64_t i = 0; i < nsteps && s == ST_OK && !sv->abandoned; i++) {
    if (end - p < 16) goto bad;
    uint64_t step = st__ps_get_u64(p), n = st__ps_get_u64(p + 8);
    p += 16;
    if (n == 0 || n > (uint64_t)sv->job.batch || (uint64_t)(end - p) / 8 < n) goto bad;
    for (uint64_t k = 0; k < n; k++)
      if (st__ps_get_u64(p + 8 * k) >= (uint64_t)n_train) goto bad;
    s = worker_step(sv, m->h.closure, step, p, (int)n, sums);
    p += 8 * n;
  }
  if (s != ST_OK) {
    const char *e = st_last_error();
    /* step: the status (ST_ERR_TIMEOUT: a ps did not answer; the chief decides) */
    reply(sv, m, ST_PS_MSG_ERROR, m->h.closure, (uint64_t)s, e, strlen(e));
    say(sv, "worker:%d: %s", sv->cluster.self_index, e);
    if (s == ST_ERR_PEER) { /* refused (fenced): a ps that does not answer is the chief's call */
      sv->stop_code = 2;
      snprintf(sv->failure, sizeof sv->failure, "worker:%d: %s", sv->cluster.self_index, e);
    }
    return;
  }
  if (sv->abandoned) { /* the chief rolled back to a backup: it no longer waits for this closure */
    say(sv, "worker:%d: closure %llx abandoned (the job rolled back to a backup)",
            sv->cluster.self_index, (unsigned long long)m->h.closure);
    return;
  }
  uint8_t out[4 * 8];
  for (int k = 0; k < 4; k++) st__ps_put_u64(out + 8 * k, (uint64_t)sums[k]);
  uint64_t lb;
  memcpy(&lb, &sums[0], 8);
  st__ps_put_u64(out, lb);
  reply(sv, m, ST_PS_MSG_DONE, m->h.closure, m->h.step, out, sizeof out);
  return;
bad:
  reply(sv, m, ST_PS_MSG_ERROR, m->h.closure, 0, "malformed RUN", 13);
}

/* ---- heartbeats (worker or ps -> chief), on their own thread and socket ---- */
typedef struct heartbeat {
  server *sv;
  pthread_t th;
  atomic_bool stop;
  atomic_bool fenced; /* the chief answered FENCE: it declared us lost */
  bool running;
} heartbeat;

static void *heartbeat_main(void *arg) {
  heartbeat *hb = arg;
  server *sv = hb->sv;
  st_ps_socket *s = NULL;
  if (st__ps_connect(sv->t, st__ps_cluster_task(&sv->cluster, ST_PS_CHIEF, 0), &s) != ST_OK) return NULL;
  int ms = (int)(sv->job.heartbeat_interval * 1000.0);
  if (ms < 10) ms = 10;
  while (!atomic_load(&hb->stop)) {
    st_ps_header h = st__ps_make_header(&sv->cluster, sv->job.job_id, sv->incarnation, ST_PS_MSG_HEARTBEAT);
    st__ps_send(s, NULL, &h, NULL, 0, 0);
    st_ps_msg m;
    while (st__ps_recv(s, sv->job.job_id, 0, &m) == ST_OK) {
      if (m.h.type == ST_PS_MSG_FENCE && m.h.sender_role == ST_PS_CHIEF) atomic_store(&hb->fenced, true);
      st__ps_msg_free(&m);
    }
    for (int slept = 0; slept < ms && !atomic_load(&hb->stop); slept += 10) usleep(10000);
  }
  st__ps_socket_close(s);
  return NULL;
}

/* ---- JOB ---- */

static st_status setup_job(server *sv) {
  st_status s = sv->o->build(&sv->job, &sv->model);
  if (s == ST_OK) s = st__ps_layout_make(sv->model.net, sv->cluster.count[ST_PS_PS], &sv->job, &sv->layout);
  if (s != ST_OK) return s;
  size_t maxf = 0;
  for (int p = 0; p < sv->layout.nps; p++)
    if (st__ps_wire_floats(&sv->layout, p) > maxf) maxf = st__ps_wire_floats(&sv->layout, p);
  sv->packed = malloc((maxf ? maxf : 1) * sizeof(float));
  sv->state0 = malloc((sv->layout.n_state + 1) * sizeof(float));
  if (!sv->packed || !sv->state0) return st_error(ST_ERR_NOMEM, "out of memory");
  if (sv->cluster.self_role == ST_PS_PS) {
    sv->applied = calloc((size_t)sv->job.total_steps, 1);
    return sv->applied ? ST_OK : st_error(ST_ERR_NOMEM, "out of memory");
  }
  if (!sv->o->data)
    return st_error(ST_ERR_INVALID, "st_ps_server_options.data: a worker task needs the training data");
  s = sv->o->data(sv->o->user, &sv->job, sv->model.net->input_shape, &sv->train_x, &sv->train_y, &sv->n_train);
  if (s != ST_OK) return s;
  if (!sv->train_x || !sv->train_y || sv->train_x->rank < 1 || sv->n_train < 1 ||
      sv->n_train > sv->train_x->dims[0] || (sv->train_x->dtype != ST_U8 && sv->train_x->dtype != ST_F32) ||
      sv->train_y->dtype != ST_U8 || (int64_t)st_tensor_count(sv->train_y) < sv->n_train)
    return st_error(ST_ERR_INVALID, "st_ps_server_options.data: the training set for --data %s is not "
                    "u8/f32 images with u8 labels", sv->job.data);
  const st_tensor *tx = sv->train_x;
  size_t per = st_tensor_count(tx) / (size_t)tx->dims[0];
  if (per > ((size_t)1 << 40) / sizeof(float) / (size_t)sv->job.batch) /* batch <= 2^20 (job.c) */
    return st_error(ST_ERR_INVALID, "JOB: batch %lld of %zu floats per example: too large",
                    (long long)sv->job.batch, per);
  sv->x = malloc((size_t)sv->job.batch * per * sizeof(float));
  sv->y = malloc((size_t)sv->job.batch * sizeof(float));
  if (!sv->x || !sv->y) return st_error(ST_ERR_NOMEM, "out of memory");
  st_net *net = sv->model.net;
  s = st__replica_create(net, net->be, 0, (int)sv->job.batch, net->params, net->state, &sv->rep);
  return s == ST_OK ? worker_connect(sv) : s;
}

static void handle(server *sv, st_ps_msg *m, heartbeat *hb) {
  if (m->h.sender_role == ST_PS_CHIEF) sv->chief_seen = st_now_seconds();
  bool chief = m->h.sender_role == ST_PS_CHIEF;
  if ((m->h.type == ST_PS_MSG_JOB || m->h.type == ST_PS_MSG_STOP || m->h.type == ST_PS_MSG_STATS) && !chief)
    return; /* only the chief starts, stops or asks for the counters */
  switch (m->h.type) {
    case ST_PS_MSG_JOB: {
      if (sv->have_job) { /* the chief again (same job): confirm */
        reply(sv, m, ST_PS_MSG_JOB_OK, 0, 0, NULL, 0);
        break;
      }
      st_status s = st__ps_job_decode((const char *)m->payload, m->h.payload_len, &sv->job);
      if (s == ST_OK) s = setup_job(sv);
      if (s != ST_OK) {
        const char *e = st_last_error();
        say(sv, "%s:%d: %s", st__ps_role_name(sv->cluster.self_role),
                sv->cluster.self_index, e);
        snprintf(sv->failure, sizeof sv->failure, "%s:%d: %s", st__ps_role_name(sv->cluster.self_role),
                 sv->cluster.self_index, e);
        reply(sv, m, ST_PS_MSG_ERROR, 0, 0, e, strlen(e));
        sv->stop_code = 2;
        break;
      }
      sv->have_job = true;
      hb->sv = sv; /* workers and ps: the chief detects a lost ps too */
      hb->running = pthread_create(&hb->th, NULL, heartbeat_main, hb) == 0;
      reply(sv, m, ST_PS_MSG_JOB_OK, 0, 0, NULL, 0);
      break;
    }
    case ST_PS_MSG_STOP: sv->stop_code = 1; break;
    case ST_PS_MSG_HEARTBEAT: break;
    case ST_PS_MSG_PULL: if (sv->have_job && sv->applied) ps_pull(sv, m); break;
    case ST_PS_MSG_PUSH: if (sv->have_job && sv->applied) ps_push(sv, m); break;
    case ST_PS_MSG_FENCE:
      if (sv->applied && m->h.sender_role == ST_PS_CHIEF && m->h.closure < ST_PS_MAX_TASKS)
        sv->fenced[m->h.closure] = (uint32_t)m->h.step;
      break;
    case ST_PS_MSG_STATS: if (sv->have_job && sv->applied) ps_stats(sv, m); break;
    case ST_PS_MSG_SNAPSHOT: if (chief && sv->have_job && sv->applied) ps_snapshot(sv, m); break;
    case ST_PS_MSG_RESTORE: if (chief && sv->have_job && sv->applied) ps_restore(sv, m); break;
    case ST_PS_MSG_RUN:
      if (sv->have_job && sv->rep && m->h.sender_role == ST_PS_CHIEF) worker_run(sv, m);
      break;
    default: break;
  }
  /* the time spent handling it (a closure, loading the data) is not silence */
  if (m->h.sender_role == ST_PS_CHIEF) sv->chief_seen = st_now_seconds();
}

/* Frames this server dropped, by reason, on stderr (none: nothing). */
static void log_drops(server *sv) {
  char why[512];
  int64_t n = st__ps_drops_text(st__ps_socket_counters(sv->sock), why, sizeof why);
  if (n)
    say(sv, "%s:%d: %lld frames dropped (%s)", st__ps_role_name(sv->cluster.self_role),
            sv->cluster.self_index, (long long)n, why);
}

static st_status serve(server *sv, double job_timeout) {
  heartbeat hb;
  memset(&hb, 0, sizeof hb);
  double start = st_now_seconds();
  st_status rc = ST_OK;
  char why[512] = "";
  char who[32];
  snprintf(who, sizeof who, "%s:%d", st__ps_role_name(sv->cluster.self_role), sv->cluster.self_index);
  while (!stopped(sv)) {
    st__ps_transport_report_refusals(sv->t, who, warn, sv); /* N3, issue 29 D13 */
    st_ps_msg m;
    if (st__ps_recv(sv->sock, sv->have_job ? sv->job.job_id : 0, 200, &m) == ST_OK) {
      handle(sv, &m, &hb);
      st__ps_msg_free(&m);
    }
    double now = st_now_seconds();
    if (atomic_load(&hb.fenced)) {
      say(sv, "worker:%d: the chief declared this worker lost (missed "
              "heartbeats: stopped or too slow): exiting", sv->cluster.self_index);
      rc = ST_ERR_PEER;
      break;
    }
    if (!sv->have_job && now - start > job_timeout) {
      snprintf(why, sizeof why, "no JOB from the chief within %g s", job_timeout);
      rc = ST_ERR_PEER;
      break;
    }
    if (sv->have_job && now - sv->chief_seen > sv->job.coordinator_timeout) {
      snprintf(why, sizeof why, "%s:%d: the chief has been silent for %.1f s (coordinator "
              "timeout): exiting", st__ps_role_name(sv->cluster.self_role),
              sv->cluster.self_index, now - sv->chief_seen);
      rc = ST_ERR_PEER;
      break;
    }
  }
  if (why[0]) say(sv, "%s", why);
  if (sv->stop_code == 2 && !why[0]) snprintf(why, sizeof why, "%s", sv->failure); /* said when it happened */
  log_drops(sv);
  st__ps_transport_report_refusals(sv->t, who, warn, sv);
  if (hb.running) {
    atomic_store(&hb.stop, true);
    pthread_join(hb.th, NULL);
  }
  if (sv->stop_code == 2) rc = ST_ERR_PEER;
  return rc == ST_OK ? ST_OK : st_error(rc, "%s", why);
}

static void server_free(server *sv) {
  int nps = sv->cluster.count[ST_PS_PS];
  for (int p = 0; sv->ps_socks && p < nps; p++) st__ps_socket_close(sv->ps_socks[p]);
  free(sv->ps_socks);
  st__ps_socket_close(sv->sock);
  st__ps_transport_destroy(sv->t);
  st__replica_destroy(sv->rep);
  free(sv->x), free(sv->y), free(sv->packed), free(sv->applied), free(sv->restore_buf), free(sv->state0);
  st__ps_layout_free(&sv->layout);
  st__ps_model_free(&sv->model);
  st__ps_cluster_free(&sv->cluster);
}

/* The test hooks (ps/test_hooks.h, RELIABILITY.md P1-P5): the fault
 * "kill|stop:WORKER:STEP" of this worker, slower steps. */
static void test_hooks(server *sv) {
  const st__ps_test_hooks *t = st__ps_get_test_hooks();
  char kind[8];
  int fw;
  long long fs;
  if (sv->cluster.self_role == ST_PS_WORKER && t->fault[0] &&
      sscanf(t->fault, "%7[a-z]:%d:%lld", kind, &fw, &fs) == 3 && fw == sv->cluster.self_index) {
    sv->fault_sig = !strcmp(kind, "kill") ? SIGKILL : !strcmp(kind, "stop") ? SIGSTOP : 0;
    sv->fault_step = fs;
  }
  sv->step_delay_ms = t->step_delay_ms;
}

st_status st__ps_serve(const st__ps_server_config *o) {
  if (!(o->job_timeout > 0))
    return st_error(ST_ERR_INVALID, "st_ps_server_options.job_timeout: %g (must be > 0)", o->job_timeout);
  server sv;
  memset(&sv, 0, sizeof sv);
  sv.o = o;
  st_status s = st__ps_cluster_load(o->tf_config, o->cluster_file, o->task, "st_ps_server_options",
                                    &sv.cluster);
  if (s != ST_OK) return s;
  if (sv.cluster.self_role == ST_PS_CHIEF) {
    st__ps_cluster_free(&sv.cluster);
    return st_error(ST_ERR_INVALID, "task chief: the chief runs 'strata train --strategy "
                    "parameter_server', not a server");
  }
  test_hooks(&sv);
  sv.incarnation = (uint32_t)st__ps_random_u64() | 1u; /* never 0: 0 means "not fenced" */
  const char *net = st__ps_get_test_hooks()->net;
  st_ps_transport_options to = {&sv.cluster, o->keys_dir, o->insecure, 0, net[0] ? net : NULL};
  s = st__ps_transport_create(&to, &sv.t);
  if (s == ST_OK)
    s = st__ps_listen(sv.t, st__ps_cluster_task(&sv.cluster, sv.cluster.self_role, sv.cluster.self_index),
                      &sv.sock);
  if (s == ST_OK) s = serve(&sv, o->job_timeout);
  server_free(&sv);
  return s;
}
