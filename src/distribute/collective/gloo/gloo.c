/* The Gloo transport: the processes of a job launched the TensorFlow way (one
 * process per worker, each with its TF_CONFIG; no mpirun) joined by Gloo's
 * TCP pairs (gloo_shim.cc: two meshes, one per direction of the puts) after
 * a rendezvous through worker 0's key-value store (kvstore.c). Every collective is built from puts between every pair
 * into buffers the receiver registered once (a staging area per peer) or
 * before it could be sent (the all-reduce's all-gather, straight into the
 * result): no ready-to-receive handshake per message, which on one core per
 * host cost a few context switches each (1.5-6.5 ms an operation however
 * small). Every reduction ends with the same rank-order sum as the MPI
 * transport (rank_sum.h), so a job gives the same bytes under mpirun and
 * under TF_CONFIG. Each wait is bounded by the transport's timeout and names
 * the worker that did not take part (workers that share one host all-reduce
 * through shared memory, shm.c, with the same sums and bits;
 * STRATA_MPI_SHM=0 keeps them on messages); after a failure every pair is
 * closed (the peers then fail at once) and every later operation fails with
 * ST_ERR_PEER. Point to point (send / recv / wait) uses Gloo's unbound
 * buffers. Called by the one thread that owns it (rank = c->self).
 *
 * Sizes (issue 29, D1's Gloo twin): Gloo trusts the sender's size (a message
 * larger than the receiving buffer aborts the process: an exception in its
 * device thread; a smaller one leaves the rest stale without a word), so no
 * message lands unchecked. A collective's every staged message is preceded,
 * in the same half of the staging area, by a header with the operation's
 * number, kind and count, checked before its data is read: workers that
 * passed other counts (or called another collective) fail at once with
 * ST_ERR_INVALID naming the worker and both counts, every one of them:
 * the first to see it closes its pairs 0.2 s late (the others read what it
 * sent first), and a worker that sees a pair fail still finds a header of
 * another count that landed before (close_late, step_failed). The direct puts
 * (kinds 1, 2) go to a peer only after its header of the same operation
 * was checked, so their sizes agree with the buffers it expected. Through
 * shared memory shm.c compares the counts. A point-to-point message is
 * preceded by a header with its count, checked before its data can land (a
 * mismatch: ST_ERR_INVALID naming the peer and both counts). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/split.h"
#include "distribute/collective/collective.h"
#include "distribute/collective/gloo/gloo_shim.h"
#include "distribute/collective/gloo/kvstore.h"
#include "distribute/collective/rank_sum.h"
#include "distribute/collective/shm.h"

enum { MAX_PENDING = 64 };
/* A staged message's header: {operation number << 4 | kind, count}. With at
 * most SMALL_BYTES of data the two go as one put, copied together (a put
 * more would cost the reader a wake-up), otherwise as two. */
enum { HDR_BYTES = 2 * sizeof(uint64_t), SMALL_BYTES = 64 << 10 };
/* A direct put (kinds 1, 2) carries at most PIECE floats: Gloo sizes a
 * socket's send buffer to the largest message sent on it (up to twice
 * net.core.wmem_max), and one put of megabytes then filled it in one write
 * before the host's core read anything (16 MiB between emulated hosts in
 * 1 MiB pieces: 2 hosts 64 -> 27 ms, 3 hosts 138 -> 64 ms; BENCHMARKS.md). */
enum { PIECE = (1 << 20) / sizeof(float) };
/* Point-to-point slots (uint64): P2P_SLOT | P2P_HEADER for the header |
 * count (29 bits) << 32 | message number (16 bits) << 16 | sender. */
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
  size_t cur_n;          /* its element count (in its messages' headers) */
  uint64_t hdr[2];       /* the header of the current exchange's puts */
  char *out;             /* [size][HDR_BYTES + SMALL_BYTES]: small puts, header and data */
  bool broken;
  bool closed;           /* close_late closed the pairs */
  char first_failure[320]; /* the failure that broke it */
  bool ready;            /* connected; false again once leaving with an error */
  st__shm *shm;          /* every worker on this machine: all-reduces through it */
  double wait_t0;        /* the start of the current wait on shm */
  size_t chunk;          /* floats: the most one message of a collective carries */
  uint64_t *seq;         /* [size] messages so far each way with each peer */
  float *tmp;            /* scratch of tmp_n floats: the all-reduce's parts */
  size_t tmp_n;
  uint64_t *sent, *recvd; /* [size] point-to-point messages per peer */
  pending p2p[MAX_PENDING];
} gloo_coll;

