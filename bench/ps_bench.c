/* Parameter-server transport throughput on loopback: push (S bytes to the ps,
 * a 1-byte ACK back) and pull (an empty request, S bytes back) of 1 MiB and
 * 16 MiB through Strata's transport with CURVE and with --insecure, beside
 * raw ZeroMQ (a DEALER/ROUTER pair, the same message pattern, no header, no
 * checks, no CURVE).
 *
 * Build (after building libstrata in build/ with ZeroMQ):
 *   gcc -O2 -std=c11 -Iinclude -Ibuild/include -Isrc bench/ps_bench.c build/libstrata.a \
 *       -lzmq -lpthread -lm -ldl -lz -ljansson -o /tmp/ps_bench
 * Run:
 *   /tmp/ps_bench [trials=5]
 *
 * Method: a server thread answers in a loop; the client thread runs `iters`
 * back-to-back request/reply round trips per trial (iters: ~256 MiB moved per
 * trial, at least 4); time per op = trial time / iters; median, min and max
 * over trials; GB/s = S / median time (1e9 B/s). Both ends are in one
 * process (two ZeroMQ contexts for Strata, as two processes would have), so
 * the figures are loopback TCP + the library, without process scheduling
 * between machines. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "ps/transport.h"

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  bind(fd, (struct sockaddr *)&a, sizeof a);
  getsockname(fd, (struct sockaddr *)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---- Strata transport ---- */
typedef struct srv_arg {
  st_ps_transport *t;
  st_ps_socket *s;
  size_t size;
  volatile int stop;
} srv_arg;

static void *strata_server(void *p) {
  srv_arg *a = p;
  char *buf = calloc(1, a->size);
  while (!a->stop) {
    st_ps_msg m;
    if (st__ps_recv(a->s, 0, 100, &m) != ST_OK) continue;
    st_ps_header h = {.type = m.h.type == ST_PS_MSG_PUSH ? ST_PS_MSG_ACK : ST_PS_MSG_PULL_OK,
                      .job_id = 1, .sender_role = ST_PS_PS};
    uint8_t one = 1;
    if (m.h.type == ST_PS_MSG_PUSH) st__ps_send(a->s, &m, &h, &one, 1, 5000);
    else st__ps_send(a->s, &m, &h, buf, a->size, 5000);
    st__ps_msg_free(&m);
  }
  free(buf);
  return NULL;
}

static void cluster_as(st_ps_cluster *c, int port, st_ps_role self) {
  char json[512];
  snprintf(json, sizeof json,
           "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"], \"ps\": "
           "[\"127.0.0.1:%d\"]}, \"task\": {\"type\": \"%s\", \"index\": 0}}", port, st__ps_role_name(self));
  if (st__ps_cluster_parse_tf_config(json, strlen(json), "bench", c) != ST_OK) abort();
}

/* Median seconds per op of push (push=1) or pull through Strata. */
static void bench_strata(bool curve, const char *keys, size_t size, int trials, int push, double *med,
                         double *lo, double *hi) {
  int port = free_port();
  st_ps_cluster cs, cw;
  cluster_as(&cs, port, ST_PS_PS);
  cluster_as(&cw, port, ST_PS_WORKER);
  st_ps_transport_options os = {&cs, keys, !curve, 64u << 20, NULL}, ow = {&cw, keys, !curve, 64u << 20, NULL};
  srv_arg a = {.size = size};
  st_ps_transport *tw;
  st_ps_socket *cl;
  if (st__ps_transport_create(&os, &a.t) || st__ps_transport_create(&ow, &tw) ||
      st__ps_listen(a.t, st__ps_cluster_task(&cs, ST_PS_PS, 0), &a.s) ||
      st__ps_connect(tw, st__ps_cluster_task(&cw, ST_PS_PS, 0), &cl)) {
    fprintf(stderr, "ps_bench: %s\n", st_last_error());
    exit(1);
  }
  pthread_t th;
  pthread_create(&th, NULL, strata_server, &a);
  char *buf = calloc(1, size);
  int iters = (int)((256u << 20) / size);
  if (iters < 4) iters = 4;
  double t[64];
  for (int r = -1; r < trials; r++) { /* r = -1: warm-up */
    double t0 = st_now_seconds();
    for (int i = 0; i < iters; i++) {
      st_ps_header h = {.type = push ? ST_PS_MSG_PUSH : ST_PS_MSG_PULL, .job_id = 1, .sender_role = ST_PS_WORKER};
      st__ps_send(cl, NULL, &h, buf, push ? size : 0, 5000);
      st_ps_msg m;
      if (st__ps_recv(cl, 0, 10000, &m) != ST_OK) abort();
      st__ps_msg_free(&m);
    }
    if (r >= 0) t[r] = (st_now_seconds() - t0) / iters;
  }
  qsort(t, (size_t)trials, sizeof t[0], cmp_d);
  *med = t[trials / 2], *lo = t[0], *hi = t[trials - 1];
  a.stop = 1;
  pthread_join(th, NULL);
  st__ps_socket_close(cl);
  st__ps_socket_close(a.s);
  st__ps_transport_destroy(tw);
  st__ps_transport_destroy(a.t);
  st__ps_cluster_free(&cs);
  st__ps_cluster_free(&cw);
  free(buf);
}

