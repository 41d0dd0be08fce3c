/* Checkpoints: save -> restore gives identical variables, slots, step and
 * predictions; a fit stopped at any step and resumed from its backup ends with
 * the bytes (and history) of an uninterrupted fit, for one device and
 * mirrored; a save interrupted at many byte offsets leaves the previous
 * checkpoint as latest and loadable; every single-bit flip anywhere in a
 * checkpoint and every truncation is detected, leaving the model untouched;
 * --keep prunes. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tmpdir.h"
#include "model/model.h"
#include "strata/strata.h"

enum { N = 200, D = 6, C = 4 };
static float X[N * D], Y[N];

static void make_data(void) {
  st_rng r = st_rng_make(5, 0);
  for (int i = 0; i < N * D; i++) X[i] = st_rng_normal(&r);
  for (int i = 0; i < N; i++) Y[i] = (float)((X[i * D] > 0) + 2 * (X[i * D + 1] > 0));
}

static st_dataset *dataset(void) {
  st_tensor x = {ST_F32, 2, {N, D}, X}, y = {ST_F32, 1, {N}, Y};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&x, &y, 1.0f, false, &ds) != ST_OK) return NULL;
  if (st_dataset_shuffle(ds, N, 8, true, &ds) != ST_OK) return NULL;
  (void)st_dataset_batch(ds, 16, false, &ds); /* 13 steps per epoch; NULL on failure */
  return ds;
}

