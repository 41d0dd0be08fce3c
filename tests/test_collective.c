/* The in-process collective (distribute/collective/threads.c): every operation
 * for 1..4 rank threads, both cross_device_ops, element counts from 0 to 16 MiB
 * of floats (odd sizes and chunk edges included). Reductions are checked
 * bit-exactly (memcmp on every rank) against a sequential sum in rank order
 * computed here; inputs span many magnitudes so another order would show. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "distribute/collective/collective.h"
#include "strata/base.h"

#define MAXR 4
/* Under a sanitizer every access is instrumented: skip the largest sizes. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define BIG_N ((size_t)1 << 18)
#else
#define BIG_N ((size_t)-1)
#endif

/* One collective run: fn(ctx, rank) on `size` threads (rank 0 on the caller). */
typedef struct ctx ctx;
typedef void (*rank_fn)(ctx *x, int rank);
struct ctx {
  st_collective *c;
  int size;
  size_t n;
  int arg;               /* reduce op or root */
  float *in[MAXR];       /* [n] or [size*n]: each rank's input, kept */
  float *buf[MAXR];      /* working buffers */
  float *out[MAXR];      /* receive buffers (all_gather, reduce_scatter) */
  st_status st[MAXR];
  rank_fn fn;
  atomic_int counter;
  int bad[MAXR];
};
typedef struct { ctx *x; int rank; } targ;

static void *thread_main(void *p) {
  targ *a = p;
  a->x->fn(a->x, a->rank);
  return NULL;
}

static void run_ranks(ctx *x, rank_fn fn) {
  pthread_t th[MAXR];
  targ a[MAXR];
  x->fn = fn;
  for (int r = 1; r < x->size; r++) {
    a[r] = (targ){x, r};
    CHECK(pthread_create(&th[r], NULL, thread_main, &a[r]) == 0);
  }
  fn(x, 0);
  for (int r = 1; r < x->size; r++) pthread_join(th[r], NULL);
}

/* Values over ~2^-12 .. 2^12 with both signs, seeded by (seed, rank). */
static void fill(float *p, size_t n, uint64_t seed, int rank) {
  st_rng g = st_rng_make(seed, (uint64_t)rank);
  for (size_t i = 0; i < n; i++) {
    uint32_t w = st_rng_u32(&g);
    float m = st_u32_to_unit(w) + 0.5f;
    p[i] = ldexpf((w & 1) ? -m : m, (int)(w >> 1 & 31) - 12);
  }
}

/* want[i] = ((in0 + in1) + ...) [ * (1/size) ], over in[r] + off. */
static void expected(const ctx *x, size_t off, size_t n, st_reduce_op op, float *want) {
  for (size_t i = 0; i < n; i++) {
    float s = x->in[0][off + i];
    for (int r = 1; r < x->size; r++) s += x->in[r][off + i];
    want[i] = op == ST_REDUCE_MEAN ? s * (1.0f / (float)x->size) : s;
  }
}

static void *xalloc(size_t bytes) {
  void *p = st_alloc(bytes);
  if (!p) check_skip("out of memory");
  return p;
}

static void ctx_init(ctx *x, int size, size_t n, size_t in_mult, size_t out_mult) {
  memset(x, 0, sizeof *x);
  x->size = size;
  x->n = n;
  for (int r = 0; r < size; r++) {
    x->in[r] = xalloc(n * in_mult * sizeof(float));
    x->buf[r] = xalloc(n * in_mult * sizeof(float));
    x->out[r] = xalloc(n * out_mult * sizeof(float));
    fill(x->in[r], n * in_mult, 1234 + n, r);
  }
}

static void ctx_free(ctx *x) {
  for (int r = 0; r < x->size; r++) {
    st_free(x->in[r]);
    st_free(x->buf[r]);
    st_free(x->out[r]);
  }
  st__collective_destroy(x->c);
}

