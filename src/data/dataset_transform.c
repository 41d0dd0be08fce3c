/* Element-wise and counting transforms of the dataset pipeline: map (a user
 * callback applied in place to each example), batch (gathers examples straight
 * into the batch buffer through next_into), repeat (new upstream pass per
 * repetition, at a derived epoch so shuffles reshuffle), take, skip and shard
 * (every num_shards-th element starting at index). Each transform takes
 * ownership of its input and destroys it when it fails. A take/skip/shard
 * chain right above a tensor-slices source is also described as an index view
 * (start, step, count) so shuffle can use its fast path over it. */
#include "data/dataset_impl.h"

#include <stdlib.h>
#include <string.h>

/* A transform iterator that reads one upstream iterator. */
typedef struct pass_iter {
  st_iterator base;
  const st_dataset *node;
  st_iterator *up;
} pass_iter;

/* Allocate a pass_iter-based iterator of `size` bytes and start its upstream. */
static st_status pass_start(st_dataset *node, uint64_t epoch, size_t size,
                            const st__iter_ops *ops, pass_iter **out) {
  pass_iter *it = calloc(1, size);
  if (!it) return st_error(ST_ERR_NOMEM, "%s: out of memory for an iterator", node->ops->name);
  it->base.ops = ops;
  it->node = node;
  st_status s = st__ds_iterate(node->input, epoch, &it->up);
  if (s != ST_OK) {
    free(it);
    return s;
  }
  *out = it;
  return ST_OK;
}

static void pass_destroy(st_iterator *base) {
  pass_iter *it = (pass_iter *)base;
  st_iterator_destroy(it->up);
  free(it);
}

/* NULL (error set, in destroyed) when out of memory. */
static st_dataset *new_node(st_dataset *in, const st__ds_ops *ops, size_t size) {
  st_dataset *ds = calloc(1, size);
  if (!ds) {
    st__ds_fail(in, ST_ERR_NOMEM, "%s: out of memory", ops->name);
    return NULL;
  }
  st__ds_init(ds, ops, in);
  return ds;
}

/* ---- map ------------------------------------------------------------------ */

typedef struct map_node {
  st_dataset base;
  st_map_fn fn;
  void *user;
} map_node;

typedef struct map_iter {
  pass_iter p;
  float *x, *y; /* [item x floats], [item y floats] */
} map_iter;

static st_status map_apply(const map_node *m, float *x, float *y, int n) {
  const st_dataset *ds = &m->base;
  for (int i = 0; i < n; i++) {
    st_status s = m->fn(m->user, x + (size_t)i * ds->x_size, ds->x_size,
                        y + (size_t)i * ds->y_size, ds->y_size);
    if (s != ST_OK) return st_error_prefix(s, "map callback: ");
  }
  return ST_OK;
}

static st_status map_next_into(st_iterator *base, float *x, float *y, bool *end) {
  map_iter *it = (map_iter *)base;
  const st_dataset *in = it->p.node->input;
  st_status s = st__iter_next_into(it->p.up, in, x, y, end);
  if (s != ST_OK || *end) return s;
  return map_apply((const map_node *)it->p.node, x, y, 1);
}

static st_status map_next(st_iterator *base, st_batch *out, bool *end) {
  map_iter *it = (map_iter *)base;
  const st_dataset *ds = it->p.node;
  st_batch b = {1, it->x, it->y};
  st_status s;
  if (ds->batch == 0) {
    s = map_next_into(base, it->x, it->y, end);
  } else {
    s = it->p.up->ops->next(it->p.up, &b, end);
    if (s != ST_OK || *end) return s;
    st__batch_copy(ds, &b, it->x, it->y);
    s = map_apply((const map_node *)ds, it->x, it->y, b.size);
  }
  if (s == ST_OK && !*end) *out = (st_batch){b.size, it->x, it->y};
  return s;
}

static void map_destroy(st_iterator *base) {
  map_iter *it = (map_iter *)base;
  free(it->x);
  pass_destroy(base);
}

static const st__iter_ops map_iter_ops = {map_next, map_next_into, NULL, map_destroy};

