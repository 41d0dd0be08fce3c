/* AutoShardPolicy AUTO over a file pipeline (see autoshard.h): the file
 * source (TFRecord or token shards: ops->reshard) re-made FILE-sharded for
 * one worker, and every node above it rebuilt over it (ops->rebuild), batch
 * nodes with the per-worker size. */
#include "data/autoshard.h"

#include <stdio.h>
#include <string.h>

#include "data/dataset_impl.h"

#define MAX_NODES 64

st_status st__ds_auto_shard_files(const st_dataset *ds, int workers, int rank,
                                  st_dataset **out, char *why, size_t why_size) {
  *out = NULL;
  snprintf(why, why_size, "%s", "");
  const st_dataset *src = ds;
  while (src && src->input) src = src->input;
  if (!src || !src->ops->reshard) return ST_OK; /* why stays empty: not a file pipeline */
  bool sharded = false;
  int nfiles = src->ops->file_count(src, &sharded);
  if (sharded)
    return snprintf(why, why_size, "the %s source is already sharded",
                    !strcmp(src->ops->name, "tfrecord") ? "TFRecord" : src->ops->name), ST_OK;
  if (nfiles < workers)
    return snprintf(why, why_size, "%d file%s for %d workers", nfiles,
                    nfiles == 1 ? "" : "s", workers), ST_OK;
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
  st_status s = src->ops->reshard(src, workers, rank, &p);
  for (int i = n - 1; s == ST_OK && i >= 0; i--) {
    const st_dataset *d = nodes[i];
    s = d->batch > 0 && d->input->batch == 0 ? st__batch_rebuild_size(d, p, d->batch / workers, &p)
                                              : d->ops->rebuild(d, p, &p);
  }
  if (s != ST_OK) return s; /* rebuild destroyed p */
  *out = p;
  return ST_OK;
}
