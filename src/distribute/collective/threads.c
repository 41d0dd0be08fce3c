/* The in-process collective transport: `size` replica threads of one process
 * exchange float buffers through shared memory. Every operation follows one
 * pattern: each rank publishes its buffer pointers (and n, op/root) in its own
 * cache-line slot, all ranks meet at a barrier, every rank checks that the
 * published arguments agree (so all ranks reach the same verdict), does its
 * share of the work reading and writing the other ranks' buffers directly, and
 * meets the others at a second barrier before returning, so no rank reuses or
 * frees a buffer that another still reads.
 *
 * all_reduce, ST_CROSS_ALL_REDUCE: [0, n) is cut into `size` contiguous chunks
 * (boundaries on 16-float = 64-byte multiples); rank r alone touches chunk r of
 * every buffer: block by block (BLOCK floats, cache-resident) it reduces the
 * block over ranks 0, 1, ..., size-1 into a stack buffer and writes the result
 * into every rank's buffer (reduce-scatter and all-gather fused; each element is
 * read once and written once per rank, no scratch memory).
 * ST_CROSS_REDUCTION_TO_ONE_DEVICE: rank 0 reduces everything into its own
 * buffer, barrier, every other rank copies rank 0's buffer.
 * Every element is ((b0 + b1) + b2) + ... in rank order; MEAN is that sum times
 * (1.0f / size). Results are therefore bit-identical on every rank, for both
 * algorithms, and from run to run.
 *
 * The barrier is sense-reversing (a generation counter): arrivals count on one
 * cache line, waiters poll the generation on another: first a few microseconds
 * with a pause instruction, then with sched_yield (which hands the CPU to a
 * rank that was preempted, e.g. 3 ranks on 2 cores or a CPU shared with
 * another process), then they sleep on a futex. With more ranks than CPUs the
 * pause phase is cut short. Measured on a 2-vCPU VM: a 3-rank barrier took
 * ~31 us with pause-then-futex alone, ~1-3 us with the sched_yield phase.
 * Leaving (abort): a replica that fails or returns early while the others
 * wait in a collective calls st__collective_abort, which sets bit 0 of the
 * generation word (a barrier completing adds 2, so the bit survives it) and
 * wakes the sleepers. A waiter that sees the generation change by the abort
 * bit alone returns ST_ERR_PEER; one whose barrier completed first finishes
 * normally; a rank arriving after the abort returns ST_ERR_PEER at once
 * (the bit is in the generation it reads on entry anyway: the fast path
 * costs nothing more). st__collective_reset makes the transport usable
 * again once every rank has left its operation.
 * Linux only (futex). Create/destroy: one thread; every op: each rank from its
 * own thread, as collective.h says. */
#define _GNU_SOURCE
#include "distribute/collective/collective.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield" ::: "memory")
#else
#define CPU_RELAX() ((void)0)
#endif

enum {
  ALIGN_FLOATS = 16,     /* chunk boundaries: 64 bytes, one cache line */
  BLOCK = 2048,          /* floats reduced per step: 8 KiB, stays in L1 */
  SPIN_ALONE = 500,      /* pause-polls (~10 ns each) when every rank has a CPU */
  SPIN_CROWDED = 16,     /* ... when ranks outnumber CPUs */
  YIELDS = 1000,         /* then polls with sched_yield, then the futex */
};

/* ---- barrier ------------------------------------------------------------- */
typedef struct barrier {
  alignas(64) atomic_uint count;   /* arrivals in this generation */
  alignas(64) atomic_uint gen;     /* += 2 by the last arrival; bit 0: aborted
                                      (the futex word) */
  atomic_int sleepers;             /* ranks inside futex_wait */
  int size, spin, yields;
} barrier;

enum { GEN_ABORTED = 1u, GEN_STEP = 2u };

