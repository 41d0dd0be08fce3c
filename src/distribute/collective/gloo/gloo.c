/* The Gloo transport: the processes of a job launched the TensorFlow way (one
 * process per worker, each with its TF_CONFIG; no mpirun) joined by Gloo's
 * TCP pairs (gloo_shim.cc) after a rendezvous through worker 0's key-value
 * store (kvstore.c). Every operation is built from posted point-to-point
 * transfers between every pair, and every reduction ends with the same
 * rank-order sum as the MPI transport (rank_sum.h), so a job gives the same
 * bytes under mpirun and under TF_CONFIG. Each wait is bounded by the
 * transport's timeout and names the worker that did not take part (workers
 * that share one host all-reduce through shared memory, shm.c, with the same
 * sums and bits; STRATA_MPI_SHM=0 keeps them on messages); after a
 * failure every pair is closed (the peers then fail at once) and every later
 * operation fails with ST_ERR_PEER. Called by the one thread that owns it
 * (rank = c->self).
 *
 * Sizes (issue 29, D1's Gloo twin): Gloo's unbound-buffer receive aborts the
 * process (an exception in its device thread: std::terminate) when the
 * message is larger than the posted receive, and completes silently, the
 * rest of the buffer unwritten, when it is smaller. So no receive here can
 * be matched by a message of another size: every slot carries the element
 * count (collectives: the operation's count, which every worker must pass
 * alike; a worker that passes another never pairs, and the wait ends at the
 * timeout naming it and this worker's count; through shared memory shm.c
 * compares the counts at once), and a point-to-point message
 * is preceded by a header with its count, checked before its data can land
 * (a mismatch: ST_ERR_INVALID naming the peer and both counts). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/split.h"
#include "distribute/collective/collective.h"
#include "distribute/collective/gloo/gloo_shim.h"
#include "distribute/collective/gloo/kvstore.h"
#include "distribute/collective/rank_sum.h"
#include "distribute/collective/shm.h"

enum { MAX_PENDING = 64 };
/* Slots (uint64): collectives: count (26 bits) << 36 | op number << 4 |
 * phase; point to point: P2P_SLOT | P2P_HEADER for the header | count (29
 * bits) << 32 | message number (16 bits) << 16 | sender. */
#define P2P_SLOT ((uint64_t)1 << 62)
#define P2P_HEADER ((uint64_t)1 << 61)
#define COUNT_BITS(n, bits, shift) (((uint64_t)(n) & (((uint64_t)1 << (bits)) - 1)) << (shift))

typedef struct pending {
  st__gloo_buf *buf, *hbuf; /* the data, the header (hdr) */
  int peer;
  uint64_t hdr;             /* the count sent */
} pending;

typedef struct gloo_coll {
  st_collective base;
  st__gloo *g;
  double timeout;        /* seconds, every operation */
  const int64_t *step;   /* for messages; may be NULL */
  uint64_t ops;          /* collective operations started */
  int cur_op;            /* the operation under way (op_kind), for messages */
  size_t cur_n;          /* its element count (in its slots and messages) */
  bool broken;
  st__shm *shm;          /* every worker on this machine: all-reduces through it */
  double wait_t0;        /* the start of the current wait on shm */
  float *tmp;            /* scratch of tmp_n floats */
  size_t tmp_n;
  uint64_t *sent, *recvd; /* [size] point-to-point messages per peer */
  pending p2p[MAX_PENDING];
} gloo_coll;

typedef enum op_kind { OP_ALL_REDUCE, OP_BROADCAST, OP_ALL_GATHER, OP_REDUCE_SCATTER,
                       OP_BARRIER, OP_SEND, OP_RECV } op_kind;
static const char *const op_names[] = {"all-reduce", "broadcast", "all-gather",
                                       "reduce-scatter", "barrier", "send", "receive"};

