/* The parameter-server transport over libzmq with CURVE and a ZAP allow-list
 * (transport.h says what it guarantees). Selected by CMake when libzmq is
 * found (pkg-config libzmq); transport_none.c otherwise. */
#define _GNU_SOURCE
#include "ps/zmq/zmq_private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>
#include <arpa/inet.h>
#include <netdb.h>

#include "base/fileio.h"

bool st__ps_transport_built(void) { return true; }

static st_status zerr(const char *what) {
  return st_error(ST_ERR_IO, "ZeroMQ: %s: %s", what, zmq_strerror(zmq_errno()));
}

/* DIR/<role>-<index>.<ext>, Z85 key of 40 characters. */
static st_status read_key(const char *dir, const st_ps_task *task, const char *ext, char *out) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s-%d.%s", dir, st__ps_role_name(task->role), task->index, ext);
  struct stat sb;
  if (!strcmp(ext, "secret") && stat(path, &sb) == 0 && (sb.st_mode & 077))
    /* a secret others can read is no secret (issue 29 D20; ssh refuses them too) */
    return st_error(ST_ERR_INVALID, "CURVE key %s: mode %04o: readable or writable by others than "
                    "its owner (chmod 600 %s)", path, (unsigned)(sb.st_mode & 07777), path);
  if (!strcmp(ext, "pub") && stat(path, &sb) == 0 && (sb.st_mode & 022))
    /* a public key others can rewrite puts their key in the allow-list */
    return st_error(ST_ERR_INVALID, "CURVE key %s: mode %04o: writable by others than its owner "
                    "(chmod 644 %s)", path, (unsigned)(sb.st_mode & 07777), path);
  char *text = NULL;
  size_t len = 0;
  st_status s = st__read_all(path, 4096, &text, &len);
  if (s != ST_OK)
    return st_error(s == ST_ERR_NOMEM ? s : ST_ERR_INVALID,
                    "CURVE key: %s (generate keys with 'strata keygen DIR')", st_last_error());
  while (len && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
  uint8_t bin[32];
  bool ok = len == KEY_Z85;
  if (ok) {
    text[len] = '\0';
    ok = zmq_z85_decode(bin, text) != NULL;
  }
  if (ok) memcpy(out, text, KEY_Z85 + 1);
  free(text);
  return ok ? ST_OK : st_error(ST_ERR_INVALID, "CURVE key %s: not a 40-character Z85 key", path);
}

/* A key directory others may write to lets them replace the allow-list's
 * public keys (issue 29 D20; ssh refuses such a ~/.ssh too). */
static st_status check_key_dir(const char *dir) {
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || !(sb.st_mode & 022)) return ST_OK;
  return st_error(ST_ERR_INVALID, "CURVE key directory %s: mode %04o: writable by others than its "
                  "owner, who could replace the cluster's keys (chmod 700 %s)", dir,
                  (unsigned)(sb.st_mode & 07777), dir);
}

/* Every task's public key (the ZAP allow-list) and this task's key pair. */
static st_status load_keys(st_ps_transport *t, const char *dir) {
  const st_ps_cluster *c = t->cluster;
  st_status st = check_key_dir(dir);
  if (st != ST_OK) return st;
  int n = c->count[0] + c->count[1] + c->count[2];
  t->allow = calloc((size_t)n, sizeof *t->allow);
  if (!t->allow) return st_error(ST_ERR_NOMEM, "out of memory");
  for (int r = 0; r < ST_PS_ROLE_COUNT; r++)
    for (int i = 0; i < c->count[r]; i++) {
      char z[KEY_Z85 + 1];
      st_status s = read_key(dir, &c->tasks[r][i], "pub", z);
      if (s != ST_OK) return s;
      st__ps_allowed_key *a = &t->allow[t->nallow++];
      zmq_z85_decode(a->key, z);
      snprintf(a->user, sizeof a->user, "%s:%d", st__ps_role_name((st_ps_role)r), i);
    }
  const st_ps_task *self = st__ps_cluster_task(c, c->self_role, c->self_index);
  st_status s = read_key(dir, self, "pub", t->public_key);
  if (s == ST_OK) s = read_key(dir, self, "secret", t->secret_key);
  return s;
}

