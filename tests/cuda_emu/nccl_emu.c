/* An emulated NCCL (tests/cuda_emu/), built as build/cuda_emu/nccl/libnccl.so.2
 * over the emulated CUDA runtime (libcudart_emu.so): the functions that the
 * CUDA module's src/backend/cuda/nccl.c uses (src/backend/cuda/nccl_api.h),
 * over host memory, so CI runs the module's NCCL path without a GPU
 * ($STRATA_NCCL_LIB or LD_LIBRARY_PATH make the module open this file).
 *
 * What it does as NCCL does: one communicator per rank; ncclCommInitAll
 * (one process) and ncclGetUniqueId + ncclCommInitRank (threads or
 * processes: the id names a POSIX shared-memory file, so ranks in several
 * processes of one machine meet too; InitRank returns once every rank has
 * joined); two ranks on one device refused as "Duplicate GPU"
 * (ncclInvalidUsage); each rank's call from its own thread (the calls meet
 * on the host: the emulated runtime is synchronous, so the operation is
 * complete when the call returns); ncclGroupStart/End per thread, one thread
 * may drive several ranks inside a group (at ncclGroupEnd each rank's queued
 * operations run on a thread of their own); ncclCommAbort wakes the ranks
 * waiting for the aborted one (ncclRemoteError).
 *
 * What it does NOT do as NCCL does: the sums are in rank order 0, 1, ...,
 * n-1 (((x0 + x1) + x2) ...), the CPU threads transport's order, so results
 * equal the CPU's bytes; real NCCL sums in ring/tree order. Float32 and
 * ncclSum only. Data go through the shared file in rounds of CHUNK floats
 * per rank. A rank waiting more than $STRATA_NCCL_EMU_TIMEOUT seconds
 * (default 60) for the others fails (ncclRemoteError) instead of hanging.
 * Test fixture only. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/nccl_api.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_RANKS 16
#define CHUNK (1u << 16) /* floats per rank per round */
#define MAGIC 0x5354524e43434c31ull /* "STRNCCL1" */
#define ID_TAG "strata-nccl-emu:"

enum op_kind { OP_ALL_REDUCE = 1, OP_BROADCAST, OP_ALL_GATHER, OP_REDUCE_SCATTER };

/* What each rank called (all must agree). */
typedef struct call_arg {
  int kind, root;
  size_t count;
} call_arg;

/* The shared file: one per communicator set. */
typedef struct shared {
  uint64_t magic;
  pthread_mutex_t mu; /* process-shared, robust */
  pthread_cond_t cv;  /* process-shared */
  int nranks, joined, arrived, aborted;
  unsigned gen;
  int device[MAX_RANKS], present[MAX_RANKS];
  call_arg arg[MAX_RANKS];
  float data[MAX_RANKS][CHUNK];
} shared;

struct ncclComm {
  shared *sh;
  int rank, nranks, device;
};
typedef struct ncclComm comm_t;

static _Thread_local char t_last[256]; /* ncclGetLastError */

static st__ncclResult_t failed(st__ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static st__ncclResult_t failed(st__ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_last, sizeof t_last, fmt, ap);
  va_end(ap);
  return r;
}

EXPORT st__ncclResult_t ncclGetVersion(int *v) {
  *v = 22800; /* 2.28.0 */
  return st__ncclSuccess;
}

