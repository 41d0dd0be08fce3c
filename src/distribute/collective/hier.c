/* The hierarchical transport: `local` replica threads in each process of an
 * MPI job. An all-reduce sums over the local replicas first (threads.c,
 * shared memory), then local replica 0 alone all-reduces that sum across the
 * processes (the process transport), then broadcasts it to the local
 * replicas. Every process thus sends one buffer per bucket, whatever its
 * number of replicas. Element order: ((local sum of process 0) + (local sum
 * of process 1)) + ..., the same on every rank and from run to run.
 *
 * A failure of the process transport on local replica 0 is published before
 * the local broadcast, which every local replica enters anyway, so all of
 * them return the error instead of waiting for a broadcast that never comes.
 * Ranks passed to the operations are local replica indices. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "distribute/collective/collective.h"

typedef struct hier {
  st_collective base;
  st_collective *loc; /* owned */
  st_collective *net; /* borrowed */
  _Atomic st_status net_status; /* first failure of net, seen by every replica */
} hier;

/* The process-transport step runs only while it has not failed; a failure is
 * kept for every local replica. */
static bool net_ok(hier *h) { return atomic_load(&h->net_status) == ST_OK; }
static void net_done(hier *h, st_status s) {
  if (s != ST_OK) atomic_store(&h->net_status, s);
}

static st_status after_local_broadcast(hier *h, st_status s) {
  st_status n = atomic_load(&h->net_status);
  return n != ST_OK ? n : s;
}

static st_status h_all_reduce(st_collective *c, int rank, float *buf, size_t n, st_reduce_op op) {
  hier *h = (hier *)c;
  st_status s = h->loc->vt->all_reduce(h->loc, rank, buf, n, ST_REDUCE_SUM);
  if (s != ST_OK) return s;
  if (rank == 0) {
    if (net_ok(h)) net_done(h, h->net->vt->all_reduce(h->net, h->net->self, buf, n, ST_REDUCE_SUM));
    if (op == ST_REDUCE_MEAN) {
      float f = 1.0f / (float)(h->base.size * h->net->size);
      for (size_t e = 0; e < n; e++) buf[e] *= f;
    }
  }
  return after_local_broadcast(h, h->loc->vt->broadcast(h->loc, rank, buf, n, 0));
}

static st_status h_broadcast(st_collective *c, int rank, float *buf, size_t n, int root) {
  hier *h = (hier *)c;
  if (rank == root && net_ok(h)) net_done(h, h->net->vt->broadcast(h->net, h->net->self, buf, n, 0));
  return after_local_broadcast(h, h->loc->vt->broadcast(h->loc, rank, buf, n, root));
}

/* recv[size * n], size = local replicas of every process, process-major. */
static st_status h_all_gather(st_collective *c, int rank, const float *send, size_t n,
                              float *recv) {
  hier *h = (hier *)c;
  int L = h->base.size;
  size_t mine = (size_t)h->net->self * (size_t)L * n;
  st_status s = h->loc->vt->all_gather(h->loc, rank, send, n, recv + mine);
  if (s != ST_OK) return s;
  if (rank == 0 && net_ok(h))
    net_done(h, h->net->vt->all_gather(h->net, h->net->self, recv + mine, (size_t)L * n, recv));
  s = h->loc->vt->broadcast(h->loc, rank, recv, (size_t)L * n * (size_t)h->net->size, 0);
  return after_local_broadcast(h, s);
}

/* recv[n] on global rank (process p, local l) = p*L + l: the reduction over
 * every replica of every process of send[(p*L + l)*n, +n), summed as
 * h_all_reduce sums (the local replicas in order, then the processes in
 * order: the same bits). One local replica: the process transport's own
 * reduce-scatter, without a copy. */
static st_status h_reduce_scatter(st_collective *c, int rank, const float *send, float *recv,
                                  size_t n, st_reduce_op op) {
  hier *h = (hier *)c;
  int L = h->base.size, self = h->net->self;
  float f = 1.0f / (float)(L * h->net->size);
  if (L == 1) {
    if (net_ok(h))
      net_done(h, h->net->vt->reduce_scatter(h->net, self, send, recv, n, ST_REDUCE_SUM));
    st_status s = atomic_load(&h->net_status);
    if (s == ST_OK && op == ST_REDUCE_MEAN)
      for (size_t e = 0; e < n; e++) recv[e] *= f;
    return s;
  }
  size_t total = n * (size_t)L * (size_t)h->net->size, part = n * (size_t)L;
  float *tmp = malloc((total ? total : 1) * sizeof(float));
  st_status s = tmp ? ST_OK : st_error(ST_ERR_NOMEM, "hierarchical reduce-scatter: out of memory");
  if (tmp) memcpy(tmp, send, total * sizeof(float));
  /* every replica takes part, even without scratch memory */
  st_status r = h->loc->vt->all_reduce(h->loc, rank, tmp ? tmp : recv, tmp ? total : 0,
                                       ST_REDUCE_SUM);
  if (r == ST_OK && rank == 0 && tmp && net_ok(h))
    net_done(h, h->net->vt->reduce_scatter(h->net, self, tmp, tmp + (size_t)self * part, part,
                                           ST_REDUCE_SUM));
  if (r == ST_OK)
    r = after_local_broadcast(h, h->loc->vt->broadcast(h->loc, rank, tmp ? tmp + (size_t)self * part : recv,
                                                       tmp ? part : 0, 0));
  if (s == ST_OK && r == ST_OK) {
    memcpy(recv, tmp + (size_t)self * part + (size_t)rank * n, n * sizeof(float));
    if (op == ST_REDUCE_MEAN)
      for (size_t e = 0; e < n; e++) recv[e] *= f;
  }
  free(tmp);
  return s != ST_OK ? s : r;
}

static st_status h_barrier(st_collective *c, int rank) {
  hier *h = (hier *)c;
  float one = 0.0f;
  return h_all_reduce(&h->base, rank, &one, 1, ST_REDUCE_SUM);
}

static void h_destroy(st_collective *c) {
  hier *h = (hier *)c;
  st__collective_destroy(h->loc);
  free(h);
}

/* The local replicas leave (the process transport has its own timeout). */
static void h_abort(st_collective *c) { st__collective_abort(((hier *)c)->loc); }
static void h_reset(st_collective *c) { st__collective_reset(((hier *)c)->loc); }

static const st_collective_vtable hier_vtable = {
    .name = "hierarchical",
    .all_reduce = h_all_reduce,
    .broadcast = h_broadcast,
    .all_gather = h_all_gather,
    .reduce_scatter = h_reduce_scatter,
    .barrier = h_barrier,
    .abort = h_abort,
    .reset = h_reset,
    .destroy = h_destroy,
};

st_status st__collective_hier_create(int local, st_cross_device_ops algo, st_collective *net,
                                     st_collective **out) {
  *out = NULL;
  hier *h = calloc(1, sizeof *h);
  if (!h) return st_error(ST_ERR_NOMEM, "hierarchical transport: out of memory");
  st_status s = st__collective_threads_create(local, algo, &h->loc);
  if (s != ST_OK) {
    free(h);
    return s;
  }
  h->base = (st_collective){&hier_vtable, local, algo, 0};
  h->net = net;
  atomic_init(&h->net_status, ST_OK);
  *out = &h->base;
  return ST_OK;
}
