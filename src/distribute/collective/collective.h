/* Internal: the collective table. Strategies reduce and share tensors only
 * through it, never through MPI, NCCL or ZeroMQ directly; each transport is one
 * implementation (threads.c: replica threads of one process over shared memory;
 * later mpi.c, nccl.c). A transport that was not built is a file whose create
 * function returns ST_ERR_NOT_BUILT with a clear message.
 *
 * Calling convention (SPMD): every one of the `size` ranks calls the same
 * operation, in the same order, from its own thread, with its own buffers;
 * the call returns on a rank once that rank's result is complete. Results are
 * bit-identical on every rank and from run to run: each element is reduced in
 * rank order 0, 1, ..., size-1. A rank may pass n = 0 only if every rank does.
 * Buffers of different ranks must not overlap. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_H
#define STRATA_DISTRIBUTE_COLLECTIVE_H

#include "strata/distribute.h" /* st_reduce_op */

/* How an all-reduce is carried out (TensorFlow's cross_device_ops). */
typedef enum st_cross_device_ops {
  ST_CROSS_ALL_REDUCE = 0,         /* reduce-scatter + all-gather in chunks, each
                                      rank owning a slice (default) */
  ST_CROSS_REDUCTION_TO_ONE_DEVICE,/* rank 0 reduces everything, then broadcast */
  ST_CROSS_COUNT
} st_cross_device_ops;
const char *st__cross_device_ops_name(st_cross_device_ops k);
st_status st__cross_device_ops_parse(const char *name, st_cross_device_ops *out);

typedef struct st_collective st_collective;
typedef struct st_collective_vtable {
  const char *name; /* "threads", "mpi", ... */
  /* buf[n] on every rank becomes the reduction over ranks (in place). */
  st_status (*all_reduce)(st_collective *c, int rank, float *buf, size_t n, st_reduce_op op);
  /* buf[n] on every rank becomes root's buf. */
  st_status (*broadcast)(st_collective *c, int rank, float *buf, size_t n, int root);
  /* recv[size * n] = concatenation of every rank's send[n], in rank order. */
  st_status (*all_gather)(st_collective *c, int rank, const float *send, size_t n, float *recv);
  /* recv[n] = reduction over ranks of their send[rank*n .. rank*n+n). */
  st_status (*reduce_scatter)(st_collective *c, int rank, const float *send, float *recv,
                              size_t n, st_reduce_op op);
  st_status (*barrier)(st_collective *c, int rank);
  void (*destroy)(st_collective *c);
} st_collective_vtable;

struct st_collective {
  const st_collective_vtable *vt;
  int size;                 /* number of ranks */
  st_cross_device_ops algo; /* how all_reduce runs */
};

/* In-process transport for `size` replica threads (size >= 1). */
st_status st__collective_threads_create(int size, st_cross_device_ops algo, st_collective **out);
void st__collective_destroy(st_collective *c); /* accepts NULL */

#endif
