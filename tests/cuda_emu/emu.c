/* The emulated CUDA runtime and cuBLASLt of tests/cuda_emu/ (declared in its
 * include/): synchronous copies, $STRATA_EMU_GPUS devices (default 1; a
 * thread's current device is thread-local, as CUDA's), and a column-major
 * matmul loop that follows cuBLASLt's documented layout and transpose rules.
 * Built as build/cuda_emu/libcudart_emu.so, which the CUDA module's own
 * sources (build/cuda_emu/libstrata_cuda_emu.so) and the emulated NCCL
 * (nccl_emu.c, build/cuda_emu/nccl/libnccl.so.2) share;
 * tests/test_cuda_emulated.sh runs tests/test_cuda_backend.c against the
 * module and tests/test_gpu_check.sh trains with it: the module's logic
 * (table, contexts, allocator, gemm mapping, every kernel's per-element code)
 * and the callers' use of device memory are checked on machines without a GPU.
 *
 * Device memory is kept apart as a GPU keeps it: "device" allocations come
 * from one reserved arena of address space that is inaccessible (PROT_NONE)
 * except while an emulated kernel, copy, matmul or NCCL operation runs, so a
 * host read or write of a device pointer (a missing to_host/to_device in the
 * library) faults here, as it would on a GPU, and the SIGSEGV handler names
 * it; a copy whose direction does not match its pointers aborts naming both.
 * Real CUDA behaviour (asynchrony, launch limits, cuBLASLt's kernels) is not
 * emulated. Test fixture only. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cublasLt.h"
#include "cuda_runtime_api.h"

/* ---- device memory: the guarded arena ------------------------------------ */

#define ARENA_BYTES ((size_t)8 << 30) /* address space only (MAP_NORESERVE) */
static char *g_arena;
static size_t g_used;   /* bytes handed out (page-rounded prefix is mapped) */
static int g_active;    /* emulated kernels/copies running (any thread) */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction g_old_segv;

static size_t page_up(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) / pg * pg;
}

static int in_arena(const void *p) {
  return g_arena && (const char *)p >= g_arena && (const char *)p < g_arena + ARENA_BYTES;
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
  if (in_arena(si->si_addr)) {
    static const char msg[] = "cuda_emu: the host touched emulated device memory outside "
                              "a kernel or copy (a missing to_host/to_device)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    abort();
  }
  if (g_old_segv.sa_flags & SA_SIGINFO) g_old_segv.sa_sigaction(sig, si, uc);
  else {
    signal(sig, g_old_segv.sa_handler == SIG_IGN ? SIG_DFL : g_old_segv.sa_handler);
    raise(sig);
  }
}

static int arena_init(void) {
  if (g_arena) return 1;
  void *p = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return 0;
  g_arena = p;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, &g_old_segv);
  return 1;
}

/* Kernels, copies and matmuls run between enter and leave: the arena is
 * readable and writable while any runs (a host access racing with another
 * thread's kernel goes unseen; one replica's runs are checked exactly). */
void st__emu_device_enter(void) {
  pthread_mutex_lock(&g_mu);
  if (g_active++ == 0 && g_used) mprotect(g_arena, page_up(g_used), PROT_READ | PROT_WRITE);
  pthread_mutex_unlock(&g_mu);
}
void st__emu_device_leave(void) {
  pthread_mutex_lock(&g_mu);
  if (--g_active == 0 && g_used) mprotect(g_arena, page_up(g_used), PROT_NONE);
  pthread_mutex_unlock(&g_mu);
}

/* Allocations are never reused (cudaFree gives the pages back): the module's
 * caching allocator reuses blocks itself. */
static size_t device_bytes(void) { /* $STRATA_EMU_MEM_MB: a smaller device */
  const char *e = getenv("STRATA_EMU_MEM_MB");
  size_t mb = e ? (size_t)strtoull(e, NULL, 10) : 0;
  return mb && mb < (ARENA_BYTES >> 20) ? mb << 20 : ARENA_BYTES;
}

static void *arena_alloc(size_t bytes) {
  pthread_mutex_lock(&g_mu);
  void *p = NULL;
  size_t at = (g_used + 255) & ~(size_t)255;
  if (arena_init() && bytes <= device_bytes() - (at < device_bytes() ? at : device_bytes()) &&
      at < device_bytes()) {
    p = g_arena + at;
    size_t old_end = page_up(g_used);
    g_used = at + (bytes ? bytes : 1);
    if (g_active && page_up(g_used) > old_end)
      mprotect(g_arena + old_end, page_up(g_used) - old_end, PROT_READ | PROT_WRITE);
  }
  pthread_mutex_unlock(&g_mu);
  return p;
}

static _Thread_local int t_device; /* cudaSetDevice of this thread */

