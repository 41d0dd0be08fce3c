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

/* A new TFRecord source over src's files, FILE-sharded (file i kept when
 * i % num_shards == shard_index; fewer files than shards is an error). */
st_status st__tfr_reshard(const st_dataset *src, int num_shards, int shard_index,
                          st_dataset **out);

/* Make r reserve each record larger than 1 MiB, with its decode budget, from
 * the process-wide pool (2 x 64 MiB + 1 MiB; a larger reservation waits until
 * it is alone), until st__tfrecord_reader_release, the next record or destroy.
 * Call release after parsing each record: a thread must not wait for the
 * pool while holding a reservation of another reader. */
void st__tfrecord_reader_pool(st_tfrecord_reader *r);
void st__tfrecord_reader_release(st_tfrecord_reader *r);
/* Parse a record of r's dataset (decode budget from max_record_bytes),
 * release r's reservation; a record refused by the budget is skipped
 * (*skipped, counted in src) when skip_corrupt. Errors name file and offset. */
st_status st__tfr_parse(tfr_node *src, int file, st_tfrecord_reader *r, uint64_t at,
                        const void *rec, size_t n, float *x, float *y, bool *skipped);
/* Bytes decoding a tf.train.Example of size bytes may allocate (example.c):
 * 8 x size + 64 KiB, at most max_record_bytes + 64 KiB. st_parse_example uses
 * it with the default max_record_bytes (64 MiB). */
size_t st__example_decode_budget(size_t size, size_t max_record_bytes);
/* st_parse_example with protobuf-c's allocations bounded by limit bytes;
 * *over (may be NULL) tells an ST_ERR_FORMAT that refused the record for that. */
st_status st__parse_example_bounded(const void *data, size_t size, const st_example_spec *spec,
                                    float *x, float *y, size_t limit, bool *over);

#endif