/* After a failure: close the pairs so the peers fail at once. */
static st_status fail(gloo_coll *c, st_status s, op_kind op, int peer, const char *why) {
  c->broken = true;
  st__gloo_close_pairs(c->g);
  char at[48] = "";
  if (c->step) snprintf(at, sizeof at, " at step %lld", (long long)*c->step);
  if (s == ST_ERR_TIMEOUT && op < OP_SEND && !c->shm) /* another count never pairs (shm.c names it) */
    return st_error(s, "gloo transport: worker %d did not join %s #%llu%s within %.0f s (%s; "
                    "this worker's count: %zu, a worker that passed another waits too)", peer,
                    op_names[op], (unsigned long long)c->ops, at, c->timeout, why, c->cur_n);
  if (s == ST_ERR_TIMEOUT)
    return st_error(s, "gloo transport: worker %d did not join %s #%llu%s within %.0f s (%s)",
                    peer, op_names[op], (unsigned long long)c->ops, at, c->timeout, why);
  return st_error(s, "gloo transport: %s #%llu%s with worker %d failed: %s", op_names[op],
                  (unsigned long long)c->ops, at, peer, why);
}

static st_status fail_broken(const gloo_coll *c, op_kind op) {
  return st_error(ST_ERR_PEER, "gloo transport: %s after an earlier failure of this job's "
                  "collectives (a worker was lost)", op_names[op]);
}

static st_status reserve_tmp(gloo_coll *c, size_t n) {
  if (n <= c->tmp_n) return ST_OK;
  float *t = realloc(c->tmp, n * sizeof *t);
  if (!t) return st_error(ST_ERR_NOMEM, "gloo transport: %zu floats of scratch", n);
  c->tmp = t;
  c->tmp_n = n;
  return ST_OK;
}

/* One exchange: the transfers posted on up to two buffers, then waited for
 * (nsend sends on the send buffer, nrecv receives on the receive buffer). */
typedef struct xfer {
  st__gloo_buf *sb, *rb;
  int nsend, nrecv;
  char err[256];
} xfer;

static st_status post(gloo_coll *c, xfer *x, bool sending, int peer, uint64_t slot,
                      size_t off_floats, size_t n, op_kind op) {
  if (n == 0) return ST_OK;
  int rc = sending ? st__gloo_send(x->sb, peer, slot, off_floats * 4, n * 4, x->err, sizeof x->err)
                   : st__gloo_recv(x->rb, peer, slot, off_floats * 4, n * 4, x->err, sizeof x->err);
  if (rc != 0) return fail(c, ST_ERR_PEER, op, peer, x->err);
  if (sending) x->nsend++;
  else x->nrecv++;
  return ST_OK;
}

/* Wait for every posted transfer of x; a missing one names its peer. */
static st_status wait_all(gloo_coll *c, xfer *x, op_kind op, const bool *expect_from) {
  double deadline = st_now_seconds() + c->timeout;
  bool got[ST_MAX_WORKERS] = {false};
  for (int k = 0; k < x->nrecv + x->nsend; k++) {
    bool recv = k < x->nrecv;
    int ms = (int)((deadline - st_now_seconds()) * 1000.0), peer = -1;
    if (ms < 1) ms = 1;
    int rc = recv ? st__gloo_wait_recv(x->rb, ms, &peer, x->err, sizeof x->err)
                  : st__gloo_wait_send(x->sb, ms, &peer, x->err, sizeof x->err);
    if (rc == 0) {
      if (recv && peer >= 0 && peer < ST_MAX_WORKERS) got[peer] = true;
      continue;
    }
    int missing = peer;
    for (int j = 0; recv && j < c->base.size; j++)
      if (expect_from[j] && !got[j]) {
        missing = j;
        break;
      }
    return fail(c, rc == ST__GLOO_TIMEOUT ? ST_ERR_TIMEOUT : ST_ERR_PEER, op, missing, x->err);
  }
  return ST_OK;
}

