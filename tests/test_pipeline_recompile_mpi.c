/* A second compile of a model whose variables are reserved: the pipeline
 * across processes (each rank holds only its stage's share, base/vmem.h).
 * Under `mpirun -np 2` (2 stages: Dense 64 | Dense 5), run "recompile":
 * compile with Adam, fit an epoch, save w1, compile again with SGD +
 * momentum (fresh slots, step 0: the stage's slot share reserved again,
 * the transports detached and attached again), fit an epoch, save w2; run
 * "fresh": a new model compiled with SGD + momentum loads w1 (each rank
 * reads its stage's tensors), fits an epoch, saves w3. w2 and w3 must be
 * the same bytes (Keras's recompile keeps the weights and starts a new
 * optimizer). One model per process: each run is its own mpirun. Under
 * ASan the workers' LeakSanitizer checks the recompile path (OpenMPI's own
 * reports suppressed). Run by CTest directly, it starts itself under mpirun;
 * skips (77) when mpirun is missing or Strata was built without MPI. */
#define _GNU_SOURCE
#include <sys/stat.h>
#include <unistd.h>

#include "distribute/collective/collective.h"
#include "distribute/strategy.h"
#include "mpi_env.h"
#include "shard_fixture.h"

static void save(st_model *m, const char *dir, const char *name) {
  char path[800];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  CHECK_OK(st_model_save_weights(m, path)); /* collective: the chief writes */
  CHECK_OK(st__strategy_barrier(m->strategy));
}

static void worker(bool fresh, const char *dir) {
  int rank = 0, size = 0;
  CHECK_OK(st__mpi_world(&rank, &size));
  CHECK(size == 2);
  st_model *m = sf_model(ST_STRATEGY_PIPELINE, 0, false, fresh ? 2 : 0);
  if (!m) return;
  CHECK(m->net.reserved);
  CHECK_EQ(st_strategy_pipeline_stages(m->strategy), 2);
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = sf_optimizer(2);
  if (fresh) {
    char path[800];
    snprintf(path, sizeof path, "%s/w1", dir);
    CHECK_OK(st_model_load_weights(m, path));
  } else {
    sf_fit(m, 1);
    save(m, dir, "w1");
    CHECK_OK(st_model_compile(m, &co)); /* the second compile */
    CHECK(m->net.reserved);
    CHECK_EQ(m->net.n_slots, 1);
    CHECK_EQ(m->net.step, 0);
  }
  sf_fit(m, 1);
  save(m, dir, fresh ? "w3" : "w2");
  st_model_destroy(m);
}

static void launch(const char *self) {
  const char *missing = mpi_test_missing();
  if (missing) {
    check_skip(missing);
    return;
  }
  char dir[] = "/tmp/strata_recompile_mpi_XXXXXX", cmd[4600], a[700], b[700];
  CHECK(mkdtemp(dir) != NULL);
  mpi_test_env();
  for (int fresh = 0; fresh < 2; fresh++) {
    snprintf(cmd, sizeof cmd, "STRATA_RECOMPILE_RUN='%d %s' timeout 120 mpirun -np 2 %s", fresh,
             dir, self);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
  }
  snprintf(a, sizeof a, "%s/w2", dir);
  snprintf(b, sizeof b, "%s/w3", dir);
  CHECK_MSG(sf_same_file(a, b), "recompiled under the pipeline (%s) differs from a fresh model (%s)",
            a, b);
  snprintf(b, sizeof b, "%s/w1", dir);
  CHECK_MSG(!sf_same_file(a, b), "the epoch after the recompile changed nothing");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

static const char *g_self;
static void test_recompile_reserved(void) {
  const char *run = getenv("STRATA_RECOMPILE_RUN");
  int fresh, at;
  if (getenv("OMPI_COMM_WORLD_SIZE") && run && sscanf(run, "%d %n", &fresh, &at) == 1)
    worker(fresh, run + at);
  else
    launch(g_self);
}

int main(int argc, char **argv) {
  g_self = argv[0];
  sf_make_data();
  static const check_case cases[] = {CHECK_CASE(test_recompile_reserved)};
  return CHECK_MAIN(argc, argv, cases);
}
