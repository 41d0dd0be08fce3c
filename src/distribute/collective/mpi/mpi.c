/* The MPI transport: the processes of an MPI job (mpirun, srun) exchange float
 * buffers with non-blocking point-to-point messages on a communicator of
 * their own. Built only when CMake finds MPI (mpi_none.c otherwise).
 *
 * When every rank runs on one machine, all_reduce goes through shared memory
 * instead (shm.c: the same sums and bits, waits as below; STRATA_MPI_SHM=0
 * keeps it on messages). What follows is the message path.
 *
 * all_reduce of a small buffer (at most 16 KiB) takes one round: each rank
 * sends its whole buffer to every other rank (in pieces small enough to be
 * sent eagerly) and sums all of them itself in rank order 0, 1, ..., size-1:
 * one latency instead of two, for (size-1) times the bytes. Larger ones are
 * reduce-scatter + all-gather done directly: [0, n) is cut into
 * `size` chunks; rank r receives chunk r from every other rank, sums it in
 * rank order 0, 1, ..., size-1 (so every element is bit-identical on every
 * rank and from run to run, which MPI_Allreduce does not promise), then sends
 * its reduced chunk to every rank. Each rank sends and receives 2 (size-1)/size
 * of the buffer, as a ring does, in two rounds of messages instead of
 * 2 (size-1) steps; for the few workers of a data-parallel job that is fewer
 * latencies. Large chunks are cut into segments of SEG_FLOATS and pipelined:
 * up to WINDOW segments are in flight, and while the next ones arrive, the
 * current one is summed (from cache: a segment is small) and its all-gather
 * sent, so transfer, summing and all-gather overlap; a chunk of one segment is
 * the plain two-round exchange. The summation order (rank order) does not
 * depend on the segmenting. reduce_scatter is the first phase alone, with the
 * same segments and order (chunk r of the send buffer summed into recv: the
 * same bits as the all-reduce of that chunk); broadcast and all_gather are
 * the same direct exchanges, unsegmented.
 *
 * Every wait polls its requests (MPI_Testsome) against a deadline, so a peer
 * that died or stalls becomes ST_ERR_TIMEOUT naming the rank whose message is
 * missing, the operation and its number, instead of a hang. The transport is
 * then broken: later operations fail at once, and MPI_Finalize is skipped at
 * exit (it would wait for the missing peer).
 *
 * Naming the rank that is really missing (a survivor may wait for another
 * survivor that waits for the lost rank): a rank that times out first sends
 * every process a LOST report of the ranks it misses (mpi_lost.c), waits up
 * to GRACE_S (1 s, none with two processes) for the reports of the peers it
 * waited for, and names a rank it waited for, directly or through them, that
 * sent none; so it fails within the timeout + GRACE_S, saying through which
 * peer it waited.
 *
 * A process that leaves the job early (an error outside the collectives, e.g.
 * the chief could not write a checkpoint) says so first: st__collective_mpi_leave
 * sends every peer a LEAVE message (tag TAG_LEAVE: how many operations it
 * finished, and its error). The waits probe for it, and a peer waiting for
 * the part of an operation the leaver never started fails at once with
 * ST_ERR_PEER naming the rank and its error, instead of waiting for the
 * timeout. Its pending requests are cancelled, so it still finalises MPI
 * (unless a send could not be taken back).
 *
 * Threads: MPI_THREAD_MULTIPLE; one transport is used by one thread at a time
 * (the strategies give each thread that communicates a transport of its own). */
#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/split.h" /* st__split */
#include "distribute/collective/collective.h"
#include "distribute/collective/mpi/mpi_fault.h"
#include "distribute/collective/mpi/mpi_lost.h"
#include "distribute/collective/mpi/mpi_world.h"
#include "distribute/collective/shm.h"

/* The LEAVE message (TAG_LEAVE, MPI_BYTE, why's length + 1 bytes after done):
 * the sender will post no message of an operation after its `done`-th. */
typedef struct leave_msg {
  uint64_t done;          /* operations the sender finished */
  char why[504];          /* its error, "" when it left without one */
} leave_msg;
/* operation tags are below 32000; mpi_lost.c's LOST reports use 32003 */
enum { TAG_LEAVE = 32001, TAG_P2P = 32002 };
/* How long a rank that timed out waits for its peers' LOST messages. */
#define GRACE_S 1.0

typedef struct peer_left {
  bool gone;
  uint64_t done;
  char why[sizeof ((leave_msg *)0)->why];
} peer_left;

