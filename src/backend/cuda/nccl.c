/* NCCL in the CUDA module: the st__cuda_nccl table (backend/cuda_module.h
 * says what each slot does and how ranks' threads meet). libnccl.so.2 is
 * opened with dlopen at the first call of a slot ($STRATA_NCCL_LIB names
 * another file: the emulated NCCL of tests/cuda_emu/ is one), so the module
 * links no NCCL and loads where NCCL is absent; then every slot answers
 * ST_ERR_NOT_BUILT naming libnccl.so.2 and dlopen's reason, and the caller
 * falls back to its in-process reducer.
 *
 * Each operation sets the rank's device current for the calling thread,
 * checks that the context is on that device, reports an earlier
 * asynchronous error of the rank (ncclCommGetAsyncError), then enqueues on
 * the context's stream. The library state below is process-wide by nature
 * (a process loads libnccl once); it is written inside pthread_once and
 * read-only afterwards. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/nccl_api.h"

/* The real build checks nccl_api.h against nccl.h when it has one (the
 * emulated build of tests/cuda_emu/ never: its CUDA headers are stand-ins). */
#if defined(__has_include) && !defined(STRATA_CUDA_EMULATED)
#if __has_include(<nccl.h>)
#include <nccl.h>
_Static_assert(NCCL_UNIQUE_ID_BYTES == ST__NCCL_UNIQUE_ID_BYTES, "nccl_api.h: id size");
_Static_assert((int)ncclFloat32 == (int)st__ncclFloat32 && (int)ncclSum == (int)st__ncclSum,
               "nccl_api.h: enums");
_Static_assert((int)ncclRemoteError == (int)st__ncclRemoteError, "nccl_api.h: ncclResult_t");
#endif
#endif

#define NCCL_FILE "libnccl.so.2"

struct st__nccl_comm {
  st__ncclComm_t comm;
  int device; /* physical device of this rank */
  int rank, nranks;
};

static struct {
  st__ncclGetVersion_fn get_version;
  st__ncclGetErrorString_fn error_string;
  st__ncclGetLastError_fn last_error; /* NCCL >= 2.13; may be NULL */
  st__ncclGetUniqueId_fn get_unique_id;
  st__ncclCommInitRank_fn init_rank;
  st__ncclCommInitAll_fn init_all;
  st__ncclCommDestroy_fn destroy;
  st__ncclCommAbort_fn abort;
  st__ncclCommGetAsyncError_fn async_error;
  st__ncclAllReduce_fn all_reduce;
  st__ncclBroadcast_fn broadcast;
  st__ncclAllGather_fn all_gather;
  st__ncclReduceScatter_fn reduce_scatter;
  st__ncclGroup_fn group_start, group_end;
} g_nccl;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local int t_group; /* this thread's ncclGroupStart depth */
static char g_why[512]; /* "" once loaded */
static int g_version;

/* Resolves one symbol into *slot; false (and g_why set) when absent. */
static bool sym(void *h, const char *file, const char *name, void *slot) {
  void *p = dlsym(h, name);
  if (p) memcpy(slot, &p, sizeof p);
  else snprintf(g_why, sizeof g_why, "%s has no %s (NCCL 2.x is needed)", file, name);
  return p != NULL;
}

static void load_once(void) {
  const char *env = getenv("STRATA_NCCL_LIB");
  const char *file = env && *env ? env : NCCL_FILE;
  void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(g_why, sizeof g_why, "NCCL is not available: %s cannot be loaded (%s); the "
             "device collectives need NCCL 2 (libnccl2)", file, why ? why : "unknown error");
    return;
  }
  g_why[0] = '\0';
  bool ok = sym(h, file, "ncclGetVersion", &g_nccl.get_version) &&
            sym(h, file, "ncclGetErrorString", &g_nccl.error_string) &&
            sym(h, file, "ncclGetUniqueId", &g_nccl.get_unique_id) &&
            sym(h, file, "ncclCommInitRank", &g_nccl.init_rank) &&
            sym(h, file, "ncclCommInitAll", &g_nccl.init_all) &&
            sym(h, file, "ncclCommDestroy", &g_nccl.destroy) &&
            sym(h, file, "ncclCommAbort", &g_nccl.abort) &&
            sym(h, file, "ncclCommGetAsyncError", &g_nccl.async_error) &&
            sym(h, file, "ncclAllReduce", &g_nccl.all_reduce) &&
            sym(h, file, "ncclBroadcast", &g_nccl.broadcast) &&
            sym(h, file, "ncclAllGather", &g_nccl.all_gather) &&
            sym(h, file, "ncclReduceScatter", &g_nccl.reduce_scatter) &&
            sym(h, file, "ncclGroupStart", &g_nccl.group_start) &&
            sym(h, file, "ncclGroupEnd", &g_nccl.group_end);
  if (!ok) return;
  void *le = dlsym(h, "ncclGetLastError");
  memcpy(&g_nccl.last_error, &le, sizeof le);
  if (g_nccl.get_version(&g_version) != st__ncclSuccess) g_version = 0;
}

