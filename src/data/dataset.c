/* The dataset pipeline's public entry points and generic plumbing: node
 * destruction down the chain, the accessors (shape, sizes, cardinality, batch
 * size), starting a pass, the iterator calls, and the helpers the node files
 * share (transform init and failure, next_into and skip fallbacks). Node kinds
 * live in dataset_source.c (tensor slices), dataset_shuffle.c,
 * dataset_transform.c (map, batch, repeat, take, skip, shard) and
 * dataset_prefetch.c; see dataset_impl.h for the vtables. */
#include "data/dataset_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void st__ds_init(st_dataset *ds, const st__ds_ops *ops, st_dataset *in) {
  ds->ops = ops;
  ds->input = in;
  ds->x_shape = in->x_shape;
  ds->x_size = in->x_size;
  ds->y_size = in->y_size;
  ds->batch = in->batch;
  ds->cardinality = in->cardinality;
  ds->next_epoch = 0;
}

st_status st__ds_fail(st_dataset *in, st_status s, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  st_dataset_destroy(in);
  return st_error(s, "%s", msg);
}

bool st__ds_bad_args(st_dataset *in, st_dataset **out, const char *fn) {
  if (!out) {
    st_dataset_destroy(in); /* the transform owns its input, even refused */
    st_error(ST_ERR_INVALID, "%s: out is NULL", fn);
    return true;
  }
  *out = NULL;
  if (in) return false;
  st_error(ST_ERR_INVALID, "%s: ds (the input dataset) is NULL", fn);
  return true;
}

void st_dataset_destroy(st_dataset *ds) {
  while (ds) {
    st_dataset *in = ds->input;
    if (ds->ops->destroy) ds->ops->destroy(ds);
    free(ds);
    ds = in;
  }
}

st_shape st_dataset_x_shape(const st_dataset *ds) {
  st_shape none = {0, {0}};
  return ds ? ds->x_shape : none;
}

size_t st_dataset_y_size(const st_dataset *ds) { return ds ? ds->y_size : 0; }
int64_t st_dataset_cardinality(const st_dataset *ds) { return ds ? ds->cardinality : -2; }
int st_dataset_batch_size(const st_dataset *ds) { return ds ? ds->batch : 0; }

size_t st__ds_item_floats(const st_dataset *ds, size_t per_example) {
  return (size_t)(ds->batch > 0 ? ds->batch : 1) * per_example;
}

st_status st__ds_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  *out = NULL;
  st_status s = ds->ops->iterate(ds, epoch, out);
  if (s == ST_OK && *out) (*out)->no_labels = ds->y_size == 0;
  return s;
}

st_status st_dataset_iterate(st_dataset *ds, st_iterator **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_dataset_iterate: out is NULL");
  *out = NULL;
  if (!ds) return st_error(ST_ERR_INVALID, "st_dataset_iterate: ds is NULL");
  uint64_t epoch = __atomic_fetch_add(&ds->next_epoch, 1, __ATOMIC_RELAXED);
  return st__ds_iterate(ds, epoch, out);
}

st_status st_dataset_iterate_epoch(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_dataset_iterate_epoch: out is NULL");
  *out = NULL;
  if (!ds) return st_error(ST_ERR_INVALID, "st_dataset_iterate_epoch: ds is NULL");
  return st__ds_iterate(ds, epoch, out);
}

st_status st_iterator_next(st_iterator *it, st_batch *out, bool *end) {
  ST_REQUIRE(it);
  ST_REQUIRE(out);
  ST_REQUIRE(end);
  *end = false;
  st_status s = it->ops->next(it, out, end);
  if (s == ST_OK && it->no_labels) out->y = NULL; /* no buffer to read labels from */
  return s;
}

void st_iterator_destroy(st_iterator *it) {
  if (it) it->ops->destroy(it);
}

st_status st__iter_next_into(st_iterator *it, const st_dataset *ds, float *x, float *y,
                             bool *end) {
  *end = false;
  if (it->ops->next_into) return it->ops->next_into(it, x, y, end);
  st_batch b;
  st_status s = it->ops->next(it, &b, end);
  if (s != ST_OK || *end) return s;
  memcpy(x, b.x, ds->x_size * sizeof(float));
  memcpy(y, b.y, ds->y_size * sizeof(float));
  return ST_OK;
}

st_status st__iter_skip(st_iterator *it, int64_t n, int64_t *done) {
  *done = 0;
  if (n <= 0) return ST_OK;
  if (it->ops->skip) return it->ops->skip(it, n, done);
  bool end = false;
  st_batch b;
  while (*done < n) {
    st_status s = it->ops->next(it, &b, &end);
    if (s != ST_OK || end) return s;
    ++*done;
  }
  return ST_OK;
}

void st__batch_copy(const st_dataset *ds, const st_batch *b, float *x, float *y) {
  memcpy(x, b->x, (size_t)b->size * ds->x_size * sizeof(float));
  memcpy(y, b->y, (size_t)b->size * ds->y_size * sizeof(float));
}