static st_model *model(st_strategy_kind kind) {
  st_strategy_options so = st_strategy_default_options(kind);
  if (kind == ST_STRATEGY_MIRRORED) so.replicas = 2;
  st_strategy *s = NULL;
  CHECK_OK(st_strategy_create(&so, &s));
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 3;
  mo.strategy = s;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(12, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_batchnorm(&l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dropout(0.1f, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(C, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  CHECK_OK(st_model_compile(m, &co));
  m->owns_strategy = true;
  return m;
}

static float *weights(st_model *m) {
  float *w = malloc(st_model_weights_size(m) * sizeof(float));
  CHECK_OK(st_model_get_weights(m, w));
  return w;
}

/* Stops fit at a given global step, as a crash would, or (preempt) asks it
 * to stop there as SIGTERM does. */
typedef struct stopper {
  int64_t at, seen;
  bool preempt;
} stopper;
static st_status stop_at(void *user, st_model *m, const st_batch_logs *l) {
  stopper *s = user;
  (void)m, (void)l;
  if (++s->seen != s->at) return ST_OK;
  if (!s->preempt) return st_error(ST_ERR_INTERNAL, "simulated crash");
  st_request_stop();
  return ST_OK;
}

static st_status fit_ex(st_model *m, const char *backup, int64_t every, int64_t crash_at,
                        bool preempt, st_history *h) {
  st_dataset *ds = dataset();
  stopper sp = {crash_at, 0, preempt};
  st_callback cb = {&sp, NULL, stop_at, NULL, NULL};
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 3;
  fo.backup_dir = backup;
  fo.backup_every_steps = every;
  fo.callbacks = &cb;
  fo.ncallbacks = crash_at > 0;
  st_status s = st_model_fit(m, ds, &fo, h);
  st_dataset_destroy(ds);
  return s;
}

static st_status fit(st_model *m, const char *backup, int64_t every, int64_t crash_at, st_history *h) {
  return fit_ex(m, backup, every, crash_at, false, h);
}

/* Preemption (st_request_stop, as the CLI's SIGTERM handler calls it): fit
 * finishes the step, writes the backup there even off the --backup-every
 * grid, returns ST_ERR_STOPPED; a new fit resumes to the uninterrupted
 * weights. */
static void test_preempt(st_strategy_kind kind) {
  st_model *ref = model(kind);
  st_history href;
  CHECK_OK(fit(ref, NULL, 0, 0, &href));
  float *want = weights(ref);
  int64_t at[] = {1, 13, 26};
  for (int i = 0; i < 3; i++) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/preempt%d", g_dir, i);
    st_model *a = model(kind);
    st_history h1, h2;
    CHECK(fit_ex(a, dir, 4, at[i], true, &h1) == ST_ERR_STOPPED);
    CHECK_MSG(strstr(st_last_error(), "stopped on request") != NULL, "%s", st_last_error());
    CHECK(a->net.step == at[i]);
    st_clear_stop_request();
    st_model *b = model(kind);
    CHECK_OK(st_checkpoint_restore(b, dir));
    CHECK_MSG(b->net.step == at[i], "preempted at %lld, backup at %lld", (long long)at[i],
              (long long)b->net.step);
    st_model_destroy(b);
    b = model(kind);
    CHECK_OK(fit(b, dir, 4, 0, &h2));
    float *got = weights(b);
    CHECK_MSG(memcmp(want, got, st_model_weights_size(b) * sizeof(float)) == 0,
              "%s: preempted at step %lld: weights differ", st_strategy_kind_name(kind),
              (long long)at[i]);
    free(got);
    st_history_destroy(&h1), st_history_destroy(&h2);
    st_model_destroy(a), st_model_destroy(b);
  }
  st_history_destroy(&href);
  free(want);
  st_model_destroy(ref);
}

static void test_resume(st_strategy_kind kind) {
  st_model *ref = model(kind);
  st_history href;
  CHECK_OK(fit(ref, NULL, 0, 0, &href));
  float *want = weights(ref);
  size_t nw = st_model_weights_size(ref);
  int64_t crashes[] = {1, 5, 13, 14, 20, 26, 27, 38};
  for (int i = 0; i < 8; i++) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/backup%d", g_dir, i);
    st_model *a = model(kind);
    st_history h1, h2;
    CHECK(fit(a, dir, 4, crashes[i], &h1) == ST_ERR_INTERNAL);
    st_model_destroy(a);
    st_model *b = model(kind); /* a new process would start like this */
    CHECK_OK(fit(b, dir, 4, 0, &h2));
    float *got = weights(b);
    CHECK_MSG(memcmp(want, got, nw * sizeof(float)) == 0, "%s: crash at step %lld: weights differ",
              st_strategy_kind_name(kind), (long long)crashes[i]);
    CHECK(b->net.step == ref->net.step && h2.epochs == 3);
    for (int e = 0; e < 3 && h2.epochs == 3; e++)
      CHECK(h2.logs[e].loss == href.logs[e].loss && h2.logs[e].accuracy == href.logs[e].accuracy);
    struct stat sb;
    CHECK_MSG(stat(dir, &sb) != 0, "backup %s not removed after completion", dir);
    free(got);
    st_history_destroy(&h1), st_history_destroy(&h2);
    st_model_destroy(b);
  }
  st_history_destroy(&href);
  free(want);
  st_model_destroy(ref);
}

static int count_ckpts(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) n += !strncmp(e->d_name, "ckpt-", 5);
  if (d) closedir(d);
  return n;
}

static void test_roundtrip_and_keep(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/rt", g_dir);
  st_model *m = model(ST_STRATEGY_ONE_DEVICE);
  st_history h;
  CHECK_OK(fit(m, NULL, 0, 0, &h));
  st_checkpoint_options o = st_checkpoint_default_options();
  o.keep = 2;
  for (int i = 0; i < 5; i++) CHECK_OK(st_checkpoint_save(m, dir, &o));
  CHECK(count_ckpts(dir) == 2);
  char latest[512];
  CHECK_OK(st_checkpoint_latest(dir, latest, sizeof latest));
  CHECK(strstr(latest, "ckpt-000005") != NULL);
  st_model *r = model(ST_STRATEGY_ONE_DEVICE);
  CHECK_OK(st_checkpoint_restore(r, dir));
  float *a = weights(m), *b = weights(r);
  CHECK(memcmp(a, b, st_model_weights_size(m) * sizeof(float)) == 0);
  CHECK(r->net.step == m->net.step && r->last_pos.epoch == 3 && r->last_pos.nlogs == 3);
  for (int k = 0; k < m->net.n_slots; k++)
    CHECK(memcmp(m->net.slots[k], r->net.slots[k], m->net.n_params * sizeof(float)) == 0);
  free(a), free(b);
  st_history_destroy(&h);
  st_model_destroy(m);
  st_model_destroy(r);
}

static void test_interrupted_writes(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/crash", g_dir);
  st_model *m = model(ST_STRATEGY_ONE_DEVICE);
  st_history h;
  CHECK_OK(fit(m, NULL, 0, 0, &h));
  st_checkpoint_options o = st_checkpoint_default_options();
  CHECK_OK(st_checkpoint_save(m, dir, &o));
  float *w0 = weights(m);
  int64_t offsets[] = {1, 7, 8, 100, 500, 1000, 2000, 5000, 9000, 20000, 60000};
  for (int i = 0; i < 11; i++) {
    o.test_fail_after_bytes = offsets[i];
    CHECK(st_checkpoint_save(m, dir, &o) == ST_ERR_IO);
    char latest[512];
    CHECK_OK(st_checkpoint_latest(dir, latest, sizeof latest));
    CHECK(strstr(latest, "ckpt-000001") != NULL);
    st_model *r = model(ST_STRATEGY_ONE_DEVICE);
    CHECK_OK(st_checkpoint_restore(r, dir));
    float *w = weights(r);
    CHECK(memcmp(w, w0, st_model_weights_size(m) * sizeof(float)) == 0);
    free(w);
    st_model_destroy(r);
  }
  o.test_fail_after_bytes = 0;
  CHECK_OK(st_checkpoint_save(m, dir, &o)); /* cleans the temporaries */
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) CHECK(strncmp(e->d_name, ".tmp", 4) != 0);
  if (d) closedir(d);
  free(w0);
  st_history_destroy(&h);
  st_model_destroy(m);
}

