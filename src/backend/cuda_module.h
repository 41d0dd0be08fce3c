/* Internal: the interface between libstrata and the CUDA backend module
 * (libstrata_cuda.so, built from src/backend/cuda/ when the CUDA toolkit is
 * found, loaded with dlopen by src/backend/cuda_load.c when a GPU is asked
 * for). The main library and the CLI never link a CUDA library, so they start
 * on machines without CUDA or a driver.
 *
 * The module exports one symbol, ST__CUDA_MODULE_ENTRY, of type
 * st__cuda_module_open_fn. It may not call into libstrata directly (the CLI
 * links libstrata statically and exports nothing), so the loader passes the few
 * functions it needs in st__cuda_host. Bump ST__CUDA_MODULE_ABI whenever this
 * file or st_backend (backend/impl.h) changes: a module of another ABI is
 * refused with a message naming both numbers. */
#ifndef STRATA_SRC_BACKEND_CUDA_MODULE_H
#define STRATA_SRC_BACKEND_CUDA_MODULE_H

#include "backend/impl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST__CUDA_MODULE_ABI 2u
#define ST__CUDA_MODULE_ENTRY "st__cuda_module_open"

/* What libstrata lends the module: st_error (sets this thread's message and
 * returns the status) and st_log. Any thread. */
typedef struct st__cuda_host {
  st_status (*error)(st_status s, const char *fmt, ...);
  void (*log)(st_log_level level, const char *fmt, ...);
} st__cuda_host;

/* NCCL, the device collectives (src/backend/cuda/nccl.c). The module opens
 * libnccl.so.2 (or $STRATA_NCCL_LIB) with dlopen at the first call of a slot;
 * without it every slot answers ST_ERR_NOT_BUILT naming libnccl.so.2 and
 * dlopen's reason, and the rest of the module works as before.
 *
 * A communicator set has one st__nccl_comm per rank. Each rank is driven by
 * one thread (its replica's), which calls the operations of its own rank with
 * device buffers of its own st_backend_ctx (a "cuda" context on the rank's
 * device): the operation is enqueued on that context's stream and the call
 * returns; the result is complete in stream order (later kernels of the
 * context, to_host and synchronize see it). No host-side meeting is needed:
 * NCCL matches the n ranks' calls on the devices (the first operation of a
 * set may wait on the host for the other ranks to connect). So the n ranks'
 * threads call at the same time, in the same order of operations; one thread
 * may instead drive several ranks between group_start and group_end (NCCL's
 * group calls; group state is per thread). MEAN is NCCL's sum then a scale
 * by 1/n on the stream (as the CPU transports, not NCCL's ncclAvg, which
 * multiplies before it sums).
 *
 * Order: NCCL sums in an order of its own (ring or tree, chosen from the
 * size, topology and NCCL version; pinned with NCCL_ALGO / NCCL_PROTO), not
 * the CPU transports' rank order 0, 1, ..., n-1, so its bytes may differ from
 * the CPU's; for a fixed communicator, size, NCCL version and environment the
 * order is fixed, so runs repeat bit for bit. */
#define ST__NCCL_ID_BYTES 128
typedef struct st__nccl_comm st__nccl_comm; /* one rank of a communicator set */
typedef struct st__cuda_nccl {
  /* Loads NCCL (once) and its version code (22809 = 2.28.9). Any thread. */
  st_status (*version)(int *code);
  /* comms[0..n) for n ranks of this process, rank r on the physical device
   * of ctxs[r], a "cuda" context (ncclCommInitAll). Two ranks on one physical device (logical
   * GPUs) are refused with ST_ERR_INVALID before NCCL is asked (NCCL refuses
   * or hangs: "Duplicate GPU"); the caller then reduces through its in-process
   * device reducer. One thread. */
  st_status (*init_all)(int n, st_backend_ctx *const *ctxs, st__nccl_comm **comms);
  /* A new id for init_rank (ncclGetUniqueId), to be sent to every process
   * of the set by the caller's own transport. Any thread. */
  st_status (*unique_id)(unsigned char id[ST__NCCL_ID_BYTES]);
  /* This process's rank of an nranks set, on the physical device of ctx
   * (ncclCommInitRank): returns once every rank has joined. */
  st_status (*init_rank)(int nranks, const unsigned char id[ST__NCCL_ID_BYTES], int rank,
                         st_backend_ctx *ctx, st__nccl_comm **comm);
  /* ncclCommDestroy once the rank's work is done (accepts NULL). */
  void (*destroy)(st__nccl_comm *comm);
  /* ncclCommAbort: frees the rank at once, making its pending operations
   * (and peers' operations waiting for it) end (accepts NULL). Any thread,
   * but not while another thread is inside an operation of this rank. */
  void (*abort)(st__nccl_comm *comm);
  /* The operations of one rank on ctx (its device must be the rank's),
   * as collective.h's: buf[n] in place; all_gather recv[nranks * n];
   * reduce_scatter send[nranks * n] -> recv[n]. Errors name the NCCL call,
   * the device and the rank, with NCCL's text (ncclGetErrorString,
   * ncclGetLastError), or an earlier asynchronous error of the rank. */
  st_status (*all_reduce)(st__nccl_comm *comm, st_backend_ctx *ctx, float *buf, size_t n,
                          bool mean);
  st_status (*broadcast)(st__nccl_comm *comm, st_backend_ctx *ctx, float *buf, size_t n,
                         int root);
  st_status (*all_gather)(st__nccl_comm *comm, st_backend_ctx *ctx, const float *send,
                          size_t n, float *recv);
  st_status (*reduce_scatter)(st__nccl_comm *comm, st_backend_ctx *ctx, const float *send,
                              float *recv, size_t n, bool mean);
  /* The physical device of a "cuda" context (-1 for another context). */
  int (*device_of)(st_backend_ctx *ctx);
  /* ncclGroupStart / ncclGroupEnd of the calling thread. */
  st_status (*group_start)(void);
  st_status (*group_end)(void);
} st__cuda_nccl;

/* What the module gives back; every pointer stays valid while the process
 * lives (the module is never unloaded). */
typedef struct st__cuda_module {
  unsigned abi;               /* ST__CUDA_MODULE_ABI the module was built with */
  const st_backend *backend;  /* the "cuda" table (NULL in test fakes) */
  /* cudaGetDeviceCount: ST_OK and *count (0 included), or an error naming
   * the CUDA call and its error string. Any thread. */
  st_status (*device_count)(int *count);
  /* "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB" of physical device `index` into
   * buf (cap bytes); ST_OK or an error naming the call. Any thread. */
  st_status (*device_name)(int index, char *buf, size_t cap);
  /* "CUDA runtime 13000, driver 13000, cuBLASLt 130000" into buf. */
  void (*versions)(char *buf, size_t cap);
  /* TF32 tensor-core math for the gemm of contexts created afterwards
   * (default off: fp32 as the CPU). Before the first ctx_create. */
  void (*set_tf32)(bool on);
  /* NCCL (above); never NULL in a module of this ABI (NULL in test fakes). */
  const st__cuda_nccl *nccl;
} st__cuda_module;

/* The module's entry: fills *out. abi is the loader's ST__CUDA_MODULE_ABI;
 * a module built with another returns ST_ERR_NOT_BUILT through host->error. */
typedef st_status (*st__cuda_module_open_fn)(unsigned abi, const st__cuda_host *host,
                                             st__cuda_module *out);

#ifdef __cplusplus
}
#endif
#endif