static st_status map_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  pass_iter *p;
  st_status s = pass_start(ds, epoch, sizeof(map_iter), &map_iter_ops, &p);
  if (s != ST_OK) return s;
  map_iter *it = (map_iter *)p;
  size_t nx = st__ds_item_floats(ds, ds->x_size), ny = st__ds_item_floats(ds, ds->y_size);
  it->x = malloc((nx + ny) * sizeof(float));
  if (!it->x) {
    pass_destroy(&it->p.base);
    return st_error(ST_ERR_NOMEM, "map: out of memory for an item buffer");
  }
  it->y = it->x + nx;
  *out = &it->p.base;
  return ST_OK;
}

static st_status map_rebuild(const st_dataset *ds, st_dataset *in, st_dataset **out) {
  const map_node *m = (const map_node *)ds;
  return st_dataset_map(in, m->fn, m->user, out);
}

static const st__ds_ops map_ops = {"map", map_iterate, NULL, map_rebuild, NULL, NULL};

st_status st_dataset_map(st_dataset *ds, st_map_fn fn, void *user, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_map")) return ST_ERR_INVALID;
  if (!fn) return st__ds_fail(ds, ST_ERR_INVALID, "%s: fn is NULL", __func__);
  map_node *m = (map_node *)new_node(ds, &map_ops, sizeof *m);
  if (!m) return ST_ERR_NOMEM;
  m->fn = fn;
  m->user = user;
  *out = &m->base;
  return ST_OK;
}

/* ---- batch ---------------------------------------------------------------- */

typedef struct batch_node {
  st_dataset base;
  bool drop_remainder;
} batch_node;

typedef struct batch_iter {
  pass_iter p;
  float *x, *y; /* [batch, x_size], [batch, y_size] */
  bool done;
} batch_iter;

static st_status batch_next(st_iterator *base, st_batch *out, bool *end) {
  batch_iter *it = (batch_iter *)base;
  const st_dataset *ds = it->p.node;
  int k = 0;
  bool e = it->done;
  while (k < ds->batch && !e) {
    st_status s = st__iter_next_into(it->p.up, ds->input, it->x + (size_t)k * ds->x_size,
                                     it->y + (size_t)k * ds->y_size, &e);
    if (s != ST_OK) return s;
    k += !e;
  }
  it->done = e;
  if (k == 0 || (k < ds->batch && ((const batch_node *)ds)->drop_remainder))
    return *end = true, ST_OK;
  *out = (st_batch){k, it->x, it->y};
  return ST_OK;
}

static void batch_destroy(st_iterator *base) {
  batch_iter *it = (batch_iter *)base;
  free(it->x);
  pass_destroy(base);
}

static const st__iter_ops batch_iter_ops = {batch_next, NULL, NULL, batch_destroy};

static st_status batch_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  pass_iter *p;
  st_status s = pass_start(ds, epoch, sizeof(batch_iter), &batch_iter_ops, &p);
  if (s != ST_OK) return s;
  batch_iter *it = (batch_iter *)p;
  size_t nx = (size_t)ds->batch * ds->x_size, ny = (size_t)ds->batch * ds->y_size;
  it->x = malloc((nx + ny) * sizeof(float));
  if (!it->x) {
    pass_destroy(&it->p.base);
    return st_error(ST_ERR_NOMEM, "batch: out of memory for a batch of %d", ds->batch);
  }
  it->y = it->x + nx;
  *out = &it->p.base;
  return ST_OK;
}

static st_status batch_rebuild(const st_dataset *ds, st_dataset *in, st_dataset **out) {
  return st_dataset_batch(in, ds->batch, ((const batch_node *)ds)->drop_remainder, out);
}

static const st__ds_ops batch_ops = {"batch", batch_iterate, NULL, batch_rebuild, NULL, NULL};

st_status st__batch_rebuild_size(const st_dataset *ds, st_dataset *in, int batch_size,
                                 st_dataset **out) {
  if (ds->ops != &batch_ops) return ds->ops->rebuild(ds, in, out);
  return st_dataset_batch(in, batch_size, ((const batch_node *)ds)->drop_remainder, out);
}

