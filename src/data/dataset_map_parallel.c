/* map(num_parallel_calls): st_dataset_map's callback on a pool of background
 * threads, output in input order (tf.data's deterministic=True).
 *
 * Items are numbered in input order. A worker reserves room in the ring of
 * 2 x workers item slots (under mu), then takes the upstream lock, reads the
 * next item (its number = reads so far, so numbers follow the upstream order
 * whatever the thread interleaving), drops the upstream lock and runs fn on
 * the item's examples in its slot (number % slots) while other workers read
 * and map the next ones. The consumer hands out item next_out once its slot
 * is marked done and holds it until its next call. The first error (of
 * upstream or fn, the lowest item number) ends the pass there: items before
 * it are handed out, then the error. Reserving before reading guarantees
 * that item n's slot was released by item n - slots. */
#define _GNU_SOURCE
#include "data/dataset_impl.h"
#include "base/sysinfo.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PMAP_MAX_THREADS 256

typedef struct pmap_node {
  st_dataset base;
  st_map_fn fn;
  void *user;
  int num_parallel_calls; /* ST_AUTOTUNE or 1.. */
} pmap_node;

typedef struct pmap_iter {
  st_iterator base;
  const pmap_node *node;
  st_iterator *up;          /* read under up_mu */
  int64_t reads;            /* items read from up; under up_mu */
  bool up_over;             /* up ended or failed; under up_mu */
  pthread_mutex_t mu, up_mu;
  pthread_cond_t work, done;
  pthread_t *threads;
  int nthreads, started;
  int nslots;
  size_t item_x, item_y;
  float *mem;               /* [nslots, item_x + item_y] */
  int *size;                /* [nslots] examples per item */
  /* guarded by mu */
  bool *ready;              /* [nslots] the slot's item is mapped */
  int64_t reserved;         /* reservations made (one read each) */
  int64_t released;         /* items the consumer has finished with */
  int64_t next_out;         /* the next item number the consumer takes */
  bool held;                /* the consumer holds item next_out - 1 */
  int64_t end_at;           /* first number that is not an item (end or error) */
  st_status error;          /* of item end_at (ST_OK: the end) */
  char message[1024];
  bool stop;
} pmap_iter;

static float *slot_x(pmap_iter *it, int64_t n) {
  return it->mem + (size_t)(n % it->nslots) * (it->item_x + it->item_y);
}

/* Item n failed or the input ended there (mu held): keep the earliest. */
static void end_at(pmap_iter *it, int64_t n, st_status s) {
  if (n > it->end_at) return;
  it->end_at = n;
  it->error = s;
  if (s != ST_OK) snprintf(it->message, sizeof it->message, "%s", st_last_error());
  pthread_cond_broadcast(&it->done);
  pthread_cond_broadcast(&it->work);
}

/* Read the next upstream item into its slot; *n its number, -1 if none. */
static st_status read_item(pmap_iter *it, int64_t *n, int *size) {
  const st_dataset *in = it->node->base.input;
  *n = -1;
  pthread_mutex_lock(&it->up_mu);
  st_status s = ST_OK;
  if (!it->up_over) {
    *n = it->reads++;
    float *x = slot_x(it, *n);
    bool end = false;
    if (in->batch == 0) {
      s = st__iter_next_into(it->up, in, x, x + it->item_x, &end);
      *size = 1;
    } else {
      st_batch b;
      s = it->up->ops->next(it->up, &b, &end);
      if (s == ST_OK && !end) st__batch_copy(in, &b, x, x + it->item_x);
      *size = s == ST_OK && !end ? b.size : 0;
    }
    if (s != ST_OK || end) {
      it->up_over = true;
      pthread_mutex_lock(&it->mu);
      end_at(it, *n, s);
      pthread_mutex_unlock(&it->mu);
      *n = -1;
    }
  }
  pthread_mutex_unlock(&it->up_mu);
  return s;
}

