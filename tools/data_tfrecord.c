/* --data tfrecord:PATTERN for `strata train`: the training pipeline streamed
 * from TFRecord files (list_files, FILE-sharded across multi-worker workers,
 * optionally read N files at a time and cached in a file, a bounded shuffle
 * buffer, batch, an autotuned prefetch) with the --features spec, the
 * test set from --test-data (the same form) or the default test set when the
 * shapes match, and the per-worker summary line printed after training. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "outputs.h"

bool cli_is_tfrecord(const char *spec) { return spec && !strncmp(spec, "tfrecord:", 9); }

/* Counts and checksums the elements read, all passes together (the map runs
 * in the pipeline before shuffle; a sum, so the order does not matter). */
static st_status tally(void *user, float *x, size_t xs, float *y, size_t ys) {
  cli_tfrecord_tally *t = user;
  uint32_t c = st_crc32c(0, x, xs * sizeof *x);
  if (ys) c = st_crc32c(c, y, ys * sizeof *y);
  t->examples++;
  t->checksum += c;
  return ST_OK;
}

/* files of pattern, FILE-sharded when asked, as a parsed element dataset. */
static st_status open_files(const char *pattern, const st_example_spec *spec,
                            const cli_tfrecord_args *a, bool shard, st_dataset **out) {
  char **files = NULL;
  int n = 0;
  st_status s = st_list_files(pattern, false, 0, &files, &n);
  if (s != ST_OK) return s;
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  size_t len = strlen(pattern);
  o.record.compression = len > 3 && !strcmp(pattern + len - 3, ".gz") ? ST_COMPRESSION_GZIP
                                                                      : ST_COMPRESSION_NONE;
  if (a->compression) st_compression_parse(a->compression, &o.record.compression);
  o.record.skip_corrupt = a->skip_corrupt;
  o.spec = *spec;
  if (shard) {
    o.num_shards = a->workers;
    o.shard_index = a->worker;
  }
  if (a->parallel_reads) { /* TFRecordDataset(num_parallel_reads=N): interleave N, block 1 */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o.cycle_length = a->parallel_reads > 0 ? a->parallel_reads : cores > 0 ? (int)cores : 1;
    o.num_parallel_calls = a->parallel_reads > 0 ? a->parallel_reads : ST_AUTOTUNE;
  }
  s = st_dataset_tfrecord((const char *const *)files, n, &o, out);
  st_list_files_free(files, n);
  return s;
}

/* "x image uint8 [28,28,1], y label int64 []" */
static void describe(const st_example_spec *sp, char *buf, size_t cap) {
  static const char *const dt[] = {"float32", "int64", "uint8"};
  const st_feature_spec *f[2] = {&sp->x, &sp->y};
  size_t len = 0;
  for (int k = 0; k < 2 && f[k]->name[0]; k++) {
    len += (size_t)snprintf(buf + len, cap - len, "%s%s %s %s [", k ? ", " : "", k ? "y" : "x",
                            f[k]->name, dt[f[k]->dtype]);
    for (int i = 0; i < f[k]->shape.rank && len < cap; i++)
      len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? "," : "", f[k]->shape.dims[i]);
    if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "]");
    if (len >= cap) return;
  }
}

/* The default test set's images [n,h,w,1] and labels when they match spec. */
static st_status default_test(const st_example_spec *sp, cli_data *d, bool *ok) {
  *ok = false;
  const st_shape *xs = &sp->x.shape;
  if (!(xs->rank == 3 && xs->dims[0] == 28 && xs->dims[1] == 28 && xs->dims[2] == 1) ||
      st_feature_spec_size(&sp->y) != 1 || !sp->y.name[0])
    return ST_OK;
  const char *dir = CLI_FASHION_MNIST_DIR;
  char p[512];
  snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", dir);
  st_status s = st_idx_read(p, &d->raw.test_x);
  snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", dir);
  if (s == ST_OK) s = st_idx_read(p, &d->raw.test_y);
  if (s != ST_OK)
    return st_error_prefix(s, "the default test set (no --test-data given): ");
  if (d->raw.test_x.dtype != ST_U8 || d->raw.test_x.rank != 3) return ST_OK;
  d->raw.test_x.dims[3] = 1;
  d->raw.test_x.rank = 4;
  s = st_dataset_from_tensor_slices(&d->raw.test_x, &d->raw.test_y, 1.0f / 255.0f, false,
                                    &d->test);
  *ok = s == ST_OK;
  return s;
}

/* The batched test pipeline: --test-data, else the default test set. */
static int make_test(const char *cmd, const st_example_spec *sp, const cli_tfrecord_args *a,
                     cli_data *d) {
  int eval_batch = a->batch > 256 ? a->batch : 256;
  st_status s;
  if (a->test_data) {
    if (!cli_is_tfrecord(a->test_data)) {
      fprintf(stderr, "strata %s: --test-data: expected tfrecord:PATTERN, got '%s'\n", cmd,
              a->test_data);
      return EXIT_USAGE;
    }
    s = open_files(a->test_data + 9, sp, a, false, &d->test);
  } else {
    bool ok;
    s = default_test(sp, d, &ok);
    if (s == ST_OK && !ok) {
      char what[256] = "";
      describe(sp, what, sizeof what);
      fprintf(stderr, "strata %s: --data tfrecord: no --test-data given and the features (%s) "
              "do not match the default test set (Fashion-MNIST 28x28x1 uint8 images, one label)\n",
              cmd, what);
      return EXIT_USAGE;
    }
  }
  if (s == ST_OK) s = st_dataset_batch(d->test, eval_batch, false, &d->test);
  if (s == ST_OK) return EXIT_OK;
  fprintf(stderr, "strata %s: %s\n", cmd, st_last_error());
  return s == ST_ERR_NOMEM ? EXIT_FAIL : EXIT_USAGE; /* a missing or bad file: as --data */
}

