/* Keras callbacks in C: CSVLogger, EarlyStopping, LearningRateScheduler and
 * ModelCheckpoint (its files: src/io/checkpoint.c), and st_callback_destroy,
 * which frees any callback.
 * Each keeps its memory in one struct, owned by the callback (st_callback's
 * user) and freed by its destroy member. A state belongs to one fit at a time
 * (one thread). A constructor checks its options and allocates the state, and
 * returns the failure (the callback zeroed) instead of deferring it to fit. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/args.h"
#include "strata/train.h"
#include "base/fileio.h"
#include "train/callbacks_impl.h"

void st_callback_destroy(st_callback *cb) {
  if (!cb) return;
  if (cb->destroy) cb->destroy(cb->user);
  memset(cb, 0, sizeof *cb);
}

static st_status no_state(const char *who, st_callback *out) {
  memset(out, 0, sizeof *out);
  return st_error(ST_ERR_NOMEM, "%s: out of memory for the callback's state", who);
}

/* ---- CSVLogger ---------------------------------------------------------- */

static const char csv_header[] = "epoch,loss,accuracy,val_loss,val_accuracy,lr\n";

typedef struct csv_logger {
  char *path;  /* owned copy */
  char *rows;  /* rows[len]: the data rows written so far (no header) */
  size_t len, cap;
  int last_epoch; /* last epoch begun; -1 before the first */
} csv_logger;

static void csv_destroy(void *self) {
  csv_logger *c = self;
  free(c->path);
  free(c->rows);
  free(c);
}

static st_status csv_append(csv_logger *c, const char *row) {
  size_t n = strlen(row);
  if (c->len + n + 1 > c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 1024;
    while (cap < c->len + n + 1) cap *= 2;
    char *p = realloc(c->rows, cap);
    if (!p) return st_error(ST_ERR_NOMEM, "CSVLogger: %s: out of memory", c->path);
    c->rows = p;
    c->cap = cap;
  }
  memcpy(c->rows + c->len, row, n + 1);
  c->len += n;
  return ST_OK;
}

/* Header + rows, replacing path atomically (base/fileio.h). */
static st_status csv_write_file(const csv_logger *c) {
  st__atomic_file a;
  st_status s = st__atomic_open(&a, c->path);
  if (s == ST_OK) {
    bool ok = fwrite(csv_header, 1, sizeof csv_header - 1, a.f) == sizeof csv_header - 1 &&
              (c->len == 0 || fwrite(c->rows, 1, c->len, a.f) == c->len);
    s = st__atomic_commit(&a, ok ? 0 : errno);
  }
  return s == ST_OK ? s : st_error_prefix(s, "CSVLogger: ");
}

/* Keep the rows of epochs before `epoch` from an existing file with our
 * header (a fit resumed by BackupAndRestore); anything else is replaced. */
static st_status csv_load_previous(csv_logger *c, int epoch) {
  int fd = -1;
  if (st__open_input(c->path, &fd, NULL) != ST_OK) return ST_OK; /* never blocks on a FIFO */
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return ST_OK;
  }
  char line[512];
  st_status s = ST_OK;
  if (fgets(line, sizeof line, f) && strcmp(line, csv_header) == 0)
    while (s == ST_OK && fgets(line, sizeof line, f)) {
      char *end = NULL;
      long e = strtol(line, &end, 10);
      if (end == line || *end != ',' || e < 0 || e >= epoch || !strchr(line, '\n')) break;
      s = csv_append(c, line);
    }
  fclose(f);
  return s;
}

/* A fit starting at epoch 0 starts a new file, as Keras's
 * CSVLogger(append=False); one resumed at a later epoch keeps the rows before. */
static st_status csv_epoch_begin(void *user, st_model *m, int epoch) {
  csv_logger *c = user;
  (void)m;
  bool new_fit = c->last_epoch < 0 || epoch <= c->last_epoch;
  c->last_epoch = epoch;
  if (!new_fit) return ST_OK;
  c->len = 0;
  return epoch > 0 ? csv_load_previous(c, epoch) : ST_OK;
}

static st_status csv_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  csv_logger *c = user;
  (void)m;
  char vl[40] = "", va[40] = "", row[256];
  if (l->has_validation) {
    snprintf(vl, sizeof vl, "%.9g", l->val_loss);
    snprintf(va, sizeof va, "%.9g", l->val_accuracy);
  }
  snprintf(row, sizeof row, "%d,%.9g,%.9g,%s,%s,%.9g\n", l->epoch, l->loss, l->accuracy, vl,
           va, l->lr);
  st_status s = csv_append(c, row);
  return s != ST_OK ? s : csv_write_file(c);
}