static st_status open_bufs(gloo_coll *c, xfer *x, const void *s, size_t sn, void *r, size_t rn,
                           op_kind op) {
  memset(x, 0, sizeof *x);
  if ((s && st__gloo_buf_create(c->g, (void *)s, sn * 4, &x->sb, x->err, sizeof x->err) != 0) ||
      (r && st__gloo_buf_create(c->g, r, rn * 4, &x->rb, x->err, sizeof x->err) != 0))
    return fail(c, ST_ERR_INTERNAL, op, c->base.self, x->err);
  return ST_OK;
}

static void close_bufs(xfer *x) {
  st__gloo_buf_destroy(x->sb);
  st__gloo_buf_destroy(x->rb);
}

/* Send part j of a split (lo[j], len[j]) ... the exchanges of every
 * operation: to each peer j send send[soff(j) .. +sn(j)) and receive into
 * recv[roff(j) .. +rn(j)). */
typedef struct plan {
  size_t soff[ST_MAX_WORKERS], sn[ST_MAX_WORKERS], roff[ST_MAX_WORKERS], rn[ST_MAX_WORKERS];
} plan;

static st_status exchange(gloo_coll *c, const float *send, size_t send_n, float *recv,
                          size_t recv_n, const plan *p, uint64_t phase, op_kind op) {
  xfer x;
  st_status s = open_bufs(c, &x, send, send_n, recv, recv_n, op);
  bool expect[ST_MAX_WORKERS] = {false};
  uint64_t slot = COUNT_BITS(c->cur_n, 26, 36) | COUNT_BITS(c->ops, 32, 4) | phase;
  for (int j = 0; s == ST_OK && j < c->base.size; j++) {
    if (j == c->base.self) continue;
    expect[j] = p->rn[j] > 0;
    if (send) s = post(c, &x, true, j, slot, p->soff[j], p->sn[j], op);
    if (s == ST_OK && recv) s = post(c, &x, false, j, slot, p->roff[j], p->rn[j], op);
  }
  if (s == ST_OK) s = wait_all(c, &x, op, expect);
  close_bufs(&x);
  return s;
}

static void chunks(size_t n, int size, size_t *lo, size_t *len) {
  for (int j = 0; j < size; j++) {
    int start, count;
    st__split((int)n, size, j, &start, &count);
    lo[j] = (size_t)start;
    len[j] = (size_t)count;
  }
}

/* A wait of the shared-memory all-reduce (shm.h): the deadline names the
 * first worker missing; a lost worker is seen there too (its part never
 * comes). */
static st_status shm_wait(void *ctx, uint64_t missing, int spins) {
  gloo_coll *c = ctx;
  if (spins == 0) c->wait_t0 = st_now_seconds();
  double waited = st_now_seconds() - c->wait_t0;
  if (waited > c->timeout) {
    int who = 0;
    while (who < c->base.size && !(missing >> who & 1)) who++;
    return fail(c, ST_ERR_TIMEOUT, (op_kind)c->cur_op, who, "through shared memory");
  }
  st__shm_pause(spins, waited);
  return ST_OK;
}

static st_status shm_done(gloo_coll *c, st_status s) {
  if (s != ST_OK) c->broken = true;
  return s;
}