static st_status map_item(const pmap_node *m, float *x, float *y, int n) {
  const st_dataset *ds = &m->base;
  for (int i = 0; i < n; i++) {
    st_status s = m->fn(m->user, x + (size_t)i * ds->x_size, ds->x_size,
                        y + (size_t)i * ds->y_size, ds->y_size);
    if (s != ST_OK) return st_error_prefix(s, "map callback: ");
  }
  return ST_OK;
}

static void *worker(void *arg) {
  pmap_iter *it = arg;
  st__ds_background_thread();
  pthread_mutex_lock(&it->mu);
  for (;;) {
    while (!it->stop && it->reserved < it->end_at && it->reserved >= it->released + it->nslots)
      pthread_cond_wait(&it->work, &it->mu);
    if (it->stop || it->reserved >= it->end_at) break;
    it->reserved++;
    pthread_mutex_unlock(&it->mu);
    int64_t n;
    int size = 0;
    read_item(it, &n, &size);
    st_status s = ST_OK;
    if (n >= 0) {
      float *x = slot_x(it, n);
      s = map_item(it->node, x, x + it->item_x, size);
      it->size[n % it->nslots] = size;
    }
    pthread_mutex_lock(&it->mu);
    if (n < 0) continue;
    if (s != ST_OK) end_at(it, n, s);
    it->ready[n % it->nslots] = true;
    if (n == it->next_out) pthread_cond_signal(&it->done);
  }
  pthread_mutex_unlock(&it->mu);
  return NULL;
}

/* Release the held item (mu held). */
static void release(pmap_iter *it) {
  if (!it->held) return;
  it->held = false;
  it->released++;
  pthread_cond_signal(&it->work);
}

/* Wait for item next_out (mu held): true if it is there, else s or end says why. */
static bool wait_item(pmap_iter *it, st_status *s, bool *end) {
  int64_t n = it->next_out;
  while (n < it->end_at && !it->ready[n % it->nslots]) pthread_cond_wait(&it->done, &it->mu);
  if (n < it->end_at) return true;
  if (it->error != ST_OK) *s = st_error(it->error, "%s", it->message);
  else *end = true;
  return false;
}

static st_status pmap_next(st_iterator *base, st_batch *out, bool *end) {
  pmap_iter *it = (pmap_iter *)base;
  st_status s = ST_OK;
  pthread_mutex_lock(&it->mu);
  release(it);
  if (wait_item(it, &s, end)) {
    int64_t n = it->next_out++;
    it->ready[n % it->nslots] = false;
    it->held = true;
    float *x = slot_x(it, n);
    *out = (st_batch){it->size[n % it->nslots], x, x + it->item_x};
  }
  pthread_mutex_unlock(&it->mu);
  return s;
}

static st_status pmap_next_into(st_iterator *base, float *x, float *y, bool *end) {
  pmap_iter *it = (pmap_iter *)base;
  st_status s = ST_OK;
  pthread_mutex_lock(&it->mu);
  release(it);
  bool got = wait_item(it, &s, end);
  pthread_mutex_unlock(&it->mu);
  if (!got) return s;
  /* the slot stays ours until released: workers reserve only released slots */
  const float *sx = slot_x(it, it->next_out);
  memcpy(x, sx, it->node->base.x_size * sizeof(float));
  memcpy(y, sx + it->item_x, it->node->base.y_size * sizeof(float));
  pthread_mutex_lock(&it->mu);
  it->ready[it->next_out % it->nslots] = false;
  it->next_out++;
  it->held = true;
  release(it);
  pthread_mutex_unlock(&it->mu);
  return ST_OK;
}

static void pmap_destroy(st_iterator *base) {
  pmap_iter *it = (pmap_iter *)base;
  pthread_mutex_lock(&it->mu);
  it->stop = true;
  pthread_cond_broadcast(&it->work);
  pthread_mutex_unlock(&it->mu);
  for (int i = 0; i < it->started; i++) pthread_join(it->threads[i], NULL);
  st_iterator_destroy(it->up);
  pthread_cond_destroy(&it->work);
  pthread_cond_destroy(&it->done);
  pthread_mutex_destroy(&it->mu);
  pthread_mutex_destroy(&it->up_mu);
  free(it->threads);
  free(it->mem);
  free(it->size);
  free(it->ready);
  free(it);
}

