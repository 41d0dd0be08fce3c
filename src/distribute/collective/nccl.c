/* The NCCL collective: the st_collective table over the CUDA module's NCCL
 * (backend/cuda_module.h, st__cuda_nccl), for buffers that are device
 * pointers of the ranks' "cuda" contexts. Two kinds (collective.h):
 *  - st__collective_nccl_create: `size` replica threads of this process, one
 *    rank each on its own physical GPU (ncclCommInitAll);
 *  - st__collective_nccl_create_process: one rank per process, its id sent
 *    over an existing process transport (ncclGetUniqueId on rank 0, then
 *    ncclCommInitRank on every process: multi_worker_mirrored over MPI/Gloo).
 *
 * Meeting: each rank's thread calls the operation of its own rank (no group:
 * NCCL matches the ranks' calls on the devices); the call enqueues on the
 * rank's context stream and returns, so the result is complete in stream
 * order (later kernels of the context, to_host and synchronize see it);
 * barrier is a one-float all-reduce followed by a wait on the stream. MEAN is
 * the sum then a scale by 1/size. Order: NCCL's own (ring/tree), fixed for a
 * fixed communicator, size and NCCL version, so runs repeat bit for bit, but
 * not the CPU transports' rank order: bytes may differ from the CPU's (the
 * emulated NCCL of tests/cuda_emu sums in rank order, so there they match).
 * cross_device_ops is recorded but NCCL picks its own algorithm.
 *
 * Leaving (in-process kind): st__collective_abort marks the set aborted;
 * each rank's communicator is aborted (ncclCommAbort, which ends device work
 * waiting for a gone peer) by the abort itself when the rank is idle, else by
 * the rank's own thread when its call returns; every later operation fails
 * with ST_ERR_PEER. st__collective_reset builds a fresh communicator set.
 * Per-rank state words make the two never touch one communicator at once.
 * Create/destroy/reset: one thread; every op: each rank from its own thread. */
#define _GNU_SOURCE
#include "distribute/collective/collective.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda.h"

enum { IDLE, BUSY, ABORTING, DEAD }; /* a rank's state word */

typedef struct nccl_coll {
  st_collective base;
  const st__cuda_nccl *api;
  int nlocal;               /* ranks driven by this process: size, or 1 */
  st_backend_ctx **ctxs;    /* [nlocal], borrowed */
  st__nccl_comm **comms;    /* [nlocal] */
  float **scratch;          /* [nlocal] one device float each (barrier) */
  atomic_int *state;        /* [nlocal] */
  atomic_int aborted;
  char broken[512];         /* why the set is unusable ("" when it is) */
} nccl_coll;

static st_status peer_left(const char *what, int rank) {
  return st_error(ST_ERR_PEER, "collective nccl %s: rank %d: another replica left the group "
                  "(its step failed or returned early)", what, rank);
}

/* Rank i's own thread ends its communicator (an abort came while it was
 * BUSY, so the aborting thread left it alone). */
static st_status self_abort(nccl_coll *t, int i, const char *what) {
  t->api->abort(t->comms[i]);
  t->comms[i] = NULL;
  atomic_store(&t->state[i], DEAD);
  return peer_left(what, t->nlocal == t->base.size ? i : t->base.self);
}

/* The local index of `rank`, marked BUSY; -1 and *s on failure. */
static int enter(nccl_coll *t, int rank, const char *what, st_status *s) {
  int i = t->nlocal == t->base.size ? rank : (rank == t->base.self ? 0 : -1);
  if (i < 0 || i >= t->nlocal) {
    *s = st_error(ST_ERR_INVALID, "collective nccl %s: rank %d is not driven by this %s",
                  what, rank, t->nlocal == t->base.size ? "group" : "process");
    return -1;
  }
  if (t->broken[0]) {
    *s = st_error(ST_ERR_PEER, "collective nccl %s: rank %d: %s", what, rank, t->broken);
    return -1;
  }
  int expect = IDLE;
  if (!atomic_compare_exchange_strong(&t->state[i], &expect, BUSY)) {
    *s = peer_left(what, rank);
    return -1;
  }
  if (atomic_load(&t->aborted)) { /* the abort's scan may have passed this rank */
    *s = self_abort(t, i, what);
    return -1;
  }
  return i;
}

/* Back to IDLE; when an abort came meanwhile, this thread aborts its rank.
 * An operation that failed because the abort ended a peer's communicator
 * (NCCL's remote error) before the abort's scan reached this rank is a peer
 * that left too (the scan ends this rank's communicator once it is IDLE). */
static st_status leave(nccl_coll *t, int i, const char *what, st_status s) {
  int expect = BUSY;
  if (atomic_compare_exchange_strong(&t->state[i], &expect, IDLE))
    return s != ST_OK && atomic_load(&t->aborted)
               ? peer_left(what, t->nlocal == t->base.size ? i : t->base.self)
               : s;
  return self_abort(t, i, what);
}