static st_status gloo_all_reduce(st_collective *cc, int rank, float *buf, size_t n,
                                 st_reduce_op op) {
  (void)rank;
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken) return fail_broken(c, OP_ALL_REDUCE);
  c->ops++;
  c->cur_op = OP_ALL_REDUCE;
  c->cur_n = n;
  int size = c->base.size, me = c->base.self;
  if (size == 1 || n == 0) return ST_OK;
  if (c->shm) return shm_done(c, st__shm_all_reduce(c->shm, buf, n, op, shm_wait, c));
  size_t lo[ST_MAX_WORKERS] = {0}, len[ST_MAX_WORKERS] = {0};
  chunks(n, size, lo, len);
  st_status s = reserve_tmp(c, (size_t)size * len[me] + 1);
  if (s != ST_OK) return s;
  plan p; /* reduce-scatter: my chunk of every peer into tmp[j] */
  memset(&p, 0, sizeof p);
  for (int j = 0; j < size; j++) {
    p.soff[j] = lo[j], p.sn[j] = len[j];
    p.roff[j] = (size_t)j * len[me], p.rn[j] = len[me];
  }
  if ((s = exchange(c, buf, n, c->tmp, (size_t)size * len[me] + 1, &p, 0, OP_ALL_REDUCE)) != ST_OK)
    return s;
  const float *src[ST_MAX_WORKERS];
  for (int j = 0; j < size; j++) src[j] = j == me ? buf + lo[me] : c->tmp + (size_t)j * len[me];
  st__sum_in_rank_order(buf + lo[me], NULL, src, size, len[me], op);
  for (int j = 0; j < size; j++) { /* all-gather: my sum to every peer, theirs back */
    p.soff[j] = lo[me], p.sn[j] = len[me];
    p.roff[j] = lo[j], p.rn[j] = len[j];
  }
  return exchange(c, buf, n, buf, n, &p, 1, OP_ALL_REDUCE);
}

static st_status gloo_broadcast(st_collective *cc, int rank, float *buf, size_t n, int root) {
  (void)rank;
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken) return fail_broken(c, OP_BROADCAST);
  c->ops++;
  c->cur_op = OP_BROADCAST;
  c->cur_n = n;
  int size = c->base.size, me = c->base.self;
  if (size == 1 || n == 0) return ST_OK;
  if (c->shm) return shm_done(c, st__shm_broadcast(c->shm, buf, n, root, shm_wait, c));
  plan p;
  memset(&p, 0, sizeof p);
  if (me == root) {
    for (int j = 0; j < size; j++) p.sn[j] = n;
    return exchange(c, buf, n, NULL, 0, &p, 0, OP_BROADCAST);
  }
  for (int j = 0; j < size; j++) p.rn[j] = j == root ? n : 0;
  return exchange(c, NULL, 0, buf, n, &p, 0, OP_BROADCAST);
}

static st_status gloo_all_gather(st_collective *cc, int rank, const float *send, size_t n,
                                 float *recv) {
  (void)rank;
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken) return fail_broken(c, OP_ALL_GATHER);
  c->ops++;
  c->cur_op = OP_ALL_GATHER;
  c->cur_n = n;
  int size = c->base.size, me = c->base.self;
  if (c->shm && n <= ST__SHM_GATHER_MAX)
    return shm_done(c, st__shm_all_gather(c->shm, send, n, recv, shm_wait, c));
  if (n) memmove(recv + (size_t)me * n, send, n * sizeof *send);
  if (size == 1 || n == 0) return ST_OK;
  plan p;
  for (int j = 0; j < size; j++) {
    p.soff[j] = 0, p.sn[j] = n;
    p.roff[j] = (size_t)j * n, p.rn[j] = n;
  }
  return exchange(c, recv + (size_t)me * n, n, recv, (size_t)size * n, &p, 0, OP_ALL_GATHER);
}

static st_status gloo_reduce_scatter(st_collective *cc, int rank, const float *send, float *recv,
                                     size_t n, st_reduce_op op) {
  (void)rank;
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken) return fail_broken(c, OP_REDUCE_SCATTER);
  c->ops++;
  c->cur_op = OP_REDUCE_SCATTER;
  c->cur_n = n;
  int size = c->base.size, me = c->base.self;
  const float *src[ST_MAX_WORKERS];
  st_status s = reserve_tmp(c, (size_t)size * n + 1);
  if (s != ST_OK) return s;
  if (size > 1 && n) {
    plan p;
    for (int j = 0; j < size; j++) {
      p.soff[j] = (size_t)j * n, p.sn[j] = n;
      p.roff[j] = (size_t)j * n, p.rn[j] = n;
    }
    s = exchange(c, send, (size_t)size * n, c->tmp, (size_t)size * n + 1, &p, 0, OP_REDUCE_SCATTER);
    if (s != ST_OK) return s;
  }
  for (int j = 0; j < size; j++) src[j] = j == me ? send + (size_t)me * n : c->tmp + (size_t)j * n;
  st__sum_in_rank_order(recv, NULL, src, size, n, op);
  return ST_OK;
}

