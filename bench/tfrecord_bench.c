/* TFRecord input pipeline throughput (issue 18): records/s and MB/s of
 * st_dataset_tfrecord (framing + every CRC + tf.train.Example parsing +
 * uint8 -> float conversion, batched by 32) over the files of a glob pattern,
 * with 1 and 2 threads. With T threads, thread t reads the FILE shard t of T
 * (what T workers on one machine do); a third line is one pipeline whose
 * interleave reads 2 files at once on 2 background threads
 * (num_parallel_calls 2, cycle_length 2). MB/s counts the bytes of the files
 * (compressed bytes for GZIP) over the wall time of the slowest thread.
 *
 * Build (after building libstrata in build/):
 *   gcc -O2 -std=c11 -Iinclude -Ibuild/include -Isrc bench/tfrecord_bench.c build/libstrata.a \
 *       -lprotobuf-c -ljansson -lz -lm -ldl -lpthread $(mpicc --showme:link) -o /tmp/tfrecord_bench
 * Run (files from `strata convert`; SPEC from its --features):
 *   /tmp/tfrecord_bench 'DIR/fm-*.tfrecord' SPEC.json [repeats=3]
 * Prints one line per thread count: the best of `repeats` passes (the files
 * are in the page cache after the first: this is the CPU cost; compare with
 * the disk's sequential read speed, e.g. dd iflag=direct). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "strata/data.h"

typedef struct job {
  char **files;
  int nfiles, shard, shards;
  int parallel; /* interleave readers of one pipeline (cycle_length too); 0 = none */
  const st_example_spec *spec;
  st_compression comp;
  long long records;
  double seconds;
  st_status status;
} job;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *run(void *arg) {
  job *j = arg;
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  o.record.compression = j->comp;
  o.spec = *j->spec;
  o.num_shards = j->shards;
  o.shard_index = j->shard;
  if (j->parallel) {
    o.cycle_length = j->parallel;
    o.num_parallel_calls = j->parallel;
  }
  st_dataset *ds = NULL;
  double t0 = now();
  j->records = 0;
  j->status = st_dataset_tfrecord((const char *const *)j->files, j->nfiles, &o, &ds);
  if (j->status == ST_OK) j->status = st_dataset_batch(ds, 32, false, &ds);
  st_iterator *it = NULL;
  if (j->status == ST_OK) j->status = st_dataset_iterate(ds, &it);
  for (bool end = false; j->status == ST_OK && !end;) {
    st_batch b;
    j->status = st_iterator_next(it, &b, &end);
    if (j->status == ST_OK && !end) j->records += b.size;
  }
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
  j->seconds = now() - t0;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s 'PATTERN' SPEC.json [repeats=3]\n", argv[0]);
    return 2;
  }
  int repeats = argc > 3 ? atoi(argv[3]) : 3;
  st_example_spec spec;
  char **files;
  int n;
  if (st_example_spec_load(argv[2], &spec) != ST_OK || st_list_files(argv[1], false, 0, &files, &n) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    return 2;
  }
  size_t len = strlen(argv[1]);
  st_compression comp = len > 3 && !strcmp(argv[1] + len - 3, ".gz") ? ST_COMPRESSION_GZIP
                                                                      : ST_COMPRESSION_NONE;
  long long bytes = 0;
  for (int i = 0; i < n; i++) {
    struct stat sb;
    if (stat(files[i], &sb) == 0) bytes += sb.st_size;
  }
  printf("%d files, %.1f MB on disk, %s\n", n, (double)bytes / 1e6, comp ? "GZIP" : "plain");
  for (int mode = 1; mode <= 3; mode++) { /* 1, 2 pipelines; 1 with 2 parallel reads */
    int threads = mode == 3 ? 1 : mode, parallel = mode == 3 ? 2 : 0;
    double best = 1e30;
    long long records = 0;
    for (int r = 0; r < repeats; r++) {
      job jobs[2];
      pthread_t tid[2];
      double t0 = now();
      for (int t = 0; t < threads; t++) {
        jobs[t] = (job){files, n, t, threads, parallel, &spec, comp, 0, 0, ST_OK};
        pthread_create(&tid[t], NULL, run, &jobs[t]);
      }
      records = 0;
      for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        if (jobs[t].status != ST_OK) {
          fprintf(stderr, "%s\n", st_last_error());
          return 1;
        }
        records += jobs[t].records;
      }
      double s = now() - t0;
      if (s < best) best = s;
    }
    printf("%s: %lld records in %.3f s: %.0f records/s, %.1f MB/s\n",
           mode == 1 ? "1 thread" : mode == 2 ? "2 threads (FILE shards)"
                                              : "1 pipeline, 2 parallel reads",
           records, best, (double)records / best, (double)bytes / 1e6 / best);
  }
  st_list_files_free(files, n);
  return 0;
}