EXPORT const char *ncclGetErrorString(st__ncclResult_t r) {
  switch (r) {
    case st__ncclSuccess: return "no error";
    case st__ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case st__ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case st__ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case st__ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case st__ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case st__ncclRemoteError: return "remote process exited or there was a network error";
    case st__ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

EXPORT const char *ncclGetLastError(comm_t *comm) {
  (void)comm;
  return t_last;
}

static double timeout_s(void) {
  const char *env = getenv("STRATA_NCCL_EMU_TIMEOUT");
  double t = env ? atof(env) : 60.0;
  return t > 0 ? t : 60.0;
}

/* ---- the shared file --------------------------------------------------- */

/* Locks sh->mu; a holder that died leaves the group aborted. */
static void lock(shared *sh) {
  if (pthread_mutex_lock(&sh->mu) == EOWNERDEAD) {
    sh->aborted = 1;
    pthread_mutex_consistent(&sh->mu);
  }
}

static shared *map_file(const char *name, int flags) {
  int fd = shm_open(name, flags, 0600);
  if (fd < 0) return NULL;
  if ((flags & O_CREAT) && ftruncate(fd, sizeof(shared)) != 0) {
    close(fd);
    shm_unlink(name);
    return NULL;
  }
  void *p = mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

EXPORT st__ncclResult_t ncclGetUniqueId(st__ncclUniqueId *id) {
  static atomic_uint counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char name[96];
  snprintf(name, sizeof name, "/strata-nccl-emu-%d-%u-%ld", (int)getpid(),
           atomic_fetch_add(&counter, 1), (long)ts.tv_nsec);
  shared *sh = map_file(name, O_CREAT | O_EXCL | O_RDWR);
  if (!sh) return failed(st__ncclSystemError, "emulated NCCL: shm_open %s: %s", name,
                         strerror(errno));
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&sh->mu, &ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&sh->cv, &ca);
  sh->magic = MAGIC;
  munmap(sh, sizeof *sh);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "%s%s", ID_TAG, name);
  return st__ncclSuccess;
}

/* Waits on sh->cv (locked) until *flag changes from `old` (or the group is
 * aborted); false after the timeout, which aborts the group. */
static bool wait_change(shared *sh, const volatile unsigned *word, unsigned old, double limit) {
  struct timespec end;
  clock_gettime(CLOCK_MONOTONIC, &end);
  end.tv_sec += (time_t)limit;
  while (*word == old && !sh->aborted) {
    if (pthread_cond_timedwait(&sh->cv, &sh->mu, &end) == ETIMEDOUT) {
      sh->aborted = 1;
      pthread_cond_broadcast(&sh->cv);
      return false;
    }
  }
  return true;
}

/* Rank `rank` of the set named by id joins (does not wait for the others). */
static st__ncclResult_t join(const st__ncclUniqueId *id, int nranks, int rank, int device,
                             comm_t **out) {
  *out = NULL;
  if (strncmp(id->internal, ID_TAG, strlen(ID_TAG)) != 0)
    return failed(st__ncclInvalidArgument, "emulated NCCL: not an id of ncclGetUniqueId");
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
    return failed(st__ncclInvalidArgument, "emulated NCCL: rank %d of %d (at most %d ranks)",
                  rank, nranks, MAX_RANKS);
  const char *name = id->internal + strlen(ID_TAG);
  shared *sh = map_file(name, O_RDWR);
  if (!sh || sh->magic != MAGIC)
    return failed(st__ncclSystemError, "emulated NCCL: the id's file %s is gone (every rank "
                  "joined already?)", name);
  comm_t *c = calloc(1, sizeof *c);
  st__ncclResult_t r = st__ncclSuccess;
  lock(sh);
  if (!c) r = failed(st__ncclSystemError, "emulated NCCL: out of memory");
  else if (sh->nranks && sh->nranks != nranks)
    r = failed(st__ncclInvalidUsage, "emulated NCCL: rank %d says %d ranks, another %d", rank,
               nranks, sh->nranks);
  else if (sh->present[rank])
    r = failed(st__ncclInvalidUsage, "emulated NCCL: rank %d joined twice", rank);
  if (r == st__ncclSuccess) {
    sh->nranks = nranks;
    sh->present[rank] = 1;
    sh->device[rank] = device;
    if (++sh->joined == nranks) shm_unlink(name); /* complete: nothing left behind */
    pthread_cond_broadcast(&sh->cv);
    *c = (comm_t){.sh = sh, .rank = rank, .nranks = nranks, .device = device};
    *out = c;
  }
  pthread_mutex_unlock(&sh->mu);
  if (r != st__ncclSuccess) {
    free(c);
    munmap(sh, sizeof *sh);
  }
  return r;
}

/* "Duplicate GPU" as NCCL reports it, when two joined ranks share a device. */
static st__ncclResult_t duplicate(const int *device, int n) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      if (device[i] == device[j])
        return failed(st__ncclInvalidUsage, "Duplicate GPU detected : rank %d and rank %d "
                      "both on CUDA device %d", i, j, device[i]);
  return st__ncclSuccess;
}

