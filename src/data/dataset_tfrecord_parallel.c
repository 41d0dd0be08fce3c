/* Parallel interleave of the TFRecord source (num_parallel_calls != 0):
 * background threads read and parse records of the cycle's open files into
 * one queue per cycle slot, while the consumer walks the cycle exactly as the
 * sequential iterator does (dataset_tfrecord.c: an empty slot takes the next
 * file when the cycle reaches it, block_length elements from a slot, then the
 * next; a finished file frees its slot), taking elements from the queues
 * instead of reading. Which file a slot reads and which slot comes next are
 * decided by the consumer alone, so the order is the sequential one; errors
 * surface at the same element too (after the elements before them).
 *
 * A worker picks an open slot that no other worker is on, whose file is not
 * finished and whose queue has room (searching from the consumer's slot on),
 * fills up to PAR_CHUNK positions past the queue's tail outside the lock and
 * publishes them; it owns the slot's reader while it is on it and closes it
 * at the end of the file. Queues: 32 elements per slot or block_length if
 * more, within 16 MiB a slot and 64 MiB in all (at least one element). */
#define _GNU_SOURCE
#include "data/tfrecord_ds.h"
#include "base/sysinfo.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAR_CHUNK 8
#define PAR_QMIN 32
#define PAR_SLOT_BYTES (16u << 20)
#define PAR_TOTAL_BYTES (64u << 20)

typedef struct par_slot {
  int file;                /* -1: free (consumer-owned; read by workers under mu) */
  /* guarded by mu */
  int head, count;         /* the queue: count elements from head */
  bool busy, eof, failed;
  st_status error;
  char message[1024];
  /* owned by the busy worker */
  st_tfrecord_reader *r;
  int64_t seen_skipped;
  float *q;                /* [qcap, x_size + y_size] */
} par_slot;

typedef struct par_iter {
  st_iterator base;
  tfr_node *src;
  par_slot *slots;         /* [cycle] */
  int cycle, cur, in_block, next_file, open; /* consumer-owned, under mu */
  int qcap;
  size_t elem;             /* floats per element */
  pthread_mutex_t mu;
  pthread_cond_t work, ready;
  pthread_t *threads;
  int nthreads, started;
  bool stop;
  float *x, *y;            /* the element next hands out */
} par_iter;

/* Add the reader's newly skipped records to the node's count. */
static void count_skipped(par_iter *it, par_slot *sl) {
  int64_t d = st_tfrecord_reader_skipped(sl->r) - sl->seen_skipped;
  if (d > 0) {
    __atomic_fetch_add(&it->src->skipped, d, __ATOMIC_RELAXED);
    sl->seen_skipped += d;
  }
}

/* Read up to n records of sl's file into queue positions from tail on (the
 * worker owns sl; no lock). *got: elements written; *eof at the file's end;
 * an error is returned with its message set in this thread. */
static st_status fill(par_iter *it, par_slot *sl, int tail, int n, int *got, bool *eof) {
  const tfr_node *src = it->src;
  const char *path = src->files[sl->file];
  *got = 0;
  *eof = false;
  st_status s;
  if (!sl->r) {
    sl->seen_skipped = 0;
    if ((s = st_tfrecord_reader_create(path, &src->o.record, &sl->r)) != ST_OK) return s;
    st__tfrecord_reader_pool(sl->r);
  }
  while (*got < n) {
    const void *rec;
    size_t len;
    bool done;
    uint64_t at = st_tfrecord_reader_offset(sl->r);
    s = st_tfrecord_reader_next(sl->r, &rec, &len, &done);
    count_skipped(it, sl);
    if (s != ST_OK) return s;
    if (done) {
      st_tfrecord_reader_destroy(sl->r);
      sl->r = NULL;
      *eof = true;
      return ST_OK;
    }
    float *x = sl->q + (size_t)((tail + *got) % it->qcap) * it->elem;
    bool skipped;
    s = st__tfr_parse(it->src, sl->file, sl->r, at, rec, len, x, x + src->base.x_size, &skipped);
    if (s != ST_OK) return s;
    if (!skipped) ++*got;
  }
  return ST_OK;
}