st_status st_csv_logger_create(const char *path, st_callback *out) {
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  if (!path) return st_error(ST_ERR_INVALID, "st_csv_logger_create: path is NULL (CSVLogger: no file path)");
  if (!path[0]) return st_error(ST_ERR_INVALID, "CSVLogger: no file path");
  csv_logger *c = calloc(1, sizeof *c);
  if (!c) return no_state("CSVLogger", out);
  if (!(c->path = strdup(path))) {
    free(c);
    return no_state("CSVLogger", out);
  }
  c->last_epoch = -1;
  *out = (st_callback){.user = c, .on_epoch_begin = csv_epoch_begin,
                       .on_epoch_end = csv_epoch_end, .destroy = csv_destroy};
  return ST_OK;
}

/* ---- EarlyStopping ------------------------------------------------------ */

typedef enum { MON_LOSS, MON_ACCURACY, MON_VAL_LOSS, MON_VAL_ACCURACY, MON_COUNT } monitor_kind;
static const char *const monitor_names[MON_COUNT] = {"loss", "accuracy", "val_loss",
                                                     "val_accuracy"};

typedef struct early_stopping {
  int monitor;          /* monitor_kind (checked by st_early_stopping_create) */
  char monitor_name[32];/* as given (truncated), for messages */
  double min_delta;     /* >= 0 */
  int patience;
  bool restore;
  bool maximize;        /* accuracy metrics improve upwards */
  double best;
  int wait, best_epoch, last_epoch;
  float *best_weights;  /* [nweights] = st_model_weights_size, allocated once */
  size_t nweights;
  bool have_weights;    /* best_weights holds this fit's best epoch */
  bool restore_pending; /* stopped: restore best_weights when fit ends */
} early_stopping;

st_early_stopping_options st_early_stopping_default_options(void) {
  st_early_stopping_options o = {"val_loss", 0.0, 0, false};
  return o;
}

static void es_destroy(void *self) {
  early_stopping *e = self;
  free(e->best_weights);
  free(e);
}

static st_status es_snapshot(early_stopping *e, st_model *m) {
  size_t n = st_model_weights_size(m);
  if (!e->best_weights || e->nweights != n) {
    free(e->best_weights);
    e->nweights = 0;
    if (!(e->best_weights = malloc((n + 1) * sizeof(float))))
      return st_error(ST_ERR_NOMEM, "EarlyStopping: out of memory for %zu weights", n);
    e->nweights = n;
  }
  st_status s = st_model_get_weights(m, e->best_weights);
  e->have_weights = s == ST_OK;
  return s;
}

/* Resets at the start of each fit (Keras on_train_begin) and checks options. */
static st_status es_epoch_begin(void *user, st_model *m, int epoch) {
  early_stopping *e = user;
  (void)m;
  if (e->last_epoch < 0 || epoch <= e->last_epoch) {
    e->best = e->maximize ? -INFINITY : INFINITY;
    e->wait = 0;
    e->best_epoch = -1;
    e->have_weights = false; /* forget the previous fit's best weights */
    e->restore_pending = false;
  }
  e->last_epoch = epoch;
  return ST_OK;
}

static double es_value(const early_stopping *e, const st_epoch_logs *l) {
  switch ((monitor_kind)e->monitor) {
    case MON_LOSS: return l->loss;
    case MON_ACCURACY: return l->accuracy;
    case MON_VAL_LOSS: return l->val_loss;
    default: return l->val_accuracy;
  }
}

static bool es_improved(const early_stopping *e, double cur) {
  return e->maximize ? cur - e->min_delta > e->best : cur + e->min_delta < e->best;
}

/* Keras 3's EarlyStopping.on_epoch_end. When it stops training with
 * restore_best_weights, the best weights are put back when fit ends
 * (st__callbacks_train_end, Keras's on_train_end), after every callback's
 * hooks for this epoch: a ModelCheckpoint listed after it still saves this
 * epoch's weights with this epoch's optimizer state. */