/* ---- all_reduce ----------------------------------------------------------- */
static void do_all_reduce(ctx *x, int rank) {
  x->st[rank] = x->c->vt->all_reduce(x->c, rank, x->buf[rank], x->n, (st_reduce_op)x->arg);
}

static void test_all_reduce_case(int size, size_t n, st_cross_device_ops algo) {
  ctx x;
  ctx_init(&x, size, n, 1, 0);
  CHECK_OK(st__collective_threads_create(size, algo, &x.c));
  float *want = xalloc(n * sizeof(float) + 4);
  for (int op = 0; op < ST_REDUCE_COUNT; op++) {
    for (int r = 0; r < size; r++) memcpy(x.buf[r], x.in[r], n * sizeof(float));
    x.arg = op;
    run_ranks(&x, do_all_reduce);
    expected(&x, 0, n, (st_reduce_op)op, want);
    for (int r = 0; r < size; r++) {
      CHECK_OK(x.st[r]);
      CHECK_MSG(memcmp(x.buf[r], want, n * sizeof(float)) == 0,
                "all_reduce size=%d n=%zu algo=%s op=%d rank=%d", size, n,
                st__cross_device_ops_name(algo), op, r);
    }
  }
  st_free(want);
  ctx_free(&x);
}

static void test_all_reduce(void) {
  static const size_t ns[] = {1, 2, 15, 16, 17, 1000, 4097, (1u << 20) + 3, 4u << 20};
  for (int size = 1; size <= MAXR; size++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
      if (ns[k] == 4u << 20 && size != 2 && size != 3) continue;
      if (ns[k] > BIG_N && (size != 3 || ns[k] > (1u << 20) + 3)) continue; /* one big case */
      for (int algo = 0; algo < ST_CROSS_COUNT; algo++)
        test_all_reduce_case(size, ns[k], (st_cross_device_ops)algo);
    }
}

/* ---- broadcast ------------------------------------------------------------ */
static void do_broadcast(ctx *x, int rank) {
  x->st[rank] = x->c->vt->broadcast(x->c, rank, x->buf[rank], x->n, x->arg);
}

static void test_broadcast(void) {
  static const size_t ns[] = {1, 17, 4097, (1u << 20) + 3};
  for (int size = 1; size <= MAXR; size++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
      if (ns[k] > BIG_N) continue;
      ctx x;
      ctx_init(&x, size, ns[k], 1, 0);
      CHECK_OK(st__collective_threads_create(size, ST_CROSS_ALL_REDUCE, &x.c));
      for (int root = 0; root < size; root++) {
        for (int r = 0; r < size; r++) memcpy(x.buf[r], x.in[r], x.n * sizeof(float));
        x.arg = root;
        run_ranks(&x, do_broadcast);
        for (int r = 0; r < size; r++) {
          CHECK_OK(x.st[r]);
          CHECK_MSG(memcmp(x.buf[r], x.in[root], x.n * sizeof(float)) == 0,
                    "broadcast size=%d n=%zu root=%d rank=%d", size, x.n, root, r);
        }
      }
      ctx_free(&x);
    }
}

/* ---- all_gather ------------------------------------------------------------ */
static void do_all_gather(ctx *x, int rank) {
  x->st[rank] = x->c->vt->all_gather(x->c, rank, x->in[rank], x->n, x->out[rank]);
}
/* In place: the rank's own contribution already sits at out + rank*n. */
static void do_all_gather_inplace(ctx *x, int rank) {
  float *recv = x->out[rank];
  memcpy(recv + (size_t)rank * x->n, x->in[rank], x->n * sizeof(float));
  x->st[rank] = x->c->vt->all_gather(x->c, rank, recv + (size_t)rank * x->n, x->n, recv);
}

