/* The NCCL collective (src/distribute/collective/nccl.c) and the CUDA
 * module's NCCL table (src/backend/cuda/nccl.c) on the emulated CUDA module
 * and the emulated NCCL of tests/cuda_emu/ (host memory; sums in rank
 * order): for 2 and 3 ranks in threads, every operation on "device" buffers
 * of cuda contexts gives the bytes of the CPU threads transport
 * (threads.c) on the same inputs; the one-rank-per-process kind (bootstrapped
 * over a stand-in process transport), the grouped calls of one thread over
 * every rank, abort/reset, and the errors: no libnccl.so.2 (message naming
 * it), two ranks on one GPU, a context that is not a cuda one.
 *
 * The process re-executes itself once with the environment the emulation
 * needs (the emulated module, the stand-in libcuda.so.1 on LD_LIBRARY_PATH,
 * the emulated libnccl.so.2, 4 emulated GPUs). Skips (77) without the
 * emulated module (no C++ compiler) or the stand-in driver.
 *
 * On a GPU machine, STRATA_NCCL_REAL=1 runs the same cases on the real
 * module and libnccl.so.2 with the GPUs there are (cases needing more skip
 * themselves, saying so): with one GPU, one-rank sets (every call of the
 * module's NCCL path, the fallbacks' errors); bytes are compared exactly up
 * to 2 ranks (one addition: any order gives the same float) and within 1e-5
 * relative from 3 (NCCL's order is not rank order). Skips (77) without a
 * GPU. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda.h"
#include "check.h"
#include "distribute/collective/collective.h"
#include "strata/backend.h"
#include "strata/base.h"

#define MAXR 4
enum { AR, AR_MEAN, BC, AG, AG_INPLACE, RS, RS_MEAN, RS_INPLACE, OPS, BARRIER = OPS };
static const char *const k_op_names[OPS] = {"all_reduce", "all_reduce mean", "broadcast",
                                            "all_gather", "all_gather in place",
                                            "reduce_scatter", "reduce_scatter mean",
                                            "reduce_scatter in place"};

static const st_backend *g_gpu;
static st_backend_ctx *g_ctx[MAXR]; /* gpu:0 .. gpu:(g_count - 1) */
static int g_count;                 /* GPUs used: 4 emulated, or the real ones (<= 4) */
static bool g_real;                 /* STRATA_NCCL_REAL=1: the real module and NCCL */

/* Whether `size` ranks fit on distinct GPUs here (else says why it skips). */
static bool have_gpus(int size, const char *what) {
  if (size <= g_count) return true;
  printf("  %s: skipped: needs %d GPUs, this machine has %d\n", what, size, g_count);
  return false;
}

/* ---- one operation on every rank, each in its own thread ------------------ */
typedef struct run {
  st_collective *c;
  int size, op, root;
  size_t n;
  float *buf[MAXR]; /* host (threads) or device (nccl) buffers: in/out */
  float *out[MAXR]; /* all_gather / reduce_scatter receive buffers */
  st_status st[MAXR];
} run;
typedef struct { run *r; int rank; } targ;

static void *rank_main(void *p) {
  targ *a = p;
  run *r = a->r;
  int k = a->rank;
  size_t n = r->n;
  st_collective *c = r->c;
  switch (r->op) {
    case AR: r->st[k] = c->vt->all_reduce(c, k, r->buf[k], n, ST_REDUCE_SUM); break;
    case AR_MEAN: r->st[k] = c->vt->all_reduce(c, k, r->buf[k], n, ST_REDUCE_MEAN); break;
    case BC: r->st[k] = c->vt->broadcast(c, k, r->buf[k], n, r->root); break;
    case AG: r->st[k] = c->vt->all_gather(c, k, r->buf[k], n, r->out[k]); break;
    case AG_INPLACE: /* send = recv + rank * n */
      r->st[k] = c->vt->all_gather(c, k, r->out[k] + (size_t)k * n, n, r->out[k]);
      break;
    case RS: r->st[k] = c->vt->reduce_scatter(c, k, r->buf[k], r->out[k], n, ST_REDUCE_SUM); break;
    case RS_MEAN:
      r->st[k] = c->vt->reduce_scatter(c, k, r->buf[k], r->out[k], n, ST_REDUCE_MEAN);
      break;
    case RS_INPLACE: /* recv = send + rank * n */
      r->st[k] = c->vt->reduce_scatter(c, k, r->buf[k], r->buf[k] + (size_t)k * n, n,
                                       ST_REDUCE_SUM);
      break;
    case BARRIER: r->st[k] = c->vt->barrier(c, k); break;
  }
  return NULL;
}

