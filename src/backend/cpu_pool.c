/* The cpu backend's kernel threads (st__cpu_parallel): a fork-join pool for
 * the short runs of a training step (a few hundred per step of resnet20, tens
 * to hundreds of microseconds each).
 *
 * Unlike base/threadpool.c, a run waits for its tasks, not for its workers:
 * on a loaded machine a worker the OS has not scheduled yet misses the run,
 * the caller does its share, and the run ends when every task is done (a
 * run that waited for every worker to check in stalled for a scheduler
 * time slice each time). A worker that wakes late must then not run a task
 * of a finished run with the fields of the next: tasks are claimed by a
 * compare-and-swap of one 64-bit word, run number << 32 | next task, and the
 * caller publishes a run seqlock-style (the word closed, the fields written,
 * the word opened): a claim succeeds only while the word still holds the run
 * whose fields the worker read. Workers poll for the next run for SPIN_NS,
 * then sleep on a condition variable; so does the caller waiting for the
 * last task. A worker preempted in the middle of a task still stalls the
 * run: after such a stall the caller runs the next runs alone for a while
 * (STALL_NS, BACKOFF_RUNS). Create, destroy and run: the owner's thread, one run at a time
 * (st__cpu_parallel's busy flag); tasks run on the workers and the caller. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu.h"
#include "base/fpenv.h"

#define SPIN_NS 200000LL
/* A run whose caller waited longer than STALL_NS for a worker's task (a
 * worker the OS preempted mid-task: a loaded machine) makes the next
 * BACKOFF_RUNS runs run on the caller alone, then the pool is tried again.
 * The tasks are the same either way, so the bytes are too. */
#define STALL_NS 1000000LL
#define BACKOFF_RUNS 200
#define CLOSED 0xFFFFFFFFu /* the task half of the word while a run is published */

typedef void (*task_fn)(void *arg, int task);

struct st__cpu_pool {
  int n;                     /* workers */
  pthread_t *threads;        /* [n] */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;    /* sleeping workers */
  pthread_cond_t cv_done;    /* the sleeping caller */
  int sleepers;              /* guarded by mu */
  bool caller_sleeping;      /* guarded by mu */
  atomic_bool stop;
  _Atomic uint64_t claim;    /* run << 32 | next task index */
  _Atomic(task_fn) fn;       /* the run's fields: written while claim is CLOSED */
  _Atomic(void *) arg;
  atomic_int ntasks;
  atomic_int done;           /* tasks of the run finished */
  int backoff;               /* runs left for the caller alone (owner thread) */
};

static uint32_t run_of(uint64_t v) { return (uint32_t)(v >> 32); }

static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Polls cond(p, v) for up to SPIN_NS; returns its last value. */
static bool spin(st__cpu_pool *p, bool (*cond)(st__cpu_pool *, uint32_t), uint32_t v) {
  long long deadline = 0;
  for (unsigned i = 0;; i++) {
    if (cond(p, v)) return true;
    if ((i & 63) == 63) {
      long long t = now_ns();
      if (!deadline) deadline = t + SPIN_NS;
      else if (t >= deadline) return false;
    }
    relax();
  }
}

static bool new_run(st__cpu_pool *p, uint32_t seen) {
  return run_of(atomic_load_explicit(&p->claim, memory_order_acquire)) != seen ||
         atomic_load_explicit(&p->stop, memory_order_acquire);
}

static bool run_done(st__cpu_pool *p, uint32_t ntasks) {
  return (uint32_t)atomic_load_explicit(&p->done, memory_order_acquire) == ntasks;
}

static void notify_caller(st__cpu_pool *p) {
  pthread_mutex_lock(&p->mu);
  if (p->caller_sleeping) pthread_cond_signal(&p->cv_done);
  pthread_mutex_unlock(&p->mu);
}

/* Claims and runs tasks of the published run until none is left; returns
 * the run number it saw last. */
