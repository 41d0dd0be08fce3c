/* The parameter-server transport (src/ps/zmq/transport_zmq.c) on
 * loopback: CURVE with the ZAP allow-list (a client with the cluster's key
 * gets through and is identified by its key, not by the sender its header
 * claims; a client with a key from another keygen is refused, counted, and
 * nothing reaches the server), and garbage, truncated, foreign-job and
 * oversized frames dropped and counted while a valid frame after them still
 * arrives (RELIABILITY.md N1, N2, N3). Skips (77) without ZeroMQ. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "free_port.h"
#include "ps/transport.h"

/* ThreadSanitizer: libzmq is not instrumented (tools/tsan_zmq.c says why). */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
  return "called_from_lib:libzmq.so\n"
         "called_from_lib:libsodium.so\n" /* CURVE's decryption, called by libzmq */
         "race:libzmq.so\n"
         "race:libsodium.so\n";
}

/* chief, worker, ps on free loopback ports; this process plays `self`. */
static void cluster_as(st_ps_cluster *c, const int *ports, st_ps_role self) {
  char json[512];
  snprintf(json, sizeof json,
           "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"], \"ps\": "
           "[\"127.0.0.1:%d\"]}, \"task\": {\"type\": \"%s\", \"index\": 0}}",
           ports[0], ports[1], ports[2], st__ps_role_name(self));
  CHECK_OK(st__ps_cluster_parse_tf_config(json, strlen(json), "test", c));
}

typedef struct pair {
  st_ps_cluster cs, cw;       /* the ps's and the worker's view */
  st_ps_transport *ts, *tw;
  st_ps_socket *server, *client;
} pair;

static bool open_pair(pair *p, const char *server_keys, const char *client_keys, bool insecure) {
  memset(p, 0, sizeof *p);
  int ports[3] = {free_port(), free_port(), free_port()};
  cluster_as(&p->cs, ports, ST_PS_PS);
  cluster_as(&p->cw, ports, ST_PS_WORKER);
  st_ps_transport_options os = {&p->cs, server_keys, insecure, 1024, NULL};
  st_ps_transport_options ow = {&p->cw, client_keys, insecure, 1024, NULL};
  if (st__ps_transport_create(&os, &p->ts) != ST_OK || st__ps_transport_create(&ow, &p->tw) != ST_OK)
    return false;
  if (st__ps_listen(p->ts, st__ps_cluster_task(&p->cs, ST_PS_PS, 0), &p->server) != ST_OK) return false;
  return st__ps_connect(p->tw, st__ps_cluster_task(&p->cw, ST_PS_PS, 0), &p->client) == ST_OK;
}

static void close_pair(pair *p) {
  st__ps_socket_close(p->client);
  st__ps_socket_close(p->server);
  st__ps_transport_destroy(p->tw);
  st__ps_transport_destroy(p->ts);
  st__ps_cluster_free(&p->cs);
  st__ps_cluster_free(&p->cw);
}

static char keydir_a[] = "/tmp/strata_keys_a_XXXXXX", keydir_b[] = "/tmp/strata_keys_b_XXXXXX";

static void make_keys(void) {
  int ports[3] = {1, 2, 3};
  st_ps_cluster c;
  cluster_as(&c, ports, ST_PS_PS);
  CHECK(mkdtemp(keydir_a) != NULL);
  CHECK(mkdtemp(keydir_b) != NULL);
  CHECK_OK(st__ps_keygen(&c, keydir_a));
  CHECK_OK(st__ps_keygen(&c, keydir_b));
  st__ps_cluster_free(&c);
}

