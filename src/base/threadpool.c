/* A small fixed thread pool for data-parallel loops. st_threadpool_run publishes
 * one job (fn, arg, ntasks) as a new "generation", and the workers and the
 * calling thread take task indices from one atomic counter until none are
 * left; run returns once every worker has finished the generation.
 *
 * A training step is a few runs a few hundred microseconds apart, and waking a
 * thread sleeping on a futex costs tens of microseconds on a VM (or the caller
 * ends up running every task itself). So a worker that has finished a run
 * first polls for the next generation for up to SPIN_NS, and only then sleeps
 * on the condition variable; the caller likewise polls for the workers to
 * finish before it sleeps. Polling is bounded, so an idle pool costs nothing.
 * Create, destroy and run must be called from one owning thread at a time; fn
 * runs on the pool's threads and the caller's. */
#define _POSIX_C_SOURCE 200809L
#include "strata/base.h"
#include "base/fpenv.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long a thread polls before it sleeps. */
#define SPIN_NS 200000LL

struct st_threadpool {
  int n;                   /* worker threads */
  pthread_t *threads;      /* [n] */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;  /* sleeping workers wait here for a new generation */
  pthread_cond_t cv_done;  /* a sleeping caller waits here for active == 0 */
  atomic_uint_fast64_t generation; /* bumped once per run, after the job fields */
  atomic_int active;       /* workers not yet done with this generation */
  atomic_bool stop;
  int sleepers;            /* workers in cv_work; guarded by mu */
  bool caller_sleeping;    /* the caller is in cv_done; guarded by mu */
  /* the job: written before generation is bumped, read after it is seen */
  void (*fn)(void *arg, int task);
  void *arg;
  int ntasks;
  atomic_int next;         /* next unclaimed task index */
};

static void cpu_relax(void) {
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

/* Poll until done(p, ctx) holds or SPIN_NS have passed; returns done's value. */
static bool spin_until(st_threadpool *p, bool (*done)(st_threadpool *, uint64_t),
                       uint64_t ctx) {
  long long deadline = 0;
  for (unsigned i = 0;; i++) {
    if (done(p, ctx)) return true;
    if ((i & 63) == 63) {
      long long t = now_ns();
      if (!deadline) deadline = t + SPIN_NS;
      else if (t >= deadline) return false;
    }
    cpu_relax();
  }
}

static bool new_generation(st_threadpool *p, uint64_t seen) {
  return atomic_load_explicit(&p->generation, memory_order_acquire) != seen ||
         atomic_load_explicit(&p->stop, memory_order_acquire);
}

static bool all_done(st_threadpool *p, uint64_t unused) {
  (void)unused;
  return atomic_load_explicit(&p->active, memory_order_acquire) == 0;
}

static void take_tasks(st_threadpool *p, void (*fn)(void *, int), void *arg,
                       int ntasks) {
  for (;;) {
    int i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    if (i >= ntasks) return;
    fn(arg, i);
  }
}

static void *worker_main(void *vp) {
  st_threadpool *p = vp;
  (void)st__ftz_enter(); /* for the thread's life (base/fpenv.h) */
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until(p, new_generation, seen)) {
      pthread_mutex_lock(&p->mu);
      p->sleepers++;
      while (!new_generation(p, seen)) pthread_cond_wait(&p->cv_work, &p->mu);
      p->sleepers--;
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    seen = atomic_load_explicit(&p->generation, memory_order_acquire);
    take_tasks(p, p->fn, p->arg, p->ntasks);
    if (atomic_fetch_sub_explicit(&p->active, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      if (p->caller_sleeping) pthread_cond_signal(&p->cv_done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

/* Wake every sleeping worker (after a new generation or stop). */
static void wake_workers(st_threadpool *p) {
  pthread_mutex_lock(&p->mu);
  if (p->sleepers) pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
}

/* Stop and join the first `started` workers, then free everything. */
static void pool_free(st_threadpool *p, int started) {
  atomic_store_explicit(&p->stop, true, memory_order_release);
  wake_workers(p);
  for (int i = 0; i < started; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->cv_done);
  pthread_cond_destroy(&p->cv_work);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}

st_status st_threadpool_create(int n, st_threadpool **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_threadpool_create: out is NULL");
  *out = NULL;
  if (n < 1)
    return st_error(ST_ERR_INVALID, "thread pool size %d: must be >= 1", n);
  st_threadpool *p = calloc(1, sizeof *p);
  if (!p) goto fail_nomem;
  p->threads = calloc((size_t)n, sizeof *p->threads);
  if (!p->threads) goto fail_threads;
  p->n = n;
  atomic_init(&p->next, 0);
  atomic_init(&p->generation, 0);
  atomic_init(&p->active, 0);
  atomic_init(&p->stop, false);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  for (int i = 0; i < n; i++) {
    int rc = pthread_create(&p->threads[i], NULL, worker_main, p);
    if (rc != 0) {
      pool_free(p, i);
      return st_error(rc == EAGAIN || rc == ENOMEM ? ST_ERR_NOMEM : ST_ERR_INTERNAL,
                      "thread pool: creating worker %d of %d failed: %s", i, n,
                      strerror(rc));
    }
  }
  *out = p;
  return ST_OK;

fail_threads:
  free(p);
fail_nomem:
  return st_error(ST_ERR_NOMEM, "out of memory creating a %d-thread pool", n);
}

void st_threadpool_destroy(st_threadpool *p) {
  if (p) pool_free(p, p->n);
}

int st_threadpool_size(const st_threadpool *p) { return p ? p->n : 0; }

void st_threadpool_run(st_threadpool *p, int ntasks,
                       void (*fn)(void *arg, int task), void *arg) {
  if (ntasks <= 0 || !fn) return;
  if (!p) { /* no pool: the caller's thread runs every task */
    for (int i = 0; i < ntasks; i++) fn(arg, i);
    return;
  }
  if (ntasks == 1) { /* nothing to share: skip the hand-off */
    fn(arg, 0);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  p->ntasks = ntasks;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->active, p->n, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_seq_cst);
  wake_workers(p);

  take_tasks(p, fn, arg, ntasks);

  if (!spin_until(p, all_done, 0)) {
    pthread_mutex_lock(&p->mu);
    p->caller_sleeping = true;
    while (!all_done(p, 0)) pthread_cond_wait(&p->cv_done, &p->mu);
    p->caller_sleeping = false;
    pthread_mutex_unlock(&p->mu);
  }
}
