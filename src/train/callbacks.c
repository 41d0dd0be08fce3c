/* Keras callbacks in C: CSVLogger, EarlyStopping, LearningRateScheduler and
 * ModelCheckpoint (its files: src/io/checkpoint.c).
 * Each keeps its memory in one struct that starts with a `cb_state` header
 * holding its destructor, so st_callback_free releases any of them. A state
 * belongs to one fit at a time (one thread). If allocating the state fails,
 * the callback is still returned (with *state = NULL) and its first hook
 * reports ST_ERR_NOMEM, which stops fit. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/train.h"
#include "base/fileio.h"
#include "train/callback_state.h"

typedef st__cb_state cb_state;

void st_callback_free(void *state) {
  if (state) ((cb_state *)state)->destroy(state);
}

static st_status no_state(const char *who) {
  return st_error(ST_ERR_NOMEM, "%s: out of memory for the callback's state", who);
}

/* ---- CSVLogger ---------------------------------------------------------- */

static const char csv_header[] = "epoch,loss,accuracy,val_loss,val_accuracy,lr\n";

typedef struct csv_logger {
  cb_state base;
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
  FILE *f = fopen(c->path, "rb");
  if (!f) return ST_OK;
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
  if (!c) return no_state("CSVLogger");
  bool new_fit = c->last_epoch < 0 || epoch <= c->last_epoch;
  c->last_epoch = epoch;
  if (!new_fit) return ST_OK;
  c->len = 0;
  return epoch > 0 ? csv_load_previous(c, epoch) : ST_OK;
}

static st_status csv_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  csv_logger *c = user;
  (void)m;
  if (!c) return no_state("CSVLogger");
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

st_callback st_csv_logger_callback(const char *path, void **state) {
  ST_ASSERT(path && state);
  st_callback cb = {NULL, csv_epoch_begin, NULL, csv_epoch_end};
  csv_logger *c = calloc(1, sizeof *c);
  if (c && !(c->path = strdup(path))) {
    free(c);
    c = NULL;
  }
  if (c) {
    c->base.destroy = csv_destroy;
    c->last_epoch = -1;
  }
  cb.user = c;
  *state = c;
  return cb;
}

/* ---- EarlyStopping ------------------------------------------------------ */

typedef enum { MON_LOSS, MON_ACCURACY, MON_VAL_LOSS, MON_VAL_ACCURACY, MON_COUNT } monitor_kind;
static const char *const monitor_names[MON_COUNT] = {"loss", "accuracy", "val_loss",
                                                     "val_accuracy"};

