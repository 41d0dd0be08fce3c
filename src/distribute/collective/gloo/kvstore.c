/* The Gloo rendezvous's key-value store: a server thread on worker 0 and a
 * one-request-a-connection client (kvstore.h has the protocol). */
#include "kvstore.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { KEY_MAX = 255, MAX_KEYS = 4096 };
#define VAL_MAX ((uint32_t)1 << 20)
#define IO_TIMEOUT_S 5

typedef struct entry {
  char key[KEY_MAX + 1];
  void *val;
  uint32_t n;
} entry;

struct st__kv_server {
  int fd;
  pthread_t thread;
  atomic_bool stop;
  entry *keys; /* [MAX_KEYS] */
  int nkeys;
};

st_status st__kv_split_address(const char *address, char *host, size_t hostlen, char *port,
                               size_t portlen) {
  const char *colon = strrchr(address, ':');
  const char *h = address, *he = colon;
  if (address[0] == '[') {
    he = strchr(address, ']');
    h = address + 1;
    if (!he || he[1] != ':') colon = NULL;
  }
  if (!colon || colon == address || !colon[1] || (size_t)(he - h) >= hostlen ||
      strlen(colon + 1) >= portlen)
    return st_error(ST_ERR_INVALID, "address '%s': expected host:port", address);
  memcpy(host, h, (size_t)(he - h));
  host[he - h] = '\0';
  strcpy(port, colon + 1);
  return ST_OK;
}