static uint32_t take(st__cpu_pool *p, bool worker) {
  for (;;) {
    uint64_t v = atomic_load_explicit(&p->claim, memory_order_acquire);
    uint32_t i = (uint32_t)v;
    if (i == CLOSED) { /* being published */
      relax();
      continue;
    }
    task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
    int nt = atomic_load_explicit(&p->ntasks, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire); /* the fields before the claim */
    if (nt < 0 || i >= (uint32_t)nt) return run_of(v);
    if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acq_rel,
                                               memory_order_relaxed))
      continue; /* another claim, or a newer run: read again */
    fn(arg, (int)i);
    if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == nt && worker)
      notify_caller(p);
  }
}

static void *worker_main(void *vp) {
  st__cpu_pool *p = vp;
  (void)st__ftz_enter(); /* for the thread's life, as base/threadpool.c's workers */
  uint32_t seen = 0;
  for (;;) {
    if (!spin(p, new_run, seen)) {
      pthread_mutex_lock(&p->mu);
      p->sleepers++;
      while (!new_run(p, seen)) pthread_cond_wait(&p->cv_work, &p->mu);
      p->sleepers--;
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    seen = take(p, true);
  }
  return NULL;
}

static void pool_free(st__cpu_pool *p, int started) {
  atomic_store_explicit(&p->stop, true, memory_order_release);
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < started; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->cv_done);
  pthread_cond_destroy(&p->cv_work);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}

st_status st__cpu_pool_create(int workers, st__cpu_pool **out) {
  *out = NULL;
  if (workers < 1) return st_error(ST_ERR_INVALID, "cpu kernel pool: %d workers (must be >= 1)", workers);
  st__cpu_pool *p = calloc(1, sizeof *p);
  if (!p || !(p->threads = calloc((size_t)workers, sizeof *p->threads))) {
    free(p);
    return st_error(ST_ERR_NOMEM, "out of memory for a %d-thread cpu kernel pool", workers + 1);
  }
  p->n = workers;
  atomic_init(&p->stop, false);
  atomic_init(&p->claim, 0);
  atomic_init(&p->fn, NULL);
  atomic_init(&p->arg, NULL);
  atomic_init(&p->ntasks, 0);
  atomic_init(&p->done, 0);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  for (int i = 0; i < workers; i++) {
    int rc = pthread_create(&p->threads[i], NULL, worker_main, p);
    if (rc != 0) {
      pool_free(p, i);
      return st_error(rc == EAGAIN || rc == ENOMEM ? ST_ERR_NOMEM : ST_ERR_INTERNAL,
                      "cpu kernel pool: creating worker %d of %d failed: %s", i, workers,
                      strerror(rc));
    }
  }
  *out = p;
  return ST_OK;
}

void st__cpu_pool_destroy(st__cpu_pool *p) {
  if (p) pool_free(p, p->n);
}

int st__cpu_pool_workers(const st__cpu_pool *p) { return p ? p->n : 0; }

void st__cpu_pool_run(st__cpu_pool *p, int ntasks, void (*fn)(void *arg, int task), void *arg) {
  if (ntasks <= 0) return;
  if (!p || ntasks == 1 || p->backoff > 0) {
    if (p && ntasks > 1) p->backoff--;
    for (int i = 0; i < ntasks; i++) fn(arg, i);
    return;
  }
  uint32_t run = run_of(atomic_load_explicit(&p->claim, memory_order_relaxed)) + 1;
  atomic_store_explicit(&p->claim, (uint64_t)run << 32 | CLOSED, memory_order_relaxed);
  atomic_thread_fence(memory_order_release); /* CLOSED before the fields */
  atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
  atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
  atomic_store_explicit(&p->ntasks, ntasks, memory_order_relaxed);
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_store_explicit(&p->claim, (uint64_t)run << 32, memory_order_release);
  pthread_mutex_lock(&p->mu);
  if (p->sleepers) pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);

  take(p, false);
  if (run_done(p, (uint32_t)ntasks)) return;
  long long t0 = now_ns();
  if (!spin(p, run_done, (uint32_t)ntasks)) {
    pthread_mutex_lock(&p->mu);
    p->caller_sleeping = true;
    while (!run_done(p, (uint32_t)ntasks)) pthread_cond_wait(&p->cv_done, &p->mu);
    p->caller_sleeping = false;
    pthread_mutex_unlock(&p->mu);
  }
  if (now_ns() - t0 > STALL_NS) p->backoff = BACKOFF_RUNS;
}