typedef struct early_stopping {
  cb_state base;
  int monitor;          /* monitor_kind, or -1 when the name was not recognised */
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
  if (!e) return no_state("EarlyStopping");
  if (e->monitor < 0)
    return st_error(ST_ERR_INVALID, "EarlyStopping: unknown monitor '%s' (use loss, accuracy, "
                    "val_loss or val_accuracy)", e->monitor_name);
  if (e->patience < 0)
    return st_error(ST_ERR_INVALID, "EarlyStopping: patience %d (must be >= 0)", e->patience);
  if (e->last_epoch < 0 || epoch <= e->last_epoch) {
    e->best = e->maximize ? -INFINITY : INFINITY;
    e->wait = 0;
    e->best_epoch = -1;
    e->have_weights = false; /* forget the previous fit's best weights */
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

/* Keras 3's EarlyStopping.on_epoch_end; restores the best weights when it
 * stops training (see st_early_stopping_callback). */
static st_status es_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  early_stopping *e = user;
  if (!e) return no_state("EarlyStopping");
  if (e->monitor < 0) return es_epoch_begin(e, m, l->epoch); /* the option error */
  bool val = e->monitor == MON_VAL_LOSS || e->monitor == MON_VAL_ACCURACY;
  if (val && !l->has_validation)
    return st_error(ST_ERR_INVALID, "EarlyStopping monitors %s but fit has no validation data",
                    monitor_names[e->monitor]);
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
    if (e->restore && e->have_weights) return st_model_set_weights(m, e->best_weights);
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
st_callback st_early_stopping_callback(st_early_stopping_options o, void **state) {
  ST_ASSERT(state);
  st_callback cb = {NULL, es_epoch_begin, NULL, es_epoch_end};
  early_stopping *e = calloc(1, sizeof *e);
  if (e) {
    const char *name = o.monitor ? o.monitor : "val_loss";
    e->base.destroy = es_destroy;
    e->monitor = monitor_index(name);
    snprintf(e->monitor_name, sizeof e->monitor_name, "%s", name);
    e->min_delta = fabs(o.min_delta);
    e->patience = o.patience;
    e->restore = o.restore_best_weights;
    e->maximize = e->monitor == MON_ACCURACY || e->monitor == MON_VAL_ACCURACY;
    e->last_epoch = -1;
  }
  cb.user = e;
  *state = e;
  return cb;
}

/* ---- LearningRateScheduler ---------------------------------------------- */

typedef struct lr_scheduler {
  cb_state base;
  st_lr_schedule_fn fn;
  void *user;  /* borrowed, passed to fn */
} lr_scheduler;

static void lr_destroy(void *self) { free(self); }

static st_status lr_epoch_begin(void *user, st_model *m, int epoch) {
  lr_scheduler *r = user;
  if (!r) return no_state("LearningRateScheduler");
  if (!r->fn) return st_error(ST_ERR_INVALID, "LearningRateScheduler: no schedule function");
  double lr = r->fn(r->user, epoch, st_model_learning_rate(m));
  /* The optimizer keeps the rate as a float: it must stay finite and > 0. */
  if (!isfinite(lr) || lr <= 0 || lr > FLT_MAX || (float)lr <= 0.0f)
    return st_error(ST_ERR_INVALID, "LearningRateScheduler: the schedule returned %g for "
                    "epoch %d (a learning rate must be finite and > 0)", lr, epoch);
  st_model_set_learning_rate(m, lr);
  return ST_OK;
}

st_callback st_lr_scheduler_callback(st_lr_schedule_fn fn, void *user, void **state) {
  ST_ASSERT(state);
  st_callback cb = {NULL, lr_epoch_begin, NULL, NULL};
  lr_scheduler *r = calloc(1, sizeof *r);
  if (r) {
    r->base.destroy = lr_destroy;
    r->fn = fn;
    r->user = user;
  }
  cb.user = r;
  *state = r;
  return cb;
}

/* ---- ModelCheckpoint ------------------------------------------------------ */

typedef struct model_checkpoint {
  cb_state base;
  char dir[4096];
  int monitor;       /* monitor_kind, -1 unknown */
  char monitor_name[32];
  bool best_only, maximize;
  int keep;
  double best;
} model_checkpoint;

static void mc_destroy(void *self) { free(self); }

static st_status mc_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  model_checkpoint *c = user;
  if (!c) return no_state("ModelCheckpoint");
  if (c->best_only) {
    if (c->monitor < 0)
      return st_error(ST_ERR_INVALID, "ModelCheckpoint: unknown monitor '%s'", c->monitor_name);
    bool val = c->monitor == MON_VAL_LOSS || c->monitor == MON_VAL_ACCURACY;
    if (val && !l->has_validation)
      return st_error(ST_ERR_INVALID, "ModelCheckpoint monitors %s but fit has no validation data",
                      c->monitor_name);
    early_stopping probe = {.monitor = c->monitor};
    double cur = es_value(&probe, l);
    if (l->epoch == 0) c->best = c->maximize ? -INFINITY : INFINITY;
    if (!(c->maximize ? cur > c->best : cur < c->best)) return ST_OK;
    c->best = cur;
  }
  st_checkpoint_options o = st_checkpoint_default_options();
  o.keep = c->keep;
  st_status s = st_checkpoint_save(m, c->dir, &o);
  return s == ST_OK ? s : st_error_prefix(s, "ModelCheckpoint: ");
}

st_callback st_model_checkpoint_callback(const char *dir, const char *monitor, bool save_best_only,
                                         int keep, void **state) {
  ST_ASSERT(state);
  st_callback cb = {NULL, NULL, NULL, mc_epoch_end};
  model_checkpoint *c = calloc(1, sizeof *c);
  if (c) {
    const char *name = monitor ? monitor : "val_loss";
    c->base.destroy = mc_destroy;
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    c->monitor = monitor_index(name);
    snprintf(c->monitor_name, sizeof c->monitor_name, "%s", name);
    c->best_only = save_best_only;
    c->maximize = c->monitor == MON_ACCURACY || c->monitor == MON_VAL_ACCURACY;
    c->keep = keep;
    c->best = c->maximize ? -INFINITY : INFINITY;
  }
  cb.user = c;
  *state = c;
  return cb;
}