static void run_all(run *r) {
  pthread_t th[MAXR];
  targ a[MAXR];
  for (int k = 0; k < r->size; k++) {
    a[k] = (targ){r, k};
    pthread_create(&th[k], NULL, rank_main, &a[k]);
  }
  for (int k = 0; k < r->size; k++) pthread_join(th[k], NULL);
}

/* Floats of many magnitudes and signs, so another summation order shows. */
static void fill_input(float *x, size_t len, int rank, int op) {
  uint32_t s = 2654435761u * (uint32_t)(rank + 1) + 97u * (uint32_t)op;
  for (size_t i = 0; i < len; i++) {
    s = s * 1664525u + 1013904223u;
    float m = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    int e = (int)((s >> 24) % 24) - 12;
    x[i] = ldexpf(m, e);
  }
}

/* Sizes of the input/output buffers of op for n elements on size ranks. */
static size_t in_len(int op, size_t n, int size) {
  return op == RS || op == RS_MEAN || op == RS_INPLACE ? n * (size_t)size : n;
}
static size_t out_len(int op, size_t n, int size) {
  return op == AG || op == AG_INPLACE ? n * (size_t)size : (op >= RS ? n : 0);
}

/* The operation on the threads transport (host) and on the nccl one
 * (device); every rank's result compared byte for byte. */
static void compare_op(st_collective *thr, st_collective *nc, int size, int op, size_t n,
                       int root) {
  size_t il = in_len(op, n, size), ol = out_len(op, n, size);
  run h = {.c = thr, .size = size, .op = op, .root = root, .n = n};
  run d = {.c = nc, .size = size, .op = op, .root = root, .n = n};
  float *in[MAXR];
  for (int k = 0; k < size; k++) {
    in[k] = malloc((il + 1) * sizeof(float));
    fill_input(in[k], il, k, op);
    h.buf[k] = malloc((il + 1) * sizeof(float));
    memcpy(h.buf[k], in[k], il * sizeof(float));
    h.out[k] = calloc(ol + 1, sizeof(float));
    if (op == AG_INPLACE) memcpy(h.out[k] + (size_t)k * n, in[k], n * sizeof(float));
    st_backend_ctx *g = g_ctx[k];
    d.buf[k] = g_gpu->alloc(g, (il + 1) * sizeof(float));
    d.out[k] = g_gpu->alloc(g, (ol + 1) * sizeof(float));
    g_gpu->to_device(g, d.buf[k], in[k], il * sizeof(float));
    g_gpu->to_device(g, d.out[k], h.out[k], ol * sizeof(float));
  }
  run_all(&h);
  run_all(&d);
  for (int k = 0; k < size; k++) {
    CHECK_MSG(h.st[k] == ST_OK && d.st[k] == ST_OK, "%s n=%zu rank %d: %s / %s",
              k_op_names[op], n, k, st_status_string(h.st[k]), st_status_string(d.st[k]));
    bool to_out = op == AG || op == AG_INPLACE || op == RS || op == RS_MEAN;
    size_t len = to_out ? ol : il;
    float *got = malloc((len + 1) * sizeof(float));
    g_gpu->to_host(g_ctx[k], got, to_out ? d.out[k] : d.buf[k], len * sizeof(float));
    const float *want = to_out ? h.out[k] : h.buf[k];
    if (g_real && size >= 3)
      CHECK_MSG(check_rel_diff(want, got, len) <= 1e-5, "%s n=%zu rank %d of %d: off by %g",
                k_op_names[op], n, k, size, check_rel_diff(want, got, len));
    else
      CHECK_MSG(memcmp(got, want, len * sizeof(float)) == 0, "%s n=%zu root=%d rank %d of %d: "
                "bytes differ from the threads transport's", k_op_names[op], n, root, k, size);
    free(got);
    g_gpu->free(g_ctx[k], d.buf[k]);
    g_gpu->free(g_ctx[k], d.out[k]);
    free(in[k]), free(h.buf[k]), free(h.out[k]);
  }
}