st_status st__ps_transport_create(const st_ps_transport_options *o, st_ps_transport **out) {
  *out = NULL;
  st_ps_transport *t = calloc(1, sizeof *t);
  if (!t) return st_error(ST_ERR_NOMEM, "out of memory");
  t->cluster = o->cluster;
  t->insecure = o->insecure;
  pthread_mutex_init(&t->ring_mu, NULL);
  for (int i = 0; i < CONN_SLOTS; i++) t->conn[i].fd = t->conn[i].dup = -1;
  t->max_payload = o->max_payload ? o->max_payload : (256u << 20);
  if (o->keys_dir) snprintf(t->keys_dir, sizeof t->keys_dir, "%s", o->keys_dir);
  if (o->test_faults) {
    unsigned long long seed = 1;
    for (const char *f = o->test_faults; f && *f; f = strchr(f, ',') ? strchr(f, ',') + 1 : NULL) {
      sscanf(f, "drop=%lf", &t->drop);
      sscanf(f, "dup=%lf", &t->dup);
      sscanf(f, "reorder=%lf", &t->reorder);
      sscanf(f, "seed=%llu", &seed);
    }
    t->fault_seed = seed;
  }
  st_status s = ST_OK;
  if (!t->insecure && !zmq_has("curve")) {
    s = st_error(ST_ERR_NOT_BUILT, "this libzmq has no CURVE support (rebuild it with libsodium, "
                 "or pass --insecure on a trusted network)");
    goto fail;
  }
  if (!t->insecure && (!o->keys_dir || !*o->keys_dir)) {
    s = st_error(ST_ERR_INVALID, "CURVE keys: no key directory (--keys DIR, written by 'strata "
                 "keygen DIR'; or --insecure)");
    goto fail;
  }
  if (!t->insecure && (s = load_keys(t, o->keys_dir)) != ST_OK) goto fail;
  if (!(t->ctx = zmq_ctx_new())) {
    s = zerr("zmq_ctx_new");
    goto fail;
  }
  /* the ZAP handler also orders insecure handshakes after the monitors'
   * events (watch_zmq.c), so it runs in both modes */
  if ((s = st__ps_zmq_watch_start(t)) != ST_OK) goto fail;
  *out = t;
  return ST_OK;
fail:
  st__ps_transport_destroy(t);
  return s;
}

void st__ps_transport_destroy(st_ps_transport *t) {
  if (!t) return;
  st__ps_zmq_watch_stop(t);
  if (t->ctx) zmq_ctx_term(t->ctx);
  pthread_mutex_destroy(&t->ring_mu);
  free(t->allow);
  memset(t->secret_key, 0, sizeof t->secret_key);
  free(t);
}