/* A slot a worker can fill (mu held), the consumer's first; NULL if none. */
static par_slot *pick(par_iter *it) {
  for (int k = 0; k < it->cycle; k++) {
    par_slot *sl = &it->slots[(it->cur + k) % it->cycle];
    if (sl->file >= 0 && !sl->busy && !sl->eof && !sl->failed && sl->count < it->qcap)
      return sl;
  }
  return NULL;
}

static void *worker(void *arg) {
  par_iter *it = arg;
  st__ds_background_thread();
  pthread_mutex_lock(&it->mu);
  for (;;) {
    par_slot *sl = NULL;
    while (!it->stop && !(sl = pick(it))) pthread_cond_wait(&it->work, &it->mu);
    if (it->stop) break;
    sl->busy = true;
    int room = it->qcap - sl->count, n = room < PAR_CHUNK ? room : PAR_CHUNK;
    int tail = (sl->head + sl->count) % it->qcap;
    pthread_mutex_unlock(&it->mu);
    int got;
    bool eof;
    st_status s = fill(it, sl, tail, n, &got, &eof);
    char msg[sizeof sl->message];
    if (s != ST_OK) snprintf(msg, sizeof msg, "%s", st_last_error());
    pthread_mutex_lock(&it->mu);
    sl->count += got;
    sl->eof = eof;
    if (s != ST_OK) {
      sl->failed = true;
      sl->error = s;
      memcpy(sl->message, msg, sizeof msg);
    }
    sl->busy = false;
    pthread_cond_broadcast(&it->ready);
  }
  pthread_mutex_unlock(&it->mu);
  return NULL;
}

static void next_slot(par_iter *it) {
  it->cur = (it->cur + 1) % it->cycle;
  it->in_block = 0;
}

/* The sequential iterator's loop over the queues (mu held). */
static st_status take(par_iter *it, float *x, float *y, bool *end) {
  const st_dataset *ds = &it->src->base;
  for (;;) {
    par_slot *sl = &it->slots[it->cur];
    if (sl->file < 0) {
      if (it->next_file < it->src->nfiles) {
        sl->file = it->next_file++;
        sl->head = sl->count = 0;
        sl->eof = sl->failed = false;
        it->open++;
        pthread_cond_broadcast(&it->work);
      } else if (it->open == 0) {
        return *end = true, ST_OK;
      } else {
        next_slot(it);
      }
      continue;
    }
    if (sl->count > 0) {
      const float *e = sl->q + (size_t)sl->head * it->elem;
      memcpy(x, e, ds->x_size * sizeof(float));
      memcpy(y, e + ds->x_size, ds->y_size * sizeof(float));
      sl->head = (sl->head + 1) % it->qcap;
      sl->count--;
      if (!sl->busy && !sl->eof && !sl->failed) pthread_cond_signal(&it->work);
      if (++it->in_block >= it->src->o.block_length) next_slot(it);
      return ST_OK;
    }
    if (sl->failed) return st_error(sl->error, "%s", sl->message);
    if (sl->eof) {
      sl->file = -1;
      it->open--;
      next_slot(it);
      continue;
    }
    pthread_cond_wait(&it->ready, &it->mu);
  }
}

static st_status par_next_into(st_iterator *base, float *x, float *y, bool *end) {
  par_iter *it = (par_iter *)base;
  pthread_mutex_lock(&it->mu);
  st_status s = take(it, x, y, end);
  pthread_mutex_unlock(&it->mu);
  return s;
}

static st_status par_next(st_iterator *base, st_batch *out, bool *end) {
  par_iter *it = (par_iter *)base;
  st_status s = par_next_into(base, it->x, it->y, end);
  if (s == ST_OK && !*end) *out = (st_batch){1, it->x, it->y};
  return s;
}