typedef struct mpi_coll {
  st_collective base;
  MPI_Comm comm;
  double timeout;
  const int64_t *step;
  uint64_t ops;           /* operations started (the #k of messages) */
  bool broken;
  bool requests_lost;     /* a failure left requests pending: keep the comm */
  bool left;              /* st__collective_mpi_leave was called */
  leave_msg leave;        /* what it sent (sends need a live buffer) */
  st__lost_msg lost;      /* the LOST message this transport sent */
  MPI_Request *lost_req;  /* [world size]: its sends, never waited for (a peer may be cut) */
  int *world_of;          /* [size]: the world rank of each rank of comm */
  uint64_t cut;           /* st__collective_mpi_test_cut: peers not talked to */
  peer_left *peers;       /* [size]: LEAVE messages received */
  float *tmp;             /* receive scratch */
  size_t tmp_cap;         /* floats */
  int nreq;               /* request slots: REQ_SLOTS(size) */
  MPI_Request *req;       /* [nreq], MPI_REQUEST_NULL when not in use */
  int *peer;              /* [nreq]: the rank each request waits for */
  int *done_idx;          /* [nreq] */
  st__shm *shm;       /* all ranks on one machine: all-reduces through it */
  double wait_t0;         /* the start of the current wait on shm */
  int wrank, wsize;       /* this process's world rank, the world's size */
} mpi_coll;

/* Pipelined all-reduce: segments of SEG_FLOATS (128 KiB), WINDOW of them in
 * flight. Request slots: segment k's reduce-scatter messages (2 (size-1)) in
 * group 2 (k % WINDOW), its all-gather messages in group 2 (k % WINDOW) + 1. */
enum { SEG_FLOATS = 32768, WINDOW = 4 };

/* Small all-reduces take one round (all_reduce_one_round): at most
 * ONE_ROUND_BYTES, and at most ONE_ROUND_SENT bytes sent by each rank (the
 * whole buffer to every peer). Their messages are cut into pieces of
 * PIECE_FLOATS (4000 bytes), each under OpenMPI's shared-memory eager limit
 * (btl_vader_eager_limit 4096 bytes with its header): sent at once, without
 * the rendezvous handshake a larger message waits for. */
enum { ONE_ROUND_BYTES = 16384, ONE_ROUND_SENT = 65536, PIECE_FLOATS = 1000 };

static bool one_round(size_t n, int size) {
  size_t bytes = n * sizeof(float);
  return bytes <= ONE_ROUND_BYTES && bytes * (size_t)(size - 1) <= ONE_ROUND_SENT;
}
#define REQ_SLOTS(size) (2 * WINDOW * 2 * (size))

static const char *g_op_names[] = {"all-reduce", "broadcast", "all-gather", "reduce-scatter",
                                   "barrier", "send", "receive"};
enum { OP_ALL_REDUCE, OP_BROADCAST, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_BARRIER, OP_SEND,
       OP_RECV };

static st_status fail_broken(mpi_coll *c, int op) {
  return st_error(ST_ERR_PEER, "%s #%llu: an earlier collective of this worker failed",
                  g_op_names[op], (unsigned long long)c->ops);
}

/* Receive the LEAVE messages that have arrived (the caller's transport only). */
static void receive_leaves(mpi_coll *c) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_LEAVE, c->comm, &flag, &st) != MPI_SUCCESS || !flag) return;
    leave_msg m;
    memset(&m, 0, sizeof m);
    if (MPI_Recv(&m, (int)sizeof m, MPI_BYTE, st.MPI_SOURCE, TAG_LEAVE, c->comm,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    peer_left *p = &c->peers[st.MPI_SOURCE];
    p->gone = true;
    p->done = m.done;
    m.why[sizeof m.why - 1] = '\0';
    snprintf(p->why, sizeof p->why, "%s", m.why);
  }
}

/* Give up the requests of a failed operation (every slot: a pipelined
 * all-reduce has several groups pending): cancel those still pending and wait
 * (briefly) for them to complete; one that does not (a send that could not be
 * taken back) keeps MPI from being finalised. */
static void abandon(mpi_coll *c) {
  int n = c->nreq;
  c->broken = true;
  for (int i = 0; i < n; i++)
    if (c->req[i] != MPI_REQUEST_NULL) MPI_Cancel(&c->req[i]);
  double t0 = MPI_Wtime();
  for (int left = n, spins = 0; left > 0 && MPI_Wtime() - t0 < 1.0; spins++) {
    left = 0;
    for (int i = 0; i < n; i++) {
      int done = 0;
      if (c->req[i] != MPI_REQUEST_NULL) MPI_Test(&c->req[i], &done, MPI_STATUS_IGNORE);
      left += c->req[i] != MPI_REQUEST_NULL;
    }
    st__shm_pause(spins, MPI_Wtime() - t0);
  }
  for (int i = 0; i < n; i++)
    if (c->req[i] != MPI_REQUEST_NULL) {
      c->requests_lost = true;
      st__mpi_mark_broken();
    }
}

/* A peer of the mask `waiting` (ranks whose part this one waits for) left
 * after finishing fewer operations than this one: its part never comes. */