static st_status new_socket(st_ps_transport *t, int type, st_ps_socket **out) {
  st_ps_socket *s = calloc(1, sizeof *s);
  if (!s) return st_error(ST_ERR_NOMEM, "out of memory");
  s->t = t;
  s->router = type == ZMQ_ROUTER;
  if (!(s->z = zmq_socket(t->ctx, type))) {
    free(s);
    return zerr("zmq_socket");
  }
  int linger = 0, ivl = 100;
  int64_t max = (int64_t)(t->max_payload + ST_PS_HEADER_BYTES);
  zmq_setsockopt(s->z, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s->z, ZMQ_MAXMSGSIZE, &max, sizeof max);
  zmq_setsockopt(s->z, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
  s->rng = st_rng_make(t->fault_seed, (uint64_t)atomic_fetch_add(&t->sockets, 1));
  *out = s;
  return ST_OK;
}

/* Bind the task's own address. zmq_bind takes IP addresses or interface
 * names, not host names, while peers resolve the same string as a host name
 * (TF_CONFIG usually names hosts: Kubernetes DNS names, localhost): the host
 * is resolved here (getaddrinfo) and its addresses tried in turn, IPv4 first
 * (issue 29 D8). An IPv6 literal in brackets is bound as given. */
static st_status bind_task(void *z, const st_ps_task *self) {
  char ep[ST_PS_MAX_HOST + 80], addr[INET6_ADDRSTRLEN] = "";
  const char *role = st__ps_role_name(self->role);
  int one = 1;
  if (self->host[0] == '[') {
    zmq_setsockopt(z, ZMQ_IPV6, &one, sizeof one);
    snprintf(ep, sizeof ep, "tcp://%s:%d", self->host, self->port);
    if (zmq_bind(z, ep) == 0) return ST_OK;
    return st_error(ST_ERR_INVALID, "cannot listen on %s:%d (%s:%d): %s", self->host, self->port,
                    role, self->index, zmq_strerror(zmq_errno()));
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(self->host, NULL, &hints, &res);
  if (g != 0)
    return st_error(ST_ERR_INVALID, "cannot listen on %s:%d (%s:%d): cannot resolve host '%s': %s",
                    self->host, self->port, role, self->index, self->host, gai_strerror(g));
  int err = 0;
  for (int pass = 0; pass < 2; pass++) /* IPv4, then IPv6 */
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
      if (a->ai_family != (pass ? AF_INET6 : AF_INET)) continue;
      const void *ip = pass ? (const void *)&((const struct sockaddr_in6 *)a->ai_addr)->sin6_addr
                            : (const void *)&((const struct sockaddr_in *)a->ai_addr)->sin_addr;
      inet_ntop(a->ai_family, ip, addr, sizeof addr);
      if (pass) zmq_setsockopt(z, ZMQ_IPV6, &one, sizeof one);
      snprintf(ep, sizeof ep, pass ? "tcp://[%s]:%d" : "tcp://%s:%d", addr, self->port);
      if (zmq_bind(z, ep) == 0) {
        freeaddrinfo(res);
        return ST_OK;
      }
      err = zmq_errno();
    }
  freeaddrinfo(res);
  return st_error(ST_ERR_INVALID, "cannot listen on %s:%d (%s:%d%s%s): %s", self->host, self->port,
                  role, self->index, strcmp(addr, self->host) && addr[0] ? ", resolved to " : "",
                  strcmp(addr, self->host) ? addr : "", err ? zmq_strerror(err) : "no IPv4 or IPv6 address");
}

st_status st__ps_listen(st_ps_transport *t, const st_ps_task *self, st_ps_socket **out) {
  st_ps_socket *s;
  st_status st = new_socket(t, ZMQ_ROUTER, &s);
  if (st != ST_OK) return st;
  if (!t->insecure) {
    int one = 1;
    zmq_setsockopt(s->z, ZMQ_CURVE_SERVER, &one, sizeof one);
    zmq_setsockopt(s->z, ZMQ_CURVE_SECRETKEY, t->secret_key, KEY_Z85);
  }
  /* ZAP for NULL clients too (they are all accepted): their handshake then
   * waits for the ZAP thread, which has seen the ACCEPTED event first */
  zmq_setsockopt(s->z, ZMQ_ZAP_DOMAIN, "strata", 6);
  st__ps_zmq_watch_socket(t, s);
  if ((st = bind_task(s->z, self)) != ST_OK) {
    st__ps_socket_close(s);
    return st;
  }
  *out = s;
  return ST_OK;
}

st_status st__ps_connect(st_ps_transport *t, const st_ps_task *peer, st_ps_socket **out) {
  st_ps_socket *s;
  st_status st = new_socket(t, ZMQ_DEALER, &s);
  if (st != ST_OK) return st;
  if (!t->insecure) {
    char server_pub[KEY_Z85 + 1];
    if ((st = read_key(t->keys_dir[0] ? t->keys_dir : ".", peer, "pub", server_pub)) != ST_OK) {
      st__ps_socket_close(s);
      return st;
    }
    zmq_setsockopt(s->z, ZMQ_CURVE_SERVERKEY, server_pub, KEY_Z85);
    zmq_setsockopt(s->z, ZMQ_CURVE_PUBLICKEY, t->public_key, KEY_Z85);
    zmq_setsockopt(s->z, ZMQ_CURVE_SECRETKEY, t->secret_key, KEY_Z85);
  }
  char ep[ST_PS_MAX_HOST + 32];
  snprintf(ep, sizeof ep, "tcp://%s:%d", peer->host, peer->port);
  if (zmq_connect(s->z, ep) != 0) {
    st = zerr(ep);
    st__ps_socket_close(s);
    return st;
  }
  *out = s;
  return ST_OK;
}

void st__ps_socket_close(st_ps_socket *s) {
  if (!s) return;
  free(s->held);
  if (s->monitored) zmq_socket_monitor(s->z, NULL, 0);
  zmq_close(s->z);
  free(s);
}

static int wait_for(void *z, short ev, int timeout_ms) {
  zmq_pollitem_t it = {z, 0, ev, 0};
  int r = zmq_poll(&it, 1, timeout_ms);
  return r > 0 && (it.revents & ev);
}

/* One frame (and its route on a ROUTER) onto the socket. */
static st_status put_frame(st_ps_socket *s, const uint8_t *route, size_t route_len, const uint8_t *hdr,
                           const void *payload, size_t len) {
  zmq_msg_t m;
  if (zmq_msg_init_size(&m, ST_PS_HEADER_BYTES + len) != 0) return zerr("zmq_msg_init_size");
  memcpy(zmq_msg_data(&m), hdr, ST_PS_HEADER_BYTES);
  if (len) memcpy((uint8_t *)zmq_msg_data(&m) + ST_PS_HEADER_BYTES, payload, len);
  if (s->router && route && zmq_send(s->z, route, route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&m);
    return zerr("send (route)");
  }
  if (zmq_msg_send(&m, s->z, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&m);
    return zerr("send");
  }
  s->n.sent++;
  return ST_OK;
}

/* Test faults: drop, duplicate or hold back (reorder) a data frame. */
static st_status send_faulty(st_ps_socket *s, const st_ps_msg *to, const uint8_t *hdr, const void *payload,
                             size_t len) {
  const uint8_t *route = to ? to->route : NULL;
  size_t rl = to ? to->route_len : 0;
  float r = st_rng_uniform(&s->rng);
  if (r < s->t->drop) return ST_OK;
  st_status st = ST_OK;
  if (r < s->t->drop + s->t->reorder && !s->held) { /* sent after the next frame */
    s->held = malloc(ST_PS_HEADER_BYTES + len);
    if (!s->held) return st_error(ST_ERR_NOMEM, "out of memory");
    memcpy(s->held, hdr, ST_PS_HEADER_BYTES);
    if (len) memcpy(s->held + ST_PS_HEADER_BYTES, payload, len);
    s->held_len = len;
    memcpy(s->held_route, route ? route : s->held_route, rl);
    s->held_route_len = rl;
    return ST_OK;
  }
  st = put_frame(s, route, rl, hdr, payload, len);
  if (st == ST_OK && r < s->t->drop + s->t->reorder + s->t->dup) st = put_frame(s, route, rl, hdr, payload, len);
  if (s->held) {
    put_frame(s, s->held_route_len ? s->held_route : NULL, s->held_route_len, s->held,
              s->held + ST_PS_HEADER_BYTES, s->held_len);
    free(s->held);
    s->held = NULL;
  }
  return st;
}

st_status st__ps_send(st_ps_socket *s, const st_ps_msg *to, st_ps_header *h, const void *payload,
                      size_t len, int timeout_ms) {
  uint8_t hdr[ST_PS_HEADER_BYTES];
  h->payload_len = len;
  h->seq = ++s->seq;
  st__ps_header_write(h, hdr);
  if (!wait_for(s->z, ZMQ_POLLOUT, timeout_ms))
    return st_error(ST_ERR_TIMEOUT, "send %s: peer not reachable within %d ms",
                    st__ps_msg_name(h->type), timeout_ms);
  bool data = (h->type == ST_PS_MSG_PULL || h->type == ST_PS_MSG_PULL_OK || h->type == ST_PS_MSG_PUSH ||
               h->type == ST_PS_MSG_ACK) &&
              !(to && to->h.sender_role == ST_PS_CHIEF); /* worker <-> ps traffic only */
  if (data && (s->t->drop > 0 || s->t->dup > 0 || s->t->reorder > 0))
    return send_faulty(s, to, hdr, payload, len);
  return put_frame(s, to ? to->route : NULL, to ? to->route_len : 0, hdr, payload, len);
}

st_status st__ps_send_raw(st_ps_socket *s, const void *bytes, size_t len) {
  if (zmq_send(s->z, bytes, len, 0) < 0) return zerr("send");
  return ST_OK;
}

/* The authenticated task of a CURVE message ("worker:1"), checked against
 * the header's sender. */
static bool identity_matches(const st_ps_socket *s, zmq_msg_t *m, const st_ps_header *h) {
  if (s->t->insecure || !s->router) return true;
  const char *user = zmq_msg_gets(m, "User-Id");
  char want[32];
  snprintf(want, sizeof want, "%s:%u", st__ps_role_name((st_ps_role)h->sender_role),
           (unsigned)h->sender_index);
  return user && !strcmp(user, want);
}

/* One message off the socket: 0 a valid one in *out, 1 dropped, -1 none. */
static int recv_one(st_ps_socket *s, uint64_t job_id, st_ps_msg *out) {
  zmq_msg_t part;
  zmq_msg_init(&part);
  if (s->router) {
    if (zmq_msg_recv(&part, s->z, ZMQ_DONTWAIT) < 0) return zmq_msg_close(&part), -1;
    size_t rl = zmq_msg_size(&part);
    out->route_len = rl <= sizeof out->route ? rl : 0;
    memcpy(out->route, zmq_msg_data(&part), out->route_len);
    bool more = zmq_msg_more(&part);
    zmq_msg_close(&part);
    zmq_msg_init(&part);
    if (!more || zmq_msg_recv(&part, s->z, ZMQ_DONTWAIT) < 0) return zmq_msg_close(&part), 1;
  } else if (zmq_msg_recv(&part, s->z, ZMQ_DONTWAIT) < 0) {
    return zmq_msg_close(&part), -1;
  }
  int rc = 1;
  st_ps_drop d = ST_PS_DROP_NONE;
  while (zmq_msg_more(&part)) { /* extra parts: never ours; drain them */
    d = ST_PS_DROP_LENGTH;
    zmq_msg_close(&part);
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, s->z, ZMQ_DONTWAIT) < 0) break;
  }
  if (d == ST_PS_DROP_NONE)
    d = st__ps_frame_parse(zmq_msg_data(&part), zmq_msg_size(&part), job_id, s->t->max_payload,
                           s->t->cluster, &out->h);
  if (d == ST_PS_DROP_NONE && !identity_matches(s, &part, &out->h)) d = ST_PS_DROP_IDENTITY;
  if (d == ST_PS_DROP_NONE) {
    out->payload = malloc(out->h.payload_len + 1);
    if (out->payload) {
      memcpy(out->payload, (uint8_t *)zmq_msg_data(&part) + ST_PS_HEADER_BYTES, out->h.payload_len);
      rc = 0;
      s->n.received++;
    }
  } else {
    s->n.dropped[d]++;
  }
  zmq_msg_close(&part);
  return rc;
}