/* ST_OK once NCCL is loaded, else ST_ERR_NOT_BUILT naming it (what: the
 * operation asked for, for the message). */
static st_status loaded(const char *what) {
  pthread_once(&g_once, load_once);
  if (!g_why[0]) return ST_OK;
  return st__cuda_host_fns.error(ST_ERR_NOT_BUILT, "%s%s%s", what ? what : "",
                                 what ? ": " : "", g_why);
}

/* NCCL's failure of `call` as a status naming the device (-1: none) and
 * the rank (c may be NULL). */
static st_status fail(st__ncclResult_t r, const char *call, const st__nccl_comm *c,
                      int device) {
  /* NCCL's last message (thread's or process's; the comm may be NULL). */
  const char *last = g_nccl.last_error ? g_nccl.last_error(c ? c->comm : NULL) : NULL;
  char who[96] = "";
  int k = device >= 0 ? snprintf(who, sizeof who, " on gpu:%d", device) : 0;
  if (c) snprintf(who + k, sizeof who - (size_t)k, " (rank %d of %d)", c->rank, c->nranks);
  return st__cuda_host_fns.error(r == st__ncclInvalidArgument || r == st__ncclInvalidUsage
                                     ? ST_ERR_INVALID : ST_ERR_INTERNAL,
                                 "%s%s failed: %s%s%s", call, who, g_nccl.error_string(r),
                                 last && *last ? ": " : "", last ? last : "");
}

static st_status version(int *code) {
  *code = 0;
  st_status s = loaded(NULL);
  if (s == ST_OK) *code = g_version;
  return s;
}

/* The module's state of ctx, or NULL when ctx is not a "cuda" context. */
static st__cuda_ctx *cuda_ctx(st_backend_ctx *ctx) {
  return ctx && ctx->be && ctx->impl && !strcmp(ctx->be->name, "cuda") ? ctx->impl : NULL;
}

/* ST_ERR_INVALID when two ranks share a physical device. */
static st_status distinct_devices(int n, const int *devices) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      if (devices[i] == devices[j])
        return st__cuda_host_fns.error(
            ST_ERR_INVALID, "NCCL cannot run two ranks on one GPU: ranks %d and %d are both "
            "on physical device %d (logical GPUs share one device; NCCL refuses them as "
            "'Duplicate GPU'); use the in-process device reducer", j, i, devices[i]);
  return ST_OK;
}

static st__nccl_comm *new_comm(st__ncclComm_t comm, int device, int rank, int nranks) {
  st__nccl_comm *c = malloc(sizeof *c);
  if (c) *c = (st__nccl_comm){.comm = comm, .device = device, .rank = rank, .nranks = nranks};
  return c;
}

/* The physical devices of n contexts into devices[n]. */
static st_status devices_of(int n, st_backend_ctx *const *ctxs, int *devices) {
  for (int r = 0; r < n; r++) {
    st__cuda_ctx *x = cuda_ctx(ctxs[r]);
    if (!x)
      return st__cuda_host_fns.error(ST_ERR_INVALID, "NCCL: rank %d's context is not a cuda "
                                     "context (%s)", r, ctxs[r] && ctxs[r]->be
                                     ? ctxs[r]->be->name : "none");
    devices[r] = x->device;
  }
  return ST_OK;
}

/* ncclCommInitAll on devices[n] (distinct) into comms (raw: scratch[n]). */
static st_status init_all_devices(int n, const int *devices, st__ncclComm_t *raw,
                                  st__nccl_comm **comms) {
  st__ncclResult_t r = g_nccl.init_all(raw, n, devices);
  if (r != st__ncclSuccess) {
    char call[160];
    int k = snprintf(call, sizeof call, "ncclCommInitAll (%d ranks on gpu:%d", n, devices[0]);
    for (int i = 1; i < n && k < (int)sizeof call - 16; i++)
      k += snprintf(call + k, sizeof call - (size_t)k, ",%d", devices[i]);
    snprintf(call + k, sizeof call - (size_t)k, ")");
    return fail(r, call, NULL, -1);
  }
  st_status s = ST_OK;
  for (int i = 0; i < n && s == ST_OK; i++)
    if (!(comms[i] = new_comm(raw[i], devices[i], i, n))) s = ST_ERR_NOMEM;
  for (int i = 0; s != ST_OK && i < n; i++) {
    g_nccl.destroy(raw[i]);
    free(comms[i]);
    comms[i] = NULL;
  }
  return s == ST_OK ? ST_OK : st__cuda_host_fns.error(s, "ncclCommInitAll: out of memory");
}

