/* Labels of an in-memory dataset read straight from its source, without a
 * pass over the pipeline, so fit can check every label before training and
 * name the source row of a bad one (not its position after shuffling). */
#ifndef STRATA_DATA_LABELS_H
#define STRATA_DATA_LABELS_H

#include "strata/data.h"

/* Called with row's labels (y_size floats, valid during the call) and its
 * 0-based row in the source tensors; a non-OK status stops the scan. */
typedef st_status (*st__label_fn)(const float *y, int64_t row, void *user);

/* When every pass over ds yields rows of a tensor-slices source with their
 * labels unchanged (ds is the source, or take/skip/shard over it, under any
 * of shuffle, batch, prefetch and repeat; not map), calls fn for each of those
 * rows in source order, sets *scanned and returns fn's first failure (or
 * ST_OK). Otherwise *scanned is false and it returns ST_OK. ST_ERR_NOMEM
 * when the label buffer cannot be allocated. */
st_status st__ds_scan_labels(const st_dataset *ds, st__label_fn fn, void *user, bool *scanned);

#endif
