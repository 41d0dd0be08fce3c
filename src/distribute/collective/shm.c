/* The process transports' all-reduce through shared memory, for processes
 * that all run on one machine (a multi-GPU box, a many-core node, `mpirun -np
 * N` or TF_CONFIG workers on one host): the ranks map one segment and
 * exchange their parts through it, instead of messages (which MPI copies
 * through its own shared-memory queues and answers with a handshake each, and
 * Gloo through loopback TCP and a thread of its own).
 *
 * The segment: per rank two counters (each on its own cache lines, written by
 * that rank only) and two slots of SPAN floats (double buffering). The buffer
 * is reduced in rounds of at most SPAN floats; round e uses slot e % 2 of
 * every rank. A round of at most ONE_PHASE_BYTES takes one phase: every rank
 * copies its span into its slot, publishes arrive = e, waits until every
 * peer's arrive >= e, and sums every rank's span itself. A larger round takes
 * two: the span is cut into `size` chunks (st__split); every rank copies the
 * chunks its peers reduce into its slot, publishes arrive = e, waits, sums
 * its own chunk of every rank's slot (its own part from its buffer) in rank
 * order into its buffer and its slot, publishes reduced = e, waits for every
 * peer's reduced >= e, and copies the peers' reduced chunks out of their
 * slots. Either way every element is src[0] + src[1] + ... + src[size-1] in
 * that order: the bits of the message exchange (mpi.c, gloo.c), whatever the
 * rounds.
 *
 * Why two slots are enough: a rank writes its slot of round e only after
 * waiting, in round e-1, for every peer's arrive >= e-1, which each peer
 * published after it had finished reading round e-2 (the same slot).
 *
 * Counts: beside its arrive counter each rank publishes the operation's
 * element count (two of them, by round parity, like the slots); after the
 * arrive wait every rank compares its peers' with its own, so ranks that
 * pass different counts to one collective stop with ST_ERR_INVALID naming
 * the rank and both counts, before anything is summed or copied (a peer's
 * shorter part would otherwise be read as stale slot contents, and
 * different numbers of rounds would pair one operation with the next).
 *
 * Waiting is the caller's (st__shm_wait_fn): it names a missing rank
 * after the transport's timeout and sees a peer that left, as for messages.
 * A rank that dies leaves its counters behind; the others time out on them.
 *
 * The segment is a POSIX shared-memory object that rank 0 creates
 * (O_EXCL, a name made of its pid, a counter and the clock), reserves
 * (posix_fallocate: a full /dev/shm is an error here, not a SIGBUS later) and
 * names to the others; it is unlinked once every rank has mapped it, so
 * nothing is left in /dev/shm even if a rank is killed later. */
#define _GNU_SOURCE
#include "distribute/collective/shm.h"

#include <sched.h>

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/split.h" /* st__split */

/* SPAN floats (1 MiB) per round: a round's slots stay in the caches while
 * they are copied in, summed and copied out (bench/mpi_allreduce_bench.c with
 * 2 ranks: 64K floats lost to MPI_Allreduce at 1-4 MiB, 16K floats more so;
 * -DSHM_SPAN=... to measure another). */
#ifndef SHM_SPAN
#define SHM_SPAN 262144
#endif
enum { SPAN = SHM_SPAN, ONE_PHASE_BYTES = 16384, LINE = 128 };

_Static_assert(SPAN >= ST__SHM_GATHER_MAX, "an all-gather's part fits a slot");

typedef struct counter {
  _Atomic uint64_t v;
  uint64_t count[2]; /* arrive only: the operation's count in rounds of parity 0 / 1,
                        written before v is published (release), read after (acquire) */
  char pad[LINE - 3 * sizeof(uint64_t)];
} counter;

struct st__shm {
  void *base;
  size_t bytes;
  int me, size;
  counter *arrive, *reduced; /* [size] each */
  float *slots;              /* [size][2][SPAN] */
  uint64_t round;            /* rounds done (the same on every rank) */
};

static float *slot(const st__shm *s, int rank, uint64_t round) {
  return s->slots + ((size_t)rank * 2 + (size_t)(round & 1)) * SPAN;
}

/* ---- opening ---- */

static size_t segment_bytes(int size) {
  size_t head = 2 * (size_t)size * sizeof(counter);
  head = (head + 4095) & ~(size_t)4095;
  return head + (size_t)size * 2 * SPAN * sizeof(float);
}

static bool disabled_here(void) {
  const char *v = getenv("STRATA_MPI_SHM");
  return v && strcmp(v, "0") == 0;
}