static void test_all_gather(void) {
  static const size_t ns[] = {1, 15, 4097, (1u << 20) + 3};
  for (int size = 1; size <= MAXR; size++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
      for (int inplace = 0; inplace < 2 && ns[k] <= BIG_N; inplace++) {
        ctx x;
        ctx_init(&x, size, ns[k], 1, (size_t)size);
        CHECK_OK(st__collective_threads_create(size, ST_CROSS_ALL_REDUCE, &x.c));
        run_ranks(&x, inplace ? do_all_gather_inplace : do_all_gather);
        for (int r = 0; r < size; r++) {
          CHECK_OK(x.st[r]);
          for (int q = 0; q < size; q++)
            CHECK_MSG(memcmp(x.out[r] + (size_t)q * x.n, x.in[q], x.n * sizeof(float)) == 0,
                      "all_gather size=%d n=%zu inplace=%d rank=%d part=%d", size, x.n,
                      inplace, r, q);
        }
        ctx_free(&x);
      }
}

/* ---- reduce_scatter ------------------------------------------------------- */
static void do_reduce_scatter(ctx *x, int rank) {
  x->st[rank] = x->c->vt->reduce_scatter(x->c, rank, x->in[rank], x->out[rank], x->n,
                                         (st_reduce_op)x->arg);
}
/* In place: recv is the rank's own slice of its send buffer. */
static void do_reduce_scatter_inplace(ctx *x, int rank) {
  float *send = x->buf[rank];
  x->st[rank] = x->c->vt->reduce_scatter(x->c, rank, send, send + (size_t)rank * x->n, x->n,
                                         (st_reduce_op)x->arg);
}

static void check_reduce_scatter(ctx *x, int inplace, float *want) {
  for (int r = 0; r < x->size; r++) {
    expected(x, (size_t)r * x->n, x->n, (st_reduce_op)x->arg, want);
    const float *got = inplace ? x->buf[r] + (size_t)r * x->n : x->out[r];
    CHECK_OK(x->st[r]);
    CHECK_MSG(memcmp(got, want, x->n * sizeof(float)) == 0,
              "reduce_scatter size=%d n=%zu op=%d inplace=%d rank=%d", x->size, x->n, x->arg,
              inplace, r);
  }
}

static void test_reduce_scatter(void) {
  static const size_t ns[] = {1, 16, 17, 4097, (1u << 18) + 3};
  for (int size = 1; size <= MAXR; size++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
      ctx x;
      ctx_init(&x, size, ns[k], (size_t)size, 1);
      CHECK_OK(st__collective_threads_create(size, ST_CROSS_ALL_REDUCE, &x.c));
      float *want = xalloc(x.n * sizeof(float));
      for (int op = 0; op < ST_REDUCE_COUNT; op++)
        for (int inplace = 0; inplace < 2; inplace++) {
          for (int r = 0; r < size; r++)
            memcpy(x.buf[r], x.in[r], (size_t)size * x.n * sizeof(float));
          x.arg = op;
          run_ranks(&x, inplace ? do_reduce_scatter_inplace : do_reduce_scatter);
          check_reduce_scatter(&x, inplace, want);
        }
      st_free(want);
      ctx_free(&x);
    }
}

/* ---- barrier -------------------------------------------------------------- */
enum { BARRIER_ROUNDS = 2000 };
static void do_barrier_rounds(ctx *x, int rank) {
  for (int i = 0; i < BARRIER_ROUNDS; i++) {
    atomic_fetch_add(&x->counter, 1);
    x->st[rank] |= x->c->vt->barrier(x->c, rank);
    if (atomic_load(&x->counter) != (i + 1) * x->size) x->bad[rank]++;
    x->st[rank] |= x->c->vt->barrier(x->c, rank);
  }
}

static void test_barrier(void) {
  for (int size = 1; size <= MAXR; size++) {
    ctx x;
    memset(&x, 0, sizeof x);
    x.size = size;
    atomic_init(&x.counter, 0);
    CHECK_OK(st__collective_threads_create(size, ST_CROSS_ALL_REDUCE, &x.c));
    double t0 = st_now_seconds();
    run_ranks(&x, do_barrier_rounds);
    double us = (st_now_seconds() - t0) / (2.0 * BARRIER_ROUNDS) * 1e6;
    fprintf(stderr, "barrier: %d ranks, %.2f us each\n", size, us);
    for (int r = 0; r < size; r++) {
      CHECK_OK(x.st[r]);
      CHECK_MSG(x.bad[r] == 0, "barrier size=%d rank=%d saw %d early rounds", size, r,
                x.bad[r]);
    }
    st__collective_destroy(x.c);
  }
}

/* ---- ops in a row with changing n, n = 0, errors --------------------------- */
static const size_t k_seq_n[] = {5, 100003, 0, 3, 4097, 70000, 1, 0, 262144};
enum { SEQ_LEN = sizeof k_seq_n / sizeof k_seq_n[0] };

/* in[rank] holds the inputs; buf[rank] is large enough for every n; out[rank]
 * gets SEQ_LEN results back to back (all_reduce, broadcast, all_gather cycle). */
static void do_sequence(ctx *x, int rank) {
  const st_collective_vtable *vt = x->c->vt;
  float *o = x->out[rank];
  for (int i = 0; i < SEQ_LEN; i++) {
    size_t n = k_seq_n[i];
    memcpy(x->buf[rank], x->in[rank], n * sizeof(float));
    st_status s;
    if (i % 3 == 0) s = vt->all_reduce(x->c, rank, x->buf[rank], n, ST_REDUCE_SUM);
    else if (i % 3 == 1) s = vt->broadcast(x->c, rank, x->buf[rank], n, i % x->size);
    else s = vt->all_gather(x->c, rank, x->in[rank], n, x->buf[rank]);
    size_t got = i % 3 == 2 ? n * (size_t)x->size : n;
    memcpy(o, x->buf[rank], got * sizeof(float));
    o += got;
    x->st[rank] |= s;
  }
}

static void check_sequence(ctx *x, float *want) {
  size_t pos = 0;
  for (int i = 0; i < SEQ_LEN; i++) {
    size_t n = k_seq_n[i], got = n;
    if (i % 3 == 0) expected(x, 0, n, ST_REDUCE_SUM, want);
    else if (i % 3 == 1) memcpy(want, x->in[i % x->size], n * sizeof(float));
    else {
      for (int q = 0; q < x->size; q++) memcpy(want + q * n, x->in[q], n * sizeof(float));
      got = n * (size_t)x->size;
    }
    for (int r = 0; r < x->size; r++)
      CHECK_MSG(memcmp(x->out[r] + pos, want, got * sizeof(float)) == 0,
                "sequence size=%d step=%d n=%zu rank=%d", x->size, i, n, r);
    pos += got;
  }
}

static void test_sequence(void) {
  const size_t maxn = 262144, total = 1000000;
  for (int size = 1; size <= MAXR; size++)
    for (int algo = 0; algo < ST_CROSS_COUNT; algo++) {
      ctx x;
      ctx_init(&x, size, maxn, (size_t)size, 0);
      for (int r = 0; r < size; r++) {
        st_free(x.out[r]);
        x.out[r] = xalloc(total * (size_t)size * sizeof(float));
      }
      CHECK_OK(st__collective_threads_create(size, (st_cross_device_ops)algo, &x.c));
      run_ranks(&x, do_sequence);
      for (int r = 0; r < size; r++) CHECK_OK(x.st[r]);
      float *want = xalloc(maxn * (size_t)size * sizeof(float));
      check_sequence(&x, want);
      st_free(want);
      ctx_free(&x);
    }
}

/* Every rank must get the same error when the ranks disagree on n. */
static void do_mismatch(ctx *x, int rank) {
  size_t n = rank == 1 ? x->n + 1 : x->n;
  x->st[rank] = x->c->vt->all_reduce(x->c, rank, x->buf[rank], n, ST_REDUCE_SUM);
  /* the collective stays usable afterwards */
  x->st[rank] |= x->c->vt->all_reduce(x->c, rank, x->buf[rank], x->n, ST_REDUCE_SUM) << 8;
}
static void do_bad_root(ctx *x, int rank) {
  x->st[rank] = x->c->vt->broadcast(x->c, rank, x->buf[rank], x->n, x->size);
}

static void test_errors(void) {
  st_collective *c = NULL;
  CHECK(st__collective_threads_create(0, ST_CROSS_ALL_REDUCE, &c) == ST_ERR_INVALID && !c);
  CHECK(st__collective_threads_create(2, ST_CROSS_COUNT, &c) == ST_ERR_INVALID && !c);
  st__collective_destroy(NULL);
  ctx x;
  ctx_init(&x, 3, 100, 2, 0);
  CHECK_OK(st__collective_threads_create(3, ST_CROSS_ALL_REDUCE, &x.c));
  CHECK(strcmp(x.c->vt->name, "threads") == 0);
  run_ranks(&x, do_mismatch);
  for (int r = 0; r < 3; r++) CHECK_MSG(x.st[r] == ST_ERR_INVALID, "rank %d: %d", r, x.st[r]);
  CHECK(strstr(st_last_error(), "rank 1") != NULL);
  run_ranks(&x, do_bad_root);
  for (int r = 0; r < 3; r++) CHECK(x.st[r] == ST_ERR_INVALID);
  ctx_free(&x);
}

static void test_names(void) {
  st_cross_device_ops k = ST_CROSS_COUNT;
  CHECK_OK(st__cross_device_ops_parse("all_reduce", &k));
  CHECK(k == ST_CROSS_ALL_REDUCE);
  CHECK_OK(st__cross_device_ops_parse("reduction_to_one_device", &k));
  CHECK(k == ST_CROSS_REDUCTION_TO_ONE_DEVICE);
  for (int i = 0; i < ST_CROSS_COUNT; i++) {
    CHECK_OK(st__cross_device_ops_parse(st__cross_device_ops_name((st_cross_device_ops)i), &k));
    CHECK(k == (st_cross_device_ops)i);
  }
  CHECK(st__cross_device_ops_parse("ring", &k) == ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "ring") && strstr(st_last_error(), "all_reduce") &&
        strstr(st_last_error(), "reduction_to_one_device"));
  CHECK(st__cross_device_ops_parse(NULL, &k) == ST_ERR_INVALID);
}

