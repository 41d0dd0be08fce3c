/* Internal: the parameter-server transport over ZeroMQ (zmq/transport_zmq.c;
 * zmq/transport_none.c answers ST_ERR_NOT_BUILT when Strata was built
 * without libzmq).
 *
 * Servers bind a ROUTER socket, clients connect one DEALER per server. By
 * default every socket runs CURVE: each task has a key pair (keygen below:
 * DIR/<role>-<index>.pub and .secret); servers run a ZAP handler (a thread of
 * the transport) that accepts only the cluster's public keys and names the
 * peer by its task ("worker:1"), so a received frame's sender is the
 * authenticated task, never the one its header claims (a mismatch is dropped
 * and counted). insecure turns CURVE off (the caller warns; the ZAP handler
 * then accepts every NULL client). Every socket has ZMQ_MAXMSGSIZE = header +
 * max_payload, so libzmq disconnects a peer that announces a larger frame
 * (logged: st__ps_transport_report_refusals); received frames go through st__ps_frame_parse and
 * a frame that fails is dropped and counted, never returned.
 * A transport and its sockets belong to one thread, except that the transport
 * may be shared by threads that each own their sockets. */
#ifndef STRATA_DISTRIBUTE_PS_TRANSPORT_H
#define STRATA_DISTRIBUTE_PS_TRANSPORT_H

#include <stdbool.h>

#include "ps/frame.h"

typedef struct st_ps_transport st_ps_transport;
typedef struct st_ps_socket st_ps_socket;

typedef struct st_ps_transport_options {
  const st_ps_cluster *cluster; /* borrowed for the transport's life */
  const char *keys_dir;         /* CURVE keys (ignored when insecure) */
  bool insecure;                /* no CURVE (ZAP accepts every NULL client) */
  uint64_t max_payload;         /* bytes per frame after the header */
  /* Tests only (RELIABILITY.md P5): "drop=P,dup=P,reorder=P,seed=S" makes
   * every socket drop, duplicate or delay past the next one a fraction P of
   * the PULL, PULL_OK, PUSH and ACK frames it sends between workers and ps
   * (not replies to the chief); NULL: none. */
  const char *test_faults;
} st_ps_transport_options;

/* A received, checked message. */
typedef struct st_ps_msg {
  st_ps_header h;
  uint8_t *payload;      /* owned (free with st__ps_msg_free); h.payload_len bytes */
  uint8_t route[256];    /* ROUTER: the peer's routing id */
  size_t route_len;
} st_ps_msg;

/* Counters of a socket (what was dropped, and why). */
typedef struct st_ps_counters {
  int64_t received, sent;
  int64_t dropped[ST_PS_DROP_COUNT];
} st_ps_counters;

bool st__ps_transport_built(void);
st_status st__ps_transport_create(const st_ps_transport_options *o, st_ps_transport **out);
void st__ps_transport_destroy(st_ps_transport *t); /* accepts NULL */
/* Connections refused at this transport's listening sockets: by the ZAP
 * handler (a key not in the allow-list) and handshakes that failed before it
 * (another mechanism than CURVE, a wrong server key or secret, not ZeroMQ).
 * Any thread. */
int64_t st__ps_transport_refused(st_ps_transport *t);
/* Say (say(user, line)) the refusals since the last call, each naming the
 * peer's address and why ("<who>: refused a connection from 127.0.0.1:40312:
 * its CURVE handshake did not decrypt ..."), and the established connections
 * libzmq dropped ("<who>: dropped a connection from ...: it sent a frame over
 * the N-byte limit ..."; RELIABILITY.md N1); rate-limited: 10 lines a minute,
 * the rest summed in one line when the minute is over. Owner thread. */
void st__ps_transport_report_refusals(st_ps_transport *t, const char *who,
                                      void (*say)(void *user, const char *line), void *user);

/* A ROUTER bound at host:port (server side). */
st_status st__ps_listen(st_ps_transport *t, const st_ps_task *self, st_ps_socket **out);
/* A DEALER connected to peer (client side). */
st_status st__ps_connect(st_ps_transport *t, const st_ps_task *peer, st_ps_socket **out);
void st__ps_socket_close(st_ps_socket *s); /* accepts NULL */
/* Send header + payload (to route on a ROUTER, NULL on a DEALER); the header's
 * payload_len and seq are filled in. Non-blocking up to timeout_ms. */
st_status st__ps_send(st_ps_socket *s, const st_ps_msg *to, st_ps_header *h, const void *payload,
                      size_t len, int timeout_ms);
/* The next valid message (job_id 0: any job), waiting up to timeout_ms
 * (-1: forever); ST_ERR_TIMEOUT when none came. Dropped frames are counted. */
st_status st__ps_recv(st_ps_socket *s, uint64_t job_id, int timeout_ms, st_ps_msg *out);
void st__ps_msg_free(st_ps_msg *m);
/* Tests only: send len raw bytes as one frame (DEALER side), unchecked. */
st_status st__ps_send_raw(st_ps_socket *s, const void *bytes, size_t len);
/* Wait until one of socks[0..n) has input (ready[i] set) or timeout_ms. */
/* At most this many sockets in one st__ps_poll (more are not watched): the
 * chief's own socket and one per worker. */
#define ST_PS_MAX_POLL (ST_PS_MAX_TASKS + 1)
st_status st__ps_poll(st_ps_socket **socks, int n, int timeout_ms, bool *ready);
st_ps_counters st__ps_socket_counters(const st_ps_socket *s);

/* Generate a CURVE key pair per task of c into dir (created if missing):
 * <role>-<index>.pub (Z85 public key) and <role>-<index>.secret (mode 0600). */
st_status st__ps_keygen(const st_ps_cluster *c, const char *dir);

#endif