typedef enum op_kind { OP_ALL_REDUCE, OP_BROADCAST, OP_ALL_GATHER, OP_REDUCE_SCATTER,
                       OP_BARRIER, OP_SEND, OP_RECV } op_kind;
static const char *const op_names[] = {"all-reduce", "broadcast", "all-gather",
                                       "reduce-scatter", "barrier", "send", "receive"};

/* The transport broken by the failure st_last_error() describes (kept for
 * the later operations' reports). */
static st_status broke(gloo_coll *c, st_status s) {
  if (!c->broken) snprintf(c->first_failure, sizeof c->first_failure, "%s", st_last_error());
  c->broken = true;
  return s;
}

/* After a failure: close the pairs so the peers fail at once. */
static st_status fail(gloo_coll *c, st_status s, op_kind op, int peer, const char *why) {
  st__gloo_close_pairs(c->g);
  char at[48] = "";
  if (c->step) snprintf(at, sizeof at, " at step %lld", (long long)*c->step);
  char n[64] = "";
  if (op < OP_SEND) snprintf(n, sizeof n, "; this worker's count: %zu", c->cur_n);
  if (s == ST_ERR_TIMEOUT)
    return broke(c, st_error(s, "gloo transport: worker %d did not join %s #%llu%s within %.0f s "
                             "(%s%s)", peer, op_names[op], (unsigned long long)c->ops, at,
                             c->timeout, why, n));
  return broke(c, st_error(s, "gloo transport: %s #%llu%s with worker %d failed: %s%s%s%s",
                           op_names[op], (unsigned long long)c->ops, at, peer, why,
                           *n ? " (" : "", *n ? n + 2 : "", *n ? ")" : ""));
}

static st_status fail_broken(const gloo_coll *c, op_kind op) {
  return st_error(ST_ERR_PEER, "gloo transport: %s after an earlier failure of this job's "
                  "collectives (a worker was lost: %s)", op_names[op], c->first_failure);
}

/* The exchanges of every collective: to each peer j send
 * send[soff[j] .. +sn[j]) and receive rn[j] floats from it, either into
 * recv[roff[j] ..) or (a reduction, every rn[j] the same m) summed in rank
 * order with mine[0, m) into recv[0, m). In floats. */
typedef struct plan {
  size_t soff[ST_MAX_WORKERS], sn[ST_MAX_WORKERS], roff[ST_MAX_WORKERS], rn[ST_MAX_WORKERS];
  const float *mine; /* a reduction: this worker's part; NULL: copy into recv */
  st_reduce_op rop;
} plan;

/* Bytes of a half of a staging area: a header, then at most chunk floats. */
static size_t half_bytes(size_t chunk) { return HDR_BYTES + chunk * sizeof(float); }

/* Close the pairs after a failure of a collective, a moment late: the
 * peers first read what this worker sent them (a close resets the
 * connection, which drops what the peer's socket holds unread), so that
 * each of them sees a mismatch of counts for itself. */
static void close_late(gloo_coll *c) {
  if (c->closed) return;
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  st__gloo_close_pairs(c->g);
  c->closed = true;
}

/* A staged header h from peer j that is not this operation's (its number,
 * kind or count differ): the workers called the collective alike up to
 * here but not now; refused before its data is read. */
static st_status header_mismatch(gloo_coll *c, int j, const uint64_t *h, op_kind op) {
  close_late(c);
  char at[48] = "";
  if (c->step) snprintf(at, sizeof at, " at step %lld", (long long)*c->step);
  unsigned kind = (unsigned)(h[0] & 15);
  return broke(c, st_error(ST_ERR_INVALID, "gloo transport: %s #%llu%s: worker %d sent its %s "
                           "#%llu with %llu floats, this worker's count: %zu: the workers "
                           "disagree on what the collective holds (a flag, the model or the "
                           "data differs between them)", op_names[op],
                           (unsigned long long)c->ops, at, j,
                           kind < OP_SEND ? op_names[kind] : "message",
                           (unsigned long long)(h[0] >> 4), (unsigned long long)h[1], c->cur_n));
}

