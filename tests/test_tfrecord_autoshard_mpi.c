/* The library's AutoShardPolicy AUTO (issue 18 item 4) under `mpirun -np 2`:
 * st_model_fit of multi_worker_mirrored (auto_shard AUTO) on a pipeline
 * reading 4 TFRecord files shards it by FILE: worker r reads files r and
 * r + 2 only, together every example once, each batching half the global
 * batch; over 1 file (fewer files than workers) it falls back to DATA (both
 * workers run the whole pipeline); a global batch that does not split over
 * the workers is an error naming it. Each worker writes the example ids its
 * pipeline produced to a file the launcher checks. Run by CTest directly, it
 * starts itself under mpirun; skips (77) when mpirun is missing or Strata
 * was built without MPI. */
#define _GNU_SOURCE
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "mpi_env.h"
#include "distribute/collective/collective.h"
#include "model/model.h"
#include "strata/strata.h"

enum { D = 6, PER = 10, NFILES = 4 };

static void write_files(const char *dir) {
  st_tfrecord_options o = st_tfrecord_default_options();
  for (int f = 0; f < NFILES; f++) {
    char path[700];
    snprintf(path, sizeof path, "%s/part-%d.tfrecord", dir, f);
    st_tfrecord_writer *w = NULL;
    CHECK_OK(st_tfrecord_writer_create(path, &o, &w));
    for (int i = 0; i < PER; i++) {
      int64_t id = f * PER + i, label = id % 3;
      float x[D];
      for (int k = 0; k < D; k++) x[k] = k == 0 ? (float)id : (float)((id * 7 + k) % 5) / 5.0f;
      st_feature_value v[2] = {{"x", ST_FEATURE_FLOAT32, x, D}, {"y", ST_FEATURE_INT64, &label, 1}};
      void *ex;
      size_t len;
      CHECK_OK(st_example_serialize(v, 2, &ex, &len));
      CHECK_OK(st_tfrecord_writer_write(w, ex, len));
      free(ex);
    }
    CHECK_OK(st_tfrecord_writer_close(w));
  }
}

/* The ids (x[0]) the pipeline produced, written to a file per rank. */
static st_status note_id(void *user, float *x, size_t xs, float *y, size_t ys) {
  (void)xs, (void)y, (void)ys;
  fprintf(user, "%d\n", (int)x[0]);
  return ST_OK;
}

/* The pipeline: nfiles files, ids noted in seen, batched, prefetched. */
static st_dataset *pipeline(const char *dir, int nfiles, int batch, FILE *seen) {
  const char *files[NFILES];
  char names[NFILES][700];
  for (int f = 0; f < nfiles; f++) {
    snprintf(names[f], sizeof names[f], "%s/part-%d.tfrecord", dir, f);
    files[f] = names[f];
  }
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  snprintf(o.spec.x.name, sizeof o.spec.x.name, "x");
  o.spec.x.dtype = ST_FEATURE_FLOAT32;
  o.spec.x.shape = st_shape1(D);
  snprintf(o.spec.y.name, sizeof o.spec.y.name, "y");
  o.spec.y.dtype = ST_FEATURE_INT64;
  st_dataset *ds = NULL;
  CHECK_OK(st_dataset_tfrecord(files, nfiles, &o, &ds));
  CHECK_OK(st_dataset_map(ds, note_id, seen, &ds));
  CHECK_OK(st_dataset_batch(ds, batch, false, &ds));
  CHECK_OK(st_dataset_prefetch(ds, ST_AUTOTUNE, &ds));
  return ds;
}

/* One worker: fit 1 epoch on `nfiles` files with global batch `batch`;
 * after the run over 1 file, a fit on all files with a global batch of 7. */