static st_status nc_all_reduce(st_collective *c, int rank, float *buf, size_t n,
                               st_reduce_op op) {
  nccl_coll *t = (nccl_coll *)c;
  if ((unsigned)op >= ST_REDUCE_COUNT)
    return st_error(ST_ERR_INVALID, "collective nccl all_reduce: reduce op %d out of range", op);
  st_status s = ST_OK;
  int i = enter(t, rank, "all_reduce", &s);
  if (i < 0) return s;
  if (n) s = t->api->all_reduce(t->comms[i], t->ctxs[i], buf, n, op == ST_REDUCE_MEAN);
  return leave(t, i, "all_reduce", s);
}

static st_status nc_broadcast(st_collective *c, int rank, float *buf, size_t n, int root) {
  nccl_coll *t = (nccl_coll *)c;
  if (root < 0 || root >= c->size)
    return st_error(ST_ERR_INVALID, "collective nccl broadcast: root %d out of range [0, %d)",
                    root, c->size);
  st_status s = ST_OK;
  int i = enter(t, rank, "broadcast", &s);
  if (i < 0) return s;
  if (n) s = t->api->broadcast(t->comms[i], t->ctxs[i], buf, n, root);
  return leave(t, i, "broadcast", s);
}

static st_status nc_all_gather(st_collective *c, int rank, const float *send, size_t n,
                               float *recv) {
  nccl_coll *t = (nccl_coll *)c;
  st_status s = ST_OK;
  int i = enter(t, rank, "all_gather", &s);
  if (i < 0) return s;
  if (n) s = t->api->all_gather(t->comms[i], t->ctxs[i], send, n, recv);
  return leave(t, i, "all_gather", s);
}

static st_status nc_reduce_scatter(st_collective *c, int rank, const float *send, float *recv,
                                   size_t n, st_reduce_op op) {
  nccl_coll *t = (nccl_coll *)c;
  if ((unsigned)op >= ST_REDUCE_COUNT)
    return st_error(ST_ERR_INVALID, "collective nccl reduce_scatter: reduce op %d out of "
                    "range", op);
  st_status s = ST_OK;
  int i = enter(t, rank, "reduce_scatter", &s);
  if (i < 0) return s;
  if (n) s = t->api->reduce_scatter(t->comms[i], t->ctxs[i], send, recv, n,
                                    op == ST_REDUCE_MEAN);
  return leave(t, i, "reduce_scatter", s);
}

/* A one-float all-reduce, then a wait for the stream: returns once every
 * rank has reached the barrier (and this rank's earlier work is done). */
static st_status nc_barrier(st_collective *c, int rank) {
  nccl_coll *t = (nccl_coll *)c;
  st_status s = ST_OK;
  int i = enter(t, rank, "barrier", &s);
  if (i < 0) return s;
  s = t->api->all_reduce(t->comms[i], t->ctxs[i], t->scratch[i], 1, false);
  if (s == ST_OK) st__be_synchronize(t->ctxs[i]);
  return leave(t, i, "barrier", s);
}

/* Any thread (collective.h): see the file comment. */
static void nc_abort(st_collective *c) {
  nccl_coll *t = (nccl_coll *)c;
  atomic_store(&t->aborted, 1);
  for (int i = 0; i < t->nlocal; i++) {
    for (;;) { /* IDLE: end it here; BUSY: leave it to its thread */
      int expect = IDLE;
      if (atomic_compare_exchange_strong(&t->state[i], &expect, DEAD)) {
        t->api->abort(t->comms[i]);
        t->comms[i] = NULL;
        break;
      }
      if (expect != BUSY || atomic_compare_exchange_strong(&t->state[i], &expect, ABORTING))
        break;
    }
  }
}

/* New communicators for every local rank (ncclCommInitAll). */
static st_status init_comms(nccl_coll *t) {
  st_status s = t->api->init_all(t->nlocal, t->ctxs, t->comms);
  for (int i = 0; i < t->nlocal; i++) atomic_store(&t->state[i], s == ST_OK ? IDLE : DEAD);
  if (s != ST_OK) snprintf(t->broken, sizeof t->broken, "%s", st_last_error());
  else t->broken[0] = '\0';
  return s;
}

/* Once no rank is inside an operation. */
static void nc_reset(st_collective *c) {
  nccl_coll *t = (nccl_coll *)c;
  if (!atomic_load(&t->aborted)) return;
  for (int i = 0; i < t->nlocal; i++) {
    if (t->comms[i]) t->api->abort(t->comms[i]);
    t->comms[i] = NULL;
  }
  atomic_store(&t->aborted, 0);
  if (init_comms(t) != ST_OK)
    st_log(ST_LOG_ERROR, "collective nccl: reset failed: %s", t->broken);
}

