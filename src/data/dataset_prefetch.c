/* Prefetch: a background thread runs the upstream iterator and keeps up to
 * buffer_size items ready in a ring of buffer_size + 1 slots (the extra slot
 * is the one the consumer is reading). Producer and consumer wait on condition
 * variables (no busy-waiting). An upstream error is copied (status and message,
 * since messages are per thread) and handed to the consumer after the items
 * produced before it. Destroying the iterator early stops the producer after
 * its current item and joins it. buffer_size -1 means "autotune", which here
 * is a fixed 2. */
#define _POSIX_C_SOURCE 200809L
#include "data/dataset_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFETCH_AUTOTUNE 2

typedef struct prefetch_node {
  st_dataset base;
  int buffer_size;
} prefetch_node;

typedef struct prefetch_iter {
  st_iterator base;
  const st_dataset *node;
  st_iterator *up;         /* used only by the producer thread while it runs */
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t not_full, not_empty;
  int nslots;              /* buffer_size + 1 */
  float *mem;              /* [nslots, item_x + item_y] */
  int *size;               /* [nslots] examples per slot */
  size_t item_x, item_y;
  /* guarded by mu */
  int head;                /* oldest ready slot */
  int ready;               /* ready slots */
  bool held;               /* the consumer holds the slot before head */
  bool finished;           /* producer is done (end or error) */
  bool stop;               /* consumer asks the producer to stop */
  st_status error;
  char message[1024];
} prefetch_iter;

static float *slot_x(prefetch_iter *it, int k) {
  return it->mem + (size_t)k * (it->item_x + it->item_y);
}

/* Producer: wait for a free slot, fill it from upstream, publish it. */
static void *producer(void *arg) {
  prefetch_iter *it = arg;
  const st_dataset *in = it->node->input;
  pthread_mutex_lock(&it->mu);
  for (;;) {
    while (!it->stop && it->ready + it->held >= it->nslots)
      pthread_cond_wait(&it->not_full, &it->mu);
    if (it->stop) break;
    int k = (it->head + it->ready) % it->nslots;
    pthread_mutex_unlock(&it->mu);
    st_batch b;
    bool end = false;
    st_status s = it->up->ops->next(it->up, &b, &end);
    if (s == ST_OK && !end) st__batch_copy(in, &b, slot_x(it, k), slot_x(it, k) + it->item_x);
    pthread_mutex_lock(&it->mu);
    if (s != ST_OK || end) {
      it->error = s;
      if (s != ST_OK) snprintf(it->message, sizeof it->message, "%s", st_last_error());
      break;
    }
    it->size[k] = b.size;
    it->ready++;
    pthread_cond_signal(&it->not_empty);
  }
  it->finished = true;
  pthread_cond_signal(&it->not_empty);
  pthread_mutex_unlock(&it->mu);
  return NULL;
}

static st_status prefetch_next(st_iterator *base, st_batch *out, bool *end) {
  prefetch_iter *it = (prefetch_iter *)base;
  pthread_mutex_lock(&it->mu);
  if (it->held) {
    it->held = false;
    pthread_cond_signal(&it->not_full);
  }
  while (it->ready == 0 && !it->finished) pthread_cond_wait(&it->not_empty, &it->mu);
  st_status s = ST_OK;
  if (it->ready > 0) {
    int k = it->head;
    it->head = (it->head + 1) % it->nslots;
    it->ready--;
    it->held = true;
    *out = (st_batch){it->size[k], slot_x(it, k), slot_x(it, k) + it->item_x};
  } else if (it->error != ST_OK) {
    s = st_error(it->error, "%s", it->message);
  } else {
    *end = true;
  }
  pthread_mutex_unlock(&it->mu);
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
  free(it->mem);
  free(it->size);
  free(it);
}

static const st__iter_ops prefetch_iter_ops = {prefetch_next, NULL, NULL, prefetch_destroy};

static prefetch_iter *prefetch_alloc(const st_dataset *ds) {
  prefetch_iter *it = calloc(1, sizeof *it);
  if (!it) return NULL;
  it->base.ops = &prefetch_iter_ops;
  it->node = ds;
  it->nslots = ((const prefetch_node *)ds)->buffer_size + 1;
  it->item_x = st__ds_item_floats(ds, ds->x_size);
  it->item_y = st__ds_item_floats(ds, ds->y_size);
  it->mem = malloc((size_t)it->nslots * (it->item_x + it->item_y) * sizeof(float));
  it->size = calloc((size_t)it->nslots, sizeof(int));
  pthread_mutex_init(&it->mu, NULL);
  pthread_cond_init(&it->not_full, NULL);
  pthread_cond_init(&it->not_empty, NULL);
  if (!it->mem || !it->size) {
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

static st_status prefetch_rebuild(const st_dataset *ds, st_dataset *in, st_dataset **out) {
  return st_dataset_prefetch(in, ((const prefetch_node *)ds)->buffer_size, out);
}

static const st__ds_ops prefetch_ops = {"prefetch", prefetch_iterate, NULL, prefetch_rebuild};

st_status st_dataset_prefetch(st_dataset *ds, int buffer_size, st_dataset **out) {
  *out = NULL;
  if (st__ds_null_input(ds, "st_dataset_prefetch")) return ST_ERR_INVALID;
  if (buffer_size == -1) buffer_size = PREFETCH_AUTOTUNE;
  if (buffer_size < 1 || buffer_size > 1 << 20)
    return st__ds_fail(ds, ST_ERR_INVALID, "prefetch: buffer_size %d must be in 1..%d or -1 "
                       "(autotune)", buffer_size, 1 << 20);
  prefetch_node *p = calloc(1, sizeof *p);
  if (!p) return st__ds_fail(ds, ST_ERR_NOMEM, "prefetch: out of memory");
  st__ds_init(&p->base, &prefetch_ops, ds);
  p->buffer_size = buffer_size;
  *out = &p->base;
  return ST_OK;
}