st_status st__ps_recv(st_ps_socket *s, uint64_t job_id, int timeout_ms, st_ps_msg *out) {
  memset(out, 0, sizeof *out);
  double deadline = st_now_seconds() + timeout_ms / 1000.0;
  for (int spins = 0; spins < 1000000; spins++) {
    int r = recv_one(s, job_id, out);
    if (r == 0) return ST_OK;
    if (r == 1) continue; /* dropped: look for the next one */
    int left = timeout_ms < 0 ? -1 : (int)((deadline - st_now_seconds()) * 1000.0);
    if (timeout_ms >= 0 && left <= 0) break;
    if (!wait_for(s->z, ZMQ_POLLIN, left < 0 ? 1000 : left) && timeout_ms >= 0 &&
        st_now_seconds() >= deadline)
      break;
  }
  return ST_ERR_TIMEOUT;
}

void st__ps_msg_free(st_ps_msg *m) {
  if (!m) return;
  free(m->payload);
  m->payload = NULL;
}

st_status st__ps_poll(st_ps_socket **socks, int n, int timeout_ms, bool *ready) {
  zmq_pollitem_t items[ST_PS_MAX_POLL];
  int map[ST_PS_MAX_POLL], m = 0;
  for (int i = 0; i < n; i++) {
    ready[i] = false;
    if (socks[i] && m < ST_PS_MAX_POLL) { /* a NULL entry (a closed socket) is skipped */
      items[m] = (zmq_pollitem_t){socks[i]->z, 0, ZMQ_POLLIN, 0};
      map[m++] = i;
    }
  }
  int r = zmq_poll(items, m, timeout_ms);
  if (r < 0 && zmq_errno() != EINTR) return zerr("zmq_poll");
  for (int k = 0; k < m; k++) ready[map[k]] = r > 0 && (items[k].revents & ZMQ_POLLIN);
  return ST_OK;
}