static void detach(comm_t *c) {
  munmap(c->sh, sizeof *c->sh);
  free(c);
}

EXPORT st__ncclResult_t ncclCommInitRank(comm_t **comm, int nranks, st__ncclUniqueId id,
                                         int rank) {
  int device = 0;
  cudaGetDevice(&device);
  comm_t *c;
  st__ncclResult_t r = join(&id, nranks, rank, device, &c);
  if (r != st__ncclSuccess) return r;
  shared *sh = c->sh;
  lock(sh);
  bool ok = true;
  while (ok && sh->joined < nranks && !sh->aborted)
    ok = wait_change(sh, (const volatile unsigned *)&sh->joined, (unsigned)sh->joined,
                     timeout_s());
  if (!ok || sh->aborted) r = failed(st__ncclRemoteError, "emulated NCCL: rank %d: the other "
                                     "ranks did not join (%d of %d)", rank, sh->joined, nranks);
  else r = duplicate(sh->device, nranks);
  pthread_mutex_unlock(&sh->mu);
  if (r != st__ncclSuccess) {
    shm_unlink(id.internal + strlen(ID_TAG)); /* when some rank never came */
    detach(c);
  }
  else *comm = c;
  return r;
}

EXPORT st__ncclResult_t ncclCommInitAll(comm_t **comms, int n, const int *devlist) {
  if (n < 1 || n > MAX_RANKS)
    return failed(st__ncclInvalidArgument, "emulated NCCL: %d ranks (1 to %d)", n, MAX_RANKS);
  int devs[MAX_RANKS];
  for (int i = 0; i < n; i++) devs[i] = devlist ? devlist[i] : i;
  st__ncclResult_t r = duplicate(devs, n);
  st__ncclUniqueId id;
  if (r == st__ncclSuccess) r = ncclGetUniqueId(&id);
  for (int i = 0; i < n && r == st__ncclSuccess; i++) {
    r = join(&id, n, i, devs[i], &comms[i]);
    for (int j = 0; r != st__ncclSuccess && j < i; j++) detach(comms[j]);
  }
  return r;
}

EXPORT st__ncclResult_t ncclCommDestroy(comm_t *c) {
  if (c) detach(c);
  return st__ncclSuccess;
}

EXPORT st__ncclResult_t ncclCommAbort(comm_t *c) {
  if (!c) return st__ncclSuccess;
  lock(c->sh);
  c->sh->aborted = 1;
  pthread_cond_broadcast(&c->sh->cv);
  pthread_mutex_unlock(&c->sh->mu);
  detach(c);
  return st__ncclSuccess;
}

EXPORT st__ncclResult_t ncclCommGetAsyncError(comm_t *c, st__ncclResult_t *err) {
  *err = c->sh->aborted ? st__ncclRemoteError : st__ncclSuccess;
  return st__ncclSuccess;
}

/* ---- operations -------------------------------------------------------- */

/* The meeting of the ranks between the phases of a round. */
static st__ncclResult_t barrier(comm_t *c) {
  shared *sh = c->sh;
  lock(sh);
  st__ncclResult_t r = st__ncclSuccess;
  if (sh->aborted) {
    r = failed(st__ncclRemoteError, "emulated NCCL: rank %d: a peer aborted", c->rank);
  } else if (++sh->arrived == c->nranks) {
    sh->arrived = 0;
    sh->gen++;
    pthread_cond_broadcast(&sh->cv);
  } else if (!wait_change(sh, &sh->gen, sh->gen, timeout_s()) || sh->aborted) {
    r = failed(st__ncclRemoteError, "emulated NCCL: rank %d: %s", c->rank,
               sh->aborted ? "a peer aborted or did not call within the timeout"
                           : "timeout");
  }
  pthread_mutex_unlock(&sh->mu);
  return r;
}

typedef struct op {
  comm_t *comm;
  int kind, root;
  const float *send;
  float *recv;
  size_t count;
} op;

