/* AutoShardPolicy AUTO over a file pipeline (see autoshard.h): the TFRecord
 * source re-made FILE-sharded for one worker, and every node above it
 * rebuilt over it (ops->rebuild), batch nodes with the per-worker size. */
#include "data/autoshard.h"

#include <stdio.h>

#include "data/dataset_impl.h"
#include "data/tfrecord_ds.h"

#define MAX_NODES 64

st_status st__ds_auto_shard_files(const st_dataset *ds, int workers, int rank,
                                  st_dataset **out, char *why, size_t why_size) {
  *out = NULL;
  snprintf(why, why_size, "%s", "");
  const st_dataset *src = st__tfr_source(ds);
  if (!src) return ST_OK; /* why stays empty: not a file pipeline at all */
  const tfr_node *t = (const tfr_node *)src;
  if (t->o.num_shards != 1)
    return snprintf(why, why_size, "the TFRecord source is already sharded"), ST_OK;
  if (t->nfiles < workers)
    return snprintf(why, why_size, "%d file%s for %d workers", t->nfiles,
                    t->nfiles == 1 ? "" : "s", workers), ST_OK;
  const st_dataset *nodes[MAX_NODES];
  int n = 0;
  for (const st_dataset *d = ds; d != src; d = d->input) {
    if (n == MAX_NODES || !d->ops->rebuild)
      return snprintf(why, why_size, "the pipeline has %s, which cannot be rebuilt",
                      n == MAX_NODES ? "too many stages" : d->ops->name), ST_OK;
    if (d->batch > 0 && d->input->batch == 0 && d->batch % workers != 0)
      return st_error(ST_ERR_INVALID, "auto-shard: the batch size %d does not split evenly "
                      "over %d workers (each reads its own files and batches %d / %d)",
                      d->batch, workers, d->batch, workers);
    nodes[n++] = d;
  }
  st_dataset *p = NULL;
  st_status s = st__tfr_reshard(src, workers, rank, &p);
  for (int i = n - 1; s == ST_OK && i >= 0; i--) {
    const st_dataset *d = nodes[i];
    s = d->batch > 0 && d->input->batch == 0 ? st__batch_rebuild_size(d, p, d->batch / workers, &p)
                                              : d->ops->rebuild(d, p, &p);
  }
  if (s != ST_OK) return s; /* rebuild destroyed p */
  *out = p;
  return ST_OK;
}