st_ps_counters st__ps_socket_counters(const st_ps_socket *s) { return s->n; }

/* Write text to dir/name with the given mode, atomically. */
static st_status write_key(const char *dir, const char *name, const char *key, mode_t mode) {
  char path[1200], line[KEY_Z85 + 2];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(line, sizeof line, "%s\n", key);
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return st_error(ST_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  bool ok = write(fd, line, strlen(line)) == (ssize_t)strlen(line);
  ok = fsync(fd) == 0 && ok;
  close(fd);
  return ok ? ST_OK : st_error(ST_ERR_IO, "%s: write failed: %s", path, strerror(errno));
}

st_status st__ps_keygen(const st_ps_cluster *c, const char *dir) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST)
    return st_error(ST_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
  st_status st = check_key_dir(dir);
  if (st != ST_OK) return st;
  for (int r = 0; r < ST_PS_ROLE_COUNT; r++)
    for (int i = 0; i < c->count[r]; i++) {
      char pub[KEY_Z85 + 1], sec[KEY_Z85 + 1], name[64];
      if (zmq_curve_keypair(pub, sec) != 0) return zerr("zmq_curve_keypair (no CURVE in this libzmq)");
      snprintf(name, sizeof name, "%s-%d.pub", st__ps_role_name((st_ps_role)r), i);
      st_status s = write_key(dir, name, pub, 0644);
      snprintf(name, sizeof name, "%s-%d.secret", st__ps_role_name((st_ps_role)r), i);
      if (s == ST_OK) s = write_key(dir, name, sec, 0600);
      memset(sec, 0, sizeof sec);
      if (s != ST_OK) return s;
    }
  return ST_OK;
}