static void ops_for(int size) {
  if (!have_gpus(size, "operations")) return;
  st_backend_ctx *ctxs[MAXR] = {g_ctx[0], g_ctx[1], g_ctx[2], g_ctx[3]};
  st_collective *thr = NULL, *nc = NULL;
  CHECK_OK(st__collective_threads_create(size, ST_CROSS_ALL_REDUCE, &thr));
  CHECK_OK(st__collective_nccl_create(size, ctxs, ST_CROSS_ALL_REDUCE, &nc));
  if (!thr || !nc) goto done;
  CHECK_STREQ(nc->vt->name, "nccl");
  CHECK_EQ(nc->size, size);
  /* 0, small, odd, and more than one round of the emulator's 65536 floats */
  static const size_t sizes[] = {0, 1, 17, 1000, 70001};
  for (int op = 0; op < OPS; op++)
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
      size_t n = sizes[i];
      if (op >= RS && n > 30000) n = 30001; /* [size * n] inputs */
      compare_op(thr, nc, size, op, n, op == BC ? (int)(i % (size_t)size) : 0);
    }
  run b = {.c = nc, .size = size, .op = BARRIER};
  run_all(&b);
  for (int k = 0; k < size; k++) CHECK_OK(b.st[k]);
done:
  st__collective_destroy(nc);
  st__collective_destroy(thr);
}

static void test_ops_1(void) { ops_for(1); }
static void test_ops_2(void) { ops_for(2); }
static void test_ops_3(void) { ops_for(3); }

/* ---- errors --------------------------------------------------------------- */

/* Two ranks on one GPU (logical GPUs): refused before NCCL is asked. */
static void test_duplicate_gpu(void) {
  int g = g_count - 1; /* the last GPU */
  st_backend_ctx *ctxs[2] = {g_ctx[g], g_ctx[g]};
  st_collective *nc = NULL;
  CHECK_EQ(st__collective_nccl_create(2, ctxs, ST_CROSS_ALL_REDUCE, &nc), ST_ERR_INVALID);
  CHECK(nc == NULL);
  char want[80];
  snprintf(want, sizeof want, "ranks 0 and 1 are both on physical device %d", g);
  CHECK_MSG(strstr(st_last_error(), want) &&
            strstr(st_last_error(), "Duplicate GPU") &&
            strstr(st_last_error(), "in-process device reducer"), "%s", st_last_error());
}

static void test_not_cuda_context(void) {
  const st_backend *cpu = NULL;
  st_backend_ctx *c = NULL;
  CHECK_OK(st_backend_get("reference", &cpu));
  CHECK_OK(st_backend_ctx_create(cpu, 0, 1, &c));
  st_backend_ctx *ctxs[2] = {g_ctx[0], c};
  st_collective *nc = NULL;
  CHECK_EQ(st__collective_nccl_create(2, ctxs, ST_CROSS_ALL_REDUCE, &nc), ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "rank 1's context is not a cuda context (reference)"),
            "%s", st_last_error());
  st_backend_ctx_destroy(c);
}

/* The path of this program (for the child runs). */
static char g_self[PATH_MAX];

/* Without libnccl.so.2 (a path that does not exist): ST_ERR_NOT_BUILT naming
 * it, in a child process (NCCL is loaded once per process). */
static void test_missing_nccl(void) {
  char cmd[PATH_MAX + 128];
  snprintf(cmd, sizeof cmd, "STRATA_NCCL_LIB=/nonexistent/libnccl.so.2 "
           "STRATA_NCCL_PROBE_MISSING=1 '%s' 2>&1", g_self);
  FILE *f = popen(cmd, "r");
  char out[2048] = "";
  size_t len = f ? fread(out, 1, sizeof out - 1, f) : 0;
  out[len] = '\0';
  int rc = f ? pclose(f) : -1;
  CHECK_MSG(rc == 0, "probe exit %d: %s", rc, out);
  char want[64];
  snprintf(want, sizeof want, "status %d", (int)ST_ERR_NOT_BUILT);
  CHECK_MSG(strstr(out, want) && strstr(out, "/nonexistent/libnccl.so.2 cannot be loaded") &&
            strstr(out, "NCCL is not available"), "%s", out);
}

/* The child of test_missing_nccl: prints the status and message. */
static int probe_missing(void) {
  st_backend_ctx *ctxs[2] = {g_ctx[0], g_ctx[1]};
  st_collective *nc = NULL;
  st_status s = st__collective_nccl_create(2, ctxs, ST_CROSS_ALL_REDUCE, &nc);
  printf("status %d: %s\n", (int)s, st_last_error());
  st__collective_destroy(nc);
  return 0;
}

/* ---- abort and reset ------------------------------------------------------ */

/* Rank 1 waits in an all-reduce that rank 0 never joins (rank 0 leaves and
 * aborts the set instead): ST_ERR_PEER; later operations too until reset;
 * after it the set works again. */
