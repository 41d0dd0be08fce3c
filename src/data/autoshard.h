/* Internal: TensorFlow's AutoShardPolicy AUTO for a pipeline that reads
 * files (dataset_autoshard.c), used by st_model_fit under
 * multi_worker_mirrored. */
#ifndef STRATA_DATA_AUTOSHARD_H
#define STRATA_DATA_AUTOSHARD_H

#include "strata/data.h"

/* If ds reads files (its bottom source is TFRecord or token shards, not
 * already sharded) and
 * has at least `workers` of them: *out = ds's pipeline rebuilt over the
 * files of worker `rank` (file i when i % workers == rank) with every batch
 * node's size divided by workers (each worker batches its share of the
 * global batch), ds unchanged; the caller then trains each worker's batches
 * whole. *out = NULL with ST_OK when ds is not such a pipeline (no files,
 * fewer files than workers, or a stage that cannot be rebuilt: *why says
 * which, and is "" when ds reads no files): the caller falls back to DATA,
 * as TensorFlow's AUTO does.
 * ST_ERR_INVALID when a batch size does not split evenly over workers. */
st_status st__ds_auto_shard_files(const st_dataset *ds, int workers, int rank,
                                  st_dataset **out, char *why, size_t why_size);

#endif