static st_status check_leaves_of(mpi_coll *c, uint64_t waiting, int op) {
  receive_leaves(c);
  for (int who = 0; who < c->base.size; who++) {
    if (!(waiting >> who & 1)) continue;
    const peer_left *p = &c->peers[who];
    if (!p->gone || p->done >= c->ops) continue;
    uint64_t done = p->done;
    abandon(c);
    long long step = c->step ? (long long)*c->step : -1LL;
    if (p->why[0])
      return st_error(ST_ERR_PEER,
                      "rank %d failed: %s (it left the job after collective #%llu of this "
                      "transport; this worker was waiting for its part of %s #%llu at step %lld)",
                      who, p->why, (unsigned long long)done, g_op_names[op],
                      (unsigned long long)c->ops, step);
    return st_error(ST_ERR_PEER,
                    "rank %d left the job without an error after collective #%llu of this "
                    "transport, while this worker was waiting for its part of %s #%llu at step "
                    "%lld (the workers ran different numbers of collectives)",
                    who, (unsigned long long)done, g_op_names[op], (unsigned long long)c->ops, step);
  }
  return ST_OK;
}

/* The peers that the pending requests of slots [first, first + n) wait for. */
static uint64_t pending_peers(const mpi_coll *c, int first, int n) {
  uint64_t m = 0;
  for (int i = first; i < first + n; i++)
    if (c->req[i] != MPI_REQUEST_NULL) m |= 1ull << c->peer[i];
  return m;
}

/* The world ranks of a mask of c's ranks. */
static uint64_t to_world(const mpi_coll *c, uint64_t mask) {
  uint64_t w = 0;
  for (int j = 0; j < c->base.size; j++)
    if (mask >> j & 1) w |= 1ull << c->world_of[j];
  return w;
}

/* Tell every other process (but those cut by the test switch) that this
 * transport timed out waiting for the world ranks of `missing`. */
static void report_lost(mpi_coll *c, uint64_t missing) {
  c->lost = (st__lost_msg){c->ops, missing};
  st__mpi_lost_report(&c->lost, c->wrank, c->wsize, to_world(c, c->cut), c->lost_req);
}

/* c's rank of a world rank (-1: not in c's group). */
static int from_world(const mpi_coll *c, int world) {
  for (int j = 0; j < c->base.size; j++)
    if (c->world_of[j] == world) return j;
  return -1;
}

/* The deadline of a wait for the ranks of `waiting` passed: report the
 * missing ranks, give the peers GRACE_S to report theirs, name the lost one. */
static st_status fail_timeout(mpi_coll *c, uint64_t waiting, int op) {
  uint64_t waited = to_world(c, waiting), from = 0, missing[ST_MAX_WORKERS];
  c->broken = true;
  c->requests_lost = true;
  st__mpi_mark_broken();
  report_lost(c, waited);
  /* with two processes the one waited for is the only candidate */
  double grace = c->wsize > 2 ? GRACE_S : 0.0;
  double t0 = MPI_Wtime();
  for (int spins = 0;; spins++) {
    from = st__mpi_lost_receive(missing);
    if (!(waited & ~from) || MPI_Wtime() - t0 >= grace) break;
    st__shm_pause(spins, MPI_Wtime() - t0);
  }
  int via_w = -1, who_w = st__mpi_lost_name(waited, from, missing, c->wrank, &via_w);
  int who = from_world(c, who_w), via = via_w >= 0 ? from_world(c, via_w) : -1;
  if (who < 0) who = who_w; /* (a group transport: the lost process is not in it) */
  char how[96] = "";
  if (via >= 0)
    snprintf(how, sizeof how, "; this worker waited for rank %d, which waited for rank %d", via,
             who);
  return st_error(ST_ERR_TIMEOUT,
                  "rank %d did not join %s #%llu at step %lld within %g s "
                  "(--collective-timeout%s; the rank died, stalls, is cut off or runs another step)",
                  who, g_op_names[op], (unsigned long long)c->ops,
                  c->step ? (long long)*c->step : -1LL, c->timeout, how);
}

/* An MPI call of operation op failed with rc: the transport is broken. */
static st_status fail_mpi(mpi_coll *c, int rc, int op) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  c->broken = true;
  c->requests_lost = true;
  st__mpi_mark_broken();
  return st_error(ST_ERR_PEER, "%s #%llu at step %lld: MPI error: %s", g_op_names[op],
                  (unsigned long long)c->ops, c->step ? (long long)*c->step : -1LL, msg);
}

/* Wait for the requests of slots [first, first + n); on the deadline name the
 * missing peer (fail_timeout). */
