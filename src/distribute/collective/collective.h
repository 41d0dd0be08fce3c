/* Internal: the collective table. Strategies reduce and share tensors only
 * through it, never through MPI, NCCL or ZeroMQ directly; each transport is one
 * implementation (threads.c: replica threads of one process over shared memory;
 * mpi/mpi.c: the processes of an MPI job; hier.c: replica threads of every
 * process of an MPI job, reduced locally first; later nccl.c). A transport
 * that was not built is a file whose create function returns ST_ERR_NOT_BUILT
 * with a clear message (mpi/mpi_none.c when CMake found no MPI).
 *
 * Calling convention (SPMD): every one of the `size` ranks calls the same
 * operation, in the same order, from its own thread, with its own buffers;
 * the call returns on a rank once that rank's result is complete. Results are
 * bit-identical on every rank and from run to run: each element is reduced in
 * rank order 0, 1, ..., size-1. A rank may pass n = 0 only if every rank does.
 * Buffers of different ranks must not overlap. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_H
#define STRATA_DISTRIBUTE_COLLECTIVE_H

#include "strata/backend.h"    /* st_backend_ctx (nccl) */
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
  /* In-process transports (NULL otherwise): abort makes every rank waiting
   * in an operation, or entering one later, return ST_ERR_PEER within
   * microseconds (any thread: a replica that left calls it); reset, called
   * once no rank is inside an operation, makes the transport usable again. */
  void (*abort)(st_collective *c);
  void (*reset)(st_collective *c);
  void (*destroy)(st_collective *c);
  /* Point-to-point between processes (process transports; NULL for the
   * in-process ones): send posts buf[n] to process `peer` and returns at once
   * with *handle (buf must stay unchanged until wait(handle) returned); recv
   * returns once buf[n] from peer has arrived. Messages from one process to
   * another arrive in the order they were sent. A peer that does not answer
   * within the timeout: ST_ERR_TIMEOUT naming its rank. */
  st_status (*send)(st_collective *c, const float *buf, size_t n, int peer, int *handle);
  st_status (*recv)(st_collective *c, float *buf, size_t n, int peer);
  st_status (*wait)(st_collective *c, int handle);
} st_collective_vtable;

struct st_collective {
  const st_collective_vtable *vt;
  int size;                 /* number of ranks (the callers' view) */
  st_cross_device_ops algo; /* how all_reduce runs */
  int self;                 /* process transports: this process's rank (the
                               only rank it may pass); 0 for threads */
};

/* Device buffers (staged.c): wraps inner (owned from now on, also when this
 * fails) so that every rank's buffers are device memory of its context
 * ctxs[rank] (ctxs[0 .. inner->size)), staged through host memory with the
 * inner transport's arithmetic and rank order (the CPU's bytes). */
struct st_backend_ctx;
st_status st__collective_staged_create(st_collective *inner, struct st_backend_ctx *const *ctxs,
                                       st_collective **out);

/* GPU replicas (staged.c): NCCL when each rank has a GPU of its own (n > 1
 * in one process, or n == 1 per process under net), else threads (or hier
 * over net) staged as above. ctxs[0..n) are the ranks' contexts. */
st_status st__collective_device_create(int n, st_cross_device_ops algo, st_collective *net,
                                       struct st_backend_ctx *const *ctxs, st_collective **out);

/* In-process transport for `size` replica threads (size >= 1). */
st_status st__collective_threads_create(int size, st_cross_device_ops algo, st_collective **out);
void st__collective_destroy(st_collective *c); /* accepts NULL */
/* vt->abort / vt->reset when the transport has them (accept NULL). */
void st__collective_abort(st_collective *c);
void st__collective_reset(st_collective *c);

/* ---- processes (mpi/mpi.c; mpi/mpi_none.c returns ST_ERR_NOT_BUILT) ----
 * The MPI job this process belongs to. The first call initialises MPI
 * (MPI_THREAD_MULTIPLE: communication threads and the compute thread call it
 * concurrently, on different communicators); MPI is finalised at process exit
 * unless a collective failed (a peer that is gone would make MPI_Finalize
 * wait forever). Any thread. */