/* A header of this operation (its number and kind) with another count in
 * a staging area (either half) of peer *who, once nothing lands there any
 * more (the pairs closed): the peer passed another count. A header of this
 * operation can only have come in it (numbers are not reused; the
 * connect's barrier, number 1 as the first operation after it, differs in
 * kind or agrees in count), and the steps before were checked. */
static bool landed_mismatch(gloo_coll *c, int *who, uint64_t *h) {
  for (int j = 0; j < c->base.size; j++) {
    for (int half = 0; j != c->base.self && half < 2; half++) {
      memcpy(h, (const char *)st__gloo_stage(c->g, j) + (size_t)half * half_bytes(c->chunk),
             HDR_BYTES);
      if (h[0] == c->hdr[0] && h[1] != c->hdr[1]) return *who = j, true;
    }
  }
  return false;
}

/* A put or take of an exchange failed (rc from the shim): the peer left or
 * did not come. If it left because it saw that the workers passed other
 * counts, what it and the others sent before may have landed here (over
 * async pairs Gloo's loop thread reads on) although the pair now fails:
 * once the pairs are closed, a mismatch found in the staging areas is
 * reported as such (naming the worker and both counts), else the failure. */
static st_status step_failed(gloo_coll *c, int rc, op_kind op, int peer, const char *why) {
  close_late(c);
  uint64_t h[2];
  int j = -1;
  if (landed_mismatch(c, &j, h)) return header_mismatch(c, j, h, op);
  return fail(c, rc == ST__GLOO_TIMEOUT ? ST_ERR_TIMEOUT : ST_ERR_PEER, op, peer, why);
}

static size_t piece(size_t n, size_t i, size_t chunk) {
  return i * chunk >= n ? 0 : n - i * chunk < chunk ? n - i * chunk : chunk;
}

/* Steps with peer j: every message at most one chunk, one message each way
 * a step (possibly empty); none when nothing goes either way. The same count
 * on both ends of the pair (my sn is its rn). */
static size_t steps_with(const plan *p, int j, size_t chunk) {
  size_t a = (p->sn[j] + chunk - 1) / chunk, b = (p->rn[j] + chunk - 1) / chunk;
  return p->sn[j] || p->rn[j] ? (a > b ? a : b) : 0;
}

/* Step i's puts, one to every peer still in the exchange, each into the
 * half of the peer's staging area this pair's step count picks. */
static st_status put_step(gloo_coll *c, const float *send, const plan *p, const size_t *steps,
                          size_t i, op_kind op) {
  char err[256];
  size_t ch = c->chunk;
  for (int j = 0; j < c->base.size; j++) {
    if (j == c->base.self || i >= steps[j]) continue;
    size_t nb = piece(p->sn[j], i, ch) * sizeof(float);
    size_t roff = (size_t)(c->seq[j] & 1) * half_bytes(ch);
    const float *data = nb ? send + p->soff[j] + i * ch : NULL;
    char *o = c->out + (size_t)j * (HDR_BYTES + SMALL_BYTES);
    memcpy(o, c->hdr, HDR_BYTES);
    if (nb && nb <= SMALL_BYTES) memcpy(o + HDR_BYTES, data, nb);
    int rc = st__gloo_put(c->g, j, 0, o, HDR_BYTES + (nb <= SMALL_BYTES ? nb : 0), roff, err,
                          sizeof err);
    if (rc == 0 && nb > SMALL_BYTES)
      rc = st__gloo_put(c->g, j, 0, data, nb, roff + HDR_BYTES, err, sizeof err);
    if (rc != 0) return step_failed(c, rc, op, j, err);
  }
  return ST_OK;
}

/* Step i's takes from every peer still in the exchange, then their pieces
 * consumed (copied out or reduced), then the step's puts waited for. */