/* Rank 0: create and reserve the object; its name in name ("" on failure). */
static void *create_segment(char *name, size_t cap, size_t bytes) {
  static _Atomic unsigned g_count;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  snprintf(name, cap, "/strata-%ld-%u-%lx", (long)getpid(), atomic_fetch_add(&g_count, 1),
           (unsigned long)ts.tv_nsec);
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  void *p = MAP_FAILED;
  if (fd >= 0 && posix_fallocate(fd, 0, (off_t)bytes) == 0)
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  if (p == MAP_FAILED) {
    if (fd >= 0) shm_unlink(name);
    name[0] = '\0';
    return NULL;
  }
  return p;
}

static void *attach_segment(const char *name, size_t bytes) {
  int fd = name[0] ? shm_open(name, O_RDWR, 0600) : -1;
  struct stat st;
  void *p = MAP_FAILED;
  if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == bytes)
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  return p == MAP_FAILED ? NULL : p;
}

st__shm *st__shm_open(const st__shm_setup *su, int me, int size, bool same_machine) {
  int usable = size > 1 && !disabled_here() && same_machine;
  if (!su->all_min(su->ctx, usable)) return NULL;
  size_t bytes = segment_bytes(size);
  char name[64] = "";
  void *p = me == 0 ? create_segment(name, sizeof name, bytes) : NULL;
  su->bcast(su->ctx, name, sizeof name);
  if (me != 0) p = attach_segment(name, bytes);
  st__shm *s = p ? calloc(1, sizeof *s) : NULL;
  int all = su->all_min(su->ctx, s != NULL);
  if (me == 0 && name[0]) shm_unlink(name); /* every rank has mapped it, or given up */
  if (!all) {
    free(s);
    if (p) munmap(p, bytes);
    return NULL;
  }
  s->base = p;
  s->bytes = bytes;
  s->me = me;
  s->size = size;
  s->arrive = p;
  s->reduced = s->arrive + size;
  s->slots = (float *)((char *)p + (bytes - (size_t)size * 2 * SPAN * sizeof(float)));
  return s;
}

void st__shm_pause(int spins, double waited) {
  if (spins < 64 || waited < 100e-6) return;
  if (waited < 2e-3) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, 50000};
  nanosleep(&ts, NULL);
}

void st__shm_close(st__shm *s) {
  if (!s) return;
  munmap(s->base, s->bytes);
  free(s);
}

/* ---- the all-reduce ---- */

/* Wait until every peer's counter c[j] >= e. */
static st_status wait_all(st__shm *s, counter *c, uint64_t e, st__shm_wait_fn wait,
                          void *ctx) {
  for (int spins = 0;; spins++) {
    uint64_t missing = 0;
    for (int j = 0; j < s->size; j++)
      if (j != s->me && atomic_load_explicit(&c[j].v, memory_order_acquire) < e)
        missing |= 1ull << j;
    if (!missing) return ST_OK;
    st_status st = wait(ctx, missing, spins);
    if (st != ST_OK) return st;
  }
}

static void publish(counter *c, uint64_t e) { atomic_store_explicit(&c->v, e, memory_order_release); }

/* Publish arrive = e with this operation's count; wait for every peer's;
 * refuse a peer that passed another count (see the top). */
static st_status arrive(st__shm *s, uint64_t e, uint64_t count, const char *what,
                        st__shm_wait_fn wait, void *ctx) {
  s->arrive[s->me].count[e & 1] = count;
  publish(&s->arrive[s->me], e);
  st_status st = wait_all(s, s->arrive, e, wait, ctx);
  for (int j = 0; st == ST_OK && j < s->size; j++)
    if (j != s->me && s->arrive[j].count[e & 1] != count)
      st = st_error(ST_ERR_INVALID, "%s through shared memory: rank %d passed %llu floats, this "
                    "rank %llu: the processes disagree on what the collective holds (a flag, the "
                    "model or the data differs between them)", what, j,
                    (unsigned long long)s->arrive[j].count[e & 1], (unsigned long long)count);
  return st;
}

/* One round over x[0, len): every rank sums the whole span itself. */
static st_status one_phase(st__shm *s, float *x, size_t len, size_t count, st_reduce_op op,
                           st__shm_wait_fn wait, void *ctx) {
  uint64_t e = ++s->round;
  memcpy(slot(s, s->me, e), x, len * sizeof(float));
  st_status st = arrive(s, e, count, "all-reduce", wait, ctx);
  if (st != ST_OK) return st;
  const float *src[ST_MAX_WORKERS];
  for (int j = 0; j < s->size; j++) src[j] = j == s->me ? x : slot(s, j, e);
  st__sum_in_rank_order(x, NULL, src, s->size, len, op);
  publish(&s->reduced[s->me], e);
  return ST_OK;
}

