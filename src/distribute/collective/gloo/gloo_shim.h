/* Internal: the C face of Gloo (C++) for the Gloo transport (gloo.c). Gloo
 * connects a full mesh of TCP pairs between the processes of a job once
 * every process has published its address in a key-value store (kvstore.c);
 * this shim gives C the connect, and posted sends and receives on buffers
 * with waits that time out. Every C++ exception is caught here: each call
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
 * process: several meshes rendezvous through one store). */
int st__gloo_connect(int rank, int size, const char *host, const st__gloo_store *store,
                     const char *prefix, double timeout_s, st__gloo **out, char *err,
                     size_t errlen);
/* Close every pair (peers waiting on this process then fail at once). */
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
