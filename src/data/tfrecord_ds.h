/* Internal: the TFRecord dataset node, shared by dataset_tfrecord.c (the node,
 * the sequential iterator, list_files) and dataset_tfrecord_parallel.c (the
 * parallel interleave iterator). */
#ifndef STRATA_DATA_TFRECORD_DS_H
#define STRATA_DATA_TFRECORD_DS_H

#include "data/dataset_impl.h"

#define ST__TFR_MAX_THREADS 256

typedef struct tfr_node {
  st_dataset base;
  st_tfrecord_dataset_options o;
  char **files; /* [nfiles] this shard's files, owned */
  int nfiles;
  int64_t skipped; /* damaged records skipped, all passes (atomic) */
} tfr_node;

/* A pass of src with o.num_parallel_calls background readers. */
st_status st__tfr_parallel_iterate(tfr_node *src, st_iterator **out);

/* The TFRecord source at the bottom of ds, or NULL. */
const st_dataset *st__tfr_source(const st_dataset *ds);
/* A new TFRecord source over src's files, FILE-sharded (file i kept when
 * i % num_shards == shard_index; fewer files than shards is an error). */
st_status st__tfr_reshard(const st_dataset *src, int num_shards, int shard_index,
                          st_dataset **out);

#endif