static st_status gloo_barrier(st_collective *cc, int rank) {
  (void)rank;
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken) return fail_broken(c, OP_BARRIER);
  c->ops++;
  c->cur_op = OP_BARRIER;
  c->cur_n = 1;
  int size = c->base.size;
  if (size == 1) return ST_OK;
  if (c->shm) return shm_done(c, st__shm_all_gather(c->shm, NULL, 0, NULL, shm_wait, c));
  float one = 0.0f;
  st_status s = reserve_tmp(c, (size_t)size);
  if (s != ST_OK) return s;
  plan p;
  for (int j = 0; j < size; j++) p.soff[j] = 0, p.sn[j] = 1, p.roff[j] = (size_t)j, p.rn[j] = 1;
  return exchange(c, &one, 1, c->tmp, (size_t)size, &p, 0, OP_BARRIER);
}

/* ---- point to point ---- */

/* The slots of message number seq from `from` (the data's carries count). */
static uint64_t p2p_slot(uint64_t seq, int from, bool header, size_t count) {
  return P2P_SLOT | (header ? P2P_HEADER : COUNT_BITS(count, 29, 32)) | COUNT_BITS(seq, 16, 16) |
         (uint64_t)from;
}

/* Post the header (n) and the data of one message to peer (h: a free entry). */
static int post_send(gloo_coll *c, pending *h, const float *buf, size_t n, int peer, char *err,
                     size_t errlen) {
  uint64_t seq = c->sent[peer]++;
  h->hdr = n;
  int rc = st__gloo_buf_create(c->g, &h->hdr, sizeof h->hdr, &h->hbuf, err, errlen);
  if (rc == 0)
    rc = st__gloo_send(h->hbuf, peer, p2p_slot(seq, c->base.self, true, 0), 0, sizeof h->hdr, err,
                       errlen);
  if (rc == 0) rc = st__gloo_buf_create(c->g, (void *)buf, n * 4 + 1, &h->buf, err, errlen);
  if (rc == 0 && n)
    rc = st__gloo_send(h->buf, peer, p2p_slot(seq, c->base.self, false, n), 0, n * 4, err, errlen);
  return rc;
}

static void free_pending(pending *p) {
  st__gloo_buf_destroy(p->hbuf);
  st__gloo_buf_destroy(p->buf);
  p->hbuf = p->buf = NULL;
}

static st_status gloo_send(st_collective *cc, const float *buf, size_t n, int peer, int *handle) {
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken) return fail_broken(c, OP_SEND);
  int h = 0;
  while (h < MAX_PENDING && c->p2p[h].buf) h++;
  if (h == MAX_PENDING)
    return st_error(ST_ERR_INTERNAL, "gloo transport: more than %d sends pending", MAX_PENDING);
  char err[256];
  c->p2p[h].peer = peer;
  if (post_send(c, &c->p2p[h], buf, n, peer, err, sizeof err) != 0) {
    st_status s = fail(c, ST_ERR_PEER, OP_SEND, peer, err);
    free_pending(&c->p2p[h]);
    return s;
  }
  *handle = h;
  return ST_OK;
}