/* ---- raw ZeroMQ ---- */
typedef struct raw_arg {
  void *s;
  size_t size;
  volatile int stop;
} raw_arg;

static void *raw_server(void *p) {
  raw_arg *a = p;
  char *buf = calloc(1, a->size);
  while (!a->stop) {
    zmq_pollitem_t it = {a->s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 100) <= 0) continue;
    zmq_msg_t id, body;
    zmq_msg_init(&id), zmq_msg_init(&body);
    zmq_msg_recv(&id, a->s, 0);
    zmq_msg_recv(&body, a->s, 0);
    bool push = zmq_msg_size(&body) > 1;
    zmq_msg_send(&id, a->s, ZMQ_SNDMORE);
    if (push) zmq_send(a->s, "1", 1, 0);
    else zmq_send(a->s, buf, a->size, 0);
    zmq_msg_close(&body);
  }
  free(buf);
  return NULL;
}

static void bench_raw(size_t size, int trials, int push, double *med, double *lo, double *hi) {
  void *ctx = zmq_ctx_new();
  raw_arg a = {.s = zmq_socket(ctx, ZMQ_ROUTER), .size = size};
  void *cl = zmq_socket(ctx, ZMQ_DEALER);
  char ep[64];
  snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", free_port());
  zmq_bind(a.s, ep);
  zmq_connect(cl, ep);
  pthread_t th;
  pthread_create(&th, NULL, raw_server, &a);
  char *buf = calloc(1, size), *in = malloc(size);
  int iters = (int)((256u << 20) / size);
  if (iters < 4) iters = 4;
  double t[64];
  for (int r = -1; r < trials; r++) {
    double t0 = st_now_seconds();
    for (int i = 0; i < iters; i++) {
      zmq_send(cl, buf, push ? size : 1, 0);
      zmq_msg_t m;
      zmq_msg_init(&m);
      zmq_msg_recv(&m, cl, 0);
      memcpy(in, zmq_msg_data(&m), zmq_msg_size(&m) < size ? zmq_msg_size(&m) : size);
      zmq_msg_close(&m);
    }
    if (r >= 0) t[r] = (st_now_seconds() - t0) / iters;
  }
  qsort(t, (size_t)trials, sizeof t[0], cmp_d);
  *med = t[trials / 2], *lo = t[0], *hi = t[trials - 1];
  a.stop = 1;
  pthread_join(th, NULL);
  zmq_close(cl);
  zmq_close(a.s);
  zmq_ctx_term(ctx);
  free(buf), free(in);
}

int main(int argc, char **argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 5;
  if (trials < 1 || trials > 64) trials = 5;
  char keys[] = "/tmp/ps_bench_keys_XXXXXX";
  if (!mkdtemp(keys)) return 1;
  st_ps_cluster c;
  cluster_as(&c, 3, ST_PS_PS);
  if (st__ps_keygen(&c, keys) != ST_OK) {
    fprintf(stderr, "ps_bench: %s\n", st_last_error());
    return 1;
  }
  printf("%-8s %-6s %-16s %10s %10s %10s %8s\n", "size", "op", "transport", "ms/op", "min", "max", "GB/s");
  size_t sizes[2] = {1u << 20, 16u << 20};
  for (int si = 0; si < 2; si++)
    for (int push = 1; push >= 0; push--)
      for (int mode = 0; mode < 3; mode++) {
        double med, lo, hi;
        if (mode == 2) bench_raw(sizes[si], trials, push, &med, &lo, &hi);
        else bench_strata(mode == 0, keys, sizes[si], trials, push, &med, &lo, &hi);
        printf("%-8s %-6s %-16s %10.3f %10.3f %10.3f %8.2f\n", si ? "16 MiB" : "1 MiB", push ? "push" : "pull",
               mode == 0 ? "strata CURVE" : mode == 1 ? "strata insecure" : "raw ZeroMQ", med * 1e3,
               lo * 1e3, hi * 1e3, (double)sizes[si] / med / 1e9);
        fflush(stdout);
      }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", keys);
  if (system(cmd) != 0) return 1;
  st__ps_cluster_free(&c);
  return 0;
}
