/* Prefetch: a background thread runs the upstream iterator and keeps up to
 * `depth` items ready in a ring; the consumer holds the item it is reading
 * until its next call. Item buffers come from a free list and are allocated
 * the first time the ring needs one more, so memory is (the deepest the
 * queue got + 1) items. Producer and consumer wait on condition variables
 * (no busy-waiting). An upstream error is copied (status and message, since
 * messages are per thread) and handed to the consumer after the items
 * produced before it. Destroying the iterator early stops the producer after
 * its current item and joins it.
 *
 * Staying off the consumer's critical path (issue 18, docs/BENCHMARKS.md):
 * the producer runs as a background thread (st__ds_background_thread:
 * SCHED_BATCH, so waking it never preempts the consumer on a busy core), and
 * a producer that sleeps because the queue is full is woken only once half
 * of the queue has been taken (or the consumer is waiting), so most calls
 * are a lock and a pointer hand-over, no system call.
 *
 * buffer_size ST_AUTOTUNE (-1): depth starts at 2 and is sized from what is
 * measured: the producer's time per item p and the consumer's time between
 * calls c (moving averages) give depth >= 2p/c + 1, and each time the
 * consumer finds the queue empty after its first item the depth doubles;
 * bounded by PREFETCH_MAX_DEPTH items and PREFETCH_MAX_BYTES. */
#define _GNU_SOURCE
#include "data/dataset_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PREFETCH_AUTOTUNE_START 8
#define PREFETCH_MAX_DEPTH 64
#define PREFETCH_MAX_BYTES (64u << 20)

typedef struct prefetch_node {
  st_dataset base;
  int buffer_size; /* ST_AUTOTUNE or 1.. */
} prefetch_node;

typedef struct prefetch_iter {
  st_iterator base;
  const st_dataset *node;
  st_iterator *up;         /* used only by the producer thread while it runs */
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t not_full, not_empty;
  bool autotune;
  int max_depth;           /* ring capacity - 1 */
  size_t item_x, item_y;   /* floats per item buffer */
  /* guarded by mu */
  float **ring;            /* [max_depth + 1] item buffers in queue order */
  int *size;               /* [max_depth + 1] examples per item */
  float **free_bufs;       /* [max_depth + 1] buffers not in use */
  int nfree, nalloc;       /* free buffers; buffers allocated */
  float *held_buf;         /* the item the consumer reads; NULL = none */
  int depth;               /* items the producer keeps ready */
  int head, ready;         /* oldest ready ring position; ready items */
  bool producer_waiting;   /* asleep in not_full */
  bool finished;           /* producer is done (end or error) */
  bool stop;               /* consumer asks the producer to stop */
  int64_t taken;           /* items handed out */
  int64_t stalls;          /* calls after the first that found the queue empty */
  double produce_avg;      /* seconds per item (producer), moving average */
  double consume_avg;      /* seconds between consumer calls, moving average */
  double last_return;      /* when next last returned (consumer clock) */
  st_status error;
  char message[1024];
} prefetch_iter;

static double mono_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double ewma(double avg, double v) { return avg == 0.0 ? v : 0.875 * avg + 0.125 * v; }

/* A buffer for the next item (mu held; may drop it to allocate). NULL: out
 * of memory. */
static float *take_buffer(prefetch_iter *it) {
  if (it->nfree > 0) return it->free_bufs[--it->nfree];
  it->nalloc++;
  pthread_mutex_unlock(&it->mu);
  float *b = malloc((it->item_x + it->item_y) * sizeof(float));
  pthread_mutex_lock(&it->mu);
  if (!b) it->nalloc--;
  return b;
}

/* The producer has room for one more item (mu held). */
static bool has_room(const prefetch_iter *it) {
  return it->ready < it->depth && it->ready + (it->held_buf != NULL) <= it->max_depth;
}

