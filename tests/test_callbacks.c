/* CSVLogger, EarlyStopping and LearningRateScheduler through the public API on
 * a small synthetic classification problem: the CSV file matches the history,
 * EarlyStopping stops when it must and restores the best epoch's weights, a
 * val_* monitor without validation data is an error, and the scheduler's rates
 * reach the optimizer (and bad rates stop fit). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixtures.h"
#include "strata/strata.h"

enum { N = 120, D = 4, C = 3 };
static float X[N * D], Y[N];
static char g_dir[] = "/tmp/strata_test_callbacks_XXXXXX";

/* y = argmax(W x) for a fixed random W (tests/fixtures.h). */
static void make_data(void) { fixture_argmax_data(7, N, D, C, X, Y); }

static st_dataset *dataset(int batch) { return fixture_dataset(X, Y, N, D, batch); }

/* Dense 8 relu -> Dense 3 logits, Adam at lr, compiled. */
static st_model *model(float lr) {
  st_model_options mo = st_model_default_options(st_shape1(D));
  mo.seed = 3;
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  st_layer *l = NULL;
  CHECK_OK(st_dense(8, ST_ACT_RELU, &l));
  CHECK_OK(st_model_add(m, l));
  CHECK_OK(st_dense(C, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  co.optimizer.lr = st_schedule_constant(lr);
  CHECK_OK(st_model_compile(m, &co));
  return m;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 16);
  size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
  (void)n;
  fclose(f);
  return buf;
}

/* No "<name>.tmp.<pid>" files may be left in the test directory. */
static int count_temp_files(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
  if (d) closedir(d);
  return n;
}

/* One CSV row against the history's logs (val_* empty without validation). */
static void check_row(char *line, const st_epoch_logs *l) {
  char *f[6];
  int nf = 0;
  for (char *p = line; nf < 6; p++) {
    f[nf++] = p;
    if (!(p = strchr(p, ','))) break;
    *p = '\0';
  }
  CHECK(nf == 6);
  if (nf != 6) return;
  CHECK(atoi(f[0]) == l->epoch);
  CHECK_NEAR(strtod(f[1], NULL), l->loss, 1e-6);
  CHECK_NEAR(strtod(f[2], NULL), l->accuracy, 1e-6);
  if (l->has_validation) {
    CHECK_NEAR(strtod(f[3], NULL), l->val_loss, 1e-6);
    CHECK_NEAR(strtod(f[4], NULL), l->val_accuracy, 1e-6);
  } else {
    CHECK(f[3][0] == '\0' && f[4][0] == '\0');
  }
  CHECK_NEAR(strtod(f[5], NULL), l->lr, 1e-10);
}

static void check_csv(const char *path, const st_history *h) {
  char *text = read_all(path);
  CHECK(text != NULL);
  if (!text) return;
  const char *hdr = "epoch,loss,accuracy,val_loss,val_accuracy,lr\n";
  CHECK(strncmp(text, hdr, strlen(hdr)) == 0);
  int rows = 0;
  char *save = NULL;
  for (char *line = strtok_r(text + strlen(hdr), "\n", &save); line;
       line = strtok_r(NULL, "\n", &save), rows++)
    if (rows < h->epochs) check_row(line, &h->logs[rows]);
  CHECK(rows == h->epochs);
  free(text);
}

static void test_csv_logger(bool validation) {
  st_model *m = model(0.01f);
  st_dataset *train = dataset(16), *val = dataset(40);
  char path[256];
  snprintf(path, sizeof path, "%s/log%d.csv", g_dir, (int)validation);
  st_callback cb;
  CHECK_OK(st_csv_logger_create(path, &cb));
  CHECK(cb.user != NULL && cb.destroy != NULL);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 3;
  fo.validation = validation ? val : NULL;
  fo.callbacks = &cb;
  fo.ncallbacks = 1;
  st_history h;
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  CHECK(h.epochs == 3);
  check_csv(path, &h);
  CHECK(count_temp_files() == 0);
  /* A second fit with the same logger starts a new file. */
  fo.epochs = 2;
  st_history_destroy(&h);
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  check_csv(path, &h);
  st_history_destroy(&h);
  st_callback_destroy(&cb);
  st_dataset_destroy(train);
  st_dataset_destroy(val);
  st_model_destroy(m);
}

/* A fit resumed at epoch 2 (BackupAndRestore) keeps the file's rows 0 and 1
 * and drops the stale row 2; hooks called directly (the logger ignores m). */
static void test_csv_logger_resume(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/resume.csv", g_dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("epoch,loss,accuracy,val_loss,val_accuracy,lr\n0,1.5,0.25,,,0.01\n"
        "1,1.25,0.5,,,0.01\n2,9,9,,,9\n", f);
  fclose(f);
  st_callback cb;
  CHECK_OK(st_csv_logger_create(path, &cb));
  st_epoch_logs l = {.epoch = 2, .loss = 1.0, .accuracy = 0.75, .lr = 0.005};
  CHECK_OK(cb.on_epoch_begin(cb.user, NULL, 2));
  CHECK_OK(cb.on_epoch_end(cb.user, NULL, &l));
  char *text = read_all(path);
  CHECK_MSG(text && strcmp(text, "epoch,loss,accuracy,val_loss,val_accuracy,lr\n0,1.5,0.25,,,0.01\n"
                           "1,1.25,0.5,,,0.01\n2,1,0.75,,,0.005\n") == 0, "%s", text);
  free(text);
  st_callback_destroy(&cb);
}