/* emu.c: the guarded device arena is accessible between these. */
void st__emu_device_enter(void);
void st__emu_device_leave(void);

/* Round [off, off + len) of op o, phase 1: this rank's inputs into its slot. */
static void put_rows(const op *o, size_t off, size_t len);
static void put(const op *o, size_t off, size_t len) {
  st__emu_device_enter();
  put_rows(o, off, len);
  st__emu_device_leave();
}
static void put_rows(const op *o, size_t off, size_t len) {
  comm_t *c = o->comm;
  float *mine = c->sh->data[c->rank];
  if (o->kind == OP_REDUCE_SCATTER) {
    for (int r = 0; r < c->nranks; r++)
      memcpy(mine + (size_t)r * len, o->send + (size_t)r * o->count + off, len * sizeof(float));
  } else if (o->kind != OP_BROADCAST || c->rank == o->root) {
    memcpy(mine, o->send + off, len * sizeof(float));
  }
}

/* Phase 2: this rank's outputs from every slot, sums in rank order. */
static void get_rows(const op *o, size_t off, size_t len);
static void get(const op *o, size_t off, size_t len) {
  st__emu_device_enter();
  get_rows(o, off, len);
  st__emu_device_leave();
}
static void get_rows(const op *o, size_t off, size_t len) {
  comm_t *c = o->comm;
  float (*d)[CHUNK] = c->sh->data;
  if (o->kind == OP_ALL_GATHER) {
    for (int r = 0; r < c->nranks; r++)
      memcpy(o->recv + (size_t)r * o->count + off, d[r], len * sizeof(float));
    return;
  }
  if (o->kind == OP_BROADCAST) {
    memcpy(o->recv + off, d[o->root], len * sizeof(float));
    return;
  }
  size_t at = o->kind == OP_REDUCE_SCATTER ? (size_t)c->rank * len : 0;
  float *out = o->recv + off;
  memcpy(out, d[0] + at, len * sizeof(float));
  for (int r = 1; r < c->nranks; r++)
    for (size_t i = 0; i < len; i++) out[i] += d[r][at + i];
}

/* Every rank must pass the same kind, count and root (checked by each). */
static st__ncclResult_t agree(const op *o) {
  comm_t *c = o->comm;
  for (int r = 0; r < c->nranks; r++) {
    const call_arg *a = &c->sh->arg[r];
    if (a->kind != o->kind || a->count != o->count || a->root != o->root)
      return failed(st__ncclInvalidUsage, "emulated NCCL: rank %d called operation %d "
                    "(count %zu, root %d) while rank %d called %d (count %zu, root %d)", r,
                    a->kind, a->count, a->root, c->rank, o->kind, o->count, o->root);
  }
  return st__ncclSuccess;
}

static st__ncclResult_t run(const op *o) {
  comm_t *c = o->comm;
  c->sh->arg[c->rank].kind = o->kind;
  c->sh->arg[c->rank].root = o->root;
  c->sh->arg[c->rank].count = o->count;
  st__ncclResult_t r = barrier(c);
  if (r == st__ncclSuccess) r = agree(o);
  /* Nothing to move: meet once more, so that no rank writes its next
   * call's arguments while another still reads these. */
  if (r == st__ncclSuccess && o->count == 0) r = barrier(c);
  size_t step = o->kind == OP_REDUCE_SCATTER ? CHUNK / (size_t)c->nranks : CHUNK;
  for (size_t off = 0; r == st__ncclSuccess && off < o->count; off += step) {
    size_t len = o->count - off < step ? o->count - off : step;
    put(o, off, len);
    r = barrier(c);
    if (r == st__ncclSuccess) get(o, off, len);
    if (r == st__ncclSuccess) r = barrier(c);
  }
  return r;
}

/* ---- groups: per thread ----------------------------------------------- */

static _Thread_local int t_depth;
static _Thread_local op *t_queue;
static _Thread_local size_t t_queued, t_cap;

EXPORT st__ncclResult_t ncclGroupStart(void) {
  t_depth++;
  return st__ncclSuccess;
}

