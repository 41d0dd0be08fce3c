/* Shuffle with a buffer of buffer_size items, as tf.data does: fill the buffer
 * from upstream, then repeatedly hand out a uniformly chosen buffered item and
 * put the next upstream item in its place (or, once upstream is exhausted, the
 * last buffered item). With buffer_size >= the dataset size this is a uniform
 * random permutation. The RNG is st_rng keyed by (seed, epoch) when reshuffling
 * each iteration, else (seed, 0), so orders are deterministic. Directly above
 * a tensor-slices source (or a take/skip/shard chain over one: an index view)
 * the same algorithm runs on row indices and rows are converted straight into
 * the consumer's buffer (the fast path: no buffered floats, rows prefetched a
 * few picks ahead); it draws the same random numbers, so both paths give the
 * same order. */
#include "data/dataset_impl.h"

#include <stdlib.h>
#include <string.h>

/* Rows picked ahead of time in the fast path so their memory can be prefetched
 * (a random gather from a large array is otherwise bound by cache misses). */
#define FAST_AHEAD 8

typedef struct shuffle_node {
  st_dataset base;
  int64_t buffer_size;
  uint64_t seed;
  bool reshuffle;
} shuffle_node;

/* ---- fast path: indices over a tensor-slices source ---------------------- */

typedef struct shuf_fast_iter {
  st_iterator base;
  st__index_view view;   /* the rows upstream yields, in upstream order */
  st_rng rng;
  int64_t *idx;          /* [min(buffer_size, n)] buffered upstream positions */
  int64_t count;         /* buffered now */
  int64_t next_row;      /* next upstream position to enter the buffer */
  int64_t n;             /* upstream length */
  int64_t ahead[FAST_AHEAD]; /* ring of rows already picked, being prefetched */
  int ahead_head, ahead_count;
  float *x, *y;          /* [x_size], [y_size] for next */
} shuf_fast_iter;

static bool fast_pick(shuf_fast_iter *it, int64_t *row) {
  if (it->count == 0) return false;
  int64_t j = (int64_t)st_rng_below(&it->rng, (uint64_t)it->count);
  *row = it->idx[j];
  if (it->next_row < it->n) it->idx[j] = it->next_row++;
  else it->idx[j] = it->idx[--it->count];
  return true;
}

/* Next row of the order, keeping FAST_AHEAD picks queued and prefetched. The
 * picks are the same random draws, only made a few elements earlier. */
static bool fast_pop(shuf_fast_iter *it, int64_t *row) {
  int64_t k;
  while (it->ahead_count < FAST_AHEAD && fast_pick(it, &k)) {
    int64_t r = it->view.start + k * it->view.step;
    it->ahead[(it->ahead_head + it->ahead_count++) % FAST_AHEAD] = r;
    st__slices_prefetch(it->view.src, r);
  }
  if (it->ahead_count == 0) return false;
  *row = it->ahead[it->ahead_head];
  it->ahead_head = (it->ahead_head + 1) % FAST_AHEAD;
  it->ahead_count--;
  return true;
}

static st_status fast_next_into(st_iterator *base, float *x, float *y, bool *end) {
  shuf_fast_iter *it = (shuf_fast_iter *)base;
  int64_t row;
  if (!fast_pop(it, &row)) return *end = true, ST_OK;
  st__slices_row(it->view.src, row, x, y);
  return ST_OK;
}

static st_status fast_next(st_iterator *base, st_batch *out, bool *end) {
  shuf_fast_iter *it = (shuf_fast_iter *)base;
  st_status s = fast_next_into(base, it->x, it->y, end);
  if (s == ST_OK && !*end) *out = (st_batch){1, it->x, it->y};
  return s;
}

static st_status fast_skip(st_iterator *base, int64_t n, int64_t *done) {
  shuf_fast_iter *it = (shuf_fast_iter *)base;
  int64_t row;
  for (; *done < n && it->ahead_count > 0; ++*done) { /* queued picks first */
    it->ahead_head = (it->ahead_head + 1) % FAST_AHEAD;
    it->ahead_count--;
  }
  while (*done < n && fast_pick(it, &row)) ++*done;
  return ST_OK;
}