/* Same inputs, fresh collectives, both algorithms: identical bits. */
static void test_repeat_determinism(void) {
  const size_t n = 300007;
  float *first = xalloc(n * sizeof(float));
  for (int rep = 0; rep < 4; rep++) {
    ctx x;
    ctx_init(&x, 3, n, 1, 0);
    for (int r = 0; r < 3; r++) memcpy(x.buf[r], x.in[r], n * sizeof(float));
    CHECK_OK(st__collective_threads_create(3, (st_cross_device_ops)(rep % 2), &x.c));
    x.arg = ST_REDUCE_MEAN;
    run_ranks(&x, do_all_reduce);
    if (rep == 0) memcpy(first, x.buf[0], n * sizeof(float));
    for (int r = 0; r < 3; r++)
      CHECK_MSG(memcmp(first, x.buf[r], n * sizeof(float)) == 0, "rep %d rank %d", rep, r);
    ctx_free(&x);
  }
  st_free(first);
}

static const check_case cases[] = {
    CHECK_CASE(test_names),      CHECK_CASE(test_errors),         CHECK_CASE(test_barrier),
    CHECK_CASE(test_all_reduce), CHECK_CASE(test_broadcast),      CHECK_CASE(test_all_gather),
    CHECK_CASE(test_reduce_scatter), CHECK_CASE(test_sequence), CHECK_CASE(test_repeat_determinism)};

int main(int argc, char **argv) {
  double t0 = st_now_seconds();
  int rc = CHECK_MAIN(argc, argv, cases);
  fprintf(stderr, "test_collective: %.2f s\n", st_now_seconds() - t0);
  return rc;
}