static st_status take_step(gloo_coll *c, float *recv, const plan *p, const size_t *steps,
                           size_t i, op_kind op) {
  char err[256];
  int size = c->base.size, me = c->base.self, peer = -1;
  size_t ch = c->chunk;
  const float *src[ST_MAX_WORKERS];
  for (int j = 0; j < size; j++) {
    if (j == me || i >= steps[j]) continue;
    const char *half = (const char *)st__gloo_stage(c->g, j) + (c->seq[j]++ & 1) * half_bytes(ch);
    uint64_t h[2];
    size_t n = piece(p->rn[j], i, ch);
    int rc = st__gloo_take(c->g, j, 0, err, sizeof err); /* the header (and small data) */
    if (rc == 0) memcpy(h, half, sizeof h);
    if (rc == 0 && (h[0] != c->hdr[0] || h[1] != c->hdr[1])) return header_mismatch(c, j, h, op);
    if (rc == 0 && n * sizeof(float) > SMALL_BYTES) /* the data, a put of its own */
      rc = st__gloo_take(c->g, j, 0, err, sizeof err);
    if (rc != 0) return step_failed(c, rc, op, j, err);
    src[j] = (const float *)(half + HDR_BYTES);
    if (!p->mine && n) memcpy(recv + p->roff[j] + i * ch, src[j], n * sizeof(float));
  }
  size_t m = piece(p->rn[me == 0 ? 1 : 0], i, ch);
  if (p->mine && m) {
    src[me] = p->mine + i * ch;
    st__sum_in_rank_order(recv + i * ch, NULL, src, size, m, p->rop);
  }
  int rc = st__gloo_puts_wait(c->g, &peer, err, sizeof err);
  return rc != 0 ? step_failed(c, rc, op, peer, err) : ST_OK;
}

/* One exchange in lockstep steps: my step i+1 puts go out only after I
 * consumed the peers' step i, so a peer's step i+2, into the half of its
 * step i, never overwrites what I have not read (two halves suffice). */