static void fast_destroy(st_iterator *base) {
  shuf_fast_iter *it = (shuf_fast_iter *)base;
  free(it->idx);
  free(it->x);
  free(it);
}

static const st__iter_ops fast_ops = {fast_next, fast_next_into, fast_skip, fast_destroy};

static st_status fast_iterate(const shuffle_node *sh, const st__index_view *v, st_rng rng,
                              st_iterator **out) {
  const st_dataset *src = v->src;
  shuf_fast_iter *it = calloc(1, sizeof *it);
  int64_t n = v->count;
  int64_t cap = sh->buffer_size < n ? sh->buffer_size : n;
  if (it) it->idx = malloc((size_t)(cap > 0 ? cap : 1) * sizeof(int64_t));
  if (it) it->x = calloc(src->x_size + src->y_size, sizeof(float));
  if (!it || !it->idx || !it->x) {
    if (it) fast_destroy(&it->base);
    return st_error(ST_ERR_NOMEM, "shuffle: out of memory for %lld buffered indices",
                    (long long)cap);
  }
  it->base.ops = &fast_ops;
  it->view = *v;
  it->rng = rng;
  it->n = n;
  it->y = it->x + src->x_size;
  for (int64_t k = 0; k < cap; k++) it->idx[k] = k;
  it->count = it->next_row = cap;
  *out = &it->base;
  return ST_OK;
}

/* ---- general path: a buffer of produced items ---------------------------- */

typedef struct shuf_iter {
  st_iterator base;
  const shuffle_node *node;
  st_iterator *up;
  st_rng rng;
  float **slot;     /* [alloc] item buffers [item_x + item_y]; [0, count) buffered */
  int *size;        /* [alloc] examples in each slot */
  int64_t count, alloc, room; /* room: length of the slot/size arrays */
  float *spare;     /* the item handed out last */
  int spare_size;
  size_t item_x, item_y;
  bool started, up_done;
  bool failed;      /* upstream failed: the buffer is inconsistent, stay failed */
} shuf_iter;

/* Make slot k (k <= alloc) exist. */
static st_status ensure_slot(shuf_iter *it, int64_t k) {
  if (k < it->alloc) return ST_OK;
  if (it->alloc == it->room) {
    int64_t room = it->room ? it->room * 2 : 64;
    float **slot = realloc(it->slot, (size_t)room * sizeof *slot);
    if (slot) it->slot = slot;
    int *size = slot ? realloc(it->size, (size_t)room * sizeof *size) : NULL;
    if (!size) return st_error(ST_ERR_NOMEM, "shuffle: out of memory for %lld slots",
                               (long long)room);
    it->size = size;
    it->room = room;
  }
  it->slot[it->alloc] = malloc((it->item_x + it->item_y) * sizeof(float));
  if (!it->slot[it->alloc])
    return st_error(ST_ERR_NOMEM, "shuffle: out of memory after buffering %lld items",
                    (long long)it->alloc);
  it->alloc++;
  return ST_OK;
}

/* Read the next upstream item into slot k; sets up_done at the end. */
static st_status pull(shuf_iter *it, int64_t k) {
  const st_dataset *in = it->node->base.input;
  float *x = it->slot[k], *y = x + it->item_x;
  bool end = false;
  st_status s;
  if (in->batch == 0) {
    s = st__iter_next_into(it->up, in, x, y, &end);
    it->size[k] = 1;
  } else {
    st_batch b;
    s = it->up->ops->next(it->up, &b, &end);
    if (s == ST_OK && !end) st__batch_copy(in, &b, x, y), it->size[k] = b.size;
  }
  if (s == ST_OK && end) it->up_done = true;
  return s;
}

static st_status fill(shuf_iter *it) {
  while (it->count < it->node->buffer_size && !it->up_done) {
    st_status s = ensure_slot(it, it->count);
    if (s == ST_OK) s = pull(it, it->count);
    if (s != ST_OK) return s;
    if (!it->up_done) it->count++;
  }
  return ST_OK;
}