/* Producer: wait for room, fill a buffer from upstream, publish it. */
static void *producer(void *arg) {
  prefetch_iter *it = arg;
  const st_dataset *in = it->node->input;
  st__ds_background_thread();
  pthread_mutex_lock(&it->mu);
  for (;;) {
    while (!it->stop && !has_room(it)) {
      it->producer_waiting = true;
      pthread_cond_wait(&it->not_full, &it->mu);
      it->producer_waiting = false;
    }
    if (it->stop) break;
    float *buf = take_buffer(it);
    if (!buf) {
      it->error = st_error(ST_ERR_NOMEM, "prefetch: out of memory for an item buffer");
      snprintf(it->message, sizeof it->message, "%s", st_last_error());
      break;
    }
    pthread_mutex_unlock(&it->mu);
    double t0 = mono_now();
    st_batch b;
    bool end = false;
    st_status s = it->up->ops->next(it->up, &b, &end);
    if (s == ST_OK && !end) st__batch_copy(in, &b, buf, buf + it->item_x);
    double dt = mono_now() - t0;
    pthread_mutex_lock(&it->mu);
    if (s != ST_OK || end) {
      it->free_bufs[it->nfree++] = buf;
      it->error = s;
      if (s != ST_OK) snprintf(it->message, sizeof it->message, "%s", st_last_error());
      break;
    }
    it->produce_avg = ewma(it->produce_avg, dt);
    int k = (it->head + it->ready) % (it->max_depth + 1);
    it->ring[k] = buf;
    it->size[k] = b.size;
    it->ready++;
    pthread_cond_signal(&it->not_empty);
  }
  it->finished = true;
  pthread_cond_signal(&it->not_empty);
  pthread_mutex_unlock(&it->mu);
  return NULL;
}

/* Autotune (mu held): deepen the queue from the measured times, and double
 * it after a stall. */
static void autotune(prefetch_iter *it, bool stalled) {
  if (!it->autotune || it->taken < 1) return;
  int want = it->depth;
  if (stalled) want = 2 * it->depth;
  if (it->consume_avg > 0.0 && it->produce_avg > 0.0) {
    double r = 2.0 * it->produce_avg / it->consume_avg + 1.0;
    if (r > (double)want) want = r > (double)it->max_depth ? it->max_depth : (int)ceil(r);
  }
  if (want > it->max_depth) want = it->max_depth;
  if (want > it->depth) it->depth = want;
}

/* Wake a sleeping producer once half the queue is free (mu held). */
static void maybe_wake(prefetch_iter *it, bool consumer_waits) {
  if (!it->producer_waiting) return;
  int refill = it->depth / 2 > 1 ? it->depth / 2 : 1;
  if (consumer_waits || it->depth - it->ready >= refill) pthread_cond_signal(&it->not_full);
}

static st_status prefetch_next(st_iterator *base, st_batch *out, bool *end) {
  prefetch_iter *it = (prefetch_iter *)base;
  double t = it->autotune ? mono_now() : 0.0;
  pthread_mutex_lock(&it->mu);
  if (it->held_buf) {
    it->free_bufs[it->nfree++] = it->held_buf;
    it->held_buf = NULL;
  }
  if (it->autotune && it->taken > 0) it->consume_avg = ewma(it->consume_avg, t - it->last_return);
  bool stalled = it->ready == 0 && !it->finished;
  if (stalled && it->taken > 0) it->stalls++;
  autotune(it, stalled);
  maybe_wake(it, stalled);
  while (it->ready == 0 && !it->finished) pthread_cond_wait(&it->not_empty, &it->mu);
  st_status s = ST_OK;
  if (it->ready > 0) {
    int k = it->head;
    it->head = (it->head + 1) % (it->max_depth + 1);
    it->ready--;
    it->held_buf = it->ring[k];
    it->taken++;
    *out = (st_batch){it->size[k], it->held_buf, it->held_buf + it->item_x};
    maybe_wake(it, false);
  } else if (it->error != ST_OK) {
    s = st_error(it->error, "%s", it->message);
  } else {
    *end = true;
  }
  pthread_mutex_unlock(&it->mu);
  if (it->autotune) it->last_return = mono_now();
  return s;
}

static void prefetch_destroy(st_iterator *base) {
  prefetch_iter *it = (prefetch_iter *)base;
  if (it->thread_started) {
    pthread_mutex_lock(&it->mu);
    it->stop = true;
    pthread_cond_broadcast(&it->not_full);
    pthread_mutex_unlock(&it->mu);
    pthread_join(it->thread, NULL);
  }
  st_iterator_destroy(it->up);
  pthread_cond_destroy(&it->not_full);
  pthread_cond_destroy(&it->not_empty);
  pthread_mutex_destroy(&it->mu);
  for (int i = 0; it->ring && i < it->ready; i++)
    free(it->ring[(it->head + i) % (it->max_depth + 1)]);
  for (int i = 0; it->free_bufs && i < it->nfree; i++) free(it->free_bufs[i]);
  free(it->held_buf);
  free(it->ring);
  free(it->size);
  free(it->free_bufs);
  free(it);
}