static const st__iter_ops pmap_iter_ops = {pmap_next, pmap_next_into, NULL, pmap_destroy};

static int resolve_threads(int n) {
  if (n != ST_AUTOTUNE) return n;
  n = st__cpu_count();
  return n > PMAP_MAX_THREADS ? PMAP_MAX_THREADS : n;
}

static pmap_iter *pmap_alloc(const st_dataset *ds) {
  const pmap_node *m = (const pmap_node *)ds;
  pmap_iter *it = calloc(1, sizeof *it);
  if (!it) return NULL;
  it->base.ops = &pmap_iter_ops;
  it->node = m;
  it->nthreads = resolve_threads(m->num_parallel_calls);
  it->nslots = 2 * it->nthreads;
  it->item_x = st__ds_item_floats(ds, ds->x_size);
  it->item_y = st__ds_item_floats(ds, ds->y_size);
  it->end_at = INT64_MAX;
  pthread_mutex_init(&it->mu, NULL);
  pthread_mutex_init(&it->up_mu, NULL);
  pthread_cond_init(&it->work, NULL);
  pthread_cond_init(&it->done, NULL);
  it->threads = calloc((size_t)it->nthreads, sizeof *it->threads);
  it->mem = malloc((size_t)it->nslots * (it->item_x + it->item_y) * sizeof(float) + 1);
  it->size = calloc((size_t)it->nslots, sizeof *it->size);
  it->ready = calloc((size_t)it->nslots, sizeof *it->ready);
  if (!it->threads || !it->mem || !it->size || !it->ready) {
    pmap_destroy(&it->base);
    return NULL;
  }
  return it;
}

static st_status pmap_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  pmap_iter *it = pmap_alloc(ds);
  if (!it) return st_error(ST_ERR_NOMEM, "map: out of memory for %d parallel items",
                           2 * resolve_threads(((const pmap_node *)ds)->num_parallel_calls));
  st_status s = st__ds_iterate(ds->input, epoch, &it->up);
  for (int i = 0; s == ST_OK && i < it->nthreads; i++) {
    int rc = pthread_create(&it->threads[i], NULL, worker, it);
    if (rc == 0) it->started++;
    else s = st_error(ST_ERR_INTERNAL, "map: cannot start worker thread %d (error %d)", i, rc);
  }
  if (s != ST_OK) {
    pmap_destroy(&it->base);
    return s;
  }
  *out = &it->base;
  return ST_OK;
}

static st_status pmap_rebuild(const st_dataset *ds, st_dataset *in, st_dataset **out) {
  const pmap_node *m = (const pmap_node *)ds;
  return st_dataset_map_parallel(in, m->fn, m->user, m->num_parallel_calls, out);
}

static const st__ds_ops pmap_ops = {"map", pmap_iterate, NULL, pmap_rebuild, NULL, NULL};

st_status st_dataset_map_parallel(st_dataset *ds, st_map_fn fn, void *user,
                                  int num_parallel_calls, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_map_parallel")) return ST_ERR_INVALID;
  if (!fn) return st__ds_fail(ds, ST_ERR_INVALID, "%s: fn is NULL", __func__);
  if (num_parallel_calls != ST_AUTOTUNE &&
      (num_parallel_calls < 1 || num_parallel_calls > PMAP_MAX_THREADS))
    return st__ds_fail(ds, ST_ERR_INVALID, "map: num_parallel_calls %d must be in 1..%d or -1 "
                       "(ST_AUTOTUNE)", num_parallel_calls, PMAP_MAX_THREADS);
  pmap_node *m = calloc(1, sizeof *m);
  if (!m) return st__ds_fail(ds, ST_ERR_NOMEM, "map: out of memory");
  st__ds_init(&m->base, &pmap_ops, ds);
  m->fn = fn;
  m->user = user;
  m->num_parallel_calls = num_parallel_calls;
  *out = &m->base;
  return ST_OK;
}
