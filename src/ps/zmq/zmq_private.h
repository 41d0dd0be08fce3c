/* Internal to src/ps/zmq/: the ZeroMQ transport's structs, shared by
 * transport_zmq.c (sockets, frames, keys) and watch_zmq.c (the ZAP handler
 * thread, which also reads the listening sockets' monitors: refused
 * handshakes and connections libzmq dropped, logged through a rate-limited
 * ring). watch_zmq.c calls nothing of transport_zmq.c. */
#ifndef STRATA_PS_ZMQ_PRIVATE_H
#define STRATA_PS_ZMQ_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ps/transport.h"

#define KEY_Z85 40 /* a CURVE key in Z85 */

/* Refusals the ZAP thread saw, for the owner to log (report_refusals). */
enum { REFUSAL_RING = 16, MAX_MONITORS = 4, CONN_SLOTS = 64, LOG_BURST = 10 };
#define LOG_WINDOW_S 60.0
typedef struct st__ps_refusal {
  char addr[64];
  char why[160];
  bool dropped; /* libzmq closed an established connection (not a refused handshake) */
} st__ps_refusal;

typedef struct st__ps_allowed_key {
  uint8_t key[32];
  char user[32]; /* "worker:1" */
} st__ps_allowed_key;

/* An accepted connection of a monitored socket (ZAP thread only). dup: a
 * duplicate of its fd taken before its handshake could finish, so that when
 * libzmq closes it, whether the peer had closed first can still be read
 * (-1: none). */
typedef struct st__ps_conn {
  int fd, dup;
  bool shaking;
  uint64_t order;
  char addr[64];
} st__ps_conn;

struct st_ps_transport {
  void *ctx;
  const st_ps_cluster *cluster;
  bool insecure;
  uint64_t max_payload;
  char public_key[KEY_Z85 + 1], secret_key[KEY_Z85 + 1];
  st__ps_allowed_key *allow; /* [nallow] */
  int nallow;
  pthread_t zap;
  bool zap_running;
  atomic_bool zap_stop;
  atomic_int zap_state; /* 0 starting, 1 bound, -1 could not bind */
  atomic_llong refused;
  /* handshake monitoring (ZAP thread): the listening sockets' monitors, the
   * peer address of each accepted fd, the failure awaiting its disconnect */
  _Atomic(void *) monitor[MAX_MONITORS];
  st__ps_conn conn[CONN_SLOTS];
  uint64_t accepted;         /* connections accepted (conn[].order) */
  char pending_why[160];     /* a failed handshake, refused at its disconnect */
  bool pending_auth;         /* ZAP refused it (counted there) */
  pthread_mutex_t ring_mu;
  st__ps_refusal ring[REFUSAL_RING];
  int ring_n;
  int64_t ring_lost;         /* refusals that did not fit the ring */
  /* rate limit (owner thread): lines logged in the window that began at */
  double window_start;
  int window_lines;
  int64_t window_quiet;      /* refusals counted but not logged one by one */
  char keys_dir[1024];
  double drop, dup, reorder; /* test_faults */
  uint64_t fault_seed;
  atomic_int sockets;        /* RNG stream per socket */
};

struct st_ps_socket {
  st_ps_transport *t;
  void *z;
  bool router;
  uint64_t seq;
  st_ps_counters n;
  st_rng rng;            /* test faults */
  uint8_t *held;         /* a frame held back to be sent after the next (reorder) */
  size_t held_len;
  uint8_t held_route[256];
  size_t held_route_len;
  bool monitored;        /* watch_handshakes */
};

/* Start the ZAP handler thread (it also reads the monitors). Secure
 * transports answer CURVE requests from the allow-list; insecure ones accept
 * every NULL client (their ZAP request only orders the handshake after the
 * monitor's ACCEPTED event, see watch_zmq.c). Creating thread. */
st_status st__ps_zmq_watch_start(st_ps_transport *t);
/* Stop it, close the monitors and the duplicated fds. Accepts a transport
 * whose thread never started. */
void st__ps_zmq_watch_stop(st_ps_transport *t);
/* Monitor the listening socket s (before its bind): accepted connections,
 * failed handshakes, disconnects. Without a free slot, s goes unmonitored. */
void st__ps_zmq_watch_socket(st_ps_transport *t, st_ps_socket *s);

#endif