static void futex_wait(atomic_uint *w, unsigned old) {
  syscall(SYS_futex, (void *)w, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}
static void futex_wake_all(atomic_uint *w) {
  syscall(SYS_futex, (void *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Whether generation g, read by a waiter that entered at `old`, ends its
 * wait: the barrier completed (true) or the group was aborted (false, *done
 * set either way once the wait is over). */
static bool gen_moved(unsigned g, unsigned old, bool *done) {
  if (g == old) return false;
  *done = (g & ~GEN_ABORTED) != (old & ~GEN_ABORTED);
  return true;
}

/* Everything a rank wrote before barrier_wait is visible to every rank after
 * it (release by each arrival, acquire by each leaver). Returns false when
 * the group was aborted before the barrier completed (the rank must then
 * leave its operation without touching the other ranks' buffers). */
static bool barrier_wait(barrier *b) {
  unsigned old = atomic_load_explicit(&b->gen, memory_order_acquire);
  if (old & GEN_ABORTED) return false;
  if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) + 1 ==
      (unsigned)b->size) {
    atomic_store_explicit(&b->count, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->gen, GEN_STEP, memory_order_seq_cst);
    if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst) > 0)
      futex_wake_all(&b->gen);
    return true;
  }
  bool done = false;
  for (int i = 0; i < b->spin; i++) {
    if (gen_moved(atomic_load_explicit(&b->gen, memory_order_acquire), old, &done)) return done;
    CPU_RELAX();
  }
  for (int i = 0; i < b->yields; i++) {
    if (gen_moved(atomic_load_explicit(&b->gen, memory_order_acquire), old, &done)) return done;
    sched_yield();
  }
  atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
  while (!gen_moved(atomic_load_explicit(&b->gen, memory_order_seq_cst), old, &done))
    futex_wait(&b->gen, old);
  atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
  return done;
}

/* Any thread: every rank waiting in (or later entering) the barrier leaves
 * it with false. */
static void barrier_abort(barrier *b) {
  atomic_fetch_or_explicit(&b->gen, GEN_ABORTED, memory_order_seq_cst);
  if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst) > 0) futex_wake_all(&b->gen);
}

/* Once no rank is inside: a fresh barrier (the generation keeps counting). */
static void barrier_reset(barrier *b) {
  atomic_store_explicit(&b->count, 0, memory_order_relaxed);
  atomic_fetch_and_explicit(&b->gen, ~GEN_ABORTED, memory_order_seq_cst);
}

/* ---- the collective ------------------------------------------------------ */
/* What one rank publishes for the current operation. */
typedef struct slot {
  alignas(64) const float *src; /* the rank's input (all_gather/reduce_scatter send) */
  float *dst;                   /* the rank's output (in-place ops: same as src) */
  size_t n;
  int arg;                      /* reduce op or broadcast root */
} slot;

typedef struct thr {
  st_collective base;
  barrier bar;
  slot *slots; /* [size], 64-byte aligned, one cache line each */
} thr;

static int usable_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* ST_ERR_PEER, named after the operation, when a peer left (aborted). */
static st_status peer_left(const char *what, int rank) {
  return st_error(ST_ERR_PEER, "collective %s: rank %d: another replica left the group "
                  "(its step failed or returned early)", what, rank);
}

static st_status publish(thr *t, const char *what, int rank, const float *src, float *dst,
                         size_t n, int arg) {
  ST_ASSERT(rank >= 0 && rank < t->base.size);
  t->slots[rank] = (slot){.src = src, .dst = dst, .n = n, .arg = arg};
  return barrier_wait(&t->bar) ? ST_OK : peer_left(what, rank);
}

/* The barrier closing an operation (s: its status so far). */
static st_status finish(thr *t, const char *what, int rank, st_status s) {
  bool ok = barrier_wait(&t->bar);
  return s != ST_OK || ok ? s : peer_left(what, rank);
}

/* Same verdict on every rank: compares all slots with rank 0's. `what` names
 * the operation; need_dst/arg_max say which fields must be set/in range. */
static st_status check_slots(const thr *t, const char *what, bool need_dst, int arg_max) {
  const slot *s = t->slots;
  if (s[0].arg < 0 || s[0].arg >= arg_max)
    return st_error(ST_ERR_INVALID, "collective %s: argument %d out of range [0, %d)",
                    what, s[0].arg, arg_max);
  for (int r = 0; r < t->base.size; r++) {
    if (s[r].n != s[0].n || s[r].arg != s[0].arg)
      return st_error(ST_ERR_INVALID,
                      "collective %s: rank %d passed n=%zu arg=%d but rank 0 n=%zu arg=%d",
                      what, r, s[r].n, s[r].arg, s[0].n, s[0].arg);
    if (s[r].n && (!s[r].src || (need_dst && !s[r].dst)))
      return st_error(ST_ERR_INVALID, "collective %s: rank %d passed a NULL buffer (n=%zu)",
                      what, r, s[0].n);
  }
  return ST_OK;
}

/* tmp[0..len) = ((p0 + p1) + ...) over the ranks' src + off, times 1/size for MEAN. */
static void reduce_block(const thr *t, float *restrict tmp, size_t off, size_t len,
                         st_reduce_op op) {
  const slot *s = t->slots;
  memcpy(tmp, s[0].src + off, len * sizeof(float));
  for (int r = 1; r < t->base.size; r++) {
    const float *restrict p = s[r].src + off;
    for (size_t i = 0; i < len; i++) tmp[i] += p[i];
  }
  if (op == ST_REDUCE_MEAN) {
    const float inv = 1.0f / (float)t->base.size;
    for (size_t i = 0; i < len; i++) tmp[i] *= inv;
  }
}