st_status st_dataset_batch(st_dataset *ds, int batch_size, bool drop_remainder,
                           st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_batch")) return ST_ERR_INVALID;
  if (batch_size < 1)
    return st__ds_fail(ds, ST_ERR_INVALID, "batch: batch_size %d must be >= 1", batch_size);
  if (ds->batch > 0)
    return st__ds_fail(ds, ST_ERR_INVALID, "batch: the dataset is already batched (size %d)",
                       ds->batch);
  batch_node *b = (batch_node *)new_node(ds, &batch_ops, sizeof *b);
  if (!b) return ST_ERR_NOMEM;
  b->drop_remainder = drop_remainder;
  b->base.batch = batch_size;
  int64_t c = ds->cardinality;
  if (c >= 0) b->base.cardinality = drop_remainder ? c / batch_size
                                                   : (c + batch_size - 1) / batch_size;
  *out = &b->base;
  return ST_OK;
}

/* ---- repeat --------------------------------------------------------------- */

typedef struct repeat_node {
  st_dataset base;
  int64_t count; /* -1 = forever */
} repeat_node;

typedef struct repeat_iter {
  st_iterator base;
  const repeat_node *node;
  st_iterator *up; /* current pass; NULL when finished */
  uint64_t epoch;
  int64_t r;       /* repetition number of the current pass */
  bool any;        /* the current pass produced an item */
} repeat_iter;

/* Epoch of repetition r inside outer epoch e: a counter across all passes. */
static uint64_t inner_epoch(const repeat_node *n, uint64_t e, int64_t r) {
  return n->count > 0 ? e * (uint64_t)n->count + (uint64_t)r : (e << 32) + (uint64_t)r;
}

/* The current pass ended: start the next one, or finish. An empty pass ends
 * an infinite repeat (it would never produce anything). */
static st_status repeat_advance(repeat_iter *it) {
  const repeat_node *n = it->node;
  st_iterator_destroy(it->up);
  it->up = NULL;
  it->r++;
  if ((n->count >= 0 && it->r >= n->count) || (n->count < 0 && !it->any)) return ST_OK;
  it->any = false;
  return st__ds_iterate(n->base.input, inner_epoch(n, it->epoch, it->r), &it->up);
}

/* One item: into x/y when x is set (next_into), else as a batch view. */
static st_status repeat_pull(repeat_iter *it, st_batch *out, float *x, float *y, bool *end) {
  for (;;) {
    if (!it->up) return *end = true, ST_OK;
    st_status s = x ? st__iter_next_into(it->up, it->node->base.input, x, y, end)
                    : it->up->ops->next(it->up, out, end);
    if (s != ST_OK) return s;
    if (!*end) return it->any = true, ST_OK;
    *end = false;
    if ((s = repeat_advance(it)) != ST_OK) return s;
  }
}

static st_status repeat_next(st_iterator *base, st_batch *out, bool *end) {
  return repeat_pull((repeat_iter *)base, out, NULL, NULL, end);
}

static st_status repeat_next_into(st_iterator *base, float *x, float *y, bool *end) {
  return repeat_pull((repeat_iter *)base, NULL, x, y, end);
}

static void repeat_destroy(st_iterator *base) {
  repeat_iter *it = (repeat_iter *)base;
  st_iterator_destroy(it->up);
  free(it);
}

static const st__iter_ops repeat_iter_ops = {repeat_next, repeat_next_into, NULL,
                                             repeat_destroy};

static st_status repeat_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  repeat_iter *it = calloc(1, sizeof *it);
  if (!it) return st_error(ST_ERR_NOMEM, "repeat: out of memory for an iterator");
  it->base.ops = &repeat_iter_ops;
  it->node = (const repeat_node *)ds;
  it->epoch = epoch;
  st_status s = ST_OK;
  if (it->node->count != 0) s = st__ds_iterate(ds->input, inner_epoch(it->node, epoch, 0), &it->up);
  if (s != ST_OK) {
    free(it);
    return s;
  }
  *out = &it->base;
  return ST_OK;
}