static st_status exchange(gloo_coll *c, const float *send, float *recv, const plan *p,
                          op_kind op) {
  size_t steps[ST_MAX_WORKERS] = {0}, all = 0;
  c->hdr[0] = c->ops << 4 | (uint64_t)op;
  c->hdr[1] = c->cur_n;
  for (int j = 0; j < c->base.size; j++) {
    if (j != c->base.self) steps[j] = steps_with(p, j, c->chunk);
    all = steps[j] > all ? steps[j] : all;
  }
  st_status s = ST_OK;
  for (size_t i = 0; s == ST_OK && i < all; i++) {
    s = put_step(c, send, p, steps, i, op);
    if (s == ST_OK) s = take_step(c, recv, p, steps, i, op);
  }
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

static st_status shm_done(gloo_coll *c, st_status s) { return s != ST_OK ? broke(c, s) : s; }

/* One round of puts of kind 1 or 2 into buffers every peer expected
 * (st__gloo_expect) before it sent what this answers: src[j][0, sn[j]) to
 * every peer j, and rn[j] floats taken from it; in pieces of at most
 * PIECE floats, the peers served in turn, worker me + 1 first. */
static st_status direct_round(gloo_coll *c, int kind, const float *const *src, const size_t *sn,
                              const size_t *rn) {
  char err[256];
  int size = c->base.size, me = c->base.self, peer = -1, rc = 0;
  size_t pf = PIECE, most = 0;
  for (int j = 0; j < size; j++) most = j != me && sn[j] > most ? sn[j] : most;
  for (size_t q = 0; rc == 0 && q * pf < most; q++)
    for (int k = 1; rc == 0 && k < size; k++) {
      int j = (me + k) % size;
      size_t n = piece(sn[j], q, pf);
      if (n) peer = j, rc = st__gloo_put(c->g, j, kind, src[j] + q * pf, n * sizeof(float),
                                         q * pf * sizeof(float), err, sizeof err);
    }
  for (int k = 1; rc == 0 && k < size; k++) {
    int j = (me + size - k) % size;
    for (size_t q = 0; rc == 0 && q * pf < rn[j]; q++)
      peer = j, rc = st__gloo_take(c->g, j, kind, err, sizeof err);
  }
  if (rc == 0) rc = st__gloo_puts_wait(c->g, &peer, err, sizeof err);
  if (rc != 0)
    return fail(c, rc == ST__GLOO_TIMEOUT ? ST_ERR_TIMEOUT : ST_ERR_PEER, OP_ALL_REDUCE, peer, err);
  return ST_OK;
}

/* What the all-reduce expects from every peer before its first message:
 * the rest of the peer's part of my sum beyond the first chunk (kind 1,
 * into tmp[j * rest]) and the peer's sum (kind 2, into buf). A peer sends
 * either only after it took my first message, which goes out after this. */
static st_status expect_parts(gloo_coll *c, float *buf, const size_t *lo, const size_t *len,
                              size_t rest) {
  char err[256];
  int size = c->base.size, me = c->base.self, rc = 0, j = 0;
  for (; rc == 0 && j < size; j++) {
    if (j == me) continue;
    if (rest) rc = st__gloo_expect(c->g, j, 1, c->tmp + (size_t)j * rest, rest * sizeof(float),
                                   err, sizeof err);
    if (rc == 0 && len[j])
      rc = st__gloo_expect(c->g, j, 2, buf + lo[j], len[j] * sizeof(float), err, sizeof err);
  }
  return rc == 0 ? ST_OK : fail(c, ST_ERR_PEER, OP_ALL_REDUCE, j - 1, err);
}

static st_status reserve_tmp(gloo_coll *c, size_t n) {
  if (n <= c->tmp_n) return ST_OK;
  float *t = realloc(c->tmp, n * sizeof *t);
  if (!t) return st_error(ST_ERR_NOMEM, "gloo transport: %zu floats of scratch", n);
  c->tmp = t;
  c->tmp_n = n;
  return ST_OK;
}

/* Reduce-scatter, then all-gather; every worker's part summed in rank order.
 * The first chunk of each part goes through the staging areas (no buffer
 * of the peer's needs to exist yet); the rest of it, and the sums, straight
 * into buffers expected before (no staging copy, no lockstep: PIECE a put). */
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
  size_t lo[ST_MAX_WORKERS] = {0}, len[ST_MAX_WORKERS] = {0}, ch = c->chunk;
  chunks(n, size, lo, len);
  size_t rest = len[me] > ch ? len[me] - ch : 0;
  size_t sn[ST_MAX_WORKERS] = {0}, rn[ST_MAX_WORKERS] = {0};
  st_status s = reserve_tmp(c, (size_t)size * rest);
  if (s == ST_OK) s = expect_parts(c, buf, lo, len, rest);
  plan p; /* the first chunks: my part of every peer, summed with mine */
  memset(&p, 0, sizeof p);
  for (int j = 0; j < size; j++) {
    p.soff[j] = lo[j], p.sn[j] = len[j] < ch ? len[j] : ch;
    p.rn[j] = len[me] - rest;
  }
  p.mine = buf + lo[me], p.rop = op;
  if (s == ST_OK) s = exchange(c, buf, buf + lo[me], &p, OP_ALL_REDUCE);
  const float *src[ST_MAX_WORKERS];
  for (int j = 0; j < size; j++) {
    src[j] = buf + lo[j] + ch, sn[j] = len[j] > ch ? len[j] - ch : 0, rn[j] = rest;
  }
  if (s == ST_OK && (s = direct_round(c, 1, src, sn, rn)) == ST_OK && rest) {
    for (int j = 0; j < size; j++) src[j] = j == me ? buf + lo[me] + ch : c->tmp + (size_t)j * rest;
    st__sum_in_rank_order(buf + lo[me] + ch, NULL, src, size, rest, op);
  }
  for (int j = 0; j < size; j++) src[j] = buf + lo[me], sn[j] = len[me], rn[j] = len[j];
  if (s == ST_OK) s = direct_round(c, 2, src, sn, rn);
  st__gloo_forget(c->g);
  return s;
}