static void test_abort_reset(void) {
  if (!have_gpus(2, "abort_reset")) return;
  st_backend_ctx *ctxs[2] = {g_ctx[0], g_ctx[1]};
  st_collective *nc = NULL, *thr = NULL;
  CHECK_OK(st__collective_nccl_create(2, ctxs, ST_CROSS_ALL_REDUCE, &nc));
  CHECK_OK(st__collective_threads_create(2, ST_CROSS_ALL_REDUCE, &thr));
  if (!nc || !thr) goto done;
  float *buf = g_gpu->alloc(g_ctx[1], 64 * sizeof(float));
  g_gpu->fill(g_ctx[1], 64, 1.0f, buf);
  run r = {.c = nc, .size = 2, .op = AR, .n = 64, .buf = {NULL, buf}};
  targ a = {&r, 1};
  pthread_t th;
  pthread_create(&th, NULL, rank_main, &a);
  usleep(20000); /* usually rank 1 is waiting by now; either way it gets ST_ERR_PEER */
  st__collective_abort(nc);
  pthread_join(th, NULL);
  CHECK_EQ(r.st[1], ST_ERR_PEER);
  run again = {.c = nc, .size = 2, .op = AR, .n = 64, .buf = {buf, buf}};
  rank_main(&(targ){&again, 0});
  CHECK_EQ(again.st[0], ST_ERR_PEER);
  g_gpu->free(g_ctx[1], buf);
  st__collective_reset(nc);
  compare_op(thr, nc, 2, AR, 1000, 0);
done:
  st__collective_destroy(nc);
  st__collective_destroy(thr);
}

/* ---- the module's table: one thread drives both ranks in a group ---------- */

static void test_grouped_one_thread(void) {
  if (!have_gpus(2, "grouped_one_thread")) return;
  const st__cuda_module *m = NULL;
  CHECK_OK(st__cuda_load(&m));
  if (!m || !m->nccl) return;
  const st__cuda_nccl *api = m->nccl;
  st_backend_ctx *ctxs[2] = {g_ctx[0], g_ctx[1]};
  st__nccl_comm *comms[2] = {NULL, NULL};
  CHECK_OK(api->init_all(2, ctxs, comms));
  CHECK_EQ(api->device_of(g_ctx[1]), 1);
  enum { N = 300 };
  float x[2][N], got[2][N], *d[2];
  for (int k = 0; k < 2; k++) {
    fill_input(x[k], N, k, 42);
    d[k] = g_gpu->alloc(g_ctx[k], N * sizeof(float));
    g_gpu->to_device(g_ctx[k], d[k], x[k], sizeof x[k]);
  }
  CHECK_OK(api->group_start());
  for (int k = 0; k < 2; k++) CHECK_OK(api->all_reduce(comms[k], g_ctx[k], d[k], N, false));
  /* MEAN scales on the stream after NCCL's kernel: refused inside a group */
  CHECK_EQ(api->all_reduce(comms[0], g_ctx[0], d[0], N, true), ST_ERR_INVALID);
  CHECK_OK(api->group_end());
  for (int k = 0; k < 2; k++) {
    g_gpu->to_host(g_ctx[k], got[k], d[k], sizeof got[k]);
    g_gpu->free(g_ctx[k], d[k]);
  }
  int bad = 0;
  for (int i = 0; i < N; i++) bad += got[0][i] != x[0][i] + x[1][i] || got[1][i] != got[0][i];
  CHECK_EQ(bad, 0);
  /* a rank's call with another device's context */
  CHECK_EQ(api->broadcast(comms[0], g_ctx[1], NULL, 0, 0), ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "rank 0 of 2 is on gpu:0 but its context is on gpu:1"),
            "%s", st_last_error());
  for (int k = 0; k < 2; k++) api->destroy(comms[k]);
}

/* ---- one rank per process, bootstrapped over a process transport ---------- */

/* A stand-in process transport: rank `self` of a threads transport, as one
 * process of an MPI job sees its own (what st__collective_nccl_create_process
 * uses of it: size, self, broadcast and all_gather). */
typedef struct view {
  st_collective base;
  st_collective *inner;
} view;
static st_status v_broadcast(st_collective *c, int rank, float *buf, size_t n, int root) {
  return ((view *)c)->inner->vt->broadcast(((view *)c)->inner, rank, buf, n, root);
}
static st_status v_all_gather(st_collective *c, int rank, const float *send, size_t n,
                              float *recv) {
  return ((view *)c)->inner->vt->all_gather(((view *)c)->inner, rank, send, n, recv);
}
static const st_collective_vtable k_view_vt = {
    .name = "stand-in process", .broadcast = v_broadcast, .all_gather = v_all_gather};