/* One round over x[0, len): each rank reduces its chunk, then gathers. */
static st_status two_phase(st__shm *s, float *x, size_t len, size_t count, st_reduce_op op,
                           st__shm_wait_fn wait, void *ctx) {
  uint64_t e = ++s->round;
  int me = s->me, size = s->size;
  size_t lo[ST_MAX_WORKERS] = {0}, n[ST_MAX_WORKERS] = {0};
  for (int j = 0; j < size; j++) {
    int start, count;
    st__split((int)len, size, j, &start, &count);
    lo[j] = (size_t)start, n[j] = (size_t)count;
  }
  float *mine = slot(s, me, e);
  for (int j = 0; j < size; j++)
    if (j != me) memcpy(mine + lo[j], x + lo[j], n[j] * sizeof(float));
  st_status st = arrive(s, e, count, "all-reduce", wait, ctx);
  if (st != ST_OK) return st;
  const float *src[ST_MAX_WORKERS];
  for (int j = 0; j < size; j++) src[j] = (j == me ? x : slot(s, j, e)) + lo[me];
  st__sum_in_rank_order(x + lo[me], mine + lo[me], src, size, n[me], op);
  publish(&s->reduced[me], e);
  if ((st = wait_all(s, s->reduced, e, wait, ctx)) != ST_OK) return st;
  for (int j = 0; j < size; j++)
    if (j != me) memcpy(x + lo[j], slot(s, j, e) + lo[j], n[j] * sizeof(float));
  return ST_OK;
}

st_status st__shm_all_reduce(st__shm *s, float *buf, size_t n, st_reduce_op op,
                                 st__shm_wait_fn wait, void *ctx) {
  for (size_t lo = 0; lo < n; lo += SPAN) {
    size_t len = n - lo < SPAN ? n - lo : SPAN;
    st_status st = len * sizeof(float) <= ONE_PHASE_BYTES
                       ? one_phase(s, buf + lo, len, n, op, wait, ctx)
                       : two_phase(s, buf + lo, len, n, op, wait, ctx);
    if (st != ST_OK) return st;
  }
  return ST_OK;
}

/* ---- gathers (the Gloo transport's small operations) ---- */

/* One round in which every rank copies n floats (mine, may be NULL when n
 * is 0) into its slot; on return every peer's slot of this round holds its
 * part (read them with slot(); then call end_round). count: the operation's
 * (what: its name), the same on every rank. */
static st_status begin_round(st__shm *s, const float *mine, size_t n, size_t count,
                             const char *what, st__shm_wait_fn wait, void *ctx, uint64_t *round) {
  uint64_t e = ++s->round;
  if (n) memcpy(slot(s, s->me, e), mine, n * sizeof(float));
  *round = e;
  return arrive(s, e, count, what, wait, ctx);
}

static void end_round(st__shm *s, uint64_t e) { publish(&s->reduced[s->me], e); }

st_status st__shm_all_gather(st__shm *s, const float *send, size_t n, float *recv,
                             st__shm_wait_fn wait, void *ctx) {
  if (n > SPAN)
    return st_error(ST_ERR_INTERNAL, "shared-memory all-gather of %zu floats (at most %d)", n,
                    SPAN);
  uint64_t e;
  st_status st = begin_round(s, send, n, n, send || recv ? "all-gather" : "barrier", wait, ctx, &e);
  if (st != ST_OK) return st;
  for (int j = 0; n && j < s->size; j++) /* n 0: a barrier, recv may be NULL */
    memmove(recv + (size_t)j * n, j == s->me ? send : slot(s, j, e), n * sizeof(float));
  end_round(s, e);
  return ST_OK;
}

st_status st__shm_broadcast(st__shm *s, float *buf, size_t n, int root, st__shm_wait_fn wait,
                            void *ctx) {
  for (size_t lo = 0; lo < n; lo += SPAN) {
    size_t len = n - lo < SPAN ? n - lo : SPAN;
    uint64_t e;
    st_status st = begin_round(s, s->me == root ? buf + lo : NULL, s->me == root ? len : 0, n,
                               "broadcast", wait, ctx, &e);
    if (st != ST_OK) return st;
    if (s->me != root && len) memcpy(buf + lo, slot(s, root, e), len * sizeof(float));
    end_round(s, e);
  }
  return ST_OK;
}