static void test_csv_logger_io_error(void) {
  st_model *m = model(0.01f);
  st_dataset *train = dataset(16);
  char path[256];
  snprintf(path, sizeof path, "%s/no/such/dir/log.csv", g_dir);
  st_callback cb;
  CHECK_OK(st_csv_logger_create(path, &cb));
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 3;
  fo.callbacks = &cb;
  fo.ncallbacks = 1;
  st_history h;
  CHECK(st_model_fit(m, train, &fo, &h) == ST_ERR_IO);
  CHECK_MSG(strstr(st_last_error(), path) != NULL, "%s", st_last_error());
  CHECK(h.epochs <= 1); /* fit may keep the failed epoch's logs */
  st_history_destroy(&h);
  st_callback_destroy(&cb);
  st_dataset_destroy(train);
  st_model_destroy(m);
}

/* lr so small the loss cannot improve by min_delta = 1: epoch 0 is the best,
 * epoch 1 exhausts patience 1, fit stops after 2 of 10 epochs. */
static void test_early_stopping_stops(void) {
  st_model *m = model(1e-9f);
  st_dataset *train = dataset(16);
  st_early_stopping_options eo = st_early_stopping_default_options();
  CHECK(strcmp(eo.monitor, "val_loss") == 0 && eo.patience == 0 && !eo.restore_best_weights);
  eo.monitor = "loss";
  eo.min_delta = 1.0;
  eo.patience = 1;
  st_callback cb;
  CHECK_OK(st_early_stopping_create(eo, &cb));
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 10;
  fo.callbacks = &cb;
  fo.ncallbacks = 1;
  st_history h;
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  CHECK(h.epochs == 2);
  st_history_destroy(&h);
  /* Without min_delta the loss keeps improving a little: no early stop. */
  st_callback_destroy(&cb);
  eo.min_delta = 0;
  eo.monitor = "accuracy";
  eo.patience = 100;
  CHECK_OK(st_early_stopping_create(eo, &cb));
  fo.epochs = 3;
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  CHECK(h.epochs == 3);
  st_history_destroy(&h);
  st_callback_destroy(&cb);
  st_dataset_destroy(train);
  st_model_destroy(m);
}

/* The test drives the weights: at each epoch's start it loads good (trained)
 * or bad (all zero: loss ln 3) weights, with an lr too small to matter, and at
 * each epoch's end it snapshots what the model holds (before EarlyStopping). */