static st_status gloo_wait(st_collective *cc, int handle) {
  gloo_coll *c = (gloo_coll *)cc;
  if (handle < 0 || handle >= MAX_PENDING || !c->p2p[handle].buf)
    return st_error(ST_ERR_INTERNAL, "gloo transport: wait on handle %d, not a pending send",
                    handle);
  pending *p = &c->p2p[handle];
  char err[256];
  int peer = p->peer, ms = (int)(c->timeout * 1000.0);
  int rc = st__gloo_wait_send(p->hbuf, ms, &peer, err, sizeof err); /* the header */
  if (rc == 0 && p->hdr) rc = st__gloo_wait_send(p->buf, ms, &peer, err, sizeof err);
  st_status s = ST_OK;
  if (rc != 0) s = fail(c, rc == ST__GLOO_TIMEOUT ? ST_ERR_TIMEOUT : ST_ERR_PEER, OP_SEND, p->peer, err);
  free_pending(p);
  return s;
}

/* The header of the next message from peer came with `got` floats, this
 * receive expects n: a mismatch is refused before its data can land (its
 * receive, posted under the slot of n, cannot pair with the other count). */
static st_status size_mismatch(gloo_coll *c, int peer, uint64_t seq, uint64_t got, size_t n) {
  c->broken = true;
  st__gloo_close_pairs(c->g);
  char at[48] = "";
  if (c->step) snprintf(at, sizeof at, " at step %lld", (long long)*c->step);
  return st_error(ST_ERR_INVALID, "gloo transport: receive #%llu from worker %d%s: it sent %llu "
                  "floats (%llu bytes), this worker expects %zu (%zu bytes): the workers disagree "
                  "on what shapes the message (a flag or the data differs between them)",
                  (unsigned long long)seq + 1, peer, at, (unsigned long long)got,
                  (unsigned long long)got * 4, n, n * 4);
}

static st_status gloo_recv(st_collective *cc, float *buf, size_t n, int peer) {
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken) return fail_broken(c, OP_RECV);
  uint64_t seq = c->recvd[peer]++, got = UINT64_MAX;
  char err[256];
  st__gloo_buf *hb = NULL, *b = NULL;
  int ms = (int)(c->timeout * 1000.0), from = -1;
  int rc = st__gloo_buf_create(c->g, &got, sizeof got, &hb, err, sizeof err);
  if (rc == 0) rc = st__gloo_recv(hb, peer, p2p_slot(seq, peer, true, 0), 0, sizeof got, err, sizeof err);
  if (rc == 0 && n) rc = st__gloo_buf_create(c->g, buf, n * 4, &b, err, sizeof err);
  if (rc == 0 && n) rc = st__gloo_recv(b, peer, p2p_slot(seq, peer, false, n), 0, n * 4, err, sizeof err);
  if (rc == 0) rc = st__gloo_wait_recv(hb, ms, &from, err, sizeof err);
  st_status s = ST_OK;
  if (rc == 0 && got != n) s = size_mismatch(c, peer, seq, got, n);
  else if (rc == 0 && n) rc = st__gloo_wait_recv(b, ms, &from, err, sizeof err);
  if (rc != 0) s = fail(c, rc == ST__GLOO_TIMEOUT ? ST_ERR_TIMEOUT : ST_ERR_PEER, OP_RECV, peer, err);
  st__gloo_buf_destroy(b);
  st__gloo_buf_destroy(hb);
  return s;
}

static void gloo_destroy(st_collective *cc) {
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken) st__gloo_close_pairs(c->g);
  for (int h = 0; h < MAX_PENDING; h++) free_pending(&c->p2p[h]);
  st__shm_close(c->shm);
  st__gloo_destroy(c->g);
  free(c->tmp);
  free(c->sent);
  free(c->recvd);
  free(c);
}

static const st_collective_vtable gloo_vtable = {
    .name = "gloo",
    .all_reduce = gloo_all_reduce,
    .broadcast = gloo_broadcast,
    .all_gather = gloo_all_gather,
    .reduce_scatter = gloo_reduce_scatter,
    .barrier = gloo_barrier,
    .destroy = gloo_destroy,
    .send = gloo_send,
    .recv = gloo_recv,
    .wait = gloo_wait,
};

