/* Collectives over device buffers (collective.h): NCCL where it applies,
 * else host staging. Host staging: each
 * rank copies its device buffer into a host buffer of its own through its
 * backend context (to_host waits for the rank's earlier work), the inner
 * transport runs on the host buffers, and the result is copied back
 * (to_device, ordered before the rank's later work). The inner transport's
 * arithmetic and rank order are kept, so the bytes are the CPU's: this is the
 * reducer of GPU replicas when NCCL is not used (logical GPUs share one
 * physical device, which NCCL refuses) and the bridge from device buffers to
 * MPI. Host buffers grow to the largest call and are kept. Each op: each rank
 * from its own thread, as collective.h says. */
#include <stdlib.h>

#include "backend/impl.h"
#include "distribute/collective/collective.h"

typedef struct staged {
  st_collective base;
  st_collective *inner;
  st_backend_ctx *ctx[ST_MAX_REPLICAS];
  float *send[ST_MAX_REPLICAS], *recv[ST_MAX_REPLICAS];
  size_t send_cap[ST_MAX_REPLICAS], recv_cap[ST_MAX_REPLICAS];
} staged;

/* *buf holds at least n floats (n >= 1 allocated). */
static st_status reserve(float **buf, size_t *cap, size_t n, int rank) {
  if (n <= *cap && *buf) return ST_OK;
  float *p = realloc(*buf, (n ? n : 1) * sizeof(float));
  if (!p)
    return st_error(ST_ERR_NOMEM, "collective: rank %d: out of host memory staging %zu floats",
                    rank, n);
  *buf = p;
  *cap = n;
  return ST_OK;
}

static st_status sg_all_reduce(st_collective *c, int rank, float *buf, size_t n, st_reduce_op op) {
  staged *s = (staged *)c;
  st_status st = reserve(&s->send[rank], &s->send_cap[rank], n, rank);
  if (st != ST_OK) return st;
  st__be_to_host(s->ctx[rank], s->send[rank], buf, n * sizeof(float));
  st = s->inner->vt->all_reduce(s->inner, rank, s->send[rank], n, op);
  if (st == ST_OK) st__be_to_device(s->ctx[rank], buf, s->send[rank], n * sizeof(float));
  return st;
}

static st_status sg_broadcast(st_collective *c, int rank, float *buf, size_t n, int root) {
  staged *s = (staged *)c;
  st_status st = reserve(&s->send[rank], &s->send_cap[rank], n, rank);
  if (st != ST_OK) return st;
  if (rank == root) st__be_to_host(s->ctx[rank], s->send[rank], buf, n * sizeof(float));
  st = s->inner->vt->broadcast(s->inner, rank, s->send[rank], n, root);
  if (st == ST_OK && rank != root)
    st__be_to_device(s->ctx[rank], buf, s->send[rank], n * sizeof(float));
  return st;
}

static st_status sg_all_gather(st_collective *c, int rank, const float *send, size_t n,
                               float *recv) {
  staged *s = (staged *)c;
  size_t all = n * (size_t)c->size;
  st_status st = reserve(&s->send[rank], &s->send_cap[rank], n, rank);
  if (st == ST_OK) st = reserve(&s->recv[rank], &s->recv_cap[rank], all, rank);
  if (st != ST_OK) return st;
  st__be_to_host(s->ctx[rank], s->send[rank], send, n * sizeof(float));
  st = s->inner->vt->all_gather(s->inner, rank, s->send[rank], n, s->recv[rank]);
  if (st == ST_OK) st__be_to_device(s->ctx[rank], recv, s->recv[rank], all * sizeof(float));
  return st;
}

static st_status sg_reduce_scatter(st_collective *c, int rank, const float *send, float *recv,
                                   size_t n, st_reduce_op op) {
  staged *s = (staged *)c;
  size_t all = n * (size_t)c->size;
  st_status st = reserve(&s->send[rank], &s->send_cap[rank], all, rank);
  if (st == ST_OK) st = reserve(&s->recv[rank], &s->recv_cap[rank], n, rank);
  if (st != ST_OK) return st;
  st__be_to_host(s->ctx[rank], s->send[rank], send, all * sizeof(float));
  st = s->inner->vt->reduce_scatter(s->inner, rank, s->send[rank], s->recv[rank], n, op);
  if (st == ST_OK) st__be_to_device(s->ctx[rank], recv, s->recv[rank], n * sizeof(float));
  return st;
}

static st_status sg_barrier(st_collective *c, int rank) {
  staged *s = (staged *)c;
  return s->inner->vt->barrier(s->inner, rank);
}

static void sg_abort(st_collective *c) { st__collective_abort(((staged *)c)->inner); }
static void sg_reset(st_collective *c) { st__collective_reset(((staged *)c)->inner); }

static void sg_destroy(st_collective *c) {
  staged *s = (staged *)c;
  for (int i = 0; i < ST_MAX_REPLICAS; i++) free(s->send[i]), free(s->recv[i]);
  st__collective_destroy(s->inner);
  free(s);
}

static const st_collective_vtable staged_vt = {
    .name = "staged",
    .all_reduce = sg_all_reduce,
    .broadcast = sg_broadcast,
    .all_gather = sg_all_gather,
    .reduce_scatter = sg_reduce_scatter,
    .barrier = sg_barrier,
    .abort = sg_abort,
    .reset = sg_reset,
    .destroy = sg_destroy,
};

st_status st__collective_staged_create(st_collective *inner, st_backend_ctx *const *ctxs,
                                       st_collective **out) {
  *out = NULL;
  staged *s = calloc(1, sizeof *s);
  if (!s) {
    st__collective_destroy(inner);
    return st_error(ST_ERR_NOMEM, "collective: out of memory");
  }
  s->base = (st_collective){&staged_vt, inner->size, inner->algo, inner->self};
  s->inner = inner;
  for (int i = 0; i < inner->size && i < ST_MAX_REPLICAS; i++) s->ctx[i] = ctxs[i];
  *out = &s->base;
  return ST_OK;
}

/* The transport of a GPU replica group: NCCL over the ranks' GPUs when every
 * rank has a physical GPU of its own (one per process under a process
 * transport), else (logical GPUs sharing a device, NCCL absent or failing:
 * logged) the in-process or hierarchical transport staged through the host. */
st_status st__collective_device_create(int n, st_cross_device_ops algo, st_collective *net,
                                       st_backend_ctx *const *ctxs, st_collective **out) {
  *out = NULL;
  st_status s = ST_ERR_NOT_BUILT;
  if (!net && n > 1) s = st__collective_nccl_create(n, ctxs, algo, out);
  else if (net && n == 1 && net->size > 1) s = st__collective_nccl_create_process(net, ctxs[0], out);
  if (s == ST_OK) {
    st_log(ST_LOG_INFO, "collectives of %d GPU replica(s)%s: NCCL", n, net ? " per process" : "");
    return ST_OK;
  }
  if (n > 1 || net)
    st_log(ST_LOG_INFO, "collectives of %d GPU replica(s): through host memory (%s)", n,
           s == ST_ERR_NOT_BUILT && !st_last_error()[0] ? "NCCL not used" : st_last_error());
  st_collective *inner = NULL;
  s = net ? st__collective_hier_create(n, algo, net, &inner)
          : st__collective_threads_create(n, algo, &inner);
  return s == ST_OK ? st__collective_staged_create(inner, ctxs, out) : s;
}
