/* The share of a training step spent waiting for input (issue 18): one epoch
 * of the built-in cnn (batch 32, Adam, one_device) through st_model_fit, on
 * the TFRecord files of a pattern, with and without prefetch (2, AUTOTUNE;
 * and with 2 parallel interleave readers, cycle 2), and on the same
 * examples in memory (from_tensor_slices over the IDX file, the baseline).
 * A pass-through node (src/data internals) between the pipeline and fit times
 * every call fit makes for the next batch: wait = that time / the epoch's
 * time, also split into the first batch (opening files, filling the pipeline)
 * and the rest (per step).
 *
 * Build (after building libstrata in build/):
 *   gcc -O2 -std=c11 -Iinclude -Ibuild/include -Isrc bench/tfrecord_wait.c build/libstrata.a \
 *       -lprotobuf-c -ljansson -lz -lm -ldl -lpthread $(mpicc --showme:link) -o /tmp/tfrecord_wait
 * Run (shards from `strata convert --examples N`, SPEC from its --features):
 *   /tmp/tfrecord_wait 'DIR/fm-*.tfrecord' SPEC.json N [THREADS]
 * THREADS: the cnn's compute threads (one_device; default one per core). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/dataset_impl.h"
#include "strata/strata.h"

static int g_threads; /* compute threads of one_device (0 = one per core) */
static double g_wait, g_first; /* all calls; the first of the epoch */
static long g_calls;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct timing_iter {
  st_iterator base;
  st_iterator *in;
} timing_iter;

static st_status timing_next(st_iterator *base, st_batch *out, bool *end) {
  timing_iter *it = (timing_iter *)base;
  double t0 = now();
  st_status s = it->in->ops->next(it->in, out, end);
  double t = now() - t0;
  if (g_calls++ == 0) g_first = t;
  g_wait += t;
  return s;
}

static int g_depth;      /* the prefetch queue's depth at the end of the epoch */
static int64_t g_stalls; /* calls after the first that found it empty */

static void timing_iter_destroy(st_iterator *base) {
  timing_iter *it = (timing_iter *)base;
  g_depth = st__prefetch_depth(it->in, NULL, &g_stalls);
  st_iterator_destroy(it->in);
  free(it);
}

static const st__iter_ops timing_iter_ops = {timing_next, NULL, NULL, timing_iter_destroy};

static st_status timing_iterate(st_dataset *ds, uint64_t epoch, st_iterator **out) {
  timing_iter *it = calloc(1, sizeof *it);
  if (!it) return ST_ERR_NOMEM;
  it->base.ops = &timing_iter_ops;
  st_status s = st__ds_iterate(ds->input, epoch, &it->in);
  if (s != ST_OK) {
    free(it);
    return s;
  }
  *out = &it->base;
  return ST_OK;
}

static const st__ds_ops timing_ops = {"timing", timing_iterate, NULL};

static st_dataset *timed(st_dataset *in) {
  st_dataset *ds = calloc(1, sizeof *ds);
  st__ds_init(ds, &timing_ops, in);
  return ds;
}