static const st__ds_ops repeat_ops = {"repeat", repeat_iterate, NULL, NULL, NULL, NULL};

static int64_t repeat_cardinality(int64_t c, int64_t count) {
  if (count == 0 || c == 0) return 0;
  if (count < 0) return -1;
  if (c < 0) return c;
  int64_t r;
  return __builtin_mul_overflow(c, count, &r) ? -2 : r;
}

st_status st_dataset_repeat(st_dataset *ds, int64_t count, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_repeat")) return ST_ERR_INVALID;
  if (count < -1)
    return st__ds_fail(ds, ST_ERR_INVALID, "repeat: count %lld must be >= 0 or -1 (forever)",
                       (long long)count);
  repeat_node *n = (repeat_node *)new_node(ds, &repeat_ops, sizeof *n);
  if (!n) return ST_ERR_NOMEM;
  n->count = count;
  n->base.cardinality = repeat_cardinality(ds->cardinality, count);
  *out = &n->base;
  return ST_OK;
}

/* ---- take, skip, shard ---------------------------------------------------- */

/* One node kind for the three counting transforms. */
typedef enum count_kind { COUNT_TAKE, COUNT_SKIP, COUNT_SHARD } count_kind;

typedef struct count_node {
  st_dataset base;
  count_kind kind;
  int64_t count;     /* take/skip: -1 = all; shard: num_shards */
  int64_t index;     /* shard index */
} count_node;

typedef struct count_iter {
  pass_iter p;
  int64_t taken;     /* take: items handed out */
  int64_t pending;   /* skip/shard: items to drop before the next one */
  bool over;         /* no more items */
} count_iter;

/* Before handing out an item: true if the pass is over. */
static st_status count_gate(count_iter *it, bool *over) {
  const count_node *n = (const count_node *)it->p.node;
  if (!it->over && n->kind == COUNT_TAKE && n->count >= 0 && it->taken >= n->count)
    it->over = true;
  if (!it->over && it->pending > 0) {
    int64_t done;
    st_status s = st__iter_skip(it->p.up, it->pending, &done);
    if (s != ST_OK) return s;
    it->over = done < it->pending;
    it->pending = 0;
  }
  *over = it->over;
  return ST_OK;
}

/* After an item: take counts it, shard drops num_shards - 1 next time. */
static void count_after(count_iter *it, bool end) {
  const count_node *n = (const count_node *)it->p.node;
  if (end) it->over = true;
  else if (n->kind == COUNT_TAKE) it->taken++;
  else if (n->kind == COUNT_SHARD) it->pending = n->count - 1;
}

static st_status count_next(st_iterator *base, st_batch *out, bool *end) {
  count_iter *it = (count_iter *)base;
  st_status s = count_gate(it, end);
  if (s != ST_OK || *end) return s;
  s = it->p.up->ops->next(it->p.up, out, end);
  if (s == ST_OK) count_after(it, *end);
  return s;
}

static st_status count_next_into(st_iterator *base, float *x, float *y, bool *end) {
  count_iter *it = (count_iter *)base;
  st_status s = count_gate(it, end);
  if (s != ST_OK || *end) return s;
  s = st__iter_next_into(it->p.up, it->p.node->input, x, y, end);
  if (s == ST_OK) count_after(it, *end);
  return s;
}

static const st__iter_ops count_iter_ops = {count_next, count_next_into, NULL, pass_destroy};

static st_status count_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  const count_node *n = (const count_node *)ds;
  pass_iter *p;
  st_status s = pass_start(ds, epoch, sizeof(count_iter), &count_iter_ops, &p);
  if (s != ST_OK) return s;
  count_iter *it = (count_iter *)p;
  if (n->kind == COUNT_SKIP) it->pending = n->count;
  if (n->kind == COUNT_SKIP && n->count < 0) it->over = true; /* skip(-1): skip all */
  if (n->kind == COUNT_SHARD) it->pending = n->index;
  *out = &p->base;
  return ST_OK;
}