typedef struct driver {
  size_t n;
  float *good, *bad, *seen[8];
  const bool *use_good; /* per epoch */
} driver;

static st_status drive_begin(void *user, st_model *m, int epoch) {
  driver *d = user;
  return st_model_set_weights(m, d->use_good[epoch] ? d->good : d->bad);
}

static st_status drive_end(void *user, st_model *m, const st_epoch_logs *l) {
  driver *d = user;
  if (l->epoch >= 8) return st_error(ST_ERR_INTERNAL, "test: too many epochs");
  d->seen[l->epoch] = malloc(d->n * sizeof(float));
  return st_model_get_weights(m, d->seen[l->epoch]);
}

static void test_early_stopping_restores(void) {
  st_model *m = model(0.02f);
  st_dataset *train = dataset(16), *val = dataset(40);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 10;
  st_history h;
  CHECK_OK(st_model_fit(m, train, &fo, &h)); /* pre-train: the good weights */
  st_history_destroy(&h);
  driver d = {.n = st_model_weights_size(m)};
  d.good = malloc(d.n * sizeof(float));
  d.bad = calloc(d.n, sizeof(float));
  CHECK_OK(st_model_get_weights(m, d.good));
  CHECK_OK(st_model_set_learning_rate(m, 1e-12));
  static const bool plan[8] = {false, true, false, false, false, false, false, false};
  d.use_good = plan;
  st_early_stopping_options eo = st_early_stopping_default_options();
  eo.patience = 2;
  eo.restore_best_weights = true;
  /* late: listed after EarlyStopping (as a ModelCheckpoint would be), it
   * must still see each epoch's own weights: the best ones come back only
   * when fit ends (Keras's on_train_end). */
  driver late = {.n = d.n};
  st_callback cbs[3] = {{&d, drive_begin, NULL, drive_end, NULL}, {0},
                        {&late, NULL, NULL, drive_end, NULL}};
  CHECK_OK(st_early_stopping_create(eo, &cbs[1]));
  fo.validation = val;
  fo.callbacks = cbs;
  fo.ncallbacks = 3;
  CHECK_OK(st_model_fit(m, train, &fo, &h));
  CHECK(h.epochs == 4); /* best at epoch 1, no improvement at 2 and 3 */
  CHECK(h.epochs == 4 && h.logs[1].val_loss < h.logs[0].val_loss &&
        h.logs[2].val_loss > h.logs[1].val_loss && h.logs[3].val_loss > h.logs[1].val_loss);
  float *now = malloc(d.n * sizeof(float));
  CHECK_OK(st_model_get_weights(m, now));
  CHECK(d.seen[1] && memcmp(now, d.seen[1], d.n * sizeof(float)) == 0);
  CHECK(d.seen[3] && memcmp(now, d.seen[3], d.n * sizeof(float)) != 0);
  CHECK_MSG(late.seen[3] && d.seen[3] && memcmp(late.seen[3], d.seen[3], d.n * sizeof(float)) == 0,
            "a callback after EarlyStopping saw the restored weights in the stopping epoch");
  free(now);
  for (int i = 0; i < 8; i++) free(d.seen[i]), free(late.seen[i]);
  free(d.good);
  free(d.bad);
  st_history_destroy(&h);
  st_callback_destroy(&cbs[1]);
  st_dataset_destroy(train);
  st_dataset_destroy(val);
  st_model_destroy(m);
}

