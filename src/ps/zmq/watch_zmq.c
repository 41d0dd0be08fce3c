/* The ZAP handler thread of the ZeroMQ parameter-server transport and what it
 * watches (zmq_private.h): the CURVE allow-list (RFC 27), the listening
 * sockets' monitors (handshakes that fail before ZAP, issue 29 D13), and
 * established connections that libzmq closes while their peer is still
 * there: a frame over ZMQ_MAXMSGSIZE or one that is not valid ZMTP
 * (RELIABILITY.md N1; libzmq drops those without a word). Each becomes an
 * entry of a ring that the owner thread logs, rate-limited
 * (st__ps_transport_report_refusals). */
#define _GNU_SOURCE
#include "ps/zmq/zmq_private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>
#include <arpa/inet.h>

/* Keep a refused (or dropped) connection's address and why for the owner's
 * log. ZAP thread. */
static void remember(st_ps_transport *t, const char *addr, const char *why, bool dropped) {
  pthread_mutex_lock(&t->ring_mu);
  if (t->ring_n < REFUSAL_RING) {
    st__ps_refusal *r = &t->ring[t->ring_n++];
    snprintf(r->addr, sizeof r->addr, "%s", addr && *addr ? addr : "an unknown address (gone at once)");
    snprintf(r->why, sizeof r->why, "%s", why);
    r->dropped = dropped;
  } else {
    t->ring_lost++;
  }
  pthread_mutex_unlock(&t->ring_mu);
}

/* Count a refused connection (connections_refused) and remember it. */
static void refuse(st_ps_transport *t, const char *addr, const char *why) {
  atomic_fetch_add(&t->refused, 1);
  remember(t, addr, why, false);
}

static void drain_monitors(st_ps_transport *t);

/* One ZAP request (RFC 27) on rep. Secure: 200 with the task as user id when
 * the client's CURVE key is allowed, 400 otherwise. Insecure: 200 for every
 * NULL client. The monitors are read first, so the connection's ACCEPTED
 * event (sent before this request) has been seen: its fd is still open
 * (its handshake waits for this answer) when remember_peer duplicates it. */
static void zap_answer(st_ps_transport *t, void *rep) {
  drain_monitors(t);
  zmq_msg_t parts[8];
  int n = 0, more = 1;
  while (more && n < 8) {
    zmq_msg_init(&parts[n]);
    if (zmq_msg_recv(&parts[n], rep, 0) < 0) {
      zmq_msg_close(&parts[n]);
      break;
    }
    more = zmq_msg_more(&parts[n]);
    n++;
  }
  const char *user = NULL;
  if (t->insecure && n >= 6 && zmq_msg_size(&parts[5]) == 4 && !memcmp(zmq_msg_data(&parts[5]), "NULL", 4))
    user = "";
  if (!t->insecure && n >= 7 && zmq_msg_size(&parts[5]) == 5 && !memcmp(zmq_msg_data(&parts[5]), "CURVE", 5) &&
      zmq_msg_size(&parts[6]) == 32)
    for (int i = 0; i < t->nallow && !user; i++)
      if (!memcmp(t->allow[i].key, zmq_msg_data(&parts[6]), 32)) user = t->allow[i].user;
  if (!user) { /* parts[3]: the client's IP address */
    char addr[64] = "";
    if (n >= 4 && zmq_msg_size(&parts[3]) < sizeof addr)
      memcpy(addr, zmq_msg_data(&parts[3]), zmq_msg_size(&parts[3]));
    refuse(t, addr, t->insecure ? "it does not use the NULL mechanism" :
           "its CURVE key is not in the cluster's allow-list");
  }
  const char *reply[6] = {"1.0", "", user ? "200" : "400", user ? "OK" : "key not in the cluster",
                          user ? user : "", ""};
  for (int i = 0; i < 6; i++) {
    int flags = i < 5 ? ZMQ_SNDMORE : 0;
    if (i == 1 && n >= 2)
      zmq_send(rep, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), flags);
    else
      zmq_send(rep, reply[i], strlen(reply[i]), flags);
  }
  for (int i = 0; i < n; i++) zmq_msg_close(&parts[i]);
}

/* The peer address of an accepted connection (ZMQ_EVENT_ACCEPTED: its fd),
 * read at once, and a duplicate of the fd (see st__ps_conn). */
static void remember_peer(st_ps_transport *t, int fd) {
  st__ps_conn *c = &t->conn[(unsigned)fd % CONN_SLOTS];
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  char ip[INET6_ADDRSTRLEN] = "";
  if (c->dup >= 0) close(c->dup); /* a slot whose disconnect was never seen */
  c->fd = fd;
  c->dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  c->shaking = true;
  c->order = ++t->accepted;
  c->addr[0] = '\0';
  if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) return;
  if (ss.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(c->addr, sizeof c->addr, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
  } else if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    snprintf(c->addr, sizeof c->addr, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
  }
}