/* Waits for each rank's work, then frees its communicator. In-process ranks
 * use ncclCommAbort (local, no meeting: one thread frees them all, and
 * ncclCommDestroy's finalize could wait for ranks this thread drives); a
 * process's rank uses ncclCommDestroy. */
static void nc_destroy(st_collective *c) {
  nccl_coll *t = (nccl_coll *)c;
  for (int i = 0; t->comms && t->ctxs && i < t->nlocal; i++) {
    if (t->ctxs[i]) st__be_synchronize(t->ctxs[i]);
    if (t->scratch && t->scratch[i]) t->ctxs[i]->be->free(t->ctxs[i], t->scratch[i]);
    if (!t->comms[i]) continue;
    if (t->nlocal == t->base.size && t->base.size > 1) t->api->abort(t->comms[i]);
    else t->api->destroy(t->comms[i]);
  }
  st_free(t->comms);
  st_free(t->scratch);
  st_free(t->ctxs);
  st_free((void *)t->state);
  st_free(t);
}

static const st_collective_vtable k_nccl_vt = {
    .name = "nccl",
    .all_reduce = nc_all_reduce,
    .broadcast = nc_broadcast,
    .all_gather = nc_all_gather,
    .reduce_scatter = nc_reduce_scatter,
    .barrier = nc_barrier,
    .abort = nc_abort,
    .reset = nc_reset,
    .destroy = nc_destroy,
};

/* The process kind: no abort/reset (collective.h: in-process transports only). */
static const st_collective_vtable k_nccl_process_vt = {
    .name = "nccl",
    .all_reduce = nc_all_reduce,
    .broadcast = nc_broadcast,
    .all_gather = nc_all_gather,
    .reduce_scatter = nc_reduce_scatter,
    .barrier = nc_barrier,
    .destroy = nc_destroy,
};

/* The module's NCCL table, or ST_ERR_NOT_BUILT naming what is missing. */
static st_status nccl_api(const st__cuda_nccl **api) {
  const st__cuda_module *m = NULL;
  st_status s = st__cuda_load(&m);
  if (s != ST_OK) return st_error_prefix(s, "collective nccl: ");
  if (!m->nccl)
    return st_error(ST_ERR_NOT_BUILT, "collective nccl: the CUDA module has no NCCL table");
  int version = 0;
  s = m->nccl->version(&version);
  if (s != ST_OK) return st_error_prefix(s, "collective nccl: ");
  *api = m->nccl;
  return ST_OK;
}

/* A transport for nlocal local ranks (contexts copied), with their scratch
 * floats; comms still NULL. */
static st_status alloc_coll(const st__cuda_nccl *api, int size, int nlocal,
                            st_backend_ctx *const *ctxs, st_cross_device_ops algo,
                            nccl_coll **out) {
  nccl_coll *t = st_calloc(1, sizeof *t);
  if (!t) return ST_ERR_NOMEM;
  t->base = (st_collective){.vt = &k_nccl_vt, .size = size, .algo = algo};
  t->api = api;
  t->nlocal = nlocal;
  t->ctxs = st_calloc((size_t)nlocal, sizeof *t->ctxs);
  t->comms = st_calloc((size_t)nlocal, sizeof *t->comms);
  t->scratch = st_calloc((size_t)nlocal, sizeof *t->scratch);
  t->state = st_calloc((size_t)nlocal, sizeof *t->state);
  *out = t;
  if (!t->ctxs || !t->comms || !t->scratch || !t->state) return ST_ERR_NOMEM;
  for (int i = 0; i < nlocal; i++) {
    t->ctxs[i] = ctxs[i];
    atomic_init(&t->state[i], DEAD);
    if (!ctxs[i] || !ctxs[i]->be || strcmp(ctxs[i]->be->name, "cuda") != 0)
      return st_error(ST_ERR_INVALID, "collective nccl: rank %d's context is not a cuda "
                      "context (%s)", i, ctxs[i] && ctxs[i]->be ? ctxs[i]->be->name : "NULL");
    if (!(t->scratch[i] = ctxs[i]->be->alloc(ctxs[i], sizeof(float)))) return ST_ERR_NOMEM;
    ctxs[i]->be->fill(ctxs[i], 1, 0.0f, t->scratch[i]);
  }
  return ST_OK;
}