static void swap_slots(shuf_iter *it, int64_t a, int64_t b) {
  float *p = it->slot[a];
  int n = it->size[a];
  it->slot[a] = it->slot[b], it->size[a] = it->size[b];
  it->slot[b] = p, it->size[b] = n;
}

static st_status shuf_next(st_iterator *base, st_batch *out, bool *end) {
  shuf_iter *it = (shuf_iter *)base;
  st_status s = ST_OK;
  if (it->failed)
    return st_error(ST_ERR_INVALID, "shuffle: this pass already failed; start a new one");
  if (!it->started && (s = fill(it)) != ST_OK) return it->failed = true, s;
  it->started = true;
  if (it->count == 0) return *end = true, ST_OK;
  int64_t j = (int64_t)st_rng_below(&it->rng, (uint64_t)it->count);
  float *p = it->slot[j];
  int n = it->size[j];
  it->slot[j] = it->spare, it->size[j] = it->spare_size;
  it->spare = p, it->spare_size = n;
  if (!it->up_done && (s = pull(it, j)) != ST_OK) return it->failed = true, s;
  if (it->up_done) swap_slots(it, j, --it->count);
  *out = (st_batch){it->spare_size, it->spare, it->spare + it->item_x};
  return ST_OK;
}

static void shuf_destroy(st_iterator *base) {
  shuf_iter *it = (shuf_iter *)base;
  st_iterator_destroy(it->up);
  for (int64_t k = 0; k < it->alloc; k++) free(it->slot[k]);
  free(it->slot);
  free(it->size);
  free(it->spare);
  free(it);
}

static const st__iter_ops shuf_ops = {shuf_next, NULL, NULL, shuf_destroy};

static st_status general_iterate(shuffle_node *sh, uint64_t epoch, st_rng rng,
                                 st_iterator **out) {
  st_dataset *in = sh->base.input;
  shuf_iter *it = calloc(1, sizeof *it);
  if (!it) return st_error(ST_ERR_NOMEM, "shuffle: out of memory for an iterator");
  it->base.ops = &shuf_ops;
  it->node = sh;
  it->rng = rng;
  it->item_x = st__ds_item_floats(in, in->x_size);
  it->item_y = st__ds_item_floats(in, in->y_size);
  it->spare = malloc((it->item_x + it->item_y) * sizeof(float));
  st_status s = it->spare ? ST_OK : st_error(ST_ERR_NOMEM, "shuffle: out of memory");
  if (s == ST_OK) s = st__ds_iterate(in, epoch, &it->up);
  if (s != ST_OK) {
    shuf_destroy(&it->base);
    return s;
  }
  *out = &it->base;
  return ST_OK;
}

static st_status shuffle_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  shuffle_node *sh = (shuffle_node *)ds;
  st_rng rng = st_rng_make(sh->seed, sh->reshuffle ? epoch : 0);
  st__index_view v;
  if (st__ds_index_view(ds->input, &v)) return fast_iterate(sh, &v, rng, out);
  return general_iterate(sh, epoch, rng, out);
}

static st_status shuffle_rebuild(const st_dataset *ds, st_dataset *in, st_dataset **out) {
  const shuffle_node *sh = (const shuffle_node *)ds;
  return st_dataset_shuffle(in, sh->buffer_size, sh->seed, sh->reshuffle, out);
}

static const st__ds_ops shuffle_ops = {"shuffle", shuffle_iterate, NULL, shuffle_rebuild, NULL, NULL};

st_status st_dataset_shuffle(st_dataset *ds, int64_t buffer_size, uint64_t seed,
                             bool reshuffle_each_iteration, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_shuffle")) return ST_ERR_INVALID;
  if (buffer_size < 1)
    return st__ds_fail(ds, ST_ERR_INVALID, "shuffle: buffer_size %lld must be >= 1",
                       (long long)buffer_size);
  shuffle_node *sh = calloc(1, sizeof *sh);
  if (!sh) return st__ds_fail(ds, ST_ERR_NOMEM, "shuffle: out of memory");
  st__ds_init(&sh->base, &shuffle_ops, ds);
  sh->buffer_size = buffer_size;
  sh->seed = seed;
  sh->reshuffle = reshuffle_each_iteration;
  *out = &sh->base;
  return ST_OK;
}