static int emu_devices(void) {
  const char *env = getenv("STRATA_EMU_GPUS");
  int n = env ? atoi(env) : 1;
  return n >= 1 && n <= 64 ? n : 1;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= emu_devices()) return cudaErrorInvalidDevice;
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *count) {
  *count = emu_devices();
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
  if (device < 0 || device >= emu_devices()) return cudaErrorInvalidDevice;
  memset(p, 0, sizeof *p);
  strcpy(p->name, "emulated GPU (host memory)");
  p->totalGlobalMem = (size_t)1 << 30;
  p->major = 9;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  *total_bytes = device_bytes();
  *free_bytes = g_used < *total_bytes ? *total_bytes - g_used : 0;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
  *p = arena_alloc(bytes);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
  if (p && !in_arena(p)) {
    fprintf(stderr, "cuda_emu: cudaFree(%p): not device memory\n", p);
    abort();
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
  (void)s;
  int d_dev = in_arena(dst), s_dev = in_arena(src);
  int ok = kind == cudaMemcpyHostToDevice   ? d_dev && !s_dev
           : kind == cudaMemcpyDeviceToHost ? !d_dev && s_dev
           : kind == cudaMemcpyDeviceToDevice ? d_dev && s_dev
                                              : 0;
  if (!ok && bytes) {
    fprintf(stderr, "cuda_emu: cudaMemcpyAsync kind %d: dst %p is %s memory, src %p is %s memory\n",
            (int)kind, dst, d_dev ? "device" : "host", src, s_dev ? "device" : "host");
    abort();
  }
  st__emu_device_enter();
  memmove(dst, src, bytes);
  st__emu_device_leave();
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  *s = (cudaStream_t)malloc(1);
  return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  free(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return s ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated"; }
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  *v = 0;
  return cudaSuccess;
}

/* ---- cuBLASLt ------------------------------------------------------------- */

struct emu_lt { int unused; };
struct emu_op { cublasOperation_t ta, tb; };
struct emu_layout { uint64_t rows, cols; int64_t ld; };
struct emu_pref { int unused; };

size_t cublasLtGetVersion(void) { return 0; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = calloc(1, sizeof **h);
  return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct,
                                        cudaDataType scale) {
  (void)ct, (void)scale;
  *d = calloc(1, sizeof **d);
  return *d ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *v,
                                              size_t n) {
  if (n != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (a == CUBLASLT_MATMUL_DESC_TRANSA) memcpy(&d->ta, v, n);
  else if (a == CUBLASLT_MATMUL_DESC_TRANSB) memcpy(&d->tb, v, n);
  else return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  free(d);
  return CUBLAS_STATUS_SUCCESS;
}
/* cuBLASLt: ld >= rows (column-major). */
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  (void)t;
  *l = NULL;
  if (ld < (int64_t)rows || ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *l = malloc(sizeof **l);
  if (!*l) return CUBLAS_STATUS_ALLOC_FAILED;
  (*l)->rows = rows, (*l)->cols = cols, (*l)->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  free(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = calloc(1, sizeof **p);
  return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *v, size_t n) {
  (void)p, (void)a, (void)v, (void)n;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  free(p);
  return CUBLAS_STATUS_SUCCESS;
}

/* op(X)'s [rows, cols] for a layout and transpose. */
static void op_shape(const struct emu_layout *l, cublasOperation_t t, uint64_t *r, uint64_t *c) {
  *r = t == CUBLAS_OP_N ? l->rows : l->cols;
  *c = t == CUBLAS_OP_N ? l->cols : l->rows;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *results,
                                              int *found) {
  (void)h, (void)pref;
  uint64_t ar, ac, br, bc;
  op_shape(a, op->ta, &ar, &ac);
  op_shape(b, op->tb, &br, &bc);
  if (ac != br || ar != c->rows || bc != c->cols || c->rows != d->rows || c->cols != d->cols)
    return CUBLAS_STATUS_INVALID_VALUE; /* the shapes do not chain */
  memset(results, 0, sizeof *results);
  *found = requested > 0;
  return CUBLAS_STATUS_SUCCESS;
}

/* Element (i, j) of op(X), X column-major with leading dimension ld. */
static float at(const float *x, const struct emu_layout *l, cublasOperation_t t, uint64_t i,
                uint64_t j) {
  return t == CUBLAS_OP_N ? x[i + j * (uint64_t)l->ld] : x[j + i * (uint64_t)l->ld];
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t la, const void *B,
                              cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                              cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t s) {
  (void)h, (void)algo, (void)ws, (void)ws_bytes, (void)s;
  uint64_t m, k, k2, n;
  op_shape(la, op->ta, &m, &k);
  op_shape(lb, op->tb, &k2, &n);
  if (k != k2 || m != lc->rows || n != lc->cols || m != ld->rows || n != ld->cols)
    return CUBLAS_STATUS_INVALID_VALUE;
  float al = *(const float *)alpha, be = *(const float *)beta;
  const float *a = A, *b = B, *c = C;
  float *d = D;
  st__emu_device_enter();
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t i = 0; i < m; i++) {
      float acc = 0.0f;
      for (uint64_t p = 0; p < k; p++) acc += at(a, la, op->ta, i, p) * at(b, lb, op->tb, p, j);
      float old = be == 0.0f ? 0.0f : be * c[i + j * (uint64_t)lc->ld];
      d[i + j * (uint64_t)ld->ld] = al * acc + old;
    }
  st__emu_device_leave();
  return CUBLAS_STATUS_SUCCESS;
}