static size_t file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? (size_t)sb.st_size : 0;
}

static void flip_bit(const char *path, size_t byte, int bit) {
  FILE *f = fopen(path, "r+b");
  fseek(f, (long)byte, SEEK_SET);
  int c = fgetc(f);
  fseek(f, (long)byte, SEEK_SET);
  fputc(c ^ (1 << bit), f);
  fclose(f);
}

/* One flipped bit anywhere in a checkpoint: restore fails, model untouched. */
static void test_corruption(void) {
  char dir[256], ck[512];
  snprintf(dir, sizeof dir, "%s/flip", g_dir);
  st_model *m = model(ST_STRATEGY_ONE_DEVICE);
  st_history h;
  CHECK_OK(fit(m, NULL, 0, 0, &h));
  st_checkpoint_options o = st_checkpoint_default_options();
  CHECK_OK(st_checkpoint_save(m, dir, &o));
  CHECK_OK(st_checkpoint_latest(dir, ck, sizeof ck));
  const char *files[] = {"weights.safetensors", "optimizer.safetensors", "state.json", "../latest"};
  st_model *victim = model(ST_STRATEGY_ONE_DEVICE);
  float *before = weights(victim);
  size_t nw = st_model_weights_size(victim);
  st_rng r = st_rng_make(77, 0);
  int detected = 0, trials = 400, named = 0;
  for (int t = 0; t < trials; t++) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", ck, files[t % 4]);
    size_t size = file_size(p), byte = (size_t)st_rng_below(&r, size);
    int bit = (int)st_rng_below(&r, 8);
    flip_bit(p, byte, bit);
    st_status s = st_checkpoint_restore(victim, dir);
    detected += s != ST_OK;
    named += s != ST_OK && strstr(st_last_error(), "tensor '") != NULL;
    if (s == ST_OK) fprintf(stderr, "undetected flip: %s byte %zu bit %d\n", p, byte, bit);
    flip_bit(p, byte, bit); /* undo */
  }
  fprintf(stderr, "bit flips detected: %d/%d (%d naming the tensor)\n", detected, trials, named);
  CHECK(detected == trials && named > 0);
  /* Every byte of state.json, low bit: digit 0<->1, 2<->3, ... and space<->'!'
   * include flips that parse to the same values (a real's 17th digit). */
  char sp[700];
  snprintf(sp, sizeof sp, "%s/state.json", ck);
  size_t ssize = file_size(sp), missed = 0;
  for (size_t b = 0; b < ssize; b++) {
    flip_bit(sp, b, 0);
    if (st_checkpoint_restore(victim, dir) == ST_OK) {
      fprintf(stderr, "undetected flip: %s byte %zu bit 0\n", sp, b);
      missed++;
    }
    flip_bit(sp, b, 0);
  }
  CHECK(ssize > 100 && missed == 0);
  float *after = weights(victim);
  CHECK(memcmp(before, after, nw * sizeof(float)) == 0);
  CHECK(victim->net.step == 0);
  CHECK_OK(st_checkpoint_restore(victim, dir)); /* intact again */
  /* every truncation of the weights file is rejected */
  char p[700], bak[720];
  snprintf(p, sizeof p, "%s/weights.safetensors", ck);
  snprintf(bak, sizeof bak, "%s.bak", p);
  size_t size = file_size(p);
  CHECK(link(p, bak) == 0 && unlink(p) == 0);
  int rejected = 0;
  for (size_t len = 0; len < size; len++) {
    FILE *in = fopen(bak, "rb"), *out = fopen(p, "wb");
    char buf[1 << 16];
    for (size_t left = len, n; left && (n = fread(buf, 1, left < sizeof buf ? left : sizeof buf, in));)
      fwrite(buf, 1, n, out), left -= n;
    fclose(in), fclose(out);
    rejected += st_checkpoint_restore(victim, dir) != ST_OK;
  }
  CHECK_MSG(rejected == (int)size, "%d of %zu truncations rejected", rejected, size);
  rename(bak, p);
  free(before), free(after);
  st_history_destroy(&h);
  st_model_destroy(m);
  st_model_destroy(victim);
}