static void par_destroy(st_iterator *base) {
  par_iter *it = (par_iter *)base;
  pthread_mutex_lock(&it->mu);
  it->stop = true;
  pthread_cond_broadcast(&it->work);
  pthread_mutex_unlock(&it->mu);
  for (int i = 0; i < it->started; i++) pthread_join(it->threads[i], NULL);
  for (int k = 0; it->slots && k < it->cycle; k++) {
    par_slot *sl = &it->slots[k];
    if (sl->r) {
      count_skipped(it, sl);
      st_tfrecord_reader_destroy(sl->r);
    }
    free(sl->q);
  }
  pthread_cond_destroy(&it->work);
  pthread_cond_destroy(&it->ready);
  pthread_mutex_destroy(&it->mu);
  free(it->slots);
  free(it->threads);
  free(it->x);
  free(it);
}

static const st__iter_ops par_iter_ops = {par_next, par_next_into, NULL, par_destroy};

/* Queue capacity: block_length or PAR_QMIN elements, whichever is more, at
 * most PAR_SLOT_BYTES a slot and PAR_TOTAL_BYTES all slots together, at
 * least one element. */
static int queue_capacity(const tfr_node *src, int cycle, size_t elem) {
  size_t cap = (size_t)src->o.block_length > PAR_QMIN ? (size_t)src->o.block_length : PAR_QMIN;
  size_t budget = PAR_TOTAL_BYTES / (size_t)cycle;
  if (budget > PAR_SLOT_BYTES) budget = PAR_SLOT_BYTES;
  size_t most = budget / (elem * sizeof(float));
  if (cap > most) cap = most;
  return cap < 1 ? 1 : (int)cap;
}

static par_iter *par_alloc(tfr_node *src) {
  par_iter *it = calloc(1, sizeof *it);
  if (!it) return NULL;
  const st_dataset *ds = &src->base;
  it->base.ops = &par_iter_ops;
  it->src = src;
  it->cycle = src->o.cycle_length < src->nfiles ? src->o.cycle_length : src->nfiles;
  int n = src->o.num_parallel_calls;
  if (n == ST_AUTOTUNE) n = st__cpu_count();
  it->nthreads = n > it->cycle ? it->cycle : n;
  it->elem = ds->x_size + ds->y_size;
  it->qcap = queue_capacity(src, it->cycle, it->elem);
  pthread_mutex_init(&it->mu, NULL);
  pthread_cond_init(&it->work, NULL);
  pthread_cond_init(&it->ready, NULL);
  it->slots = calloc((size_t)it->cycle, sizeof *it->slots);
  it->threads = calloc((size_t)it->nthreads, sizeof *it->threads);
  it->x = calloc(it->elem + 1, sizeof(float));
  bool ok = it->slots && it->threads && it->x;
  for (int k = 0; ok && k < it->cycle; k++) {
    it->slots[k].file = -1;
    ok = (it->slots[k].q = malloc((size_t)it->qcap * it->elem * sizeof(float) + 1)) != NULL;
  }
  if (!ok) {
    par_destroy(&it->base);
    return NULL;
  }
  it->y = it->x + ds->x_size;
  return it;
}

st_status st__tfr_parallel_iterate(tfr_node *src, st_iterator **out) {
  par_iter *it = par_alloc(src);
  if (!it) return st_error(ST_ERR_NOMEM, "tfrecord: out of memory for a parallel interleave");
  st_status s = ST_OK;
  for (int i = 0; s == ST_OK && i < it->nthreads; i++) {
    int rc = pthread_create(&it->threads[i], NULL, worker, it);
    if (rc == 0) it->started++;
    else s = st_error(ST_ERR_INTERNAL, "tfrecord: cannot start reader thread %d (error %d)", i, rc);
  }
  if (s != ST_OK) {
    par_destroy(&it->base);
    return s;
  }
  *out = &it->base;
  return ST_OK;
}