int cli_load_tfrecord(const char *cmd, const cli_tfrecord_args *a, cli_data *d) {
  memset(d, 0, sizeof *d);
  if (!a->features) {
    fprintf(stderr, "strata %s: --data tfrecord:PATTERN needs --features SPEC.json (see "
            "docs/FORMATS.md)\n", cmd);
    return EXIT_USAGE;
  }
  st_example_spec sp;
  st_status s = st_example_spec_load(a->features, &sp);
  if (s != ST_OK) {
    fprintf(stderr, "strata %s: --features %s\n", cmd, st_last_error());
    return EXIT_USAGE;
  }
  if (!sp.y.name[0]) {
    fprintf(stderr, "strata %s: --features %s: \"y\": missing (training needs labels)\n", cmd,
            a->features);
    return EXIT_USAGE;
  }
  bool file_shard = a->shard == ST_AUTO_SHARD_FILE;
  int per_worker = a->batch;
  if (file_shard) {
    if (a->batch % a->workers) {
      fprintf(stderr, "strata %s: --batch-size %d does not split evenly over %d workers "
              "(auto-shard file: each worker batches its own files)\n", cmd, a->batch, a->workers);
      return EXIT_USAGE;
    }
    per_worker = a->batch / a->workers;
  }
  s = open_files(a->pattern, &sp, a, file_shard, &d->train);
  if (s == ST_OK && a->train_examples > 0) s = st_dataset_take(d->train, a->train_examples, &d->train);
  if (s == ST_OK && a->cache) {
    char path[4096];
    if (a->workers > 1) snprintf(path, sizeof path, "%s.worker-%d", a->cache, a->worker);
    else snprintf(path, sizeof path, "%s", a->cache);
    s = st_dataset_cache(d->train, path, &d->train);
  }
  if (s == ST_OK && a->tally) s = st_dataset_map(d->train, tally, a->tally, &d->train);
  if (s == ST_OK && a->shuffle_buffer > 0)
    s = st_dataset_shuffle(d->train, a->shuffle_buffer, a->seed, true, &d->train);
  if (s == ST_OK) s = st_dataset_batch(d->train, per_worker, false, &d->train);
  if (s == ST_OK) s = st_dataset_prefetch(d->train, ST_AUTOTUNE, &d->train);
  if (s != ST_OK) {
    int rc = cli_fail(cmd, s);
    cli_free_data(d);
    return rc;
  }
  int rc = make_test(cmd, &sp, a, d);
  if (rc != EXIT_OK) {
    cli_free_data(d);
    return rc;
  }
  d->batch = a->batch;
  d->seed = a->seed;
  d->n_train = -1; /* a stream: not known in advance */
  char what[256] = "";
  describe(&sp, what, sizeof what);
  snprintf(d->fingerprint, sizeof d->fingerprint, "tfrecord %.60s, %.80s", a->pattern, what);
  if (a->parallel_reads) { /* another order: a resumed run must read the same way */
    size_t len = strlen(d->fingerprint);
    snprintf(d->fingerprint + len, sizeof d->fingerprint - len, ", %d parallel reads",
             a->parallel_reads);
  }
  return EXIT_OK;
}

void cli_tfrecord_report(const char *cmd, const cli_tfrecord_args *a, const cli_data *d) {
  int nfiles = 0;
  char **files = NULL;
  if (st_list_files(a->pattern, false, 0, &files, &nfiles) == ST_OK)
    st_list_files_free(files, nfiles);
  const char *policy = a->workers == 1 ? "one worker" : a->shard == ST_AUTO_SHARD_FILE ? "auto-shard file"
                       : a->shard == ST_AUTO_SHARD_OFF ? "auto-shard off" : "auto-shard data";
  fprintf(stderr, "strata %s: tfrecord: worker %d of %d read %d of %d files (%s): "
          "%lld examples (checksum 0x%016llx), %lld damaged records skipped\n", cmd, a->worker,
          a->workers, st_dataset_tfrecord_file_count(d->train), nfiles, policy,
          a->tally ? (long long)a->tally->examples : -1LL,
          a->tally ? (unsigned long long)a->tally->checksum : 0ULL,
          (long long)st_dataset_tfrecord_skipped(d->train));
}

st_status cli_tfrecord_no_examples(const cli_tfrecord_args *a, const cli_data *d, st_status s) {
  if (s != ST_ERR_INVALID || !a->tally || a->tally->examples != 0 ||
      !strstr(st_last_error(), "yielded no examples"))
    return s;
  int n = 0;
  char **files = NULL, names[1024] = "";
  if (st_list_files(a->pattern, false, 0, &files, &n) != ST_OK) n = 0;
  size_t len = 0;
  for (int i = 0; i < n && len < 600; i++)
    len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", files[i]);
  if (n && len >= 600) snprintf(names + len, sizeof names - len, ", ...");
  st_list_files_free(files, n);
  int read = st_dataset_tfrecord_file_count(d->train);
  long long skipped = (long long)st_dataset_tfrecord_skipped(d->train);
  char share[128] = "", damaged[96] = "";
  if (read != n) snprintf(share, sizeof share, "; this worker (%d of %d) read %d of them",
                          a->worker, a->workers, read);
  if (skipped) snprintf(damaged, sizeof damaged, " but %lld damaged one%s (skipped: "
                        "--skip-corrupt-records)", skipped, skipped == 1 ? "" : "s");
  return st_error(ST_ERR_INVALID, "--data tfrecord:%s: no training examples: the %d file%s it "
                  "matches hold%s no records%s (%s)%s", a->pattern, n, n == 1 ? "" : "s",
                  n == 1 ? "s" : "", damaged, names, share);
}