static const st__iter_ops prefetch_iter_ops = {prefetch_next, NULL, NULL, prefetch_destroy};

/* The deepest an autotuned queue may get for items of this size. */
static int autotune_max(size_t item_bytes) {
  size_t n = item_bytes ? PREFETCH_MAX_BYTES / item_bytes : PREFETCH_MAX_DEPTH;
  if (n > PREFETCH_MAX_DEPTH) n = PREFETCH_MAX_DEPTH;
  return n < PREFETCH_AUTOTUNE_START ? PREFETCH_AUTOTUNE_START : (int)n;
}

static prefetch_iter *prefetch_alloc(const st_dataset *ds) {
  prefetch_iter *it = calloc(1, sizeof *it);
  if (!it) return NULL;
  int bs = ((const prefetch_node *)ds)->buffer_size;
  it->base.ops = &prefetch_iter_ops;
  it->node = ds;
  it->item_x = st__ds_item_floats(ds, ds->x_size);
  it->item_y = st__ds_item_floats(ds, ds->y_size);
  it->autotune = bs == ST_AUTOTUNE;
  it->max_depth = it->autotune ? autotune_max((it->item_x + it->item_y) * sizeof(float)) : bs;
  it->depth = it->autotune ? PREFETCH_AUTOTUNE_START : bs;
  size_t n = (size_t)it->max_depth + 1;
  it->ring = calloc(n, sizeof *it->ring);
  it->size = calloc(n, sizeof *it->size);
  it->free_bufs = calloc(n, sizeof *it->free_bufs);
  pthread_mutex_init(&it->mu, NULL);
  pthread_cond_init(&it->not_full, NULL);
  pthread_cond_init(&it->not_empty, NULL);
  if (!it->ring || !it->size || !it->free_bufs) {
    prefetch_destroy(&it->base);
    return NULL;
  }
  return it;
}

static st_status prefetch_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  prefetch_iter *it = prefetch_alloc(ds);
  if (!it)
    return st_error(ST_ERR_NOMEM, "prefetch: out of memory for %d buffered items",
                    ((const prefetch_node *)ds)->buffer_size);
  st_status s = st__ds_iterate(ds->input, epoch, &it->up);
  if (s == ST_OK) {
    int rc = pthread_create(&it->thread, NULL, producer, it);
    it->thread_started = rc == 0;
    if (rc != 0)
      s = st_error(ST_ERR_INTERNAL, "prefetch: cannot start the producer thread (error %d)", rc);
  }
  if (s != ST_OK) {
    prefetch_destroy(&it->base);
    return s;
  }
  *out = &it->base;
  return ST_OK;
}

int st__prefetch_depth(st_iterator *base, int *buffers, int64_t *stalls) {
  if (!base || base->ops != &prefetch_iter_ops) return 0;
  prefetch_iter *it = (prefetch_iter *)base;
  pthread_mutex_lock(&it->mu);
  int d = it->depth;
  if (buffers) *buffers = it->nalloc;
  if (stalls) *stalls = it->stalls;
  pthread_mutex_unlock(&it->mu);
  return d;
}

static st_status prefetch_rebuild(const st_dataset *ds, st_dataset *in, st_dataset **out) {
  return st_dataset_prefetch(in, ((const prefetch_node *)ds)->buffer_size, out);
}

static const st__ds_ops prefetch_ops = {"prefetch", prefetch_iterate, NULL, prefetch_rebuild, NULL, NULL};

st_status st_dataset_prefetch(st_dataset *ds, int buffer_size, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_prefetch")) return ST_ERR_INVALID;
  if ((buffer_size < 1 && buffer_size != ST_AUTOTUNE) || buffer_size > 1 << 20)
    return st__ds_fail(ds, ST_ERR_INVALID, "prefetch: buffer_size %d must be in 1..%d or -1 "
                       "(ST_AUTOTUNE)", buffer_size, 1 << 20);
  prefetch_node *p = calloc(1, sizeof *p);
  if (!p) return st__ds_fail(ds, ST_ERR_NOMEM, "prefetch: out of memory");
  st__ds_init(&p->base, &prefetch_ops, ds);
  p->buffer_size = buffer_size;
  *out = &p->base;
  return ST_OK;
}