static st_status wait_range(mpi_coll *c, int first, int n, int op) {
  double t0 = MPI_Wtime();
  int left = 0;
  for (int i = first; i < first + n; i++) left += c->req[i] != MPI_REQUEST_NULL;
  for (int spins = 0; left > 0; spins++) {
    int got = 0;
    int rc = MPI_Testsome(n, c->req + first, &got, c->done_idx, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return fail_mpi(c, rc, op);
    if (got != MPI_UNDEFINED) left -= got;
    if (left == 0) break;
    st_status s = (spins & 63) == 63 ? check_leaves_of(c, pending_peers(c, first, n), op) : ST_OK;
    if (s != ST_OK) return s;
    if (MPI_Wtime() - t0 > c->timeout) return fail_timeout(c, pending_peers(c, first, n), op);
    st__shm_pause(spins, MPI_Wtime() - t0);
  }
  return ST_OK;
}

static st_status wait_all(mpi_coll *c, int n, int op) { return wait_range(c, 0, n, op); }

static st_status reserve_tmp(mpi_coll *c, size_t floats) {
  if (floats <= c->tmp_cap) return ST_OK;
  float *t = realloc(c->tmp, floats * sizeof(float));
  if (!t) return st_error(ST_ERR_NOMEM, "MPI transport: out of memory for %zu floats", floats);
  c->tmp = t;
  c->tmp_cap = floats;
  return ST_OK;
}

static int tag_of(const mpi_coll *c, int phase) { return (int)((c->ops * 2 + (uint64_t)phase) % 32000); }

/* Post a receive of n floats from peer into buf (request slot k). */
static void post_recv(mpi_coll *c, int k, float *buf, size_t n, int peer, int tag) {
  c->peer[k] = peer;
  if (c->cut >> peer & 1) {
    memset(buf, 0, n * sizeof(float));
    return;
  }
  MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, c->comm, &c->req[k]);
}

static void post_send(mpi_coll *c, int k, const float *buf, size_t n, int peer, int tag) {
  c->peer[k] = peer;
  if (c->cut >> peer & 1) return;
  MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, c->comm, &c->req[k]);
}

bool st__collective_mpi_uses_shm(const st_collective *cc) { return ((const mpi_coll *)cc)->shm; }

void st__collective_mpi_test_cut(st_collective *cc, int peer) {
  mpi_coll *c = (mpi_coll *)cc;
  if (peer >= 0 && peer < c->base.size && peer != c->base.self) c->cut |= 1ull << peer;
}

/* One all-reduce's layout: chunk j of the buffer is [lo[j], lo[j] + len[j]),
 * cut into segments of SEG_FLOATS. */
typedef struct ar_plan {
  float *buf;  /* all_reduce: in place; reduce_scatter: the send buffer (read only) */
  float *out;  /* reduce_scatter: recv, where my chunk's sum goes; NULL: in place */
  int op;      /* OP_ALL_REDUCE or OP_REDUCE_SCATTER (for messages) */
  size_t lo[ST_MAX_WORKERS], len[ST_MAX_WORKERS];
  size_t seg;  /* floats per segment */
  int me, size, tag_rs, tag_ag;
} ar_plan;

/* Segment k of chunk j: *off (from the chunk's start) and its length (0: none). */
static size_t seg_of(const ar_plan *p, int j, size_t k, size_t *off) {
  *off = k * p->seg;
  if (*off >= p->len[j]) return 0;
  return p->len[j] - *off < p->seg ? p->len[j] - *off : p->seg;
}

/* Post segment k's reduce-scatter: my part of every peer's chunk goes to it,
 * every peer's part of my chunk comes into tmp slot k % WINDOW. */
static void post_rs(mpi_coll *c, const ar_plan *p, size_t k) {
  int first = (int)(k % WINDOW) * 2 * 2 * p->size, n = first;
  size_t off, mine = seg_of(p, p->me, k, &off);
  float *slot = c->tmp + (k % WINDOW) * (size_t)p->size * p->seg;
  for (int j = 0; j < p->size; j++) {
    if (j == p->me) continue;
    if (mine) post_recv(c, n++, slot + (size_t)j * p->seg, mine, j, p->tag_rs);
    size_t joff, jn = seg_of(p, j, k, &joff);
    if (jn) post_send(c, n++, p->buf + p->lo[j] + joff, jn, j, p->tag_rs);
  }
}

/* Segment k's all-gather: my reduced segment to every peer, theirs into the
 * buffer (my reduce-scatter send of that segment to them has completed). */
static void post_ag(mpi_coll *c, const ar_plan *p, size_t k) {
  int first = ((int)(k % WINDOW) * 2 + 1) * 2 * p->size, n = first;
  size_t off, mine = seg_of(p, p->me, k, &off);
  for (int j = 0; j < p->size; j++) {
    if (j == p->me) continue;
    if (mine) post_send(c, n++, p->buf + p->lo[p->me] + off, mine, j, p->tag_ag);
    size_t joff, jn = seg_of(p, j, k, &joff);
    if (jn) post_recv(c, n++, p->buf + p->lo[j] + joff, jn, j, p->tag_ag);
  }
}

static st_status wait_group(mpi_coll *c, const ar_plan *p, size_t k, int ag) {
  int first = ((int)(k % WINDOW) * 2 + ag) * 2 * p->size;
  return wait_range(c, first, 2 * p->size, p->op);
}

/* Sum segment k of my chunk in rank order, in place, and scale it for MEAN. */
static void reduce_segment(mpi_coll *c, const ar_plan *p, size_t k, st_reduce_op op) {
  size_t off, n = seg_of(p, p->me, k, &off);
  const float *src[ST_MAX_WORKERS];
  const float *mine = p->buf + p->lo[p->me] + off;
  float *out = p->out ? p->out + off : p->buf + p->lo[p->me] + off;
  const float *slot = c->tmp + (k % WINDOW) * (size_t)p->size * p->seg;
  for (int j = 0; j < p->size; j++) src[j] = j == p->me ? mine : slot + (size_t)j * p->seg;
  st__sum_in_rank_order(out, NULL, src, p->size, n, op);
}

