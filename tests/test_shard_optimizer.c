/* Sharded optimizer state (ZeRO stage 1, st_strategy_options.shard_optimizer)
 * under mirrored with 2 and 3 replicas: the weights after training are the
 * same bytes as without sharding for Adam, AdamW (weight decay), SGD (plain,
 * momentum, Nesterov) and RMSprop with momentum; the model keeps no full slot
 * buffers between checkpoints; a checkpoint written under sharding is the same
 * bytes as one written without (slots gathered), and resuming from it under
 * sharding trains to the same bytes; strategies without per-replica weights
 * refuse the option. The MPI side is test_shard_optimizer_mpi.c. */
#include <unistd.h>

#include "shard_fixture.h"

static void bytes_equal(int replicas) {
  for (int which = 0; which < SF_NOPT; which++) {
    st_model *a = sf_model(ST_STRATEGY_MIRRORED, replicas, false, which);
    st_model *b = sf_model(ST_STRATEGY_MIRRORED, replicas, true, which);
    if (!a || !b) return;
    sf_fit(a, 2);
    sf_fit(b, 2);
    CHECK(a->net.n_params == 1669 && a->net.step == 2 * SF_N / SF_BATCH);
    CHECK_MSG(memcmp(a->net.params, b->net.params, a->net.n_params * sizeof(float)) == 0,
              "%s, %d replicas: sharded weights differ from unsharded", sf_opt_names[which],
              replicas);
    CHECK_MSG(b->net.n_slots == 0 || b->net.slots[0] == NULL,
              "%s: the sharded model holds full slot buffers", sf_opt_names[which]);
    /* the run changed the weights at all */
    st_model *fresh = sf_model(ST_STRATEGY_MIRRORED, replicas, true, which);
    if (fresh)
      CHECK(memcmp(fresh->net.params, b->net.params, b->net.n_params * sizeof(float)) != 0);
    st_model_destroy(fresh);
    st_model_destroy(a);
    st_model_destroy(b);
  }
}
static void test_bytes_equal_2(void) { bytes_equal(2); }
static void test_bytes_equal_3(void) { bytes_equal(3); }

/* 1 epoch, checkpoint, restore into a new model, 1 more epoch. */
static float *save_resume(bool shard, int which, const char *dir) {
  st_model *m = sf_model(ST_STRATEGY_MIRRORED, 3, shard, which);
  if (!m) return NULL;
  sf_fit(m, 1);
  st_checkpoint_options co = st_checkpoint_default_options();
  CHECK_OK(st_checkpoint_save(m, dir, &co));
  st_model_destroy(m);
  m = sf_model(ST_STRATEGY_MIRRORED, 3, shard, which);
  CHECK_OK(st_checkpoint_restore(m, dir));
  sf_fit(m, 1);
  float *w = sf_params(m);
  st_model_destroy(m);
  return w;
}

static void test_checkpoint(void) {
  char a[] = "/tmp/strata_shard_XXXXXX", b[] = "/tmp/strata_shard_XXXXXX", fa[256], fb[256];
  CHECK(mkdtemp(a) && mkdtemp(b));
  for (int which = 0; which < 3; which += 2) { /* adam, sgd momentum */
    float *wa = save_resume(false, which, a), *wb = save_resume(true, which, b);
    CHECK_MSG(wa && wb && memcmp(wa, wb, 1669 * sizeof(float)) == 0,
              "%s: resumed sharded weights differ", sf_opt_names[which]);
    free(wa), free(wb);
    const char *files[] = {"weights.safetensors", "optimizer.safetensors"};
    for (int f = 0; f < 2; f++) {
      snprintf(fa, sizeof fa, "%s/ckpt-%06d/%s", a, which / 2 + 1, files[f]);
      snprintf(fb, sizeof fb, "%s/ckpt-%06d/%s", b, which / 2 + 1, files[f]);
      CHECK_MSG(sf_same_file(fa, fb), "%s: %s differs", sf_opt_names[which], files[f]);
    }
  }
  /* an unsharded checkpoint resumes under sharding to the same bytes */
  st_model *m = sf_model(ST_STRATEGY_MIRRORED, 2, true, 0), *r = sf_model(ST_STRATEGY_MIRRORED, 2, false, 0);
  snprintf(fa, sizeof fa, "%s/ckpt-000001", a);
  CHECK_OK(st_checkpoint_restore(m, fa));
  CHECK_OK(st_checkpoint_restore(r, fa));
  sf_fit(m, 1);
  sf_fit(r, 1);
  CHECK(memcmp(m->net.params, r->net.params, 1669 * sizeof(float)) == 0);
  st_model_destroy(m);
  st_model_destroy(r);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", a, b);
  CHECK(system(cmd) == 0);
}

static void test_refused(void) {
  st_strategy_kind kinds[] = {ST_STRATEGY_ONE_DEVICE, ST_STRATEGY_CENTRAL_STORAGE};
  for (int k = 0; k < 2; k++) {
    st_strategy_options so = st_strategy_default_options(kinds[k]);
    so.shard_optimizer = true;
    st_strategy *s = NULL;
    CHECK(st_strategy_create(&so, &s) == ST_ERR_INVALID && s == NULL);
    CHECK(strstr(st_last_error(), "shard_optimizer") != NULL);
  }
}

int main(int argc, char **argv) {
  sf_make_data();
  static const check_case cases[] = {CHECK_CASE(test_bytes_equal_2), CHECK_CASE(test_bytes_equal_3),
                                     CHECK_CASE(test_checkpoint), CHECK_CASE(test_refused)};
  return CHECK_MAIN(argc, argv, cases);
}