static st_status es_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  early_stopping *e = user;
  bool val = e->monitor == MON_VAL_LOSS || e->monitor == MON_VAL_ACCURACY;
  if (val && !l->has_validation) { /* an epoch validation_freq skips (fit checked the rest) */
    st_log(ST_LOG_WARN, "EarlyStopping: %s is not available at epoch %d (validation_freq): "
           "skipping the epoch", monitor_names[e->monitor], l->epoch + 1);
    return ST_OK;
  }
  double cur = es_value(e, l);
  st_status s;
  if (e->restore && !e->have_weights && (s = es_snapshot(e, m)) != ST_OK) return s;
  e->wait++;
  if (es_improved(e, cur)) {
    e->best = cur;
    e->best_epoch = l->epoch;
    e->wait = 0;
    return e->restore ? es_snapshot(e, m) : ST_OK;
  }
  if (e->wait >= e->patience && l->epoch > 0) {
    st_model_stop_training(m);
    e->restore_pending = e->restore && e->have_weights;
  }
  return ST_OK;
}

static int monitor_index(const char *name) {
  for (int i = 0; i < MON_COUNT; i++)
    if (strcmp(name, monitor_names[i]) == 0) return i;
  return -1;
}

/* Keras 3 semantics (best starts at +-inf, improvement means beating best by
 * more than min_delta, never stops at epoch 0). With restore_best_weights
 * the weights of the best epoch are restored when it stops training, inside
 * its on_epoch_end: callbacks after it in the array see the restored weights.
 * Keras 3 also restores at the end of a run that did not stop early; st_callback
 * has no train-end hook, so here such a run keeps its last weights. */
st_status st_early_stopping_create(st_early_stopping_options o, st_callback *out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_early_stopping_create: out is NULL");
  memset(out, 0, sizeof *out);
  const char *name = o.monitor ? o.monitor : "val_loss";
  int monitor = monitor_index(name);
  if (monitor < 0)
    return st_error(ST_ERR_INVALID, "EarlyStopping: unknown monitor '%s' (use loss, accuracy, "
                    "val_loss or val_accuracy)", name);
  if (o.patience < 0)
    return st_error(ST_ERR_INVALID, "EarlyStopping: patience %d (must be >= 0)", o.patience);
  early_stopping *e = calloc(1, sizeof *e);
  if (!e) return no_state("EarlyStopping", out);
  e->monitor = monitor;
  snprintf(e->monitor_name, sizeof e->monitor_name, "%s", name);
  e->min_delta = fabs(o.min_delta);
  e->patience = o.patience;
  e->restore = o.restore_best_weights;
  e->maximize = e->monitor == MON_ACCURACY || e->monitor == MON_VAL_ACCURACY;
  e->last_epoch = -1;
  *out = (st_callback){.user = e, .on_epoch_begin = es_epoch_begin,
                       .on_epoch_end = es_epoch_end, .destroy = es_destroy};
  return ST_OK;
}

/* ---- LearningRateScheduler ---------------------------------------------- */

typedef struct lr_scheduler {
  st_lr_schedule_fn fn;
  void *user;  /* borrowed, passed to fn */
} lr_scheduler;

static void lr_destroy(void *self) { free(self); }

static st_status lr_epoch_begin(void *user, st_model *m, int epoch) {
  lr_scheduler *r = user;
  double lr = r->fn(r->user, epoch, st_model_learning_rate(m));
  st_status s = st_model_set_learning_rate(m, lr);
  return s == ST_OK ? s : st_error_prefix(s, "LearningRateScheduler: epoch %d: ", epoch);
}

st_status st_lr_scheduler_create(st_lr_schedule_fn fn, void *user, st_callback *out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_lr_scheduler_create: out is NULL");
  memset(out, 0, sizeof *out);
  if (!fn) return st_error(ST_ERR_INVALID, "st_lr_scheduler_create: fn is NULL (no schedule function)");
  lr_scheduler *r = calloc(1, sizeof *r);
  if (!r) return no_state("LearningRateScheduler", out);
  r->fn = fn;
  r->user = user;
  *out = (st_callback){.user = r, .on_epoch_begin = lr_epoch_begin, .destroy = lr_destroy};
  return ST_OK;
}

/* ---- ModelCheckpoint ------------------------------------------------------ */

typedef struct model_checkpoint {
  char dir[4096];
  int monitor;       /* monitor_kind, -1 unknown (allowed unless best_only) */
  char monitor_name[32];
  bool best_only, maximize;
  int keep;
  double best;
} model_checkpoint;

static void mc_destroy(void *self) { free(self); }

