/* Keras's validation_split on a dataset pipeline: the last fraction of the
 * rows of an in-memory source held out, before any shuffling, and the
 * pipeline rebuilt over the rest. Used by st_model_fit. */
#ifndef STRATA_DATA_HOLDOUT_H
#define STRATA_DATA_HOLDOUT_H

#include "strata/data.h"

/* ds: a batched pipeline whose rows come from st_dataset_from_tensor_slices
 * (optionally through take/skip/shard right above it), under any of map,
 * shuffle, batch, prefetch, take, skip and shard; not repeat. With n those
 * rows in source order and n_train = floor(n * (1 - fraction)) (Keras's
 * rounding): *train is ds's pipeline rebuilt over the first n_train rows
 * (same seeds, buffers and batch size: the batches ds would give if it had
 * been built over those rows) and *val the last n - n_train rows through
 * ds's maps, batched with ds's batch size (no shuffle, no remainder
 * dropped). Both are new pipelines (st_dataset_destroy each) that borrow
 * the source's tensors: ds must outlive them. ds is not changed.
 * ST_ERR_INVALID naming `fn` when fraction is not in (0, 1), the pipeline
 * has another shape, or either part would be empty. */
st_status st__ds_holdout(const st_dataset *ds, double fraction, const char *fn,
                         st_dataset **train, st_dataset **val);

#endif