/* TerminateOnNaN: a diverging fit stops with the step named; the backup
 * keeps the last finite state. */
static void test_nan_stops(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/nan", g_dir);
  st_model *m = model(ST_STRATEGY_ONE_DEVICE);
  CHECK_OK(st_model_set_learning_rate(m, 1e30));
  st_history h;
  st_status s = fit(m, dir, 1, 0, &h);
  CHECK_MSG(s == ST_ERR_NONFINITE && strstr(st_last_error(), "step"), "%s", st_last_error());
  st_model *r = model(ST_STRATEGY_ONE_DEVICE);
  CHECK_OK(st_checkpoint_restore(r, dir));
  float *w = weights(r);
  bool finite = true;
  for (size_t i = 0; i < st_model_weights_size(r); i++) finite &= isfinite(w[i]) != 0;
  CHECK(finite && r->net.step >= 1);
  free(w);
  st_history_destroy(&h);
  st_model_destroy(m);
  st_model_destroy(r);
}

static void test_resume_one_device(void) { test_resume(ST_STRATEGY_ONE_DEVICE); }
static void test_resume_mirrored(void) { test_resume(ST_STRATEGY_MIRRORED); }
static void test_preempt_one_device(void) { test_preempt(ST_STRATEGY_ONE_DEVICE); }
static void test_preempt_mirrored(void) { test_preempt(ST_STRATEGY_MIRRORED); }
static const check_case cases[] = {
    CHECK_CASE(test_roundtrip_and_keep), CHECK_CASE(test_resume_one_device),
    CHECK_CASE(test_resume_mirrored),    CHECK_CASE(test_preempt_one_device),
    CHECK_CASE(test_preempt_mirrored),   CHECK_CASE(test_interrupted_writes),
    CHECK_CASE(test_corruption),         CHECK_CASE(test_nan_stops)};

int main(int argc, char **argv) {
  make_data();
  CHECK(tmpdir_make("strata_ckpt"));
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