/* A small all-reduce in one round: every rank sends its whole buffer to every
 * peer and sums all of them in rank order itself (the same sums, bit for bit,
 * as the two-round exchange: each element is still src[0] + src[1] + ...). */
static st_status all_reduce_one_round(mpi_coll *c, float *buf, size_t n, st_reduce_op op) {
  int me = c->base.self, size = c->base.size, k = 0, tag = tag_of(c, 0);
  st_status s = reserve_tmp(c, (size_t)size * n);
  if (s != ST_OK) return s;
  const float *src[ST_MAX_WORKERS];
  size_t piece = PIECE_FLOATS; /* fewer, larger pieces when the request slots run short */
  while ((n + piece - 1) / piece * 2 * (size_t)(size - 1) > (size_t)c->nreq) piece *= 2;
  for (int j = 0; j < size; j++) {
    src[j] = j == me ? buf : c->tmp + (size_t)j * n;
    if (j == me) continue;
    for (size_t lo = 0; lo < n; lo += piece) {
      size_t len = n - lo < piece ? n - lo : piece;
      post_recv(c, k++, c->tmp + (size_t)j * n + lo, len, j, tag);
      post_send(c, k++, buf + lo, len, j, tag);
    }
  }
  if ((s = wait_all(c, k, OP_ALL_REDUCE)) != ST_OK) return s;
  st__sum_in_rank_order(buf, NULL, src, size, n, op);
  return ST_OK;
}

/* A wait of the shared-memory all-reduce (shm.c), as wait_range's: the
 * peers that left, the deadline, the pauses. */
static st_status shm_wait(void *ctx, uint64_t missing, int spins) {
  mpi_coll *c = ctx;
  if (spins == 0) c->wait_t0 = MPI_Wtime();
  double waited = MPI_Wtime() - c->wait_t0;
  st_status s = (spins & 63) == 63 ? check_leaves_of(c, missing, OP_ALL_REDUCE) : ST_OK;
  if (s != ST_OK) return s;
  if (waited > c->timeout) return fail_timeout(c, missing, OP_ALL_REDUCE);
  st__shm_pause(spins, waited);
  return ST_OK;
}

static st_status mpi_all_reduce(st_collective *cc, int rank, float *buf, size_t n, st_reduce_op op) {
  mpi_coll *c = (mpi_coll *)cc;
  if (c->broken) return fail_broken(c, OP_ALL_REDUCE);
  c->ops++;
  int size = c->base.size;
  if (size == 1 || n == 0) return ST_OK;
  if (c->shm) {
    st_status s = st__shm_all_reduce(c->shm, buf, n, op, shm_wait, c);
    if (s != ST_OK) c->broken = true;
    return s;
  }
  if (one_round(n, size)) return all_reduce_one_round(c, buf, n, op);
  ar_plan p = {.buf = buf, .me = c->base.self, .size = size, .tag_rs = tag_of(c, 0),
               .tag_ag = tag_of(c, 1), .seg = SEG_FLOATS};
  size_t segs = 0;
  for (int j = 0; j < size; j++) {
    int start, count;
    st__split((int)n, size, j, &start, &count);
    p.lo[j] = (size_t)start;
    p.len[j] = (size_t)count;
    size_t sj = (p.len[j] + p.seg - 1) / p.seg;
    segs = sj > segs ? sj : segs;
  }
  st_status s = reserve_tmp(c, (size_t)WINDOW * (size_t)size * p.seg);
  if (s != ST_OK) return s;
  for (size_t k = 0; k + 1 < WINDOW && k < segs; k++) post_rs(c, &p, k);
  for (size_t k = 0; k < segs; k++) {
    if (k + WINDOW - 1 < segs) post_rs(c, &p, k + WINDOW - 1);
    if ((s = wait_group(c, &p, k, 0)) != ST_OK) return s;
    reduce_segment(c, &p, k, op);
    if (k >= WINDOW && (s = wait_group(c, &p, k - WINDOW, 1)) != ST_OK) return s;
    post_ag(c, &p, k);
  }
  for (size_t k = segs > WINDOW ? segs - WINDOW : 0; k < segs; k++)
    if ((s = wait_group(c, &p, k, 1)) != ST_OK) return s;
  return ST_OK;
}

static st_status mpi_broadcast(st_collective *cc, int rank, float *buf, size_t n, int root) {
  mpi_coll *c = (mpi_coll *)cc;
  if (c->broken) return fail_broken(c, OP_BROADCAST);
  c->ops++;
  int me = c->base.self, size = c->base.size, k = 0, tag = tag_of(c, 0);
  if (size == 1 || n == 0) return ST_OK;
  if (me == root) {
    for (int j = 0; j < size; j++)
      if (j != me) post_send(c, k++, buf, n, j, tag);
  } else {
    post_recv(c, k++, buf, n, root, tag);
  }
  return wait_all(c, k, OP_BROADCAST);
}