/* One epoch of the cnn on ds (batched); prints samples/s and the wait share. */
static void fit(const char *what, st_dataset *ds) {
  st_model_options mo = st_model_default_options(st_shape3(28, 28, 1));
  mo.seed = 1;
  st_model *m = NULL;
  st_strategy *strategy = NULL;
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
  so.threads = g_threads;
  if (st_strategy_create(&so, &strategy) != ST_OK) exit(1);
  mo.strategy = strategy;
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  if (st_builtin_model_create("cnn", &mo, &m) != ST_OK || st_model_compile(m, &co) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    exit(1);
  }
  ds = timed(ds);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 1;
  st_history h;
  g_wait = g_first = 0;
  g_calls = 0;
  g_depth = 0;
  g_stalls = 0;
  double t0 = now();
  if (st_model_fit(m, ds, &fo, &h) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    exit(1);
  }
  double total = now() - t0;
  double rest = g_wait - g_first; /* after the first batch (files opened, pipeline warm) */
  printf("%-36s %6.0f samples/s  epoch %.2f s  waiting %.3f s = %.2f%% (first batch %.1f ms; "
         "then %.1f us/step = %.3f%%)", what, h.samples_per_sec, total, g_wait,
         100.0 * g_wait / total, 1e3 * g_first, 1e6 * rest / (double)(g_calls > 1 ? g_calls - 1 : 1),
         100.0 * rest / total);
  if (g_depth) printf("  prefetch depth %d, %lld stalls", g_depth, (long long)g_stalls);
  printf("\n");
  st_history_destroy(&h);
  st_model_destroy(m);
  st_strategy_destroy(strategy);
  st_dataset_destroy(ds);
}

/* prefetch: 0 none, ST_AUTOTUNE or a depth; parallel: interleave readers
 * (cycle_length 2 when set). */
static st_dataset *tfrecord(char **files, int n, const st_example_spec *spec, bool gz,
                            int prefetch, int parallel) {
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  o.record.compression = gz ? ST_COMPRESSION_GZIP : ST_COMPRESSION_NONE;
  o.spec = *spec;
  if (parallel) {
    o.cycle_length = 2;
    o.num_parallel_calls = parallel;
  }
  st_dataset *ds = NULL;
  if (st_dataset_tfrecord((const char *const *)files, n, &o, &ds) != ST_OK ||
      st_dataset_batch(ds, 32, false, &ds) != ST_OK ||
      (prefetch && st_dataset_prefetch(ds, prefetch, &ds) != ST_OK)) {
    fprintf(stderr, "%s\n", st_last_error());
    exit(1);
  }
  return ds;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s 'PATTERN' SPEC.json N [THREADS]\n", argv[0]);
    return 2;
  }
  g_threads = argc > 4 ? atoi(argv[4]) : 0;
  long n_examples = atol(argv[3]);
  st_example_spec spec;
  char **files;
  int n;
  if (st_example_spec_load(argv[2], &spec) != ST_OK || st_list_files(argv[1], false, 0, &files, &n) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    return 2;
  }
  size_t len = strlen(argv[1]);
  bool gz = len > 3 && !strcmp(argv[1] + len - 3, ".gz");
  st_mnist mn;
  if (st_mnist_load("/usr/share/datasets/fashion-mnist", &mn) != ST_OK) {
    fprintf(stderr, "%s\n", st_last_error());
    return 2;
  }
  mn.train_x.dims[3] = 1;
  mn.train_x.rank = 4;
  st_dataset *mem = NULL;
  st_dataset_from_tensor_slices(&mn.train_x, &mn.train_y, 1.0f / 255.0f, false, &mem);
  st_dataset_take(mem, n_examples, &mem);
  st_dataset_batch(mem, 32, false, &mem);
  fit("in memory (IDX), no prefetch", mem);
  const char *kind = gz ? "GZIP" : "plain";
  char what[128];
  snprintf(what, sizeof what, "TFRecord %s, no prefetch", kind);
  fit(what, tfrecord(files, n, &spec, gz, 0, 0));
  snprintf(what, sizeof what, "TFRecord %s, prefetch 2", kind);
  fit(what, tfrecord(files, n, &spec, gz, 2, 0));
  snprintf(what, sizeof what, "TFRecord %s, prefetch AUTOTUNE", kind);
  fit(what, tfrecord(files, n, &spec, gz, ST_AUTOTUNE, 0));
  snprintf(what, sizeof what, "TFRecord %s, 2 readers + AUTOTUNE", kind);
  fit(what, tfrecord(files, n, &spec, gz, ST_AUTOTUNE, 2));
  st_mnist_destroy(&mn);
  st_list_files_free(files, n);
  return 0;
}