typedef struct proc_arg {
  st_collective *threads;
  int rank, size;
  st_backend_ctx *ctx;
  st_status create, reduce;
  char why[512];
  float got[100], x[100];
} proc_arg;

static void *proc_main(void *p) {
  proc_arg *a = p;
  view v = {.base = {.vt = &k_view_vt, .size = a->size, .self = a->rank}, .inner = a->threads};
  st_collective *nc = NULL;
  a->create = st__collective_nccl_create_process(&v.base, a->ctx, &nc);
  snprintf(a->why, sizeof a->why, "%s", st_last_error());
  if (a->create != ST_OK) return NULL;
  fill_input(a->x, 100, a->rank, 7);
  float *d = g_gpu->alloc(a->ctx, sizeof a->x);
  g_gpu->to_device(a->ctx, d, a->x, sizeof a->x);
  a->reduce = nc->vt->all_reduce(nc, a->rank, d, 100, ST_REDUCE_SUM);
  g_gpu->to_host(a->ctx, a->got, d, sizeof a->got);
  g_gpu->free(a->ctx, d);
  st__collective_destroy(nc);
  return NULL;
}

static void run_procs(int size, st_backend_ctx *const *ctxs, proc_arg *a) {
  st_collective *thr = NULL;
  CHECK_OK(st__collective_threads_create(size, ST_CROSS_ALL_REDUCE, &thr));
  pthread_t th[MAXR];
  for (int k = 0; k < size; k++) {
    a[k] = (proc_arg){.threads = thr, .rank = k, .size = size, .ctx = ctxs[k]};
    pthread_create(&th[k], NULL, proc_main, &a[k]);
  }
  for (int k = 0; k < size; k++) pthread_join(th[k], NULL);
  st__collective_destroy(thr);
}

static void test_process_kind(void) {
  proc_arg a[3];
  int size = g_count < 3 ? g_count : 3;
  run_procs(size, g_ctx, a);
  for (int k = 0; k < size; k++) {
    CHECK_MSG(a[k].create == ST_OK && a[k].reduce == ST_OK, "rank %d: %s", k, a[k].why);
    int bad = 0;
    for (int i = 0; i < 100; i++) {
      float want = a[0].x[i]; /* rank order, as the CPU transports */
      for (int r = 1; r < size; r++) want += a[r].x[i];
      bool same = memcmp(&a[k].got[i], &want, sizeof want) == 0;
      if (g_real && size >= 3) same = fabsf(a[k].got[i] - want) <= 1e-5f * fabsf(want) + 1e-30f;
      bad += !same;
    }
    CHECK_MSG(bad == 0, "rank %d of %d: %d sums differ from rank order", k, size, bad);
  }
  /* two "processes" on one GPU of one machine: the same refusal on both */
  int g = g_count - 1;
  st_backend_ctx *same[2] = {g_ctx[g], g_ctx[g]};
  run_procs(2, same, a);
  char want[80];
  snprintf(want, sizeof want, "processes 0 and 1 are both on physical gpu:%d", g);
  for (int k = 0; k < 2; k++) {
    CHECK_EQ(a[k].create, ST_ERR_INVALID);
    CHECK_MSG(strstr(a[k].why, want), "%s", a[k].why);
  }
}

/* Two processes (fork) meet through the emulated NCCL's shared file: the
 * module's unique_id / init_rank / all_reduce across processes. Emulated
 * only (CUDA does not survive fork). */
static int process_rank(const st__cuda_nccl *api, const unsigned char *id, int rank,
                        float (*x)[64]) {
  st__nccl_comm *comm = NULL;
  if (api->init_rank(2, id, rank, g_ctx[rank], &comm) != ST_OK) return 2;
  float got[64], *d = g_gpu->alloc(g_ctx[rank], sizeof got);
  g_gpu->to_device(g_ctx[rank], d, x[rank], sizeof got);
  st_status s = api->all_reduce(comm, g_ctx[rank], d, 64, true);
  g_gpu->to_host(g_ctx[rank], got, d, sizeof got);
  g_gpu->free(g_ctx[rank], d);
  api->destroy(comm);
  int bad = s != ST_OK;
  for (int i = 0; i < 64; i++) bad += got[i] != (x[0][i] + x[1][i]) * 0.5f;
  return bad ? 1 : 0;
}