/* Chunk r of [0, n) split into `size` pieces on ALIGN_FLOATS boundaries. */
static void chunk_of(size_t n, int size, int r, size_t *lo, size_t *hi) {
  size_t per = (n + (size_t)size - 1) / (size_t)size;
  per = (per + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
  *lo = per * (size_t)r < n ? per * (size_t)r : n;
  *hi = *lo + per < n ? *lo + per : n;
}

/* Rank `rank`'s share of an ST_CROSS_ALL_REDUCE: reduce chunk `rank` and write
 * it into every rank's buffer. */
static void all_reduce_chunk(const thr *t, int rank, st_reduce_op op) {
  alignas(64) float tmp[BLOCK];
  size_t lo, hi;
  chunk_of(t->slots[0].n, t->base.size, rank, &lo, &hi);
  for (size_t off = lo; off < hi; off += BLOCK) {
    size_t len = hi - off < BLOCK ? hi - off : BLOCK;
    reduce_block(t, tmp, off, len, op);
    for (int r = 0; r < t->base.size; r++)
      memcpy(t->slots[r].dst + off, tmp, len * sizeof(float));
  }
}

/* Rank 0 reduces everything into its own buffer (in place, block by block). */
static void reduce_to_rank0(const thr *t, st_reduce_op op) {
  alignas(64) float tmp[BLOCK];
  size_t n = t->slots[0].n;
  for (size_t off = 0; off < n; off += BLOCK) {
    size_t len = n - off < BLOCK ? n - off : BLOCK;
    reduce_block(t, tmp, off, len, op);
    memcpy(t->slots[0].dst + off, tmp, len * sizeof(float));
  }
}

static st_status thr_all_reduce(st_collective *c, int rank, float *buf, size_t n,
                                st_reduce_op op) {
  thr *t = (thr *)c;
  if (c->size == 1) {
    if ((unsigned)op >= ST_REDUCE_COUNT)
      return st_error(ST_ERR_INVALID, "collective all_reduce: reduce op %d out of range", op);
    return ST_OK; /* the sum (and the mean) of one buffer is itself */
  }
  st_status s = publish(t, "all_reduce", rank, buf, buf, n, (int)op);
  if (s != ST_OK) return s;
  s = check_slots(t, "all_reduce", true, ST_REDUCE_COUNT);
  if (s == ST_OK && c->algo == ST_CROSS_REDUCTION_TO_ONE_DEVICE) {
    if (rank == 0) reduce_to_rank0(t, op);
    if (!barrier_wait(&t->bar)) return peer_left("all_reduce", rank);
    if (rank != 0 && n) memcpy(buf, t->slots[0].dst, n * sizeof(float));
  } else if (s == ST_OK) {
    all_reduce_chunk(t, rank, op);
  }
  return finish(t, "all_reduce", rank, s);
}

static st_status thr_broadcast(st_collective *c, int rank, float *buf, size_t n, int root) {
  thr *t = (thr *)c;
  if (c->size == 1)
    return root == 0 ? ST_OK
                     : st_error(ST_ERR_INVALID, "collective broadcast: root %d out of range "
                                "[0, 1)", root);
  st_status s = publish(t, "broadcast", rank, buf, buf, n, root);
  if (s != ST_OK) return s;
  s = check_slots(t, "broadcast", true, c->size);
  if (s == ST_OK && rank != root && n)
    memcpy(buf, t->slots[root].src, n * sizeof(float));
  return finish(t, "broadcast", rank, s);
}

static st_status thr_all_gather(st_collective *c, int rank, const float *send, size_t n,
                                float *recv) {
  thr *t = (thr *)c;
  if (c->size == 1) {
    if (n && send != recv) memcpy(recv, send, n * sizeof(float));
    return ST_OK;
  }
  st_status s = publish(t, "all_gather", rank, send, recv, n, 0);
  if (s != ST_OK) return s;
  s = check_slots(t, "all_gather", true, 1);
  for (int r = 0; s == ST_OK && n && r < c->size; r++) {
    const float *src = t->slots[r].src;
    float *dst = recv + (size_t)r * n;
    if (src != dst) memcpy(dst, src, n * sizeof(float));
  }
  return finish(t, "all_gather", rank, s);
}

static st_status thr_reduce_scatter(st_collective *c, int rank, const float *send,
                                    float *recv, size_t n, st_reduce_op op) {
  thr *t = (thr *)c;
  if (c->size == 1) {
    if ((unsigned)op >= ST_REDUCE_COUNT)
      return st_error(ST_ERR_INVALID, "collective reduce_scatter: reduce op %d out of range",
                      op);
    if (n && send != recv) memmove(recv, send, n * sizeof(float));
    return ST_OK;
  }
  st_status s = publish(t, "reduce_scatter", rank, send, recv, n, (int)op);
  if (s != ST_OK) return s;
  s = check_slots(t, "reduce_scatter", true, ST_REDUCE_COUNT);
  alignas(64) float tmp[BLOCK];
  size_t base = (size_t)rank * n;
  for (size_t off = 0; s == ST_OK && off < n; off += BLOCK) {
    size_t len = n - off < BLOCK ? n - off : BLOCK;
    reduce_block(t, tmp, base + off, len, op);
    memcpy(recv + off, tmp, len * sizeof(float)); /* recv may alias send + base */
  }
  return finish(t, "reduce_scatter", rank, s);
}

static st_status thr_barrier(st_collective *c, int rank) {
  thr *t = (thr *)c;
  ST_ASSERT(rank >= 0 && rank < c->size);
  if (c->size > 1 && !barrier_wait(&t->bar)) return peer_left("barrier", rank);
  return ST_OK;
}

static void thr_abort(st_collective *c) { barrier_abort(&((thr *)c)->bar); }
static void thr_reset(st_collective *c) { barrier_reset(&((thr *)c)->bar); }

static void thr_destroy(st_collective *c) {
  thr *t = (thr *)c;
  st_free(t->slots);
  st_free(t);
}

static const st_collective_vtable k_threads_vt = {
    .name = "threads",
    .all_reduce = thr_all_reduce,
    .broadcast = thr_broadcast,
    .all_gather = thr_all_gather,
    .reduce_scatter = thr_reduce_scatter,
    .barrier = thr_barrier,
    .abort = thr_abort,
    .reset = thr_reset,
    .destroy = thr_destroy,
};

st_status st__collective_threads_create(int size, st_cross_device_ops algo,
                                        st_collective **out) {
  *out = NULL;
  if (size < 1)
    return st_error(ST_ERR_INVALID, "threads collective: size %d must be >= 1", size);
  if ((unsigned)algo >= ST_CROSS_COUNT)
    return st_error(ST_ERR_INVALID, "threads collective: cross_device_ops %d out of range",
                    (int)algo);
  thr *t = st_calloc(1, sizeof *t);
  if (!t) return ST_ERR_NOMEM;
  t->slots = st_calloc((size_t)size, sizeof *t->slots);
  if (!t->slots) goto fail_slots;
  t->base = (st_collective){.vt = &k_threads_vt, .size = size, .algo = algo};
  t->bar.size = size;
  t->bar.spin = size <= usable_cpus() ? SPIN_ALONE : SPIN_CROWDED;
  t->bar.yields = YIELDS;
  atomic_init(&t->bar.count, 0);
  atomic_init(&t->bar.gen, 0);
  atomic_init(&t->bar.sleepers, 0);
  *out = &t->base;
  return ST_OK;
fail_slots:
  st_free(t);
  return ST_ERR_NOMEM;
}

void st__collective_destroy(st_collective *c) {
  if (c) c->vt->destroy(c);
}

void st__collective_abort(st_collective *c) {
  if (c && c->vt->abort) c->vt->abort(c);
}

void st__collective_reset(st_collective *c) {
  if (c && c->vt->reset) c->vt->reset(c);
}

/* ---- cross_device_ops names ---------------------------------------------- */
static const char *const k_cross_names[] = {
    [ST_CROSS_ALL_REDUCE] = "all_reduce",
    [ST_CROSS_REDUCTION_TO_ONE_DEVICE] = "reduction_to_one_device",
};
_Static_assert(sizeof k_cross_names / sizeof k_cross_names[0] == ST_CROSS_COUNT,
               "k_cross_names must name every st_cross_device_ops");

const char *st__cross_device_ops_name(st_cross_device_ops k) {
  return (unsigned)k < ST_CROSS_COUNT ? k_cross_names[k] : "unknown";
}

st_status st__cross_device_ops_parse(const char *name, st_cross_device_ops *out) {
  for (int k = 0; name && k < ST_CROSS_COUNT; k++) {
    if (strcmp(name, k_cross_names[k]) == 0) {
      *out = (st_cross_device_ops)k;
      return ST_OK;
    }
  }
  return st_error(ST_ERR_INVALID,
                  "cross_device_ops '%s': unknown (valid: all_reduce, reduction_to_one_device)",
                  name ? name : "(null)");
}
