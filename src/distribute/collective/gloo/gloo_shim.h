/* Internal: the C face of Gloo (C++) for the Gloo transport (gloo.c). Gloo
 * connects a full mesh of TCP pairs between the processes of a job once
 * every process has published its address in a key-value store (kvstore.c);
 * this shim gives C the connect, the collectives' channel (puts into a
 * peer's staging area, below) and, for point to point, posted sends and
 * receives on unbound buffers with waits that time out. Every C++ exception
 * is caught here: each call
 * returns 0 on success, ST__GLOO_TIMEOUT when its wait ran out, or -1 with
 * the reason in err (errlen bytes, NUL-terminated). The thread that owns a
 * st__gloo makes all its calls. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_GLOO_SHIM_H
#define STRATA_DISTRIBUTE_COLLECTIVE_GLOO_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { ST__GLOO_TIMEOUT = 1 };

/* The store Gloo's rendezvous uses (kvstore.c's client). set: 0 or -1;
 * get: waits until the key exists, up to timeout_s; 0 with *val (malloc'd,
 * the caller frees) and *n, ST__GLOO_TIMEOUT, or -1. */
typedef struct st__gloo_store {
  void *ctx;
  int (*set)(void *ctx, const char *key, const void *val, size_t n, char *err, size_t errlen);
  int (*get)(void *ctx, const char *key, double timeout_s, void **val, size_t *n, char *err,
             size_t errlen);
} st__gloo_store;

typedef struct st__gloo st__gloo;
typedef struct st__gloo_buf st__gloo_buf;

/* Connect process `rank` of `size` (its TCP device bound on host, any port)
 * to every other through store, within timeout_s; every key this connect
 * sets or gets starts with prefix (one prefix a connect, the same on every
 * process: several meshes rendezvous through one store). With stage_bytes >
 * 0 (the same on every process) it connects a second mesh (prefix + "up/"):
 * puts from a higher rank to a lower one go on it, so that each socket
 * carries puts one way only (gloo_shim.cc says why); then each process
 * registers a staging area of stage_bytes per peer and meets the others
 * once, so that no put below ever finds its target unregistered. */
int st__gloo_connect(int rank, int size, const char *host, const st__gloo_store *store,
                     const char *prefix, double timeout_s, size_t stage_bytes, st__gloo **out,
                     char *err, size_t errlen);

/* The collectives' channel: Gloo's bound buffers (its own algorithms'
 * kind). A put writes straight into a buffer the peer registered, with no
 * handshake, from the calling thread where the socket takes it (Gloo's loop
 * thread finishes the rest); the peer's loop thread reads it there and the
 * peer's take returns. Three kinds of target: the peer's staging area (kind
 * 0), registered at connect, and (kinds 1, 2) the buffer of that kind the
 * peer last expected from this process. The caller keeps the flow control: a put
 * never overwrites staging bytes the peer has not consumed (gloo.c: lockstep
 * steps, two halves), and a put of kind 1 or 2 goes out only after the peer's
 * expect (it answers something the peer sent after it). Waits are bounded
 * by the connect's timeout. */
/* Staging area for messages from peer (stage_bytes; read after a take). */
const void *st__gloo_stage(st__gloo *g, int peer);
/* The next put of kind (1 or 2) from peer lands in dst[0, n) (until its
 * take). */
int st__gloo_expect(st__gloo *g, int peer, int kind, void *dst, size_t n, char *err,
                    size_t errlen);
/* Post a put of src[0, n) bytes to peer: into its staging area at byte roff
 * (kind 0) or at byte roff of the buffer of that kind it expects (1, 2);
 * src must stay unchanged until st__gloo_puts_wait. */
int st__gloo_put(st__gloo *g, int peer, int kind, const void *src, size_t n, size_t roff,
                 char *err, size_t errlen);
/* Wait until every posted put has left this process; on failure *peer =
 * the peer of the one that failed. */
int st__gloo_puts_wait(st__gloo *g, int *peer, char *err, size_t errlen);
/* Wait for the next put from peer to land in its staging area (kind 0) or
 * in the buffer of that kind expected from it (several puts may land in
 * one, each taken). */
int st__gloo_take(st__gloo *g, int peer, int kind, char *err, size_t errlen);
/* Forget every buffer expected (kinds 1, 2): no put lands there any more. */
void st__gloo_forget(st__gloo *g);

/* The end of a job's use of the mesh, every process in turn: a message to
 * every peer and, up to timeout_s, one from each (errors ignored), so that
 * no process closes while a peer still waits for what it sent last (Gloo
 * reports a wait as failed when the peer's close follows its message too
 * closely). */
void st__gloo_farewell(st__gloo *g, double timeout_s);
/* Close every pair (peers waiting on this process then fail at once) and
 * drop the posted puts. */
void st__gloo_close_pairs(st__gloo *g);
void st__gloo_destroy(st__gloo *g); /* accepts NULL */

/* A buffer over ptr[0, bytes) for posted sends and receives. Destroying it
 * with operations still posted is allowed only after st__gloo_close_pairs. */
int st__gloo_buf_create(st__gloo *g, void *ptr, size_t bytes, st__gloo_buf **out, char *err,
                        size_t errlen);
void st__gloo_buf_destroy(st__gloo_buf *b); /* accepts NULL */
/* Post a send of bytes [off, off+n) to peer / a receive from peer into
 * [off, off+n), matched by slot (the same on both sides). */
int st__gloo_send(st__gloo_buf *b, int peer, uint64_t slot, size_t off, size_t n, char *err,
                  size_t errlen);
int st__gloo_recv(st__gloo_buf *b, int peer, uint64_t slot, size_t off, size_t n, char *err,
                  size_t errlen);
/* Wait up to timeout_ms for one posted send / receive of b to complete:
 * *peer = the rank it went to / came from. */
int st__gloo_wait_send(st__gloo_buf *b, int timeout_ms, int *peer, char *err, size_t errlen);
int st__gloo_wait_recv(st__gloo_buf *b, int timeout_ms, int *peer, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
