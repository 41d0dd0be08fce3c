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
} st__cuda_module;

/* The module's entry: fills *out. abi is the loader's ST__CUDA_MODULE_ABI;
 * a module built with another returns ST_ERR_NOT_BUILT through host->error. */
typedef st_status (*st__cuda_module_open_fn)(unsigned abi, const st__cuda_host *host,
                                             st__cuda_module *out);

#ifdef __cplusplus
}
#endif
#endif