static st_status init_all(int n, st_backend_ctx *const *ctxs, st__nccl_comm **comms) {
  for (int r = 0; r < n; r++) comms[r] = NULL;
  st_status s = loaded("ncclCommInitAll");
  if (s == ST_OK && n < 1)
    s = st__cuda_host_fns.error(ST_ERR_INVALID, "ncclCommInitAll: %d ranks", n);
  if (s != ST_OK) return s;
  int *devices = calloc((size_t)n, sizeof *devices);
  st__ncclComm_t *raw = calloc((size_t)n, sizeof *raw);
  if (!devices || !raw) {
    free(devices), free(raw);
    return st__cuda_host_fns.error(ST_ERR_NOMEM, "ncclCommInitAll: out of memory");
  }
  s = devices_of(n, ctxs, devices);
  if (s == ST_OK) s = distinct_devices(n, devices);
  if (s == ST_OK) s = init_all_devices(n, devices, raw, comms);
  free(devices);
  free(raw);
  return s;
}

static st_status unique_id(unsigned char id[ST__NCCL_ID_BYTES]) {
  st_status s = loaded("ncclGetUniqueId");
  if (s != ST_OK) return s;
  st__ncclUniqueId u;
  st__ncclResult_t r = g_nccl.get_unique_id(&u);
  if (r != st__ncclSuccess) return fail(r, "ncclGetUniqueId", NULL, -1);
  memcpy(id, u.internal, sizeof u.internal);
  return ST_OK;
}

static st_status init_rank(int nranks, const unsigned char id[ST__NCCL_ID_BYTES], int rank,
                           st_backend_ctx *ctx, st__nccl_comm **comm) {
  *comm = NULL;
  int device = 0;
  st_status s = loaded("ncclCommInitRank");
  if (s == ST_OK) s = devices_of(1, &ctx, &device);
  if (s != ST_OK) return s;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return st__cuda_host_fns.error(ST_ERR_INVALID, "ncclCommInitRank: rank %d of %d", rank,
                                   nranks);
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return st__cuda_host_fns.error(ST_ERR_INVALID, "ncclCommInitRank: gpu:%d: cudaSetDevice "
                                   "failed: %s", device, cudaGetErrorString(e));
  st__ncclUniqueId u;
  memcpy(u.internal, id, sizeof u.internal);
  st__ncclComm_t raw = NULL;
  st__ncclResult_t r = g_nccl.init_rank(&raw, nranks, u, rank);
  if (r != st__ncclSuccess) {
    st__nccl_comm who = {.rank = rank, .nranks = nranks};
    return fail(r, "ncclCommInitRank", &who, device);
  }
  if (!(*comm = new_comm(raw, device, rank, nranks))) {
    g_nccl.destroy(raw);
    return st__cuda_host_fns.error(ST_ERR_NOMEM, "ncclCommInitRank: out of memory");
  }
  return ST_OK;
}

static void destroy(st__nccl_comm *c) {
  if (!c) return;
  cudaSetDevice(c->device);
  g_nccl.destroy(c->comm);
  free(c);
}

static void abort_comm(st__nccl_comm *c) {
  if (!c) return;
  cudaSetDevice(c->device);
  g_nccl.abort(c->comm);
  free(c);
}

/* Before an operation: the context's state with the rank's device current,
 * or NULL and an error (what: the NCCL call, for messages). */
static st__cuda_ctx *prepare(st__nccl_comm *c, st_backend_ctx *ctx, const char *what,
                             st_status *s) {
  st__cuda_ctx *x = cuda_ctx(ctx);
  if (!x || x->device != c->device) {
    *s = st__cuda_host_fns.error(ST_ERR_INVALID, "%s: rank %d of %d is on gpu:%d but its "
                                 "context is %s%d", what, c->rank, c->nranks, c->device,
                                 x ? "on gpu:" : "not a cuda context: ", x ? x->device : 0);
    return NULL;
  }
  cudaError_t e = cudaSetDevice(c->device);
  st__ncclResult_t async = st__ncclSuccess;
  if (e != cudaSuccess)
    *s = st__cuda_host_fns.error(ST_ERR_INTERNAL, "%s: gpu:%d: cudaSetDevice failed: %s",
                                 what, c->device, cudaGetErrorString(e));
  else if (g_nccl.async_error(c->comm, &async) != st__ncclSuccess || async != st__ncclSuccess)
    *s = fail(async, "an earlier NCCL operation (ncclCommGetAsyncError)", c, c->device);
  else
    *s = ST_OK;
  return *s == ST_OK ? x : NULL;
}