static st_status mpi_all_gather(st_collective *cc, int rank, const float *send, size_t n,
                                float *recv) {
  mpi_coll *c = (mpi_coll *)cc;
  if (c->broken) return fail_broken(c, OP_ALL_GATHER);
  c->ops++;
  int me = c->base.self, size = c->base.size, k = 0, tag = tag_of(c, 0);
  memmove(recv + (size_t)me * n, send, n * sizeof(float));
  if (size == 1 || n == 0) return ST_OK;
  for (int j = 0; j < size; j++)
    if (j != me) {
      post_recv(c, k++, recv + (size_t)j * n, n, j, tag);
      post_send(c, k++, recv + (size_t)me * n, n, j, tag);
    }
  return wait_all(c, k, OP_ALL_GATHER);
}

static st_status mpi_reduce_scatter(st_collective *cc, int rank, const float *send, float *recv,
                                    size_t n, st_reduce_op op) {
  mpi_coll *c = (mpi_coll *)cc;
  if (c->broken) return fail_broken(c, OP_REDUCE_SCATTER);
  c->ops++;
  int size = c->base.size;
  if (size == 1 || n == 0) {
    memmove(recv, send, n * sizeof(float));
    return ST_OK;
  }
  /* buf is only read (sent, and my chunk summed on the stack); recv may be
   * my chunk of it */
  ar_plan p = {.buf = (float *)send, .out = recv, .op = OP_REDUCE_SCATTER, .me = c->base.self,
               .size = size, .tag_rs = tag_of(c, 0), .tag_ag = tag_of(c, 1), .seg = SEG_FLOATS};
  for (int j = 0; j < size; j++) p.lo[j] = (size_t)j * n, p.len[j] = n;
  size_t segs = (n + p.seg - 1) / p.seg;
  st_status s = reserve_tmp(c, (size_t)WINDOW * (size_t)size * p.seg);
  if (s != ST_OK) return s;
  for (size_t k = 0; k + 1 < WINDOW && k < segs; k++) post_rs(c, &p, k);
  for (size_t k = 0; k < segs; k++) {
    if (k + WINDOW - 1 < segs) post_rs(c, &p, k + WINDOW - 1);
    if ((s = wait_group(c, &p, k, 0)) != ST_OK) return s;
    reduce_segment(c, &p, k, op);
  }
  return ST_OK;
}

static st_status mpi_barrier(st_collective *cc, int rank) {
  mpi_coll *c = (mpi_coll *)cc;
  float one = 1.0f, all[ST_MAX_WORKERS];
  if (c->broken) return fail_broken(c, OP_BARRIER);
  return mpi_all_gather(cc, rank, &one, 1, all);
}

void st__collective_mpi_leave(st_collective *cc, const char *why) {
  mpi_coll *c = (mpi_coll *)cc;
  int me = c->base.self, size = c->base.size, k = 0;
  if (c->left || c->requests_lost || st__mpi_broken() || size == 1) return;
  c->left = true;
  c->leave.done = c->broken ? c->ops - 1 : c->ops;
  snprintf(c->leave.why, sizeof c->leave.why, "%s", why ? why : "");
  int len = (int)(offsetof(leave_msg, why) + strlen(c->leave.why) + 1);
  for (int j = 0; j < size; j++)
    if (j != me) MPI_Isend(&c->leave, len, MPI_BYTE, j, TAG_LEAVE, c->comm, &c->req[k++]);
  /* small messages: sent at once (eager); bounded in any case */
  double t0 = MPI_Wtime();
  int all = 0;
  while (MPI_Testall(k, c->req, &all, MPI_STATUSES_IGNORE) == MPI_SUCCESS && !all &&
         MPI_Wtime() - t0 < 2.0)
    st__shm_pause(20000, 1.0); /* a sleep: no hurry here */
  if (!all) abandon(c);
}

/* A transport whose requests are still pending keeps its communicator and,
 * when a LEAVE or LOST message could not be sent, its memory (MPI may still
 * read it). */
static void mpi_destroy(st_collective *cc) {
  mpi_coll *c = (mpi_coll *)cc;
  if (!c->requests_lost) {
    receive_leaves(c);
    MPI_Comm_free(&c->comm);
  }
  bool keep = c->left && c->requests_lost;
  for (int j = 0; j < c->wsize; j++) {
    int done = 1;
    if (c->lost_req[j] != MPI_REQUEST_NULL) MPI_Test(&c->lost_req[j], &done, MPI_STATUS_IGNORE);
    keep = keep || !done;
  }
  st__shm_close(c->shm);
  free(c->tmp);
  free(c->req);
  free(c->peer);
  free(c->done_idx);
  free(c->peers);
  free(c->world_of);
  if (!keep) free(c->lost_req), free(c);
}

/* ---- point-to-point (tag TAG_P2P: in send order between a pair) ---- */

static int free_slot(const mpi_coll *c) {
  for (int i = 0; i < c->nreq; i++)
    if (c->req[i] == MPI_REQUEST_NULL) return i;
  return -1;
}