bool st__gloo_built(void) { return true; }

/* The job this process belongs to (st__gloo_world_join), like MPI's world:
 * one per process, set once. Worker 0 serves the rendezvous store from the
 * join until the process ends, so that every transport created later (each
 * with a key prefix of its own: the n-th created by every process) connects
 * through it. */
static struct {
  pthread_mutex_t lock;
  bool joined;
  int rank, size;
  char addr[ST_MAX_WORKERS][ST__GLOO_ADDRESS_MAX];
  st__kv_server *server;
  uint64_t transports; /* created so far (the next one's key prefix) */
} g_world = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool same_job(int rank, int size, const char *const *addresses) {
  if (rank != g_world.rank || size != g_world.size) return false;
  for (int r = 0; r < size; r++)
    if (strcmp(addresses[r], g_world.addr[r]) != 0) return false;
  return true;
}

static st_status join_locked(int rank, int size, const char *const *addresses) {
  if (g_world.joined)
    return same_job(rank, size, addresses)
               ? ST_OK
               : st_error(ST_ERR_INVALID, "gloo transport: this process already joined a job "
                          "as worker %d of %d; it cannot join another", g_world.rank,
                          g_world.size);
  if (size < 1 || size > ST_MAX_WORKERS || rank < 0 || rank >= size || !addresses)
    return st_error(ST_ERR_INVALID, "gloo transport: worker %d of %d (1 to %d workers)", rank,
                    size, ST_MAX_WORKERS);
  char host[256], port[32];
  for (int r = 0; r < size; r++) {
    st_status s = addresses[r] && strlen(addresses[r]) < ST__GLOO_ADDRESS_MAX
                      ? st__kv_split_address(addresses[r], host, sizeof host, port, sizeof port)
                      : st_error(ST_ERR_INVALID, "address missing or too long");
    if (s != ST_OK) return st_error_prefix(s, "gloo transport: worker %d: ", r);
    strcpy(g_world.addr[r], addresses[r]);
  }
  if (rank == 0 && size > 1) {
    st_status s = st__kv_server_start(addresses[0], &g_world.server);
    if (s != ST_OK) return st_error_prefix(s, "gloo transport: worker 0: ");
  }
  g_world.rank = rank;
  g_world.size = size;
  g_world.joined = true;
  return ST_OK;
}

st_status st__gloo_world_join(int rank, int size, const char *const *addresses) {
  /* Gloo writes to its sockets without MSG_NOSIGNAL: a peer that is gone
   * would kill this process with SIGPIPE instead of failing the operation. */
  struct sigaction old;
  if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  pthread_mutex_lock(&g_world.lock);
  st_status s = join_locked(rank, size, addresses);
  pthread_mutex_unlock(&g_world.lock);
  return s;
}

/* The shared-memory segment's opening collectives (shm.h), over Gloo; a
 * failure there (a lost worker) leaves the transport broken, and its next
 * operation says so. */
static int shm_all_min(void *ctx, int v) {
  gloo_coll *c = ctx;
  float mine = (float)v, all[ST_MAX_WORKERS];
  if (gloo_all_gather(&c->base, c->base.self, &mine, 1, all) != ST_OK) return 0;
  int m = v;
  for (int j = 0; j < c->base.size; j++) m = all[j] < (float)m ? (int)all[j] : m;
  return m;
}

static void shm_bcast(void *ctx, char *buf, size_t n) {
  gloo_coll *c = ctx;
  float f[64];
  size_t nf = (n + sizeof(float) - 1) / sizeof(float);
  if (nf > 64) return;
  memset(f, 0, sizeof f);
  memcpy(f, buf, n);
  if (gloo_broadcast(&c->base, c->base.self, f, nf, 0) == ST_OK) memcpy(buf, f, n);
}

/* Every worker's host is this one's (as TF_CONFIG names them): the workers
 * then share an all-reduce segment; workers on other hosts, or on network
 * namespaces of one machine with addresses of their own, send messages. */