static st_status count_rebuild(const st_dataset *ds, st_dataset *in, st_dataset **out) {
  const count_node *n = (const count_node *)ds;
  if (n->kind == COUNT_TAKE) return st_dataset_take(in, n->count, out);
  if (n->kind == COUNT_SKIP) return st_dataset_skip(in, n->count, out);
  return st_dataset_shard(in, (int)n->count, (int)n->index, out);
}

static const st__ds_ops take_ops = {"take", count_iterate, NULL, count_rebuild, NULL, NULL};
static const st__ds_ops skip_ops = {"skip", count_iterate, NULL, count_rebuild, NULL, NULL};
static const st__ds_ops shard_ops = {"shard", count_iterate, NULL, count_rebuild, NULL, NULL};

static st_status count_node_new(st_dataset *ds, const st__ds_ops *ops, count_kind kind,
                                int64_t count, int64_t index, int64_t cardinality,
                                st_dataset **out) {
  count_node *n = (count_node *)new_node(ds, ops, sizeof *n);
  if (!n) return ST_ERR_NOMEM;
  n->kind = kind;
  n->count = count;
  n->index = index;
  n->base.cardinality = cardinality;
  *out = &n->base;
  return ST_OK;
}

st_status st_dataset_take(st_dataset *ds, int64_t count, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_take")) return ST_ERR_INVALID;
  if (count < -1)
    return st__ds_fail(ds, ST_ERR_INVALID, "take: count %lld must be >= 0 or -1 (all)",
                       (long long)count);
  int64_t c = ds->cardinality;
  int64_t card = count < 0 ? c : c == -1 ? count : c == -2 ? -2 : c < count ? c : count;
  return count_node_new(ds, &take_ops, COUNT_TAKE, count, 0, card, out);
}

st_status st_dataset_skip(st_dataset *ds, int64_t count, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_skip")) return ST_ERR_INVALID;
  if (count < -1)
    return st__ds_fail(ds, ST_ERR_INVALID, "skip: count %lld must be >= 0 or -1 (all)",
                       (long long)count);
  int64_t c = ds->cardinality;
  int64_t card = count < 0 ? 0 : c < 0 ? c : c > count ? c - count : 0;
  return count_node_new(ds, &skip_ops, COUNT_SKIP, count, 0, card, out);
}

st_status st_dataset_shard(st_dataset *ds, int num_shards, int index, st_dataset **out) {
  if (st__ds_bad_args(ds, out, "st_dataset_shard")) return ST_ERR_INVALID;
  if (num_shards < 1 || index < 0 || index >= num_shards)
    return st__ds_fail(ds, ST_ERR_INVALID, "shard: index %d out of range for %d shards "
                       "(need num_shards >= 1 and 0 <= index < num_shards)", index, num_shards);
  int64_t c = ds->cardinality;
  int64_t card = c < 0 ? c : c > index ? (c - index - 1) / num_shards + 1 : 0;
  return count_node_new(ds, &shard_ops, COUNT_SHARD, num_shards, index, card, out);
}

/* Compose one take/skip/shard step onto the view of its input. */
static bool view_step(const count_node *n, st__index_view *v) {
  int64_t k;
  if (n->kind == COUNT_TAKE) {
    if (n->count >= 0 && n->count < v->count) v->count = n->count;
  } else if (n->kind == COUNT_SKIP) {
    k = n->count < 0 || n->count > v->count ? v->count : n->count;
    v->start += k * v->step;
    v->count -= k;
  } else {
    if (v->count <= n->index) v->count = 0;
    else v->count = (v->count - n->index - 1) / n->count + 1;
    v->start += n->index * v->step;
    if (__builtin_mul_overflow(v->step, n->count, &v->step)) return false;
  }
  return true;
}

bool st__ds_index_view(const st_dataset *ds, st__index_view *v) {
  if (st__ds_is_slices(ds)) {
    *v = (st__index_view){ds, 0, 1, st__slices_count(ds)};
    return true;
  }
  if (ds->ops != &take_ops && ds->ops != &skip_ops && ds->ops != &shard_ops) return false;
  return st__ds_index_view(ds->input, v) && view_step((const count_node *)ds, v);
}