static st_status mpi_send(st_collective *cc, const float *buf, size_t n, int peer, int *handle) {
  mpi_coll *c = (mpi_coll *)cc;
  *handle = -1;
  if (c->broken) return fail_broken(c, OP_SEND);
  if (n > (size_t)INT32_MAX)
    return st_error(ST_ERR_INVALID, "send: %zu floats in one message (at most %d)", n, INT32_MAX);
  int k = free_slot(c);
  if (k < 0)
    return st_error(ST_ERR_INTERNAL, "send: more than %d messages pending", c->nreq);
  post_send(c, k, buf, n, peer, TAG_P2P);
  c->ops++;
  *handle = k;
  return ST_OK;
}

static st_status mpi_wait(st_collective *cc, int handle) {
  mpi_coll *c = (mpi_coll *)cc;
  if (handle < 0 || handle >= c->nreq || c->req[handle] == MPI_REQUEST_NULL) return ST_OK;
  /* a send abandon() could not take back: waiting again would only time out */
  if (c->broken) return fail_broken(c, OP_SEND);
  st_status s = wait_range(c, handle, 1, OP_SEND);
  if (s != ST_OK) abandon(c);
  return s;
}

/* Poll for peer's next point-to-point message against the deadline (as
 * wait_range does) and take it off the queue: *msg, its size in *bytes. */
static st_status probe_from(mpi_coll *c, int peer, MPI_Message *msg, MPI_Count *bytes) {
  double t0 = MPI_Wtime();
  for (int spins = 0;; spins++) {
    int flag = 0, rc;
    MPI_Status st;
    if ((rc = MPI_Improbe(peer, TAG_P2P, c->comm, &flag, msg, &st)) != MPI_SUCCESS)
      return fail_mpi(c, rc, OP_RECV);
    if (flag) return MPI_Get_elements_x(&st, MPI_BYTE, bytes), ST_OK;
    st_status s = (spins & 63) == 63 ? check_leaves_of(c, 1ull << peer, OP_RECV) : ST_OK;
    if (s != ST_OK) return s;
    if (MPI_Wtime() - t0 > c->timeout) return fail_timeout(c, 1ull << peer, OP_RECV);
    st__shm_pause(spins, MPI_Wtime() - t0);
  }
}

/* A message of `bytes` from peer where n floats were expected: drained into
 * a scratch buffer of its own size (OpenMPI's shared-memory single copy
 * writes a whole message even into a smaller receive), so that the sender's
 * wait completes; one over DRAIN_MAX stays undrained. The transport is broken. */
enum { DRAIN_MAX = 256 << 20 };
static st_status mismatched(mpi_coll *c, int k, MPI_Message *msg, MPI_Count bytes, size_t n,
                            int peer) {
  void *scratch = bytes <= DRAIN_MAX ? malloc(bytes ? (size_t)bytes : 1) : NULL;
  if (scratch && MPI_Imrecv(scratch, (int)bytes, MPI_BYTE, msg, &c->req[k]) == MPI_SUCCESS) {
    c->peer[k] = peer;
    double t0 = MPI_Wtime();
    for (int spins = 0, done = 0; !done && MPI_Wtime() - t0 < c->timeout; spins++)
      if (MPI_Test(&c->req[k], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
      else if (!done) st__shm_pause(spins, MPI_Wtime() - t0);
  }
  abandon(c); /* broken; a drain that did not finish keeps MPI from finalising */
  if (c->req[k] == MPI_REQUEST_NULL) free(scratch); /* else MPI may still write it */
  return st_error(ST_ERR_INVALID,
                  "receive #%llu at step %lld: rank %d sent %lld bytes (%lld floats), this rank "
                  "expected %zu floats (%zu bytes): the ranks sized the message differently "
                  "(their settings or data differ); nothing was written to the buffer",
                  (unsigned long long)c->ops, c->step ? (long long)*c->step : -1LL, peer,
                  (long long)bytes, (long long)(bytes / 4), n, n * sizeof(float));
}

/* Receive n floats from peer into buf: the message is probed first and its
 * size compared with n before anything is written (a peer that sized it from
 * other settings is an error naming both counts, never a write past buf). */
static st_status mpi_recv(st_collective *cc, float *buf, size_t n, int peer) {
  mpi_coll *c = (mpi_coll *)cc;
  if (c->broken) return fail_broken(c, OP_RECV);
  if (n > (size_t)INT32_MAX)
    return st_error(ST_ERR_INVALID, "receive: %zu floats in one message (at most %d)", n,
                    INT32_MAX);
  int k = free_slot(c);
  if (k < 0)
    return st_error(ST_ERR_INTERNAL, "receive: more than %d messages pending", c->nreq);
  c->ops++;
  if (c->cut >> peer & 1) return memset(buf, 0, n * sizeof(float)), ST_OK;
  MPI_Message msg;
  MPI_Count bytes = 0;
  st_status s = probe_from(c, peer, &msg, &bytes);
  if (s == ST_OK && bytes != (MPI_Count)(n * sizeof(float)))
    return mismatched(c, k, &msg, bytes, n, peer);
  if (s == ST_OK) {
    c->peer[k] = peer;
    int rc = MPI_Imrecv(buf, (int)n, MPI_FLOAT, &msg, &c->req[k]);
    s = rc == MPI_SUCCESS ? wait_range(c, k, 1, OP_RECV) : fail_mpi(c, rc, OP_RECV);
  }
  if (s != ST_OK) abandon(c);
  return s;
}

static const st_collective_vtable mpi_vtable = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .barrier = mpi_barrier,
    .destroy = mpi_destroy,
    .send = mpi_send,
    .recv = mpi_recv,
    .wait = mpi_wait,
};

static st_status create_on(double timeout_s, const int64_t *step, bool split, int color,
                           st_collective **out);

st_status st__collective_mpi_create(double timeout_s, const int64_t *step, st_collective **out) {
  return create_on(timeout_s, step, false, 0, out);
}

st_status st__collective_mpi_create_group(int color, double timeout_s, const int64_t *step,
                                          st_collective **out) {
  return create_on(timeout_s, step, true, color, out);
}

/* The shared-memory segment's opening collectives (shm.h) over MPI, and
 * whether every process of comm runs on this machine (MPI's view of nodes). */
static int shm_all_min(void *ctx, int v) {
  int all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, (MPI_Comm)ctx);
  return all;
}
static void shm_bcast(void *ctx, char *buf, size_t n) { MPI_Bcast(buf, (int)n, MPI_CHAR, 0, (MPI_Comm)ctx); }
static bool all_on_one_machine(MPI_Comm comm, int size) {
  MPI_Comm node;
  int node_size = 0;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return false;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  return node_size == size;
}