static void remove_keys(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

static st_ps_header worker_header(const pair *p, int type) {
  st_ps_header h;
  memset(&h, 0, sizeof h);
  h.type = (uint16_t)type, h.job_id = 42, h.sender_role = ST_PS_WORKER, h.incarnation = 1;
  (void)p;
  return h;
}

static void test_curve_allowed_key(void) {
  pair p;
  CHECK(open_pair(&p, keydir_a, keydir_a, false));
  st_ps_header h = worker_header(&p, ST_PS_MSG_PULL);
  CHECK_OK(st__ps_send(p.client, NULL, &h, "abc", 3, 2000));
  st_ps_msg m;
  CHECK_OK(st__ps_recv(p.server, 42, 5000, &m));
  CHECK_EQ(m.h.type, ST_PS_MSG_PULL);
  CHECK_EQ(m.h.payload_len, 3u);
  CHECK(m.payload && !memcmp(m.payload, "abc", 3));
  /* the reply reaches the client through the ROUTER */
  st_ps_header r = worker_header(&p, ST_PS_MSG_PULL_OK);
  r.sender_role = ST_PS_PS;
  CHECK_OK(st__ps_send(p.server, &m, &r, "xy", 2, 2000));
  st__ps_msg_free(&m);
  st_ps_msg back;
  CHECK_OK(st__ps_recv(p.client, 42, 5000, &back));
  CHECK_EQ(back.h.type, ST_PS_MSG_PULL_OK);
  st__ps_msg_free(&back);
  /* a header claiming to be the chief, sent with the worker's key: dropped */
  st_ps_header forged = worker_header(&p, ST_PS_MSG_STOP);
  forged.sender_role = ST_PS_CHIEF;
  CHECK_OK(st__ps_send(p.client, NULL, &forged, NULL, 0, 2000));
  CHECK_EQ(st__ps_recv(p.server, 42, 500, &m), ST_ERR_TIMEOUT);
  CHECK_EQ(st__ps_socket_counters(p.server).dropped[ST_PS_DROP_IDENTITY], 1);
  CHECK_EQ(st__ps_transport_refused(p.ts), 0);
  close_pair(&p);
}

static void test_curve_wrong_key_refused(void) {
  pair p;
  /* the client's key pair comes from another keygen, so it is not in the
   * server's allow-list; it is given the server's real public key (copied
   * into its key directory), so only the ZAP check can refuse it */
  char cmd[512];
  snprintf(cmd, sizeof cmd, "cp '%s/ps-0.pub' '%s/ps-0.pub'", keydir_a, keydir_b);
  CHECK(system(cmd) == 0);
  CHECK(open_pair(&p, keydir_a, keydir_b, false));
  st_ps_header h = worker_header(&p, ST_PS_MSG_PUSH);
  st__ps_send(p.client, NULL, &h, "abcd", 4, 200);
  st_ps_msg m;
  CHECK_EQ(st__ps_recv(p.server, 0, 1000, &m), ST_ERR_TIMEOUT); /* nothing arrives */
  CHECK_GE(st__ps_transport_refused(p.ts), 1);                 /* counted */
  CHECK_EQ(st__ps_socket_counters(p.server).received, 0);
  close_pair(&p);
}

static void test_bad_frames_dropped(void) {
  pair p;
  CHECK(open_pair(&p, NULL, NULL, true)); /* insecure: raw bytes reach the parser */
  uint8_t junk[300];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 37 + 11);
  CHECK_OK(st__ps_send_raw(p.client, junk, 10));          /* short */
  CHECK_OK(st__ps_send_raw(p.client, junk, sizeof junk)); /* bad magic */
  uint8_t frame[ST_PS_HEADER_BYTES + 8];
  st_ps_header h = worker_header(&p, ST_PS_MSG_PUSH);
  h.payload_len = 8;
  st__ps_header_write(&h, frame);
  CHECK_OK(st__ps_send_raw(p.client, frame, sizeof frame - 1)); /* truncated payload */
  h.job_id = 41;
  st__ps_header_write(&h, frame);
  CHECK_OK(st__ps_send_raw(p.client, frame, sizeof frame)); /* another job */
  st_ps_msg m;
  /* all four dropped: nothing arrives (read before the oversized frame,
   * whose disconnect would discard what the server has not read yet) */
  CHECK_EQ(st__ps_recv(p.server, 42, 1000, &m), ST_ERR_TIMEOUT);
  uint8_t *big = calloc(1, 4096);
  CHECK(big != NULL);
  if (big) CHECK_OK(st__ps_send_raw(p.client, big, 4096)); /* over ZMQ_MAXMSGSIZE: peer dropped */
  free(big);
  usleep(300000); /* the oversized frame disconnects the client; it reconnects */
  st_ps_header ok = worker_header(&p, ST_PS_MSG_PULL);
  st_status s = ST_ERR_TIMEOUT;
  for (int tries = 0; tries < 20 && s != ST_OK; tries++) {
    st__ps_send(p.client, NULL, &ok, NULL, 0, 500);
    s = st__ps_recv(p.server, 42, 300, &m);
  }
  CHECK_OK(s); /* the server still serves */
  if (s == ST_OK) {
    CHECK_EQ(m.h.type, ST_PS_MSG_PULL);
    st__ps_msg_free(&m);
  }
  st_ps_counters c = st__ps_socket_counters(p.server);
  CHECK_EQ(c.dropped[ST_PS_DROP_SHORT], 1);
  CHECK_EQ(c.dropped[ST_PS_DROP_MAGIC], 1);
  CHECK_EQ(c.dropped[ST_PS_DROP_LENGTH], 1);
  CHECK_EQ(c.dropped[ST_PS_DROP_JOB], 1);
  close_pair(&p);
}

static void test_missing_keys(void) {
  int ports[3] = {1, 2, 3};
  st_ps_cluster c;
  cluster_as(&c, ports, ST_PS_PS);
  st_ps_transport *t = NULL;
  st_ps_transport_options o = {&c, "/nonexistent/keys", false, 0, NULL};
  CHECK_EQ(st__ps_transport_create(&o, &t), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "strata keygen") != NULL);
  CHECK(t == NULL);
  st__ps_cluster_free(&c);
}

int main(int argc, char **argv) {
  if (!st__ps_transport_built()) {
    printf("SKIP: this build of Strata has no ZeroMQ (install libzmq3-dev and rebuild)\n");
    return 77;
  }
  make_keys();
  static const check_case cases[] = {CHECK_CASE(test_curve_allowed_key), CHECK_CASE(test_curve_wrong_key_refused),
                                     CHECK_CASE(test_bad_frames_dropped), CHECK_CASE(test_missing_keys)};
  int rc = CHECK_MAIN(argc, argv, cases);
  remove_keys(keydir_a);
  remove_keys(keydir_b);
  return rc;
}