static void worker(const char *dir, int nfiles, int batch) {
  int rank = 0, size = 0;
  CHECK_OK(st__mpi_world(&rank, &size));
  CHECK_EQ(size, 2);
  char path[700];
  snprintf(path, sizeof path, "%s/seen-%d", dir, rank);
  FILE *seen = fopen(path, "w");
  CHECK(seen != NULL);
  if (!seen) return;
  st_dataset *ds = pipeline(dir, nfiles, batch, seen);
  st_strategy_options so = st_strategy_default_options(ST_STRATEGY_MULTI_WORKER_MIRRORED);
  so.collective_timeout = 30;
  CHECK_EQ(so.auto_shard, ST_AUTO_SHARD_AUTO);
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 3;
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(3, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  CHECK_OK(st_model_compile(m, &co));
  m->owns_strategy = true;
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 1;
  st_history h;
  CHECK_OK(st_model_fit(m, ds, &fo, &h));
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  if (nfiles == 1) { /* refused before any step, on both workers */
    ds = pipeline(dir, NFILES, 7, seen);
    CHECK_EQ(st_model_fit(m, ds, &fo, &h), ST_ERR_INVALID);
    CHECK(strstr(st_last_error(), "batch size 7 does not split evenly over 2 workers") != NULL);
    st_dataset_destroy(ds);
  }
  st_model_destroy(m);
  fclose(seen);
}

/* Ids in dir/seen-<rank>: count per id into n[NFILES * PER]. */
static int read_seen(const char *dir, int rank, int *n) {
  char path[700];
  snprintf(path, sizeof path, "%s/seen-%d", dir, rank);
  FILE *f = fopen(path, "r");
  int id, total = 0;
  while (f && fscanf(f, "%d", &id) == 1) {
    CHECK(id >= 0 && id < NFILES * PER);
    if (id >= 0 && id < NFILES * PER) n[id]++;
    total++;
  }
  if (f) fclose(f);
  return total;
}

static bool run(const char *self, const char *dir, int nfiles, int batch) {
  char cmd[1600];
  snprintf(cmd, sizeof cmd, "STRATA_AUTOSHARD_RUN='%d %d %s' timeout 120 mpirun -np 2 %s",
           nfiles, batch, dir, self);
  int rc = system(cmd);
  CHECK_MSG(rc == 0, "%s failed", cmd);
  return rc == 0;
}

static void launch(const char *self) {
  const char *missing = mpi_test_missing();
  if (missing) {
    check_skip(missing);
    return;
  }
  char dir[] = "/tmp/strata_autoshard_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  mpi_test_env();
  write_files(dir);
  /* 4 files: FILE. Worker r reads files r and r + 2; every example once. */
  if (run(self, dir, NFILES, 8)) {
    int n0[NFILES * PER] = {0}, n1[NFILES * PER] = {0};
    CHECK_EQ(read_seen(dir, 0, n0), 2 * PER);
    CHECK_EQ(read_seen(dir, 1, n1), 2 * PER);
    for (int id = 0; id < NFILES * PER; id++) {
      int file = id / PER;
      CHECK_EQ(n0[id], file % 2 == 0);
      CHECK_EQ(n1[id], file % 2 == 1);
    }
  }
  /* 1 file for 2 workers: DATA, both run the whole pipeline; then a global
   * batch of 7 over 2 workers is refused (the workers check it) */
  if (run(self, dir, 1, 8)) {
    int n0[NFILES * PER] = {0}, n1[NFILES * PER] = {0};
    CHECK_EQ(read_seen(dir, 0, n0), PER);
    CHECK_EQ(read_seen(dir, 1, n1), PER);
    for (int id = 0; id < PER; id++) CHECK(n0[id] == 1 && n1[id] == 1);
  }
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

static const char *g_self;
static void test_auto_shard(void) {
  const char *r = getenv("STRATA_AUTOSHARD_RUN");
  int nfiles, batch, at;
  if (getenv("OMPI_COMM_WORLD_SIZE") && r && sscanf(r, "%d %d %n", &nfiles, &batch, &at) == 2)
    worker(r + at, nfiles, batch);
  else
    launch(g_self);
}

int main(int argc, char **argv) {
  g_self = argv[0];
  static const check_case cases[] = {CHECK_CASE(test_auto_shard)};
  return CHECK_MAIN(argc, argv, cases);
}