static st_status mc_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  model_checkpoint *c = user;
  if (c->best_only) {
    bool val = c->monitor == MON_VAL_LOSS || c->monitor == MON_VAL_ACCURACY;
    if (l->epoch == 0) c->best = c->maximize ? -INFINITY : INFINITY;
    if (val && !l->has_validation) { /* an epoch validation_freq skips */
      st_log(ST_LOG_WARN, "ModelCheckpoint: %s is not available at epoch %d (validation_freq): "
             "not saving", c->monitor_name, l->epoch + 1);
      return ST_OK;
    }
    early_stopping probe = {.monitor = c->monitor};
    double cur = es_value(&probe, l);
    if (!(c->maximize ? cur > c->best : cur < c->best)) return ST_OK;
    c->best = cur;
  }
  st_checkpoint_options o = st_checkpoint_default_options();
  o.keep = c->keep;
  st_status s = st_checkpoint_save(m, c->dir, &o);
  return s == ST_OK ? s : st_error_prefix(s, "ModelCheckpoint: ");
}

st_status st_model_checkpoint_create(const char *dir, const char *monitor, bool save_best_only,
                                     int keep, st_callback *out) {
  ST_REQUIRE(out);
  memset(out, 0, sizeof *out);
  const char *name = monitor ? monitor : "val_loss";
  if (!dir) return st_error(ST_ERR_INVALID, "st_model_checkpoint_create: dir is NULL (ModelCheckpoint: no directory)");
  if (!dir[0]) return st_error(ST_ERR_INVALID, "ModelCheckpoint: no directory");
  if (strlen(dir) >= sizeof ((model_checkpoint *)0)->dir)
    return st_error(ST_ERR_INVALID, "ModelCheckpoint: directory '%.60s...' is %zu bytes "
                    "(at most %zu)", dir, strlen(dir), sizeof ((model_checkpoint *)0)->dir - 1);
  if (save_best_only && monitor_index(name) < 0)
    return st_error(ST_ERR_INVALID, "ModelCheckpoint: unknown monitor '%s' (use loss, accuracy, "
                    "val_loss or val_accuracy)", name);
  model_checkpoint *c = calloc(1, sizeof *c);
  if (!c) return no_state("ModelCheckpoint", out);
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  c->monitor = monitor_index(name);
  snprintf(c->monitor_name, sizeof c->monitor_name, "%s", name);
  c->best_only = save_best_only;
  c->maximize = c->monitor == MON_ACCURACY || c->monitor == MON_VAL_ACCURACY;
  c->keep = keep;
  c->best = c->maximize ? -INFINITY : INFINITY;
  *out = (st_callback){.user = c, .on_epoch_end = mc_epoch_end, .destroy = mc_destroy};
  return ST_OK;
}

/* ---- checks at fit start -------------------------------------------------- */

static bool monitors_validation(int monitor) {
  return monitor == MON_VAL_LOSS || monitor == MON_VAL_ACCURACY;
}

st_status st__callbacks_train_end(st_model *m, const st_callback *cbs, int n) {
  for (int i = 0; i < n; i++) {
    if (cbs[i].on_epoch_end != es_epoch_end) continue;
    early_stopping *e = cbs[i].user;
    if (!e->restore_pending) continue;
    e->restore_pending = false;
    st_status s = st_model_set_weights(m, e->best_weights);
    if (s != ST_OK) return s;
  }
  return ST_OK;
}

st_status st__callbacks_check_fit(const st_callback *cbs, int n, bool has_validation) {
  for (int i = 0; i < n && !has_validation; i++) {
    if (cbs[i].on_epoch_end == es_epoch_end &&
        monitors_validation(((const early_stopping *)cbs[i].user)->monitor))
      return st_error(ST_ERR_INVALID, "fit: callbacks[%d] (EarlyStopping) monitors %s but fit "
                      "has no validation data (set o->validation, or monitor loss)", i,
                      monitor_names[((const early_stopping *)cbs[i].user)->monitor]);
    const model_checkpoint *c = cbs[i].user;
    if (cbs[i].on_epoch_end == mc_epoch_end && c->best_only && monitors_validation(c->monitor))
      return st_error(ST_ERR_INVALID, "fit: callbacks[%d] (ModelCheckpoint) monitors %s but fit "
                      "has no validation data (set o->validation, or monitor loss)", i,
                      c->monitor_name);
  }
  return ST_OK;
}