/* A transport on a duplicate of the world communicator, or (split) on the
 * processes of this color. */
static st_status create_on(double timeout_s, const int64_t *step, bool split, int color,
                           st_collective **out) {
  *out = NULL;
  int rank = 0, size = 1;
  st_status s = st__mpi_world(&rank, &size);
  if (s != ST_OK) return s;
  if (size > ST_MAX_WORKERS) /* the per-process tables above are sized by it */
    return st_error(ST_ERR_INVALID, "MPI transport: %d processes given, at most %d (ST_MAX_WORKERS)",
                    size, ST_MAX_WORKERS);
  if (!(timeout_s > 0)) return st_error(ST_ERR_INVALID, "collective timeout %g s (must be > 0)", timeout_s);
  mpi_coll *c = calloc(1, sizeof *c);
  if (c) {
    c->nreq = REQ_SLOTS(size);
    c->req = malloc((size_t)c->nreq * sizeof *c->req);
    c->peer = calloc((size_t)c->nreq, sizeof *c->peer);
    c->done_idx = malloc((size_t)c->nreq * sizeof *c->done_idx);
    c->peers = calloc((size_t)size, sizeof *c->peers);
    c->lost_req = malloc((size_t)size * sizeof *c->lost_req);
    c->world_of = malloc((size_t)size * sizeof *c->world_of);
  }
  if (!c || !c->req || !c->peer || !c->done_idx || !c->peers || !c->lost_req || !c->world_of) {
    if (c)
      free(c->req), free(c->peer), free(c->done_idx), free(c->peers), free(c->lost_req),
          free(c->world_of);
    free(c);
    return st_error(ST_ERR_NOMEM, "MPI transport: out of memory");
  }
  for (int i = 0; i < c->nreq; i++) c->req[i] = MPI_REQUEST_NULL;
  for (int j = 0; j < size; j++) c->lost_req[j] = MPI_REQUEST_NULL;
  int made = split ? MPI_Comm_split(MPI_COMM_WORLD, color, rank, &c->comm)
                   : MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
  if (made != MPI_SUCCESS) {
    free(c->req), free(c->peer), free(c->done_idx), free(c->peers), free(c->lost_req),
        free(c->world_of), free(c);
    return st_error(ST_ERR_PEER, "MPI transport: MPI_Comm_dup failed");
  }
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  if (split) {
    MPI_Comm_size(c->comm, &size);
    MPI_Comm_rank(c->comm, &rank);
  }
  for (int j = 0; j < size; j++) c->world_of[j] = j;
  if (split) { /* the world rank of each rank of the group */
    MPI_Group world, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Comm_group(c->comm, &group);
    int *mine = malloc((size_t)size * sizeof *mine);
    if (mine) {
      for (int j = 0; j < size; j++) mine[j] = j;
      MPI_Group_translate_ranks(group, size, mine, world, c->world_of);
      free(mine);
    }
    MPI_Group_free(&group);
    MPI_Group_free(&world);
  }
  st__shm_setup setup = {c->comm, shm_all_min, shm_bcast};
  c->shm = st__shm_open(&setup, rank, size, all_on_one_machine(c->comm, size));
  c->base = (st_collective){&mpi_vtable, size, ST_CROSS_ALL_REDUCE, rank};
  st__mpi_world(&c->wrank, &c->wsize);
  c->timeout = timeout_s;
  c->step = step;
  *out = &c->base;
  return ST_OK;
}