static void handshake_why(const st_ps_transport *t, uint16_t ev, uint32_t v, char *out, size_t cap) {
  if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    snprintf(out, cap, "the handshake did not complete (it closed the connection or sent "
             "something that is not ZeroMQ)");
  else if (v == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH && t->insecure)
    snprintf(out, cap, "it does not use the NULL mechanism (this task runs --insecure: a CURVE client?)");
  else if (v == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    snprintf(out, cap, "it does not use CURVE (a NULL or PLAIN client, or one run --insecure)");
  else if (v == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
    snprintf(out, cap, "its CURVE handshake did not decrypt (a wrong server key, or a secret key "
             "that does not match its public key: another cluster's keys?)");
  else
    snprintf(out, cap, "malformed handshake (ZMTP protocol error 0x%08x)", (unsigned)v);
}

/* A handshake succeeded: the events do not say whose; the connection
 * accepted first of those still in their handshake (they finish in order
 * but for a slow peer; a wrong guess names a garbage connection late). */
static void handshake_done(st_ps_transport *t) {
  int first = -1;
  for (int i = 0; i < CONN_SLOTS; i++)
    if (t->conn[i].fd >= 0 && t->conn[i].shaking &&
        (first < 0 || t->conn[i].order < t->conn[first].order))
      first = i;
  if (first >= 0) t->conn[first].shaking = false;
}

/* An established connection was closed by libzmq: if its peer had not
 * closed it (the duplicate reads no end of stream), libzmq dropped it: a
 * frame over ZMQ_MAXMSGSIZE or bytes that are not ZMTP (N1). A peer that
 * closed (end of stream, or reset) is the normal case: nothing said. */
static void check_dropped(st_ps_transport *t, st__ps_conn *c) {
  char b;
  ssize_t r = recv(c->dup, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
    char why[160];
    snprintf(why, sizeof why, "it sent a frame over the %llu-byte limit (ZMQ_MAXMSGSIZE: the "
             "largest Strata frame) or one that is not valid ZeroMQ",
             (unsigned long long)(t->max_payload + ST_PS_HEADER_BYTES));
    remember(t, c->addr, why, true);
  }
}

/* A connection closed (ZMQ_EVENT_DISCONNECTED, v its fd): a failed handshake
 * (the ZAP refusals are counted by zap_answer) is refused now, naming the
 * address of that fd; so is one that closes still in its handshake without
 * an event (libzmq drops bytes that are not ZMTP 3 silently); an
 * established one may have been dropped by libzmq (check_dropped). */
static void disconnected(st_ps_transport *t, uint32_t v) {
  st__ps_conn *c = &t->conn[v % CONN_SLOTS];
  bool known = c->fd == (int)v;
  if (!t->pending_auth && !t->pending_why[0] && known && c->shaking)
    snprintf(t->pending_why, sizeof t->pending_why, "it closed the connection during the "
             "handshake or sent bytes that are not ZeroMQ 3 (a port scanner, HTTP, old ZeroMQ)");
  if (!t->pending_auth && t->pending_why[0]) refuse(t, known ? c->addr : "", t->pending_why);
  else if (!t->pending_auth && known && !c->shaking && c->dup >= 0) check_dropped(t, c);
  t->pending_why[0] = '\0';
  t->pending_auth = false;
  if (known) {
    if (c->dup >= 0) close(c->dup);
    c->fd = c->dup = -1;
  }
}

/* One event of a listening socket's monitor. */
static void monitor_event(st_ps_transport *t, void *pair, zmq_msg_t *ev) {
  zmq_msg_t ep;
  zmq_msg_init(&ep);
  uint16_t e = 0;
  uint32_t v = 0;
  if (zmq_msg_size(ev) >= 6) {
    memcpy(&e, zmq_msg_data(ev), 2);
    memcpy(&v, (uint8_t *)zmq_msg_data(ev) + 2, 4);
  }
  if (zmq_msg_more(ev)) zmq_msg_recv(&ep, pair, ZMQ_DONTWAIT); /* the local endpoint */
  if (e == ZMQ_EVENT_ACCEPTED)
    remember_peer(t, (int)v);
  else if (e == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || e == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
    handshake_why(t, e, v, t->pending_why, sizeof t->pending_why);
  else if (e == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
    handshake_done(t);
  else if (e == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
    t->pending_auth = true;
  else if (e == ZMQ_EVENT_DISCONNECTED)
    disconnected(t, v);
  zmq_msg_close(&ep);
}

/* Every event waiting on the monitors, in order. ZAP thread. */
static void drain_monitors(st_ps_transport *t) {
  for (int i = 0; i < MAX_MONITORS; i++) {
    void *m = atomic_load(&t->monitor[i]);
    for (int k = 0; m && k < 100000; k++) {
      zmq_msg_t ev;
      zmq_msg_init(&ev);
      bool got = zmq_msg_recv(&ev, m, ZMQ_DONTWAIT) >= 0;
      if (got) monitor_event(t, m, &ev);
      zmq_msg_close(&ev);
      if (!got) break;
    }
  }
}

/* Close the monitors' sockets and the duplicated fds (the ZAP thread at its
 * end; destroy after it). */
static void close_monitors(st_ps_transport *t) {
  for (int i = 0; i < MAX_MONITORS; i++) {
    void *m = atomic_exchange(&t->monitor[i], NULL);
    if (m) zmq_close(m);
  }
  for (int i = 0; i < CONN_SLOTS; i++) {
    if (t->conn[i].dup >= 0) close(t->conn[i].dup);
    t->conn[i].fd = t->conn[i].dup = -1;
  }
}

static void *zap_thread(void *arg) {
  st_ps_transport *t = arg;
  void *rep = zmq_socket(t->ctx, ZMQ_REP);
  int linger = 0;
  zmq_setsockopt(rep, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_bind(rep, "inproc://zeromq.zap.01") != 0) {
    zmq_close(rep);
    atomic_store(&t->zap_state, -1);
    return NULL;
  }
  atomic_store(&t->zap_state, 1);
  while (!atomic_load(&t->zap_stop)) {
    zmq_pollitem_t it[1 + MAX_MONITORS] = {{rep, 0, ZMQ_POLLIN, 0}};
    int n = 1;
    for (int i = 0; i < MAX_MONITORS; i++) {
      void *m = atomic_load(&t->monitor[i]);
      if (m) it[n++] = (zmq_pollitem_t){m, 0, ZMQ_POLLIN, 0};
    }
    if (zmq_poll(it, n, 50) <= 0) continue;
    drain_monitors(t);
    if (it[0].revents & ZMQ_POLLIN) zap_answer(t, rep);
  }
  close_monitors(t);
  zmq_close(rep);
  return NULL;
}

st_status st__ps_zmq_watch_start(st_ps_transport *t) {
  if (pthread_create(&t->zap, NULL, zap_thread, t) != 0)
    return st_error(ST_ERR_INTERNAL, "cannot start the ZAP handler thread");
  t->zap_running = true;
  /* libzmq accepts every CURVE client when no ZAP handler is bound: a
   * handler that did not start is a start-up error. */
  for (int i = 0; i < 2000 && atomic_load(&t->zap_state) == 0; i++) usleep(1000);
  if (atomic_load(&t->zap_state) != 1)
    return st_error(ST_ERR_INTERNAL, "the ZAP handler (CURVE allow-list) did not start");
  return ST_OK;
}

void st__ps_zmq_watch_stop(st_ps_transport *t) {
  if (t->zap_running) {
    atomic_store(&t->zap_stop, true);
    pthread_join(t->zap, NULL);
    t->zap_running = false;
  }
  close_monitors(t); /* registered after the ZAP thread ended */
}

int64_t st__ps_transport_refused(st_ps_transport *t) { return atomic_load(&t->refused); }

void st__ps_transport_report_refusals(st_ps_transport *t, const char *who,
                                      void (*say)(void *user, const char *line), void *user) {
  st__ps_refusal got[REFUSAL_RING];
  char line[512];
  pthread_mutex_lock(&t->ring_mu);
  int n = t->ring_n;
  memcpy(got, t->ring, (size_t)n * sizeof *got);
  t->window_quiet += t->ring_lost;
  t->ring_n = 0, t->ring_lost = 0;
  pthread_mutex_unlock(&t->ring_mu);
  double now = st_now_seconds();
  if (now - t->window_start >= LOG_WINDOW_S) {
    if (t->window_quiet) {
      snprintf(line, sizeof line, "%.40s: refused or dropped %lld more connection(s) in the last %g s "
               "(counted, not logged one by one)", who, (long long)t->window_quiet, LOG_WINDOW_S);
      say(user, line);
    }
    t->window_start = now, t->window_lines = 0, t->window_quiet = 0;
  }
  for (int i = 0; i < n; i++) {
    if (t->window_lines >= LOG_BURST) {
      t->window_quiet++;
      continue;
    }
    snprintf(line, sizeof line, "%.40s: %s a connection from %.63s: %.159s%s", who,
             got[i].dropped ? "dropped" : "refused", got[i].addr, got[i].why,
             ++t->window_lines == LOG_BURST ? " (more in the next minute are only counted)" : "");
    say(user, line);
  }
}

void st__ps_zmq_watch_socket(st_ps_transport *t, st_ps_socket *s) {
  static atomic_int serial;
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://strata-monitor-%d", atomic_fetch_add(&serial, 1));
  int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
               ZMQ_EVENT_HANDSHAKE_SUCCEEDED, linger = 0;
  if (zmq_socket_monitor(s->z, ep, events) != 0) return;
  void *pair = zmq_socket(t->ctx, ZMQ_PAIR);
  if (pair) zmq_setsockopt(pair, ZMQ_LINGER, &linger, sizeof linger);
  bool connected = pair && zmq_connect(pair, ep) == 0;
  for (int i = 0; connected && i < MAX_MONITORS; i++) {
    void *none = NULL;
    if (atomic_compare_exchange_strong(&t->monitor[i], &none, pair)) {
      s->monitored = true;
      return;
    }
  }
  if (pair) zmq_close(pair);
  zmq_socket_monitor(s->z, NULL, 0);
}