static void set_timeouts(int fd) {
  struct timeval tv = {IO_TIMEOUT_S, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static bool io_all(int fd, void *buf, size_t n, bool writing) {
  char *p = buf;
  while (n) {
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

static bool read_u32(int fd, uint32_t *v) {
  unsigned char b[4];
  if (!io_all(fd, b, 4, false)) return false;
  *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  return true;
}

static bool write_u32(int fd, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  return io_all(fd, b, 4, true);
}

/* ---- server ---- */

static entry *find(st__kv_server *s, const char *key) {
  for (int i = 0; i < s->nkeys; i++)
    if (strcmp(s->keys[i].key, key) == 0) return &s->keys[i];
  return NULL;
}

static void put(st__kv_server *s, const char *key, void *val, uint32_t n) {
  entry *e = find(s, key);
  if (!e && s->nkeys < MAX_KEYS) {
    e = &s->keys[s->nkeys++];
    strcpy(e->key, key);
  }
  if (!e) {
    free(val);
    return;
  }
  free(e->val);
  e->val = val;
  e->n = n;
}

/* One request on a connection; anything malformed just closes it. */
static void serve_one(st__kv_server *s, int fd) {
  char op, key[KEY_MAX + 1];
  uint32_t klen, vlen;
  if (!io_all(fd, &op, 1, false) || !read_u32(fd, &klen) || klen > KEY_MAX ||
      !io_all(fd, key, klen, false))
    return;
  key[klen] = '\0';
  if (op == 'S') {
    if (!read_u32(fd, &vlen) || vlen > VAL_MAX) return;
    void *val = malloc(vlen ? vlen : 1);
    if (!val || !io_all(fd, val, vlen, false)) {
      free(val);
      return;
    }
    put(s, key, val, vlen);
    io_all(fd, "K", 1, true);
  } else if (op == 'G') {
    entry *e = find(s, key);
    if (!e) {
      io_all(fd, "N", 1, true);
      return;
    }
    if (io_all(fd, "K", 1, true) && write_u32(fd, e->n)) io_all(fd, e->val, e->n, true);
  }
}

static void *serve(void *arg) {
  st__kv_server *s = arg;
  while (!atomic_load(&s->stop)) {
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0) continue;
    set_timeouts(c);
    serve_one(s, c);
    close(c);
  }
  return NULL;
}

static int listen_on(const char *address, char *why, size_t whylen) {
  char host[256], port[32];
  if (st__kv_split_address(address, host, sizeof host, port, sizeof port) != ST_OK) {
    snprintf(why, whylen, "%s", st_last_error());
    return -1;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE}, *res = NULL;
  int rc = getaddrinfo(host, port, &hints, &res), fd = -1;
  if (rc != 0) {
    snprintf(why, whylen, "%s", gai_strerror(rc));
    return -1;
  }
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd >= 0 && (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0)) {
      snprintf(why, whylen, "%s", strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

st_status st__kv_server_start(const char *address, st__kv_server **out) {
  *out = NULL;
  char why[256] = "no address";
  st__kv_server *s = calloc(1, sizeof *s);
  if (!s || !(s->keys = calloc(MAX_KEYS, sizeof *s->keys))) {
    if (s) free(s);
    return st_error(ST_ERR_NOMEM, "rendezvous store: out of memory");
  }
  s->fd = listen_on(address, why, sizeof why);
  if (s->fd < 0) {
    free(s->keys);
    free(s);
    return st_error(ST_ERR_INVALID, "rendezvous store: cannot serve at %s: %s (the address of "
                    "worker 0 must be free on this host: is another job or worker 0 running?)",
                    address, why);
  }
  atomic_init(&s->stop, false);
  if (pthread_create(&s->thread, NULL, serve, s) != 0) {
    close(s->fd);
    free(s->keys);
    free(s);
    return st_error(ST_ERR_IO, "rendezvous store: cannot start its thread");
  }
  *out = s;
  return ST_OK;
}

void st__kv_server_stop(st__kv_server *s) {
  if (!s) return;
  atomic_store(&s->stop, true);
  pthread_join(s->thread, NULL);
  close(s->fd);
  for (int i = 0; i < s->nkeys; i++) free(s->keys[i].val);
  free(s->keys);
  free(s);
}

/* ---- client ---- */

/* A connection to the server, retried until deadline (it may not be up yet). */
static int dial(const char *address, double deadline, char *err, size_t errlen) {
  char host[256], port[32];
  if (st__kv_split_address(address, host, sizeof host, port, sizeof port) != ST_OK) {
    snprintf(err, errlen, "%s", st_last_error());
    return -1;
  }
  for (;;) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res), fd = -1;
    if (rc == 0) {
      for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
          close(fd);
          fd = -1;
        }
      }
      freeaddrinfo(res);
    }
    if (fd >= 0) {
      set_timeouts(fd);
      return fd;
    }
    if (st_now_seconds() > deadline) {
      snprintf(err, errlen, "worker 0's rendezvous store at %s did not answer (%s)", address,
               rc ? gai_strerror(rc) : "connection refused");
      return -1;
    }
    usleep(20000);
  }
}

static bool send_key(int fd, char op, const char *key) {
  uint32_t n = (uint32_t)strlen(key);
  return io_all(fd, &op, 1, true) && write_u32(fd, n) && io_all(fd, (void *)key, n, true);
}

int st__kv_set(void *ctx, const char *key, const void *val, size_t n, char *err, size_t errlen) {
  if (strlen(key) > KEY_MAX || n > VAL_MAX) {
    snprintf(err, errlen, "key or value too long (%zu bytes)", n);
    return -1;
  }
  int fd = dial(ctx, st_now_seconds() + 30.0, err, errlen);
  if (fd < 0) return -1;
  char reply = 0;
  bool ok = send_key(fd, 'S', key) && write_u32(fd, (uint32_t)n) &&
            io_all(fd, (void *)val, n, true) && io_all(fd, &reply, 1, false) && reply == 'K';
  close(fd);
  if (!ok) snprintf(err, errlen, "set '%s': no answer from %s", key, (const char *)ctx);
  return ok ? 0 : -1;
}

int st__kv_get(void *ctx, const char *key, double timeout_s, void **val, size_t *n, char *err,
               size_t errlen) {
  double deadline = st_now_seconds() + timeout_s;
  for (;;) {
    int fd = dial(ctx, deadline, err, errlen);
    if (fd < 0) return 1; /* ST__GLOO_TIMEOUT */
    char reply = 0;
    uint32_t len = 0;
    bool ok = send_key(fd, 'G', key) && io_all(fd, &reply, 1, false);
    if (ok && reply == 'K') {
      void *v = NULL;
      ok = read_u32(fd, &len) && len <= VAL_MAX && (v = malloc(len ? len : 1)) &&
           io_all(fd, v, len, false);
      close(fd);
      if (ok) {
        *val = v;
        *n = len;
        return 0;
      }
      free(v);
    } else {
      close(fd);
    }
    if (!ok || reply != 'N') {
      snprintf(err, errlen, "get '%s': bad answer from %s", key, (const char *)ctx);
      return -1;
    }
    if (st_now_seconds() > deadline) {
      snprintf(err, errlen, "'%s' was not published within %.0f s", key, timeout_s);
      return 1;
    }
    usleep(20000);
  }
}
