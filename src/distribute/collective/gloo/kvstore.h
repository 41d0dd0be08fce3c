/* Internal: the small key-value store the Gloo transport's rendezvous goes
 * through. Worker 0 serves it at its own cluster address ("host:port", as
 * TF_CONFIG names it); every worker (0 included) sets and gets keys over TCP,
 * one request a connection:
 *   request  'S' u32 klen, key, u32 vlen, value   -> reply 'K'
 *            'G' u32 klen, key                    -> 'K' u32 vlen, value | 'N' (absent)
 * (little-endian lengths; keys up to 255 bytes, values up to 1 MiB; anything
 * else closes the connection). get polls until the key exists. The store
 * holds what the workers publish for one connect (addresses), no secret; it
 * is served only while the workers connect. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_GLOO_KVSTORE_H
#define STRATA_DISTRIBUTE_COLLECTIVE_GLOO_KVSTORE_H

#include <stddef.h>

#include "strata/base.h"

typedef struct st__kv_server st__kv_server;

/* Serve at address ("host:port"; [v6]:port) on a thread of its own. */
st_status st__kv_server_start(const char *address, st__kv_server **out);
void st__kv_server_stop(st__kv_server *s); /* accepts NULL; joins the thread */

/* Clients (the shim's store callbacks, gloo_shim.h): ctx is the server's
 * address as a NUL-terminated string. Connections refused while the server
 * is not up yet are retried until the get's deadline (set: 30 s). */
int st__kv_set(void *ctx, const char *key, const void *val, size_t n, char *err, size_t errlen);
int st__kv_get(void *ctx, const char *key, double timeout_s, void **val, size_t *n, char *err,
               size_t errlen);

/* Split "host:port" / "[v6]:port" into host (hostlen bytes) and port. */
st_status st__kv_split_address(const char *address, char *host, size_t hostlen, char *port,
                               size_t portlen);

#endif