st_status st__mpi_world(int *rank, int *size);
/* Whether this build has the MPI transport (no side effect). */
bool st__mpi_built(void);
/* Processes of the job on this machine (shared memory), at least 1. Call
 * after st__mpi_world succeeded. */
int st__mpi_node_size(void);
/* A transport over every process of the job, on a communicator of its own
 * (creating one is itself collective: every process creates its transports in
 * the same order). Elements are reduced in rank order (bit-identical on every
 * rank and run to run). A peer whose part has not arrived within timeout_s
 * seconds fails the operation with ST_ERR_TIMEOUT ("rank 1 did not join
 * all-reduce #k at step s"; *step is read for the message, may be NULL); after
 * a failure every later operation fails at once (ST_ERR_PEER). */
st_status st__collective_mpi_create(double timeout_s, const int64_t *step, st_collective **out);
/* The same over the processes that pass the same `color` (every process
 * calls it, in the same order as its other transports), ranked by their
 * rank in the job: size and self are those within the group. */
st_status st__collective_mpi_create_group(int color, double timeout_s, const int64_t *step,
                                          st_collective **out);
/* This process leaves the job: tell every peer of c, a process transport,
 * how many operations this process finished on it and why it leaves (why:
 * its error, "" or NULL when it has none; truncated to 500 bytes). A peer
 * waiting for this process's part of a later operation then fails at once
 * with ST_ERR_PEER, "rank R failed: <why> (...)", instead of after the
 * timeout. Call once, before st__collective_destroy, from the thread that
 * uses c; does nothing when a collective of this process failed for lack of
 * a peer (the peers may be gone) or for a single process. */
void st__collective_mpi_leave(st_collective *c, const char *why);

/* ---- processes without mpirun (gloo/gloo.c; gloo/gloo_none.c answers
 * ST_ERR_NOT_BUILT) ----
 * This process joins the job as worker `rank` of `size`, whose cluster
 * addresses ("host:port", as TF_CONFIG's cluster.worker lists them) are
 * addresses[0..size): worker 0 serves the rendezvous at its address from now
 * until the process ends. Once per process (joining the same job again is
 * OK; another one is refused). SIGPIPE is ignored from then on when it had
 * its default action (a lost peer is an error, not the end of the process).
 * Any thread. */
#define ST__GLOO_ADDRESS_MAX 262
st_status st__gloo_world_join(int rank, int size, const char *const *addresses);
/* A transport over every worker of the job joined, as
 * st__collective_mpi_create over MPI (every process creates its transports
 * in the same order; Gloo TCP pairs on ports of their own, on each worker's
 * host): the same operations and guarantees, rank-order sums (the same
 * bytes), every wait bounded by timeout_s naming the worker that did not
 * take part, every later operation failing at once after a failure.
 * Connecting is itself bounded by timeout_s. */
st_status st__collective_gloo_create(double timeout_s, const int64_t *step, st_collective **out);
/* Before destroying c: why, this worker's error ("" if none). Without one
 * the destroy waits (up to the timeout) until every peer has come to its
 * own, so none sees this worker's close before its last message; with one
 * the destroy closes the pairs at once, which fails the peers at once. */
void st__collective_gloo_leave(st_collective *c, const char *why);
bool st__gloo_built(void);

/* ---- the processes of a job, however launched (process.c) ----
 * st__process_world: this process's rank and the job's size. Under an MPI
 * launcher (more than one process): MPI's world. Otherwise with a TF_CONFIG
 * that names several training tasks (a chief, which is worker 0, and
 * workers): that cluster, joined through the Gloo transport (ST_ERR_NOT_BUILT
 * without it; ST_ERR_INVALID naming the field for a bad TF_CONFIG). Otherwise
 * a job of one. Decided once per process. Any thread. */
