/* validation_split: split a pipeline over in-memory rows into the pipeline
 * over the first rows (training) and the held-out last rows (validation), by
 * rebuilding each node over a borrowed copy of the source (see holdout.h). */
#include "data/holdout.h"

#include "data/dataset_impl.h"

#include <math.h>
#include <string.h>

#define MAX_NODES 64

/* The pipeline's nodes, top first: nodes[0] = ds, nodes[*n - 1] the source. */
static st_status chain(const st_dataset *ds, const char *fn, const st_dataset **nodes,
                       int *n) {
  *n = 0;
  for (; ds; ds = ds->input) {
    if (*n == MAX_NODES)
      return st_error(ST_ERR_INVALID, "%s: validation_split: the pipeline has more than %d "
                      "stages", fn, MAX_NODES);
    nodes[(*n)++] = ds;
  }
  return ST_OK;
}

/* Index of the highest node that is an index view over the source (the
 * source itself or take/skip/shard right above it); -1 if none. */
static int view_top(const st_dataset **nodes, int n, st__index_view *v) {
  for (int i = 0; i < n; i++)
    if (st__ds_index_view(nodes[i], v)) return i;
  return -1;
}

static bool is_named(const st_dataset *ds, const char *name) {
  return strcmp(ds->ops->name, name) == 0;
}

/* Rebuild nodes[from..to] (from >= to; bottom first) over *ds, in place. For
 * the validation part only maps are kept. */
static st_status rebuild(const st_dataset **nodes, int from, int to, bool val_only,
                         st_dataset **ds) {
  for (int i = from; i >= to && *ds; i--) {
    if (val_only && !is_named(nodes[i], "map")) continue;
    st_status s = nodes[i]->ops->rebuild(nodes[i], *ds, ds);
    if (s != ST_OK) return s;
  }
  return ST_OK;
}

/* One part: the view's rows (source + nodes up to `top`), then take or skip
 * of n_train, then the nodes above (all of them, or the maps and a batch). */
static st_status part(const st_dataset **nodes, int n, int top, int64_t n_train, bool val,
                      int batch, st_dataset **out) {
  st_dataset *ds = NULL;
  st_status s = st__slices_borrow(nodes[n - 1], &ds);
  if (s == ST_OK) s = rebuild(nodes, n - 2, top, false, &ds);
  if (s == ST_OK) s = val ? st_dataset_skip(ds, n_train, &ds) : st_dataset_take(ds, n_train, &ds);
  if (s == ST_OK) s = rebuild(nodes, top - 1, 0, val, &ds);
  if (s == ST_OK && val) s = st_dataset_batch(ds, batch, false, &ds);
  if (s != ST_OK) {
    st_dataset_destroy(ds);
    return s;
  }
  *out = ds;
  return ST_OK;
}

/* Every node above the rows must be rebuildable (repeat is not). */
static st_status check_nodes(const st_dataset **nodes, int top, const char *fn) {
  for (int i = 0; i < top; i++)
    if (!nodes[i]->ops->rebuild)
      return st_error(ST_ERR_INVALID, "%s: validation_split cannot split a pipeline with "
                      "%s (hold the validation rows out with take/skip instead)", fn,
                      nodes[i]->ops->name);
  return ST_OK;
}

st_status st__ds_holdout(const st_dataset *ds, double fraction, const char *fn,
                         st_dataset **train, st_dataset **val) {
  *train = *val = NULL;
  if (!(fraction > 0.0 && fraction < 1.0))
    return st_error(ST_ERR_INVALID, "%s: validation_split %g must be in (0, 1)", fn, fraction);
  if (ds->batch < 1)
    return st_error(ST_ERR_INVALID, "%s: validation_split needs a batched dataset", fn);
  const st_dataset *nodes[MAX_NODES];
  int n;
  st__index_view v;
  st_status s = chain(ds, fn, nodes, &n);
  if (s != ST_OK) return s;
  int top = view_top(nodes, n, &v);
  if (top < 0)
    return st_error(ST_ERR_INVALID, "%s: validation_split needs training data from "
                    "st_dataset_from_tensor_slices (as Keras: arrays, not a dataset of "
                    "another kind)", fn);
  if ((s = check_nodes(nodes, top, fn)) != ST_OK) return s;
  int64_t n_train = (int64_t)floor((double)v.count * (1.0 - fraction));
  if (n_train < 1 || n_train >= v.count)
    return st_error(ST_ERR_INVALID, "%s: validation_split %g of %lld examples leaves %lld "
                    "for training and %lld for validation (both must be at least 1)", fn,
                    fraction, (long long)v.count, (long long)n_train,
                    (long long)(v.count - n_train));
  s = part(nodes, n, top, n_train, false, 0, train);
  if (s == ST_OK) s = part(nodes, n, top, n_train, true, ds->batch, val);
  if (s != ST_OK) {
    st_dataset_destroy(*train);
    *train = NULL;
  }
  return s;
}
