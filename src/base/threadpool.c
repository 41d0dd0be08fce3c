/* A small fixed thread pool for data-parallel loops. st_threadpool_run publishes
 * one job (fn, arg, ntasks) as a new "generation", wakes the workers, and the
 * workers and the calling thread take task indices from one atomic counter until
 * none are left; run returns once every worker has finished the generation.
 * Idle workers sleep on a condition variable (no spinning between runs). Create,
 * destroy and run must be called from one owning thread at a time; fn runs on
 * the pool's threads and the caller's. */
#define _POSIX_C_SOURCE 200809L
#include "strata/base.h"
#include "base/fpenv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct st_threadpool {
  int n;                   /* worker threads */
  pthread_t *threads;      /* [n] */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;  /* workers wait here for a new generation or stop */
  pthread_cond_t cv_done;  /* run waits here for active == 0 */
  uint64_t generation;     /* bumped once per run; guarded by mu */
  int active;              /* workers not yet done with this generation */
  bool stop;
  void (*fn)(void *arg, int task);
  void *arg;
  int ntasks;
  atomic_int next;         /* next unclaimed task index */
};

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
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->generation == seen)
      pthread_cond_wait(&p->cv_work, &p->mu);
    if (p->stop) break;
    seen = p->generation;
    void (*fn)(void *, int) = p->fn;
    void *arg = p->arg;
    int ntasks = p->ntasks;
    pthread_mutex_unlock(&p->mu);
    take_tasks(p, fn, arg, ntasks);
    pthread_mutex_lock(&p->mu);
    if (--p->active == 0) pthread_cond_signal(&p->cv_done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Stop and join the first `started` workers, then free everything. */
static void pool_free(st_threadpool *p, int started) {
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < started; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->cv_done);
  pthread_cond_destroy(&p->cv_work);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}

st_status st_threadpool_create(int n, st_threadpool **out) {
  *out = NULL;
  if (n < 1)
    return st_error(ST_ERR_INVALID, "thread pool size %d: must be >= 1", n);
  st_threadpool *p = calloc(1, sizeof *p);
  if (!p) goto fail_nomem;
  p->threads = calloc((size_t)n, sizeof *p->threads);
  if (!p->threads) goto fail_threads;
  p->n = n;
  atomic_init(&p->next, 0);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  for (int i = 0; i < n; i++) {
    int rc = pthread_create(&p->threads[i], NULL, worker_main, p);
    if (rc != 0) {
      pool_free(p, i);
      return st_error(ST_ERR_INTERNAL,
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

int st_threadpool_size(const st_threadpool *p) { return p->n; }

void st_threadpool_run(st_threadpool *p, int ntasks,
                       void (*fn)(void *arg, int task), void *arg) {
  if (ntasks <= 0) return;
  if (ntasks == 1) { /* nothing to share: skip the wake-up round trip */
    fn(arg, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->ntasks = ntasks;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  p->active = p->n;
  p->generation++;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);

  take_tasks(p, fn, arg, ntasks);

  pthread_mutex_lock(&p->mu);
  while (p->active > 0) pthread_cond_wait(&p->cv_done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