st_status st__process_world(int *rank, int *size);
/* Whether an MPI launcher started this process with others. */
bool st__process_launched_by_mpi(void);
/* The chief and worker tasks TF_CONFIG names (0: unset or not valid). */
int st__tf_config_training_tasks(void);
/* A multi_worker_mirrored job as a TF_CONFIG document (len bytes of json)
 * describes it: this task's rank, the training tasks' addresses in rank
 * order (the chief first, then the workers) and how many of them share this
 * task's host. ST_ERR_INVALID / ST_ERR_FORMAT naming the field. Pure. */
typedef struct st_tf_config_job {
  int rank, size, node_size;
  char address[ST_MAX_WORKERS][ST__GLOO_ADDRESS_MAX];
} st_tf_config_job;
st_status st__tf_config_job(const char *json, size_t len, st_tf_config_job *job);
/* Processes of the job on this machine (at least 1), after st__process_world. */
int st__process_node_size(void);
/* A transport over every process of the job (st__collective_mpi_create or
 * st__collective_gloo_create, whichever world this process joined), and
 * leaving it (st__collective_mpi_leave's report under MPI;
 * st__collective_gloo_leave under Gloo). */
st_status st__collective_process_create(double timeout_s, const int64_t *step,
                                        st_collective **out);
void st__collective_process_leave(st_collective *c, const char *why);

/* Hierarchical transport (hier.c) for `local` replica threads of this process
 * over `net`, a process transport (borrowed; must outlive it): an all-reduce
 * reduces the local replicas (threads), then across processes (local replica
 * 0 only), then broadcasts locally; broadcast roots are local ranks of
 * process 0. size = local. */
st_status st__collective_hier_create(int local, st_cross_device_ops algo, st_collective *net,
                                     st_collective **out);

/* ---- NCCL on GPUs (nccl.c, over the CUDA module's NCCL table) ----
 * The buffers of every operation are DEVICE pointers of the rank's "cuda"
 * context (st_backend_get("cuda") contexts, which must outlive the
 * transport); each operation is enqueued on that context's stream and
 * returns: its result is complete in stream order (later kernels of the
 * context, to_host and synchronize see it); barrier waits for the stream.
 * The SPMD convention above holds (each rank calls from its own thread, all
 * in the same order). Sums are in NCCL's order (ring/tree), fixed for a fixed
 * communicator, size and NCCL version (bit-repeatable from run to run) but
 * NOT rank order 0, 1, ...: bytes may differ from the CPU transports'. MEAN
 * is the sum scaled by 1/size. cross_device_ops is kept in `algo` but NCCL
 * chooses its own algorithm.
 *
 * In-process: `size` replica threads, rank r on ctxs[r] (array copied; the
 * contexts are borrowed), each on its own physical GPU. Errors, after which
 * the caller uses its in-process device reducer instead (st_last_error()
 * says why; log it at info level): ST_ERR_NOT_BUILT when the CUDA module or
 * libnccl.so.2 cannot be loaded (the message names it), ST_ERR_INVALID when
 * two ranks share a physical GPU (logical GPUs: NCCL refuses "Duplicate
 * GPU") or a context is not a cuda context, another status when NCCL's
 * initialisation fails (the message names the call and devices). abort and
 * reset as for the threads transport (reset re-creates the communicators).
 * Create/destroy: one thread. */
st_status st__collective_nccl_create(int size, st_backend_ctx *const *ctxs,
                                     st_cross_device_ops algo, st_collective **out);
/* One rank per process (multi_worker_mirrored): this process's rank of a set
 * over the processes of `net` (a process transport, borrowed for the call
 * only: rank 0's ncclUniqueId is broadcast over it; size and self are net's),
 * on ctx's GPU. Collective over net: every process calls it, in the same
 * order as its other transports. Every process gets the same verdict before
 * NCCL is asked: ST_ERR_NOT_BUILT when some process cannot load NCCL,
 * ST_ERR_INVALID when two processes of one machine use one physical GPU;
 * then the caller keeps its process transport (host staging). No abort or
 * reset (NULL, as the other process transports). */
st_status st__collective_nccl_create_process(st_collective *net, st_backend_ctx *ctx,
                                             st_collective **out);

#endif
