/* Internal plumbing of the dataset pipeline, shared by src/data/dataset*.c.
 * A dataset is a node (st_dataset, embedded as the first member of each node
 * kind's struct) with a small vtable: iterate (start a pass at an epoch number)
 * and destroy (free the node's own state; the input node is destroyed by the
 * generic code). An iterator (st_iterator, likewise embedded) has next (one
 * item: an element or a batch), an optional next_into (write one unbatched
 * element straight into caller buffers, which lets batch gather rows without
 * an extra copy) and an optional skip (drop items without producing them).
 * The epoch number flows from the top of the pipeline down so shuffle orders
 * depend only on (seed, epoch); repeat derives its inner epochs from it. */
#ifndef STRATA_DATA_DATASET_IMPL_H
#define STRATA_DATA_DATASET_IMPL_H

#include "base/args.h"
#include "strata/data.h"

typedef struct st__iter_ops {
  st_status (*next)(st_iterator *it, st_batch *out, bool *end);
  /* Optional; unbatched datasets only. x [x_size], y [y_size]. */
  st_status (*next_into)(st_iterator *it, float *x, float *y, bool *end);
  /* Optional: drop up to n items; *done = how many were dropped (< n at end). */
  st_status (*skip)(st_iterator *it, int64_t n, int64_t *done);
  void (*destroy)(st_iterator *it);
} st__iter_ops;

struct st_iterator {
  const st__iter_ops *ops;
  bool no_labels; /* the dataset has no labels: st_iterator_next gives y NULL */
};

typedef struct st__ds_ops {
  const char *name; /* "shuffle", for messages */
  /* Start a pass; *out is a new iterator. */
  st_status (*iterate)(st_dataset *ds, uint64_t epoch, st_iterator **out);
  void (*destroy)(st_dataset *ds); /* node state only; NULL = nothing extra */
  /* Optional: a node of the same kind with the same parameters over `in`
   * (owned, as a transform takes it; destroyed on failure). NULL: the node
   * cannot be rebuilt (fit's validation_split refuses such a pipeline). */
  st_status (*rebuild)(const st_dataset *ds, st_dataset *in, st_dataset **out);
  /* Optional, sources that read files (auto-shard FILE, dataset_autoshard.c):
   * how many files the source reads and whether it is already FILE-sharded,
   * and a new source of the same kind over file i % num_shards == index of
   * those files (fewer files than shards is an error). */
  int (*file_count)(const st_dataset *ds, bool *sharded);
  st_status (*reshard)(const st_dataset *ds, int num_shards, int shard_index, st_dataset **out);
} st__ds_ops;

struct st_dataset {
  const st__ds_ops *ops;
  st_dataset *input;   /* owned upstream node; NULL for sources */
  st_shape x_shape;    /* per example */
  size_t x_size;       /* floats per example */
  size_t y_size;       /* floats per example */
  int batch;           /* examples per item at most; 0 = unbatched elements */
  int64_t cardinality; /* items per pass; -1 infinite, -2 unknown */
  uint64_t next_epoch; /* passes started through st_dataset_iterate (atomic) */
};

/* Initialise a transform node over `in`, copying its shape and counts. */
void st__ds_init(st_dataset *ds, const st__ds_ops *ops, st_dataset *in);
/* A transform failed: destroy `in` (may be NULL), set the error, return s. */
st_status st__ds_fail(st_dataset *in, st_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks for transform entry: true (error set: "<fn>: out is NULL" / "ds
 * ... is NULL") when out or the input is NULL; a NULL out destroys in (the
 * transform owns it), else *out = NULL. */
bool st__ds_bad_args(st_dataset *in, st_dataset **out, const char *fn);
/* Start a pass over ds at the given epoch (used by nodes on their input). */
st_status st__ds_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out);
/* Floats per item slot: max(batch, 1) * size. */
size_t st__ds_item_floats(const st_dataset *ds, size_t per_example);

/* One unbatched element into x/y, via next_into when the iterator has it. */
st_status st__iter_next_into(st_iterator *it, const st_dataset *ds, float *x, float *y,
                             bool *end);
/* Drop n items (skip op when present, else next). */
st_status st__iter_skip(st_iterator *it, int64_t n, int64_t *done);
/* Copy an item into buffers sized for st__ds_item_floats. */
void st__batch_copy(const st_dataset *ds, const st_batch *b, float *x, float *y);

/* Rows start + k * step (0 <= k < count) of a tensor-slices source: what a
 * chain of take/skip/shard directly above the source yields, in order. */
typedef struct st__index_view {
  const st_dataset *src;
  int64_t start, step, count;
} st__index_view;
/* True (and *v filled) if ds is such a chain (or the source itself). */
bool st__ds_index_view(const st_dataset *ds, st__index_view *v);

/* Tensor-slices source, for the shuffle fast path. */
bool st__ds_is_slices(const st_dataset *ds);
int64_t st__slices_count(const st_dataset *ds);
/* Convert example i (0 <= i < count) into x [x_size] and y [y_size]. */
void st__slices_row(const st_dataset *ds, int64_t i, float *x, float *y);
/* A second tensor-slices source over the same rows as src, borrowing src's
 * tensors (src must outlive it). */
st_status st__slices_borrow(const st_dataset *src, st_dataset **out);
/* Hint that example i will be converted soon (prefetches its bytes). */
void st__slices_prefetch(const st_dataset *ds, int64_t i);

/* Rebuild node ds over in (ops->rebuild), a batch node with batch_size
 * instead of its own (auto-shard FILE splits the global batch). */
st_status st__batch_rebuild_size(const st_dataset *ds, st_dataset *in, int batch_size,
                                 st_dataset **out);
/* Called first by every pipeline background thread (dataset_thread.c):
 * SCHED_BATCH, so waking it does not preempt the consumer. */
void st__ds_background_thread(void);
/* A prefetch iterator's current depth (items it keeps ready) and, through
 * buffers and stalls (either may be NULL), the item buffers it has allocated
 * and the calls after its first that found the queue empty; 0 for other
 * iterators. For tests of ST_AUTOTUNE and bench/tfrecord_wait.c. */
int st__prefetch_depth(st_iterator *it, int *buffers, int64_t *stalls);

#endif