/* MEAN scales on the stream after NCCL's kernel, which a group launches
 * only at ncclGroupEnd: refused inside a group (scale after it instead). */
static st_status mean_in_group(const char *what, bool mean) {
  if (!mean || t_group == 0) return ST_OK;
  return st__cuda_host_fns.error(ST_ERR_INVALID, "%s: MEAN inside ncclGroupStart/End: its "
                                 "scale would run before the reduction; reduce with SUM and "
                                 "scale after ncclGroupEnd", what);
}

/* The result of an enqueue (and MEAN's scale by 1/nranks, on the stream). */
static st_status done(st__ncclResult_t r, const char *call, st__nccl_comm *c,
                      st__cuda_ctx *x, float *out, size_t n, bool mean) {
  if (r != st__ncclSuccess) return fail(r, call, c, c->device);
  if (mean && n) {
    st__cuda_scale(x->stream, n, 1.0f / (float)c->nranks, out);
    if (!st__cuda_ok(x, cudaGetLastError(), "scale (NCCL mean)"))
      return st__cuda_host_fns.error(ST_ERR_INTERNAL, "%s", x->error);
  }
  return ST_OK;
}

static st_status all_reduce(st__nccl_comm *c, st_backend_ctx *ctx, float *buf, size_t n,
                            bool mean) {
  st_status s;
  st__cuda_ctx *x = prepare(c, ctx, "ncclAllReduce", &s);
  if (!x || (s = mean_in_group("ncclAllReduce", mean)) != ST_OK) return s;
  st__ncclResult_t r = g_nccl.all_reduce(buf, buf, n, st__ncclFloat32, st__ncclSum, c->comm,
                                         x->stream);
  return done(r, "ncclAllReduce", c, x, buf, n, mean);
}

static st_status broadcast(st__nccl_comm *c, st_backend_ctx *ctx, float *buf, size_t n,
                           int root) {
  st_status s;
  st__cuda_ctx *x = prepare(c, ctx, "ncclBroadcast", &s);
  if (!x) return s;
  if (root < 0 || root >= c->nranks)
    return st__cuda_host_fns.error(ST_ERR_INVALID, "ncclBroadcast: root %d out of range "
                                   "[0, %d)", root, c->nranks);
  st__ncclResult_t r = g_nccl.broadcast(buf, buf, n, st__ncclFloat32, root, c->comm, x->stream);
  return done(r, "ncclBroadcast", c, x, buf, n, false);
}

static st_status all_gather(st__nccl_comm *c, st_backend_ctx *ctx, const float *send,
                            size_t n, float *recv) {
  st_status s;
  st__cuda_ctx *x = prepare(c, ctx, "ncclAllGather", &s);
  if (!x) return s;
  st__ncclResult_t r = g_nccl.all_gather(send, recv, n, st__ncclFloat32, c->comm, x->stream);
  return done(r, "ncclAllGather", c, x, recv, n, false);
}

static st_status reduce_scatter(st__nccl_comm *c, st_backend_ctx *ctx, const float *send,
                                float *recv, size_t n, bool mean) {
  st_status s;
  st__cuda_ctx *x = prepare(c, ctx, "ncclReduceScatter", &s);
  if (!x || (s = mean_in_group("ncclReduceScatter", mean)) != ST_OK) return s;
  st__ncclResult_t r = g_nccl.reduce_scatter(send, recv, n, st__ncclFloat32, st__ncclSum,
                                             c->comm, x->stream);
  return done(r, "ncclReduceScatter", c, x, recv, n, mean);
}

static int device_of(st_backend_ctx *ctx) {
  st__cuda_ctx *x = cuda_ctx(ctx);
  return x ? x->device : -1;
}

static st_status group_call(bool start) {
  const char *call = start ? "ncclGroupStart" : "ncclGroupEnd";
  st_status s = loaded(call);
  if (s != ST_OK) return s;
  st__ncclResult_t r = start ? g_nccl.group_start() : g_nccl.group_end();
  if (start && r == st__ncclSuccess) t_group++;
  if (!start && t_group > 0) t_group--; /* ncclGroupEnd closes the group even when it fails */
  return r == st__ncclSuccess ? ST_OK : fail(r, call, NULL, -1);
}
static st_status group_start(void) { return group_call(true); }
static st_status group_end(void) { return group_call(false); }

const st__cuda_nccl st__cuda_nccl_table = {
    .version = version,
    .init_all = init_all,
    .unique_id = unique_id,
    .init_rank = init_rank,
    .destroy = destroy,
    .abort = abort_comm,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .all_gather = all_gather,
    .reduce_scatter = reduce_scatter,
    .device_of = device_of,
    .group_start = group_start,
    .group_end = group_end,
};
