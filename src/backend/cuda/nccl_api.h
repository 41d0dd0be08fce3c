/* Internal to the CUDA module: the part of NCCL's C interface (nccl.h, NCCL
 * 2.x) that src/backend/cuda/nccl.c uses, declared here as types and
 * function-pointer types because the module opens libnccl.so.2 with dlopen at
 * first use (the module still loads, and the CUDA backend still works, where
 * NCCL is absent) and must build where nccl.h is not installed. The values
 * below are NCCL's ABI (stable since 2.0); nccl.c checks them against nccl.h
 * when nccl.h is on the include path. tests/cuda_emu/nccl_emu.c implements
 * the same functions over host memory (an emulated libnccl.so.2). */
#ifndef STRATA_SRC_BACKEND_CUDA_NCCL_API_H
#define STRATA_SRC_BACKEND_CUDA_NCCL_API_H

#include <cuda_runtime_api.h> /* cudaStream_t (the emulated one in tests/cuda_emu) */
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ST__NCCL_UNIQUE_ID_BYTES 128
typedef struct st__ncclUniqueId {
  char internal[ST__NCCL_UNIQUE_ID_BYTES];
} st__ncclUniqueId;
typedef struct ncclComm *st__ncclComm_t;
typedef enum {
  st__ncclSuccess = 0,
  st__ncclUnhandledCudaError = 1,
  st__ncclSystemError = 2,
  st__ncclInternalError = 3,
  st__ncclInvalidArgument = 4,
  st__ncclInvalidUsage = 5,
  st__ncclRemoteError = 6,
  st__ncclInProgress = 7,
} st__ncclResult_t;
enum { st__ncclSum = 0 };      /* ncclRedOp_t */
enum { st__ncclFloat32 = 7 };  /* ncclDataType_t */

/* The functions, as nccl.h declares them (enums passed as int). */
typedef st__ncclResult_t (*st__ncclGetVersion_fn)(int *version);
typedef const char *(*st__ncclGetErrorString_fn)(st__ncclResult_t result);
typedef const char *(*st__ncclGetLastError_fn)(st__ncclComm_t comm);
typedef st__ncclResult_t (*st__ncclGetUniqueId_fn)(st__ncclUniqueId *id);
typedef st__ncclResult_t (*st__ncclCommInitRank_fn)(st__ncclComm_t *comm, int nranks,
                                                    st__ncclUniqueId id, int rank);
typedef st__ncclResult_t (*st__ncclCommInitAll_fn)(st__ncclComm_t *comms, int ndev,
                                                   const int *devlist);
typedef st__ncclResult_t (*st__ncclCommDestroy_fn)(st__ncclComm_t comm);
typedef st__ncclResult_t (*st__ncclCommAbort_fn)(st__ncclComm_t comm);
typedef st__ncclResult_t (*st__ncclCommGetAsyncError_fn)(st__ncclComm_t comm,
                                                         st__ncclResult_t *err);
typedef st__ncclResult_t (*st__ncclAllReduce_fn)(const void *send, void *recv, size_t count,
                                                 int dtype, int op, st__ncclComm_t comm,
                                                 cudaStream_t stream);
typedef st__ncclResult_t (*st__ncclBroadcast_fn)(const void *send, void *recv, size_t count,
                                                 int dtype, int root, st__ncclComm_t comm,
                                                 cudaStream_t stream);
typedef st__ncclResult_t (*st__ncclAllGather_fn)(const void *send, void *recv,
                                                 size_t sendcount, int dtype,
                                                 st__ncclComm_t comm, cudaStream_t stream);
typedef st__ncclResult_t (*st__ncclReduceScatter_fn)(const void *send, void *recv,
                                                     size_t recvcount, int dtype, int op,
                                                     st__ncclComm_t comm, cudaStream_t stream);
typedef st__ncclResult_t (*st__ncclGroup_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