typedef struct lane {
  pthread_t th;
  comm_t *comm;
  const op *ops;
  size_t n;
  st__ncclResult_t r;
  char last[256];
} lane;

/* One rank's queued operations, in order (a thread per rank at GroupEnd). */
static void *run_lane(void *arg) {
  lane *l = arg;
  l->r = st__ncclSuccess;
  for (size_t i = 0; i < l->n && l->r == st__ncclSuccess; i++)
    if (l->ops[i].comm == l->comm) l->r = run(&l->ops[i]);
  memcpy(l->last, t_last, sizeof l->last);
  return NULL;
}

static st__ncclResult_t run_group(const op *ops, size_t n) {
  lane lanes[MAX_RANKS * 4];
  size_t nl = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < nl && lanes[k].comm != ops[i].comm) k++;
    if (k == nl) {
      if (nl == sizeof lanes / sizeof *lanes)
        return failed(st__ncclInvalidUsage, "emulated NCCL: too many ranks in one group");
      lanes[nl++] = (lane){.comm = ops[i].comm, .ops = ops, .n = n};
    }
  }
  if (nl == 1) return run_lane(&lanes[0]), lanes[0].r;
  size_t started = 0;
  while (started < nl && pthread_create(&lanes[started].th, NULL, run_lane, &lanes[started]) == 0)
    started++;
  for (size_t k = 0; k < started; k++) pthread_join(lanes[k].th, NULL);
  if (started < nl) return failed(st__ncclSystemError, "emulated NCCL: pthread_create failed");
  for (size_t k = 0; k < nl; k++)
    if (lanes[k].r != st__ncclSuccess) {
      memcpy(t_last, lanes[k].last, sizeof t_last);
      return lanes[k].r;
    }
  return st__ncclSuccess;
}

EXPORT st__ncclResult_t ncclGroupEnd(void) {
  if (t_depth < 1) return failed(st__ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_depth > 0) return st__ncclSuccess;
  st__ncclResult_t r = run_group(t_queue, t_queued);
  t_queued = 0;
  return r;
}

/* An operation: queued inside a group, else run now. */
static st__ncclResult_t submit(op o, int dtype, int redop) {
  if (!o.comm) return failed(st__ncclInvalidArgument, "emulated NCCL: comm is NULL");
  if (dtype != st__ncclFloat32 || redop != st__ncclSum)
    return failed(st__ncclInvalidArgument, "emulated NCCL: float32 and ncclSum only");
  if (o.count && (!o.send || !o.recv))
    return failed(st__ncclInvalidArgument, "emulated NCCL: NULL buffer");
  if (o.root < 0 || o.root >= o.comm->nranks)
    return failed(st__ncclInvalidArgument, "emulated NCCL: root %d", o.root);
  if (t_depth == 0) return run(&o);
  if (t_queued == t_cap) {
    size_t cap = t_cap ? 2 * t_cap : 16;
    op *q = realloc(t_queue, cap * sizeof *q);
    if (!q) return failed(st__ncclSystemError, "emulated NCCL: out of memory");
    t_queue = q, t_cap = cap;
  }
  t_queue[t_queued++] = o;
  return st__ncclSuccess;
}

EXPORT st__ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int dtype,
                                      int redop, comm_t *comm, cudaStream_t s) {
  (void)s;
  return submit((op){comm, OP_ALL_REDUCE, 0, send, recv, count}, dtype, redop);
}

EXPORT st__ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, int dtype,
                                      int root, comm_t *comm, cudaStream_t s) {
  (void)s;
  return submit((op){comm, OP_BROADCAST, root, send, recv, count}, dtype, st__ncclSum);
}

EXPORT st__ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, int dtype,
                                      comm_t *comm, cudaStream_t s) {
  (void)s;
  return submit((op){comm, OP_ALL_GATHER, 0, send, recv, count}, dtype, st__ncclSum);
}

EXPORT st__ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                                          int dtype, int redop, comm_t *comm,
                                          cudaStream_t s) {
  (void)s;
  return submit((op){comm, OP_REDUCE_SCATTER, 0, send, recv, count}, dtype, redop);
}