/* Every worker sends the root an empty message a step: the root never gets
 * ahead of a worker's staging area. */
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
  for (int j = 0; j < size; j++) {
    if (me == root) p.sn[j] = n;
    else if (j == root) p.rn[j] = n;
  }
  return exchange(c, buf, buf, &p, OP_BROADCAST);
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
  memset(&p, 0, sizeof p);
  for (int j = 0; j < size; j++) {
    p.soff[j] = 0, p.sn[j] = n;
    p.roff[j] = (size_t)j * n, p.rn[j] = n;
  }
  return exchange(c, recv + (size_t)me * n, recv, &p, OP_ALL_GATHER);
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
  const float *src[1] = {send};
  if (size == 1 || n == 0) {
    if (n) st__sum_in_rank_order(recv, NULL, src, 1, n, op);
    return ST_OK;
  }
  plan p; /* part j of my send to worker j; theirs summed with mine */
  memset(&p, 0, sizeof p);
  for (int j = 0; j < size; j++) {
    p.soff[j] = (size_t)j * n, p.sn[j] = n;
    p.rn[j] = n;
  }
  p.mine = send + (size_t)me * n, p.rop = op;
  return exchange(c, send, recv, &p, OP_REDUCE_SCATTER);
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
  float one = 0.0f, got[ST_MAX_WORKERS];
  plan p;
  memset(&p, 0, sizeof p);
  for (int j = 0; j < size; j++) p.sn[j] = 1, p.roff[j] = (size_t)j, p.rn[j] = 1;
  return exchange(c, &one, got, &p, OP_BARRIER);
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
  st__gloo_close_pairs(c->g);
  char at[48] = "";
  if (c->step) snprintf(at, sizeof at, " at step %lld", (long long)*c->step);
  return broke(c, st_error(ST_ERR_INVALID, "gloo transport: receive #%llu from worker %d%s: it "
                           "sent %llu floats (%llu bytes), this worker expects %zu (%zu bytes): "
                           "the workers disagree on what shapes the message (a flag or the data "
                           "differs between them)", (unsigned long long)seq + 1, peer, at,
                           (unsigned long long)got, (unsigned long long)got * 4, n, n * 4));
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

/* A transport that worked and is left without an error says farewell to
 * its peers first (gloo_shim.h); otherwise its pairs close at once, which
 * fails the peers still waiting on it at once. */
static void gloo_destroy(st_collective *cc) {
  gloo_coll *c = (gloo_coll *)cc;
  if (c->broken || !c->ready) st__gloo_close_pairs(c->g);
  else if (c->g) st__gloo_farewell(c->g, c->timeout);
  for (int h = 0; h < MAX_PENDING; h++) free_pending(&c->p2p[h]);
  st__shm_close(c->shm);
  st__gloo_destroy(c->g);
  free(c->seq);
  free(c->out);
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

/* A message into a staging area: at most 512 KiB (the all-reduce's first
 * chunk per peer; the other collectives' steps, each a wake-up of the
 * reader), less with many peers (the staging areas hold two each). */
static size_t chunk_floats(int size) {
  size_t bytes = size <= 9 ? (size_t)512 << 10 : ((size_t)4 << 20) / (size_t)(size - 1);
  return (bytes < (64 << 10) ? 64 << 10 : bytes) / sizeof(float);
}

/* Connect a new mesh (key prefix "t<n>/"), then a barrier: every worker has
 * connected it before any uses it. */
static st_status connect_job(gloo_coll *c, uint64_t seq) {
  char host[256], port[32], err[512] = "", prefix[32];
  int rank = c->base.self;
  st__kv_split_address(g_world.addr[rank], host, sizeof host, port, sizeof port);
  snprintf(prefix, sizeof prefix, "t%llu/", (unsigned long long)seq);
  st__gloo_store store = {(void *)g_world.addr[0], st__kv_set, st__kv_get};
  int rc = st__gloo_connect(rank, c->base.size, host, &store, prefix, c->timeout,
                            2 * half_bytes(c->chunk), &c->g, err, sizeof err);
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
      !(c->recvd = calloc((size_t)size, sizeof *c->recvd)) ||
      !(c->seq = calloc((size_t)size, sizeof *c->seq)) ||
      !(c->out = malloc((size_t)size * (HDR_BYTES + SMALL_BYTES)))) {
    if (c) free(c->sent), free(c->recvd), free(c->seq);
    free(c);
    return st_error(ST_ERR_NOMEM, "gloo transport: out of memory");
  }
  c->base = (st_collective){.vt = &gloo_vtable, .size = size, .self = g_world.rank};
  c->timeout = timeout_s > 0 ? timeout_s : ST_DEFAULT_COLLECTIVE_TIMEOUT;
  c->step = step;
  c->chunk = chunk_floats(size);
  st_status s = size > 1 ? connect_job(c, seq) : ST_OK;
  if (s != ST_OK) {
    gloo_destroy(&c->base);
    return s;
  }
  c->ready = true;
  *out = &c->base;
  return ST_OK;
}

void st__collective_gloo_leave(st_collective *cc, const char *why) {
  if (cc && why && *why) ((gloo_coll *)cc)->ready = false;
}