static void test_two_processes(void) {
  if (g_real) {
    printf("  two_processes: emulated only (CUDA does not survive fork)\n");
    return;
  }
  const st__cuda_module *m = NULL;
  CHECK_OK(st__cuda_load(&m));
  unsigned char id[ST__NCCL_ID_BYTES];
  CHECK_OK(m->nccl->unique_id(id));
  float x[2][64];
  for (int k = 0; k < 2; k++) fill_input(x[k], 64, k, 9);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) _exit(process_rank(m->nccl, id, 1, x));
  CHECK_EQ(process_rank(m->nccl, id, 0, x), 0);
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other process: status %d",
            status);
}

/* ---- main: the environment, then the cases -------------------------------- */

/* Re-executes this program with the emulation's environment; returns only
 * when that cannot be done (77: skip). */
static int reexec(char **argv) {
  char dir[PATH_MAX], path[PATH_MAX + 64], nccl[PATH_MAX + 64], lib[2 * PATH_MAX];
  snprintf(dir, sizeof dir, "%s", g_self);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  snprintf(path, sizeof path, "%s/cuda_emu/libstrata_cuda_emu.so", dir);
  snprintf(nccl, sizeof nccl, "%s/cuda_emu/nccl/libnccl.so.2", dir);
  if (access(path, R_OK) != 0 || access(nccl, R_OK) != 0) {
    printf("skip: no emulated CUDA module or NCCL in %s/cuda_emu (the build found no C++ "
           "compiler)\n", dir);
    return 77;
  }
  snprintf(lib, sizeof lib, "%s/fake_cuda/libcuda.so.1", dir);
  if (access(lib, R_OK) != 0) {
    printf("skip: no stand-in libcuda.so.1 (%s)\n", lib);
    return 77;
  }
  const char *old = getenv("LD_LIBRARY_PATH");
  snprintf(lib, sizeof lib, "%s/fake_cuda%s%s", dir, old && *old ? ":" : "", old ? old : "");
  setenv("LD_LIBRARY_PATH", lib, 1);
  setenv("STRATA_CUDA_MODULE", path, 1);
  setenv("STRATA_NCCL_LIB", nccl, 1);
  setenv("STRATA_EMU_GPUS", "4", 1);
  setenv("STRATA_NCCL_EMU_TIMEOUT", "30", 1);
  setenv("STRATA_NCCL_EMULATED_CHILD", "1", 1);
  execv(g_self, argv);
  printf("skip: cannot re-execute %s\n", g_self);
  return 77;
}

int main(int argc, char **argv) {
  ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  g_self[n > 0 ? n : 0] = '\0';
  const char *real = getenv("STRATA_NCCL_REAL");
  g_real = real && !strcmp(real, "1");
  if (!g_real && !getenv("STRATA_NCCL_EMULATED_CHILD")) return reexec(argv);
  if (st_backend_get("cuda", &g_gpu) != ST_OK || st__cuda_device_count(&g_count) != ST_OK ||
      (!g_real && g_count < MAXR)) {
    printf("skip: the %s CUDA module does not load or sees no GPU: %s\n",
           g_real ? "real" : "emulated", st_last_error());
    return 77;
  }
  if (g_count > MAXR) g_count = MAXR;
  for (int k = 0; k < g_count; k++)
    if (st_backend_ctx_create(g_gpu, k, 0, &g_ctx[k]) != ST_OK) {
      fprintf(stderr, "gpu:%d: %s\n", k, st_last_error());
      return 1;
    }
  int rc;
  if (getenv("STRATA_NCCL_PROBE_MISSING")) {
    rc = probe_missing();
  } else {
    static const check_case cases[] = {
        {"ops_1", test_ops_1},
        {"ops_2", test_ops_2},
        {"ops_3", test_ops_3},
        {"duplicate_gpu", test_duplicate_gpu},
        {"not_cuda_context", test_not_cuda_context},
        {"missing_nccl", test_missing_nccl},
        {"abort_reset", test_abort_reset},
        {"grouped_one_thread", test_grouped_one_thread},
        {"process_kind", test_process_kind},
        {"two_processes", test_two_processes},
    };
    rc = check_main(argc, argv, cases, sizeof cases / sizeof *cases);
  }
  for (int k = 0; k < g_count; k++) st_backend_ctx_destroy(g_ctx[k]);
  return rc;
}
