/* Sharded optimizer state across processes: under `mpirun -np 2`,
 * multi_worker_mirrored with shard_optimizer trains to the same weight bytes
 * as without it, with one replica per worker (the MPI transport's
 * reduce-scatter: 2 shards) and with two (the hierarchical one: 4 shards),
 * for Adam and SGD with momentum; the chief's checkpoint (slots gathered
 * from both workers) is the same bytes as the unsharded run's, and the
 * workers restoring it (each takes its shard) then train to the bytes of
 * the unsharded run. One model per process: each run is its own mpirun. Run by CTest directly, it starts itself under
 * `mpirun -np 2`; skips (77) when mpirun is missing or Strata was built
 * without MPI. */
#define _GNU_SOURCE
#include <sys/stat.h>
#include <unistd.h>

#include "distribute/collective/collective.h"
#include "distribute/strategy.h"
#include "mpi_env.h"
#include "shard_fixture.h"

/* One worker of one run (one model per process): 1 epoch, a checkpoint
 * into dir/ckpt (the chief writes; slots gathered under sharding), the
 * weights into dir/w1 (chief); restore from that checkpoint, 1 more epoch,
 * the weights into dir/w2. */
static void worker(int local, int which, bool shard, const char *dir) {
  int rank = 0, size = 0;
  CHECK_OK(st__mpi_world(&rank, &size));
  CHECK(size == 2);
  char ck[700], path[700];
  snprintf(ck, sizeof ck, "%s/ckpt", dir);
  st_model *m = sf_model(ST_STRATEGY_MULTI_WORKER_MIRRORED, local, shard, which);
  if (!m) return;
  sf_fit(m, 1);
  st_checkpoint_options co = st_checkpoint_default_options();
  CHECK_OK(st_checkpoint_save(m, ck, &co));
  snprintf(path, sizeof path, "%s/w1", dir);
  if (rank == 0) CHECK_OK(st_model_save_weights(m, path));
  CHECK_OK(st__strategy_barrier(m->strategy)); /* the chief has written */
  CHECK_OK(st_checkpoint_restore(m, ck));
  sf_fit(m, 1);
  snprintf(path, sizeof path, "%s/w2", dir);
  if (rank == 0) CHECK_OK(st_model_save_weights(m, path));
  st_model_destroy(m);
}

/* Both runs of a configuration under mpirun; their files compared. */
static void compare(const char *self, const char *dir, int local, int which) {
  char cmd[4600], a[700], b[700];
  for (int shard = 0; shard < 2; shard++) {
    snprintf(a, sizeof a, "%s/%d-%d-%d", dir, local, which, shard);
    CHECK(mkdir(a, 0700) == 0);
    snprintf(cmd, sizeof cmd, "STRATA_SHARD_RUN='%d %d %d %s' timeout 120 mpirun -np 2 %s",
             local, which, shard, a, self);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
  }
  const char *files[] = {"w1", "w2", "ckpt/ckpt-000001/weights.safetensors",
                         "ckpt/ckpt-000001/optimizer.safetensors"};
  for (int f = 0; f < 4; f++) {
    snprintf(a, sizeof a, "%s/%d-%d-0/%s", dir, local, which, files[f]);
    snprintf(b, sizeof b, "%s/%d-%d-1/%s", dir, local, which, files[f]);
    CHECK_MSG(sf_same_file(a, b), "%d local replicas, %s: %s differs under sharding", local,
              sf_opt_names[which], files[f]);
  }
}

static void launch(const char *self) {
  const char *missing = mpi_test_missing();
  if (missing) {
    check_skip(missing);
    return;
  }
  char dir[] = "/tmp/strata_shard_mpi_XXXXXX", cmd[4600];
  CHECK(mkdtemp(dir) != NULL);
  mpi_test_env();
  compare(self, dir, 1, 0); /* adam: the MPI transport's reduce-scatter, 2 shards */
  compare(self, dir, 1, 2); /* sgd with momentum */
  compare(self, dir, 2, 0); /* 2 local replicas each: the hierarchical one, 4 shards */
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

static const char *g_self;
static void test_mpi_workers(void) {
  const char *run = getenv("STRATA_SHARD_RUN");
  int local, which, shard, at;
  if (getenv("OMPI_COMM_WORLD_SIZE") && run && sscanf(run, "%d %d %d %n", &local, &which, &shard, &at) == 3)
    worker(local, which, shard, run + at);
  else
    launch(g_self);
}

int main(int argc, char **argv) {
  g_self = argv[0];
  sf_make_data();
  static const check_case cases[] = {CHECK_CASE(test_mpi_workers)};
  return CHECK_MAIN(argc, argv, cases);
}