st_status st__collective_nccl_create(int size, st_backend_ctx *const *ctxs,
                                     st_cross_device_ops algo, st_collective **out) {
  *out = NULL;
  if (size < 1 || !ctxs)
    return st_error(ST_ERR_INVALID, "collective nccl: size %d must be >= 1 with a context "
                    "per rank", size);
  if ((unsigned)algo >= ST_CROSS_COUNT)
    return st_error(ST_ERR_INVALID, "collective nccl: cross_device_ops %d out of range",
                    (int)algo);
  const st__cuda_nccl *api = NULL;
  st_status s = nccl_api(&api);
  if (s != ST_OK) return s;
  nccl_coll *t = NULL;
  s = alloc_coll(api, size, size, ctxs, algo, &t);
  if (s == ST_OK) s = init_comms(t);
  if (s != ST_OK) {
    if (t) nc_destroy(&t->base);
    return s == ST_ERR_NOMEM ? st_error(s, "collective nccl: out of memory") : s;
  }
  *out = &t->base;
  return ST_OK;
}

/* A 24-bit hash of this machine's name (exact in a float). */
static float host_hash(void) {
  char name[256] = "";
  gethostname(name, sizeof name - 1);
  uint32_t h = 2166136261u;
  for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
  return (float)(h & 0xffffffu);
}

/* Every process agrees (over net) that NCCL can run: loaded everywhere, and
 * no two processes of one machine on one GPU. The same verdict on all. */
static st_status agree_usable(st_collective *net, bool loaded, int device) {
  int p = net->size;
  float mine[3] = {loaded ? 1.0f : 0.0f, host_hash(), (float)device};
  float *all = st_calloc((size_t)p * 3, sizeof *all);
  if (!all) return st_error(ST_ERR_NOMEM, "collective nccl: out of memory");
  st_status s = net->vt->all_gather(net, net->self, mine, 3, all);
  for (int i = 0; s == ST_OK && i < p; i++) {
    if (all[3 * i] == 0.0f)
      s = st_error(ST_ERR_NOT_BUILT, "collective nccl: process %d cannot load NCCL%s", i,
                   i == net->self ? "" : " (its own log says why)");
    for (int j = 0; s == ST_OK && j < i; j++)
      if (all[3 * i + 1] == all[3 * j + 1] && all[3 * i + 2] == all[3 * j + 2])
        s = st_error(ST_ERR_INVALID, "collective nccl: processes %d and %d are both on "
                     "physical gpu:%d of one machine; NCCL needs one GPU per rank "
                     "('Duplicate GPU'): use the process transport", j, i, (int)all[3 * i + 2]);
  }
  st_free(all);
  return s;
}

/* Rank 0's ncclUniqueId to every process through net (as floats: bytes are
 * copied, never computed on); the last float says whether rank 0 made one. */
static st_status share_id(st_collective *net, const st__cuda_nccl *api,
                          unsigned char id[ST__NCCL_ID_BYTES]) {
  enum { WORDS = ST__NCCL_ID_BYTES / sizeof(float) };
  float msg[WORDS + 1];
  memset(msg, 0, sizeof msg);
  st_status made = net->self == 0 ? api->unique_id(id) : ST_OK;
  if (net->self == 0 && made == ST_OK) {
    memcpy(msg, id, ST__NCCL_ID_BYTES);
    msg[WORDS] = 1.0f;
  }
  st_status s = net->vt->broadcast(net, net->self, msg, WORDS + 1, 0);
  if (s != ST_OK) return s;
  if (made != ST_OK) return made;
  if (msg[WORDS] != 1.0f)
    return st_error(ST_ERR_PEER, "collective nccl: rank 0 could not make an NCCL id");
  memcpy(id, msg, ST__NCCL_ID_BYTES);
  return ST_OK;
}

st_status st__collective_nccl_create_process(st_collective *net, st_backend_ctx *ctx,
                                             st_collective **out) {
  *out = NULL;
  if (!net || !ctx)
    return st_error(ST_ERR_INVALID, "collective nccl: a process transport and a context "
                    "are needed");
  const st__cuda_nccl *api = NULL;
  st_status ls = nccl_api(&api);
  char why[512];
  snprintf(why, sizeof why, "%s", ls == ST_OK ? "" : st_last_error());
  int device = api ? api->device_of(ctx) : -1;
  st_status s = agree_usable(net, ls == ST_OK, device);
  if (ls != ST_OK) return st_error(ls, "%s", why);
  if (s != ST_OK) return s;
  nccl_coll *t = NULL;
  unsigned char id[ST__NCCL_ID_BYTES];
  s = alloc_coll(api, net->size, 1, &ctx, ST_CROSS_ALL_REDUCE, &t);
  if (t) t->base.vt = &k_nccl_process_vt, t->base.self = net->self;
  if (s == ST_OK) s = share_id(net, api, id);
  if (s == ST_OK) s = api->init_rank(net->size, id, net->self, ctx, &t->comms[0]);
  if (s != ST_OK) {
    if (t) nc_destroy(&t->base);
    return s == ST_ERR_NOMEM ? st_error(s, "collective nccl: out of memory") : s;
  }
  atomic_store(&t->state[0], IDLE);
  *out = &t->base;
  return ST_OK;
}