static void test_early_stopping_errors(void) {
  st_model *m = model(0.01f);
  st_dataset *train = dataset(16);
  st_callback cb;
  CHECK_OK(st_early_stopping_create(st_early_stopping_default_options(), &cb));
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 3;
  fo.callbacks = &cb;
  fo.ncallbacks = 1;
  st_history h;
  CHECK(st_model_fit(m, train, &fo, &h) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "EarlyStopping) monitors val_loss but fit has no "
                                    "validation data") != NULL,
            "%s", st_last_error());
  CHECK(h.epochs == 0); /* refused before epoch 1 */
  st_history_destroy(&h);
  st_callback_destroy(&cb);
  /* an unknown monitor is refused when the callback is created */
  st_early_stopping_options eo = st_early_stopping_default_options();
  eo.monitor = "val_acc";
  CHECK(st_early_stopping_create(eo, &cb) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "'val_acc'") != NULL, "%s", st_last_error());
  CHECK(cb.user == NULL && cb.destroy == NULL);
  st_callback_destroy(&cb);
  st_callback_destroy(NULL);
  st_dataset_destroy(train);
  st_model_destroy(m);
}

/* Halves the rate from epoch 1 on; *bad_epoch >= 0 returns *bad there. */
typedef struct sched {
  int bad_epoch;
  double bad;
  double seen[8]; /* st_model_learning_rate at each epoch's start, after the scheduler */
} sched;

static double halve(void *user, int epoch, double lr) {
  sched *s = user;
  if (epoch == s->bad_epoch) return s->bad;
  return epoch == 0 ? lr : lr / 2;
}

static st_status record_lr(void *user, st_model *m, int epoch) {
  sched *s = user;
  if (epoch < 8) s->seen[epoch] = st_model_learning_rate(m);
  return ST_OK;
}

static st_status run_schedule(sched *sc, st_history *h) {
  st_model *m = model(1e-3f);
  st_dataset *train = dataset(16);
  st_callback cbs[2] = {{0}, {sc, record_lr, NULL, NULL, NULL}};
  CHECK_OK(st_lr_scheduler_create(halve, sc, &cbs[0]));
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 3;
  fo.callbacks = cbs;
  fo.ncallbacks = 2;
  st_status s = st_model_fit(m, train, &fo, h);
  if (s == ST_OK) CHECK_NEAR(st_model_learning_rate(m), 2.5e-4, 1e-10);
  st_callback_destroy(&cbs[0]);
  st_dataset_destroy(train);
  st_model_destroy(m);
  return s;
}

static void test_lr_scheduler(void) {
  sched sc = {.bad_epoch = -1};
  st_history h;
  CHECK_OK(run_schedule(&sc, &h));
  CHECK(h.epochs == 3);
  const double want[3] = {1e-3, 5e-4, 2.5e-4};
  for (int e = 0; e < 3 && e < h.epochs; e++) {
    CHECK_NEAR(h.logs[e].lr, want[e], 1e-10);
    CHECK_NEAR(sc.seen[e], want[e], 1e-10);
  }
  st_history_destroy(&h);
  const double bad[3] = {NAN, 0.0, -1e-3};
  for (int i = 0; i < 3; i++) {
    sched b = {.bad_epoch = 1, .bad = bad[i]};
    CHECK(run_schedule(&b, &h) == ST_ERR_INVALID);
    CHECK(h.epochs == 1);
    CHECK_MSG(strstr(st_last_error(), "epoch 1") != NULL, "%s", st_last_error());
    st_history_destroy(&h);
  }
}

static void test_csv_logger_header(void) { test_csv_logger(true); }
static void test_csv_logger_plain(void) { test_csv_logger(false); }
static const check_case cases[] = {
    CHECK_CASE(test_csv_logger_header), CHECK_CASE(test_csv_logger_plain),
    CHECK_CASE(test_csv_logger_resume), CHECK_CASE(test_csv_logger_io_error),
    CHECK_CASE(test_early_stopping_stops), CHECK_CASE(test_early_stopping_restores),
    CHECK_CASE(test_early_stopping_errors), CHECK_CASE(test_lr_scheduler)};

int main(int argc, char **argv) {
  if (!mkdtemp(g_dir)) check_skip("cannot create a temporary directory");
  make_data();
  int rc = CHECK_MAIN(argc, argv, cases);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return rc;
}