static void open_shm(gloo_coll *c) {
  char mine[256], port[32], host[256];
  bool same = true;
  st__kv_split_address(g_world.addr[c->base.self], mine, sizeof mine, port, sizeof port);
  for (int r = 0; r < c->base.size; r++) {
    st__kv_split_address(g_world.addr[r], host, sizeof host, port, sizeof port);
    same = same && strcmp(host, mine) == 0;
  }
  st__shm_setup setup = {c, shm_all_min, shm_bcast};
  c->shm = st__shm_open(&setup, c->base.self, c->base.size, same);
}

/* Connect a new mesh (key prefix "t<n>/"), then a barrier: every worker has
 * connected it before any uses it. */
static st_status connect_job(gloo_coll *c, uint64_t seq) {
  char host[256], port[32], err[512] = "", prefix[32];
  int rank = c->base.self;
  st__kv_split_address(g_world.addr[rank], host, sizeof host, port, sizeof port);
  snprintf(prefix, sizeof prefix, "t%llu/", (unsigned long long)seq);
  st__gloo_store store = {(void *)g_world.addr[0], st__kv_set, st__kv_get};
  int rc = st__gloo_connect(rank, c->base.size, host, &store, prefix, c->timeout, &c->g, err,
                            sizeof err);
  const char *key = strstr(err, prefix); /* Gloo's key of worker N is "N" */
  int missing = key && key[strlen(prefix)] >= '0' && key[strlen(prefix)] <= '9'
                    ? atoi(key + strlen(prefix)) : -1;
  if (rc != 0 && missing >= 0 && missing < c->base.size && missing != rank)
    return st_error(rc == ST__GLOO_TIMEOUT ? ST_ERR_TIMEOUT : ST_ERR_PEER,
                    "multi-worker job: worker %d (%s) did not join within %.0f s (worker %d "
                    "waited at the rendezvous, worker 0's address %s)", missing,
                    g_world.addr[missing], c->timeout, rank, g_world.addr[0]);
  if (rc != 0)
    return st_error(rc == ST__GLOO_TIMEOUT ? ST_ERR_TIMEOUT : ST_ERR_PEER,
                    "multi-worker job: worker %d of %d could not join the others within %.0f s "
                    "(rendezvous at worker 0, %s): %s", rank, c->base.size, c->timeout,
                    g_world.addr[0], err);
  st_status s = gloo_barrier(&c->base, rank);
  if (s == ST_OK) open_shm(c);
  c->ops = 0;
  return s;
}

st_status st__collective_gloo_create(double timeout_s, const int64_t *step, st_collective **out) {
  *out = NULL;
  pthread_mutex_lock(&g_world.lock);
  bool joined = g_world.joined;
  uint64_t seq = g_world.transports++;
  pthread_mutex_unlock(&g_world.lock);
  if (!joined)
    return st_error(ST_ERR_INVALID, "gloo transport: this process has not joined a job "
                    "(st__gloo_world_join)");
  int size = g_world.size;
  gloo_coll *c = calloc(1, sizeof *c);
  if (!c || !(c->sent = calloc((size_t)size, sizeof *c->sent)) ||
      !(c->recvd = calloc((size_t)size, sizeof *c->recvd))) {
    if (c) free(c->sent);
    free(c);
    return st_error(ST_ERR_NOMEM, "gloo transport: out of memory");
  }
  c->base = (st_collective){.vt = &gloo_vtable, .size = size, .self = g_world.rank};
  c->timeout = timeout_s > 0 ? timeout_s : ST_DEFAULT_COLLECTIVE_TIMEOUT;
  c->step = step;
  st_status s = size > 1 ? connect_job(c, seq) : ST_OK;
  if (s != ST_OK) {
    gloo_destroy(&c->base);
    return s;
  }
  *out = &c->base;
  return ST_OK;
}
