/* The chief's snapshots and recovery (ps/chief.h): every ps's variables
 * and slots into the chief's net at a quiescent point (SNAPSHOT, in chunks),
 * the net back to every ps after a backup was read (RESTORE), and a lost ps
 * waited for, then every ps reloaded (with --backup-dir). */
#include <stdlib.h>
#include <string.h>

#include "ps/chief.h"
#include "ps/test_hooks.h"

/* Floats per SNAPSHOT / RESTORE chunk: 64 MiB (a frame carries at most 256
 * MiB; a model's variables and Adam slots on one ps pass that above ~22M
 * parameters); tests lower it with the test hook chunk_bytes
 * (ps/test_hooks.h). */
static size_t chunk_floats(void) {
  long long b = st__ps_get_test_hooks()->chunk_bytes;
  if (b < (long long)sizeof(float) || b > (64LL << 20)) b = 64LL << 20;
  return (size_t)b / sizeof(float);
}

/* Every float of ps p's variables and slots (n * (1 + ns)) into buf, chunk
 * by chunk; *applied / *version: its counters (the same in every chunk). */
static st_status snapshot_ps(st__ps_chief *c, int p, float *buf, size_t total, uint64_t *applied, uint64_t *version) {
  size_t chunk = chunk_floats();
  for (size_t off = 0; off < total || off == 0; off += chunk) {
    st_ps_header h = st__ps_make_header(&c->cluster, c->job.job_id, c->incarnation, ST_PS_MSG_SNAPSHOT);
    h.version_seen = off, h.step = chunk;
    st_status s = st__ps_send(c->ps[p], NULL, &h, NULL, 0, 2000);
    st_ps_msg m;
    if (s == ST_OK) s = st__ps_chief_await(c, c->ps[p], ST_PS_MSG_SNAPSHOT_OK, ST_PS_PS, p, 30, &m);
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
st_status st__ps_chief_snapshot(st__ps_chief *c, int64_t b) {
  st_net *net = c->model.net;
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

st_status st__ps_chief_snapshot_or_recover(st__ps_chief *c, int64_t b) {
  c->ps_lost_in_wait = -1;
  st_status s = st__ps_chief_snapshot(c, b);
  if (s == ST_ERR_PEER && c->ps_lost_in_wait >= 0 && c->cfg.recover && c->backups > 0) {
    st_clear_error();
    s = st__ps_chief_recover(c, c->ps_lost_in_wait, NULL);
  }
  return s;
}

st_status st__ps_chief_restore(st__ps_chief *c, int64_t b) {
  if (c->generation >= 0xffff) /* closure ids carry it in 16 bits */
    return st_error(ST_ERR_PEER, "backup: 65535 rollbacks in one run: giving up");
  c->generation++;
  c->snapshot_step = b; /* the net holds the backup: every ps's state once restored */
  st_net *net = c->model.net;
  st_status s = ST_OK;
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
      if (s == ST_OK) s = st__ps_chief_await(c, c->ps[p], ST_PS_MSG_RESTORE_OK, ST_PS_PS, p, 30, &m);
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
static st_status mark_lost(st__ps_chief *c, int q, bool *lost, int *nlost) {
  st__ps_chief_say(c, "ps:%d lost (no heartbeat for %.2f s); training paused: waiting up to "
          "%g s (--coordinator-timeout) for a new process of the task, then every ps reloads the "
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
st_status st__ps_chief_recover(st__ps_chief *c, int p, st__ps_closure *cls) {
  double t0 = st_now_seconds(), last_offer = 0, limit = c->job.coordinator_timeout;
  bool *lost = calloc((size_t)c->nps, sizeof *lost);
  if (!lost) return st_error(ST_ERR_NOMEM, "out of memory");
  int nlost = 0;
  st_status s = mark_lost(c, p, lost, &nlost);
  while (s == ST_OK && nlost > 0) {
    double now = st_now_seconds();
    for (int q = 0; q < c->nps; q++)
      if (lost[q]) c->ps_seen[q] = now; /* lost_ps names another one */
    int q = st__ps_chief_lost_ps(c);
    if (q >= 0 && (s = mark_lost(c, q, lost, &nlost)) != ST_OK) break;
    if (st__ps_chief_stop_asked(c)) s = st_error(ST_ERR_STOPPED, "stopped by a signal");
    for (int q = 0; s == ST_OK && q < c->nps; q++)
      if (lost[q] && now - t0 > limit)
        s = st_error(ST_ERR_PEER, "ps:%d lost and not back within %g s (--coordinator-timeout)", q, limit);
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
    st__ps_chief_drain_heartbeats(c);
    for (int i = 0; i < c->nw; i++) { /* rejoins; the rest is void after the rollback */
      st_ps_msg m;
      while (c->w[i].sock && st__ps_recv(c->w[i].sock, c->job.job_id, 0, &m) == ST_OK) {
        if (m.h.type == ST_PS_MSG_JOB_OK) st__ps_chief_rejoin(c, i, &m);
        st__ps_msg_free(&m);
      }
    }
    st__ps_chief_check_workers(c, cls);
    for (int q = 0; q < c->nps; q++) {
      st_ps_msg m;
      while (lost[q] && st__ps_recv(c->ps[q], c->job.job_id, 0, &m) == ST_OK) {
        if (m.h.type == ST_PS_MSG_JOB_OK && m.h.sender_role == ST_PS_PS && m.h.sender_index == q) {
          st__ps_chief_say(c, "ps:%d is back after %.2f s", q, st_now_seconds() - t0);
          lost[q] = false, nlost--;
        }
        st__ps_msg_free(&m);
      }
      if (!lost[q]) c->ps_seen[q] = st_now_seconds();
    }
    st__ps_chief_ping(c);
  }
  free(lost);
  if (s != ST_OK) return s;
  int64_t redo = c->done_since_backup, b = 0;
  if ((s = c->cfg.reload(c->cfg.user, &b)) != ST_OK || (s = st__ps_chief_restore(c, b)) != ST_OK) return s;
  c->rollbacks++, c->steps_rolled_back += redo;
  for (int i = 0; i < c->nw; i++) c->w[i].busy = -1; /* their closures are void */
  c->rewind = true;
  st__ps_chief_say(c, "every ps reloaded the backup at step %lld (epoch %lld, step %lld of it); "
          "training goes on from there (%lld finished steps run again)\n", (long long)b,
          (long long)(b / c->steps_per_epoch) + 1, (long long)(b % c->steps_per_epoch), (long long)redo);
  return ST_OK;
}
