/* fit / evaluate / predict: the training loop. Each global batch from the
 * dataset goes to the model's strategy, which splits it across replicas, runs
 * forward and backward, reduces gradients and applies the update; the loop
 * keeps the epoch's running figures and the training position (its own
 * state: it hands the position to the checkpoint writer and reader, and
 * leaves the model where it ended), calls the callbacks and times training. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "distribute/strategy.h"
#include "model/model.h"
#include "data/holdout.h"
#include "data/autoshard.h"
#include "data/dataset_impl.h"
#include "data/labels.h"
#include "io/checkpoint.h"
#include "train/callbacks_impl.h"
#include "train/fit_loop.h"

st_fit_options st_fit_default_options(void) {
  st_fit_options o;
  memset(&o, 0, sizeof o);
  o.epochs = 1;
  o.warmup_steps = 20;
  o.validation_freq = 1;
  return o;
}

void st_history_destroy(st_history *h) {
  if (!h) return;
  free(h->logs);
  memset(h, 0, sizeof *h);
}

/* The data's example shape against the model input, as Keras: equal
 * dimension by dimension, or the input's trailing channel of 1 left out
 * (images [h, w] into [h, w, 1]). */
static bool shape_fits(st_shape data, st_shape in) {
  if (st_shape_equal(data, in)) return true;
  if (data.rank + 1 != in.rank || in.dims[in.rank - 1] != 1) return false;
  for (int i = 0; i < data.rank; i++)
    if (data.dims[i] != in.dims[i]) return false;
  return true;
}

/* Why the shapes differ, for the message: channels first, the same values
 * in another shape (a reshape), or another size. */
static const char *shape_hint(st_shape data, st_shape in) {
  if (in.rank == 3 && data.rank == 3 && data.dims[0] == in.dims[2] &&
      data.dims[1] == in.dims[0] && data.dims[2] == in.dims[1])
    return ": the data looks channels_first (channels, height, width) but the model is "
           "channels_last (height, width, channels): transpose the images";
  if (in.rank == 3)
    return ": the model takes channels_last images (height, width, channels)";
  if (st_shape_size(data) == st_shape_size(in))
    return ": same size, other shape: reshape the data (the tensor given to "
           "st_dataset_from_tensor_slices) to the model's input";
  return "";
}

/* no_labels: the error when the dataset has none (fit, evaluate); NULL where
 * labels are optional (predict). extra: label values after the loss's (1: a
 * sample weight column). */
static st_status check_data(const st_model *m, st_dataset *ds, const char *what,
                            const char *no_labels, size_t extra) {
  if (!ds) return st_error(ST_ERR_INVALID, "%s: no dataset", what);
  if (st_dataset_batch_size(ds) <= 0)
    return st_error(ST_ERR_INVALID, "%s: dataset must be batched (st_dataset_batch)", what);
  st_shape xs = st_dataset_x_shape(ds), in = m->net.input_shape;
  if (!shape_fits(xs, in)) {
    char a[64], b[64];
    return st_error(ST_ERR_INVALID, "%s: dataset features %s do not fit model input %s%s", what,
                    st_shape_format(xs, a, sizeof a), st_shape_format(in, b, sizeof b),
                    shape_hint(xs, in));
  }
  size_t ys = st_dataset_y_size(ds), out = st__net_output_size(&m->net);
  if (ys == 0)
    return no_labels ? st_error(ST_ERR_INVALID, "%s", no_labels) : ST_OK;
  size_t want = st__net_label_width(&m->net) + extra;
  if (ys != want && m->net.n_outputs > 1)
    return st_error(ST_ERR_INVALID, "%s: dataset labels have %zu values per example; the "
                    "model's %d outputs need %zu (each output's label, concatenated: 1 value "
                    "for a sparse loss, the output's size otherwise)", what, ys,
                    m->net.n_outputs, want);
  if (ys != want)
    return st_error(ST_ERR_INVALID, "%s: dataset labels have %zu values per example; loss %s "
                    "on a model with %zu outputs needs %zu", what, ys,
                    st_loss_name(m->net.loss), out, want);
  return ST_OK;
}

/* Sparse labels must be class indices within the model's outputs (checked
 * before any kernel uses them as an index). */
static st_status check_labels(const st_model *m, const st_batch *b, int64_t first) {
  return st__net_check_labels(&m->net, b->y, b->size, first);
}

/* Input values a layer reading a model input cannot take (Embedding: ids
 * that are not integers in [0, input_dim)), refused before any kernel uses
 * them, as labels are; the error names the layer, value, example and
 * position. */
static st_status check_inputs(const st_model *m, const st_batch *b, int64_t first) {
  if (m->net.nlayers == 0 || !b->x) return ST_OK;
  return st__net_check_inputs(&m->net, b->x, b->size, first);
}

/* Labels checked before training where the data is in memory. */
typedef struct label_scan {
  int64_t classes;
  const char *what; /* "training data" */
} label_scan;

static st_status check_label_row(const float *y, int64_t row, void *user) {
  const label_scan *ls = user;
  float v = y[0];
  if (v == (float)(int64_t)v && (v < 0.0f || v >= (float)ls->classes))
    return st_error(ST_ERR_INVALID, "fit: label %g at row %lld of the %s is out of range "
                    "[0, %lld) (the model has %lld outputs)", (double)v, (long long)row,
                    ls->what, (long long)ls->classes, (long long)ls->classes);
  if (!(v >= 0.0f && v < (float)ls->classes) || v != (float)(int64_t)v)
    return st_error(ST_ERR_INVALID, "fit: label %g at row %lld of the %s is not a class "
                    "index (an integer in [0, %lld))", (double)v, (long long)row, ls->what,
                    (long long)ls->classes);
  return ST_OK;
}

/* Every sparse label of an in-memory source (st__ds_scan_labels), before the
 * first step, naming its source row; other pipelines are checked per batch. */
static st_status check_source_labels(const st_model *m, const st_dataset *ds, const char *what) {
  if (!st_loss_is_sparse(m->net.loss) || st_dataset_y_size(ds) != 1 || m->net.n_outputs > 1)
    return ST_OK; /* several outputs: checked per batch */
  label_scan ls = {(int64_t)st__net_output_size(&m->net), what};
  bool scanned;
  return st__ds_scan_labels(ds, check_label_row, &ls, &scanned);
}

typedef st_status (*step_fn)(st_model *m, const st_batch *b, st_step_stats *s, void *arg);

/* One pass over ds; calls step for each batch. */
static st_status run_pass(st_model *m, st_dataset *ds, step_fn step, void *arg,
                          st_step_stats *total, int64_t max_steps) {
  st_iterator *it = NULL;
  st_status s = st_dataset_iterate(ds, &it);
  if (s != ST_OK) return s;
  for (int64_t n = 0;; n++) {
    st_batch b;
    bool end = max_steps > 0 && n >= max_steps, go = false;
    if (!end && (s = st_iterator_next(it, &b, &end)) != ST_OK) break;
    if ((s = st__strategy_agree(m->strategy, end ? -1 : b.size, false, &go, NULL)) != ST_OK ||
        !go)
      break;
    if ((s = check_inputs(m, &b, total->examples)) != ST_OK) break;
    if (st_dataset_y_size(ds) == 0) b.y = NULL; /* predict without labels */
    else if ((s = check_labels(m, &b, total->examples)) != ST_OK) break;
    if ((s = step(m, &b, total, arg)) != ST_OK) break;
  }
  st_iterator_destroy(it);
  return s;
}

/* ---- fit ---- */
typedef struct fit_state {
  const st_fit_options *o;
  st__fit_loop l;        /* the epoch loop's state: position, epoch, timing (train/fit_loop.h) */
  float *sw_labels, *sw_weights; /* sample_weight_column: the batch split (grown) */
  int sw_cap;
  st__run_identity id;   /* the run's identity (recorded in backups, checked on resume) */
  int64_t steps_per_epoch, global_step;
  double t_last;
  st_dataset *train;     /* the epochs' data */
  struct lookahead *stream; /* an endless dataset's one pass across the epochs */
} fit_state;

static double ratio(int64_t a, int64_t b) { return b ? (double)a / (double)b : 0.0; }

/* Multi-worker: the chief writes (st_checkpoint_save does nothing elsewhere). */
static st_status save_backup(st_model *m, const fit_state *fs) {
  st_checkpoint_options co = st_checkpoint_default_options();
  co.keep = 2;
  st_status s = st__checkpoint_save_at(m, fs->o->backup_dir, &co, &fs->l.pos, &fs->id);
  return s == ST_OK ? s : st_error_prefix(s, "backup: ");
}

static st_status fit_step(st_model *m, const st_batch *b, const st__side_task *side,
                          st_step_stats *tot, fit_state *fs) {
  st_status s = st__strategy_train_step(m->strategy, &m->net, b, side, tot);
  if (s != ST_OK) return s;
  double now = st_now_seconds();
  if (fs->global_step >= fs->o->warmup_steps) {
    fs->l.timed_seconds += now - fs->t_last;
    fs->l.timed_samples += b->size;
  }
  fs->t_last = now;
  fs->global_step++;
  st_train_position *p = &fs->l.pos;
  /* the step's own loss: what its batch added to the epoch's sums (p holds
   * them before the step, restored from a backup too) */
  double step_loss = tot->examples > p->examples
                         ? (tot->loss_sum - p->loss_sum) / (double)(tot->examples - p->examples)
                         : 0.0;
  p->step_in_epoch++;
  p->loss_sum = tot->loss_sum, p->examples = tot->examples;
  p->correct = tot->correct, p->metric_count = tot->metric_count;
  st_batch_logs bl = {fs->l.epoch, p->step_in_epoch - 1, fs->steps_per_epoch,
                      tot->loss_sum / (double)tot->examples, ratio(tot->correct, tot->metric_count),
                      step_loss};
  if (!(bl.loss == bl.loss) || bl.loss > 1e30)
    return st_error(ST_ERR_NONFINITE, "loss became %g at epoch %d, step %lld (TerminateOnNaN)",
                    bl.loss, fs->l.epoch + 1, (long long)bl.step + 1);
  for (int c = 0; c < fs->o->ncallbacks; c++)
    if (fs->o->callbacks[c].on_batch_end &&
        (s = fs->o->callbacks[c].on_batch_end(fs->o->callbacks[c].user, m, &bl)) != ST_OK)
      return s;
  if (fs->o->backup_dir && fs->o->backup_every_steps > 0 && m->net.step % fs->o->backup_every_steps == 0)
    return save_backup(m, fs);
  return ST_OK;
}

/* Preemption, at a step boundary every worker agreed on: the backup (if any)
 * takes this position; the workers wait for the chief to have written it
 * before any returns (a launcher may kill the rest when one exits). */
static st_status stop_here(st_model *m, fit_state *fs) {
  st_status s = fs->o->backup_dir ? save_backup(m, fs) : ST_OK;
  if (s == ST_OK) s = st__strategy_barrier(m->strategy);
  if (s != ST_OK) return s;
  long long step = (long long)fs->l.pos.step_in_epoch;
  if (fs->o->backup_dir)
    return st_error(ST_ERR_STOPPED, "stopped on request at epoch %d after step %lld; the "
                    "backup in %s holds this point: the same command resumes from it",
                    fs->l.epoch + 1, step, fs->o->backup_dir);
  return st_error(ST_ERR_STOPPED, "stopped on request at epoch %d after step %lld; nothing "
                  "saved (with --backup-dir a rerun would resume from here)", fs->l.epoch + 1, step);
}

/* The next batch, taken while a step runs: the strategy calls take_next
 * beside its optimizer update, when the step's batch has been read (its
 * buffer is the one the next batch overwrites). The same calls to the
 * iterator in the same order, so the same batches. */
typedef struct lookahead {
  st_iterator *it;
  bool taken;        /* next_* hold the result of the next st_iterator_next */
  st_batch next;
  bool next_end;
  st_status next_status;
  char next_error[512]; /* the error message, from the thread that ran it */
} lookahead;

static void take_next(void *arg) {
  lookahead *la = arg;
  la->next_end = false;
  la->next_status = st_iterator_next(la->it, &la->next, &la->next_end);
  if (la->next_status != ST_OK)
    snprintf(la->next_error, sizeof la->next_error, "%s", st_last_error());
  la->taken = true;
}

static st_status next_batch(lookahead *la, st_batch *b, bool *end) {
  if (!la->taken) return st_iterator_next(la->it, b, end);
  la->taken = false;
  if (la->next_status != ST_OK) return st_error(la->next_status, "%s", la->next_error);
  *b = la->next;
  *end = la->next_end;
  return ST_OK;
}

/* sample_weight_column: the batch's labels without their last value go to
 * fs->sw_labels, that value to fs->sw_weights (the net's sample weights);
 * *b then points at the labels. */
static st_status split_sample_weights(st_model *m, fit_state *fs, st_batch *b, int64_t first) {
  size_t w = st__net_label_size(&m->net);
  if (b->size > fs->sw_cap) {
    float *l = realloc(fs->sw_labels, (size_t)b->size * w * sizeof(float));
    if (l) fs->sw_labels = l;
    float *ws = l ? realloc(fs->sw_weights, (size_t)b->size * sizeof(float)) : NULL;
    if (!ws) return st_error(ST_ERR_NOMEM, "fit: out of memory for sample weights");
    fs->sw_weights = ws;
    fs->sw_cap = b->size;
  }
  for (int i = 0; i < b->size; i++) {
    const float *row = b->y + (size_t)i * (w + 1);
    memcpy(fs->sw_labels + (size_t)i * w, row, w * sizeof(float));
    if (!isfinite(row[w]))
      return st_error(ST_ERR_INVALID, "sample_weight: example %lld has weight %g (not finite)",
                      (long long)(first + i), (double)row[w]);
    fs->sw_weights[i] = row[w];
  }
  b->y = fs->sw_labels;
  m->net.sample_labels = fs->sw_labels;
  m->net.sample_weights = fs->sw_weights;
  return ST_OK;
}

/* The epoch's batches. An endless dataset (cardinality -1) with
 * steps_per_epoch is one stream across the epochs, as Keras keeps its
 * iterator: epoch e trains on batches [e spe, (e + 1) spe) of the pass of
 * epoch 0. The first epoch this fit runs starts that pass and drops the
 * batches its position says were trained (a resumed run: e spe + step,
 * the same on every worker); later epochs go on where the last stopped.
 * Any other dataset is iterated anew each epoch (that epoch's shuffle),
 * *skip: the steps a restored position trained. *la: fs->stream or local. */
static st_status pass_source(st_dataset *ds, fit_state *fs, lookahead *local, lookahead **la,
                             int64_t *skip) {
  int64_t spe = fs->o->steps_per_epoch, done = 0;
  *skip = fs->l.pos.step_in_epoch;
  if (spe <= 0 || st_dataset_cardinality(ds) != -1) {
    *la = local;
    return st_dataset_iterate_epoch(ds, (uint64_t)fs->l.epoch, &local->it);
  }
  *la = fs->stream;
  if (fs->stream) return *skip = 0, ST_OK; /* goes on where the last epoch stopped */
  if (!(*la = fs->stream = calloc(1, sizeof **la)))
    return st_error(ST_ERR_NOMEM, "fit: out of memory");
  st_status s = st_dataset_iterate_epoch(ds, 0, &fs->stream->it);
  if (s == ST_OK) s = st__iter_skip(fs->stream->it, fs->l.pos.epoch * spe + *skip, &done);
  *skip = 0; /* a shorter stream ends the epoch at its first read */
  return s;
}

/* The epoch's steps, skipping those a restored checkpoint had already
 * trained on; stops early when asked to (st_request_stop). */
static st_status train_pass(st_model *m, st_dataset *ds, fit_state *fs, st_step_stats *tot) {
  lookahead local = {0}, *la = NULL;
  int64_t skip = 0;
  st_status s = pass_source(ds, fs, &local, &la, &skip);
  int64_t limit = fs->o->steps_per_epoch; /* 0: the whole pass */
  while (s == ST_OK) {
    st_batch b;
    bool end = false, go = false;
    if (limit > 0 && fs->l.pos.step_in_epoch >= limit) end = true; /* the epoch's steps */
    else if ((s = next_batch(la, &b, &end)) != ST_OK) break;
    if (skip > 0 && !end) { /* every worker skips the same (checked at start) */
      skip--;
      continue;
    }
    bool stop = false;
    if ((s = st__strategy_agree(m->strategy, end ? -1 : b.size, st_stop_requested(), &go,
                                &stop)) != ST_OK)
      break;
    if (stop) {
      s = stop_here(m, fs);
      break;
    }
    if (!go) break;
    if (fs->o->sample_weight_column &&
        (s = split_sample_weights(m, fs, &b, tot->examples)) != ST_OK)
      break;
    if ((s = check_inputs(m, &b, tot->examples)) != ST_OK ||
        (s = check_labels(m, &b, tot->examples)) != ST_OK ||
        (s = st__net_check_classes(&m->net, b.y, b.size, tot->examples)) != ST_OK)
      break;
    s = fit_step(m, &b, &(st__side_task){take_next, la}, tot, fs);
  }
  st_iterator_destroy(local.it);
  return s;
}

/* BackupAndRestore: resume from the backup when there is one (its position
 * goes to fs->l.pos) and it was written by this run (fs->id, set here: the
 * global batch size, the caller's data fingerprint; the model gives the
 * rest). No `latest` file is a fresh start; a damaged or unreadable one is an
 * error (a fresh start would end by deleting the backup). */
static st_status maybe_restore(st_model *m, const st_dataset *train, fit_state *fs) {
  const st_fit_options *o = fs->o;
  st_train_position *pos = &fs->l.pos;
  char latest[4096];
  fs->id = (st__run_identity){.global_batch = st_dataset_batch_size(train),
                              .data = o->data_fingerprint, .anyway = o->resume_anyway};
  if (!o->backup_dir) return ST_OK;
  st_status s = st_checkpoint_latest(o->backup_dir, latest, sizeof latest);
  if (s != ST_OK) {
    snprintf(latest, sizeof latest, "%s/latest", o->backup_dir);
    struct stat sb;
    if (s == ST_ERR_IO && stat(latest, &sb) != 0 && errno == ENOENT) {
      st_clear_error();
      return ST_OK;
    }
    return st_error_prefix(s, "backup: cannot resume: ");
  }
  s = st__checkpoint_restore_at(m, o->backup_dir, pos, &fs->id);
  if (s != ST_OK) return st_error_prefix(s, "backup: cannot resume: ");
  st_log(ST_LOG_INFO, "resuming from %s at epoch %lld, step %lld", latest,
         (long long)pos->epoch + 1, (long long)pos->step_in_epoch);
  return ST_OK;
}

/* ---- the local dataset loop: fit's step source (train/fit_loop.h) ---- */
static int64_t fit_src_step(void *user, st_model *m, const st__fit_loop *fl) {
  (void)user, (void)fl;
  return m->net.step;
}

static st_status fit_src_pass(void *user, st_model *m, st__fit_loop *fl, st_step_stats *tot) {
  fit_state *fs = user;
  (void)fl;
  fs->t_last = st_now_seconds();
  return train_pass(m, fs->train, fs, tot);
}

/* The epoch's backup (BackupAndRestore). */
static st_status fit_src_after_end(void *user, st_model *m, st__fit_loop *fl, const st_epoch_logs *lg) {
  (void)lg;
  return fl->o->backup_dir ? save_backup(m, user) : ST_OK;
}

/* The model keeps where this fit ended (takes p's logs), for
 * st_checkpoint_save called after fit. */
static void keep_position(st_model *m, st_train_position *p) {
  st__train_position_clear(&m->last_pos);
  m->last_pos = *p;
  memset(p, 0, sizeof *p);
}

/* validation_freq / validation_epochs and class_weight of o (fn names the
 * function). */
static st_status check_fit_extras(const st_model *m, const st_fit_options *o, const char *fn) {
  if ((o->sample_weight_column || o->nclass_weight > 0) && m->net.n_outputs > 1)
    return st_error(ST_ERR_INVALID, "%s: o->%s with a model of %d outputs (not supported: "
                    "Keras takes one per output)", fn,
                    o->sample_weight_column ? "sample_weight_column" : "class_weight",
                    m->net.n_outputs);
  if (o->validation_freq < 0)
    return st_error(ST_ERR_INVALID, "%s: o->validation_freq %d is negative", fn, o->validation_freq);
  if (o->nvalidation_epochs < 0 || (o->nvalidation_epochs > 0 && !o->validation_epochs))
    return st_error(ST_ERR_INVALID, "%s: o->validation_epochs is NULL or o->nvalidation_epochs "
                    "%d is negative", fn, o->nvalidation_epochs);
  for (int i = 0; i < o->nvalidation_epochs; i++)
    if (o->validation_epochs[i] < 1)
      return st_error(ST_ERR_INVALID, "%s: o->validation_epochs[%d] = %d (epochs are 1-based)", fn,
                      i, o->validation_epochs[i]);
  if (o->nclass_weight < 0 || (o->nclass_weight > 0 && !o->class_weight))
    return st_error(ST_ERR_INVALID, "%s: o->class_weight is NULL or o->nclass_weight %d is "
                    "negative", fn, o->nclass_weight);
  for (int i = 0; i < o->nclass_weight; i++)
    if (!isfinite(o->class_weight[i]))
      return st_error(ST_ERR_INVALID, "%s: o->class_weight[%d] = %g is not finite", fn, i,
                      (double)o->class_weight[i]);
  if (o->steps_per_epoch < 0 || o->validation_steps < 0)
    return st_error(ST_ERR_INVALID, "%s: o->%s %lld is negative (0 = a whole pass)", fn,
                    o->steps_per_epoch < 0 ? "steps_per_epoch" : "validation_steps",
                    (long long)(o->steps_per_epoch < 0 ? o->steps_per_epoch : o->validation_steps));
  if (o->sample_weight_column && o->nclass_weight > 0)
    return st_error(ST_ERR_INVALID, "%s: o->class_weight and o->sample_weight_column together "
                    "(as Keras: give one or the other)", fn);
  if (o->sample_weight_column && o->validation_split != 0.0)
    return st_error(ST_ERR_INVALID, "%s: o->sample_weight_column with o->validation_split (hold "
                    "the validation rows out with take/skip, without the weight column)", fn);
  return ST_OK;
}

/* A dataset of infinite cardinality needs a step count (steps > 0): what
 * names the dataset, and what to set. */
static st_status check_finite(const st_dataset *ds, int64_t steps, const char *fn,
                              const char *what, const char *fix) {
  if (steps > 0 || st_dataset_cardinality(ds) != -1) return ST_OK;
  return st_error(ST_ERR_INVALID, "%s: %s is infinite (st_dataset_repeat with -1): a pass "
                  "would never end: %s", fn, what, fix);
}

/* The pointers fit is given, checked before anything is touched. */
static st_status check_fit_args(const st_model *m, const st_dataset *train,
                                const st_fit_options *o, const st_history *out) {
  const char *fn = "st_model_fit";
  if (!out) return st_error(ST_ERR_INVALID, "%s: out is NULL", fn);
  st_status s = st__model_check(m, fn, true);
  if (s != ST_OK) return s;
  if (!train) return st_error(ST_ERR_INVALID, "%s: train is NULL", fn);
  if (!o) return st_error(ST_ERR_INVALID, "%s: o is NULL (st_fit_default_options)", fn);
  if (o->ncallbacks < 0)
    return st_error(ST_ERR_INVALID, "%s: o->ncallbacks %d is negative", fn, o->ncallbacks);
  if (o->ncallbacks > 0 && !o->callbacks)
    return st_error(ST_ERR_INVALID, "%s: o->callbacks is NULL with o->ncallbacks = %d", fn,
                    o->ncallbacks);
  return check_fit_extras(m, o, fn);
}

static st_status fit_checked(st_model *m, st_dataset *train, st_fit_options *o,
                             st_history *out);
static st_status fit_auto_shard(st_model *m, st_dataset *train, st_fit_options *o,
                                st_history *out);

/* validation_split: fit on the rebuilt training pipeline with the held-out
 * rows as o->validation (data/holdout.h). */
static st_status fit_split(st_model *m, st_dataset *train, const st_fit_options *o,
                           st_history *out) {
  st_dataset *tr, *val;
  st_status s = st__ds_holdout(train, o->validation_split, "st_model_fit", &tr, &val);
  if (s != ST_OK) return s;
  st_fit_options so = *o;
  so.validation = val;
  so.validation_split = 0.0;
  s = fit_checked(m, tr, &so, out);
  st_dataset_destroy(tr);
  st_dataset_destroy(val);
  return s;
}

static st_status fit_entered(st_model *m, st_dataset *train, st_fit_options *o,
                             st_history *out);

st_status st_model_fit(st_model *m, st_dataset *train, st_fit_options *o, st_history *out) {
  st_status s = check_fit_args(m, train, o, out);
  if (out) memset(out, 0, sizeof *out);
  if (s == ST_OK) s = st__strategy_enter(m->strategy, ST__BUSY_FIT, "st_model_fit");
  if (s != ST_OK) return s;
  s = fit_entered(m, train, o, out);
  st__strategy_leave(m->strategy);
  return s;
}

/* st_model_fit with its arguments checked, the strategy marked busy. */
static st_status fit_entered(st_model *m, st_dataset *train, st_fit_options *o,
                             st_history *out) {
  st_status s;
  s = check_data(m, train, "fit", "st_model_fit: the dataset has no labels",
                 o->sample_weight_column ? 1 : 0);
  if (s == ST_OK) s = check_finite(train, o->steps_per_epoch, "st_model_fit", "the training dataset",
                                   "set o->steps_per_epoch (batches per epoch, Keras's steps_per_epoch)");
  if (s == ST_OK && o->validation)
    s = check_finite(o->validation, o->validation_steps, "st_model_fit", "the validation dataset",
                     "set o->validation_steps (Keras's validation_steps)");
  if (s != ST_OK) return s;
  if (o->validation_split != 0.0 && o->validation)
    st_log(ST_LOG_WARN, "st_model_fit: both validation and validation_split %g are set: "
           "using validation (as Keras)", o->validation_split);
  else if (o->validation_split != 0.0)
    return fit_split(m, train, o, out);
  return fit_auto_shard(m, train, o, out);
}

/* multi_worker_mirrored with auto_shard AUTO: a pipeline that reads files is
 * sharded by file (each worker reads its own files and batches its share of
 * the global batch, trained whole), any other by data (data/autoshard.h). */
static st_status fit_auto_shard(st_model *m, st_dataset *train, st_fit_options *o,
                                st_history *out) {
  int workers, rank;
  if (!st__strategy_auto_shard(m->strategy, &workers, &rank)) return fit_checked(m, train, o, out);
  st_dataset *mine = NULL;
  char why[256];
  st_status s = st__ds_auto_shard_files(train, workers, rank, &mine, why, sizeof why);
  if (s != ST_OK) return st_error_prefix(s, "st_model_fit: ");
  if (!mine) {
    if (why[0]) st_log(ST_LOG_WARN, "st_model_fit: auto-shard AUTO: %s: sharding by data", why);
    return fit_checked(m, train, o, out);
  }
  st__strategy_file_shard(m->strategy, true);
  s = fit_checked(m, mine, o, out);
  st__strategy_file_shard(m->strategy, false);
  st_dataset_destroy(mine);
  return s;
}

/* st_model_fit once its arguments and training data are checked. */
static st_status fit_checked(st_model *m, st_dataset *train, st_fit_options *o,
                             st_history *out) {
  st_status s;
  if (o->validation &&
      (s = check_data(m, o->validation, "fit: validation data",
                      "st_model_fit: the validation dataset has no labels", 0)) != ST_OK)
    return s;
  if ((s = st__callbacks_check_fit(o->callbacks, o->ncallbacks, o->validation != NULL)) != ST_OK)
    return s;
  if ((s = check_source_labels(m, train, "training data")) != ST_OK ||
      (o->validation && (s = check_source_labels(m, o->validation, "validation data")) != ST_OK))
    return s;
  if (o->epochs < 0) return st_error(ST_ERR_INVALID, "fit: epochs %d (must be >= 0)", o->epochs);
  if ((o->nclass_weight > 0 || o->sample_weight_column) && !strcmp(m->strategy->vt->name, "pipeline"))
    return st_error(ST_ERR_INVALID, "fit: %s is not supported by the pipeline strategy",
                    o->nclass_weight > 0 ? "class_weight" : "sample_weight");
  int64_t card = st_dataset_cardinality(train);
  if (o->steps_per_epoch > 0 && (card < 0 || card > o->steps_per_epoch)) card = o->steps_per_epoch;
  fit_state fs = {.o = o, .l.o = o, .steps_per_epoch = card, .train = train};
  if ((s = maybe_restore(m, train, &fs)) == ST_OK)
    s = st__strategy_check_fit(m->strategy, &m->net, st_dataset_batch_size(train),
                               card, o->epochs, fs.l.pos.epoch,
                               fs.l.pos.step_in_epoch);
  if (s != ST_OK) {
    keep_position(m, &fs.l.pos);
    return s;
  }
  m->net.class_weight = o->nclass_weight > 0 ? o->class_weight : NULL;
  m->net.n_class_weight = o->nclass_weight;
  st__step_source src = {&fs, fit_src_step, fit_src_pass, NULL, fit_src_after_end};
  s = st__fit_run_epochs(m, &fs.l, &src);
  m->net.class_weight = NULL;
  m->net.n_class_weight = 0;
  m->net.sample_weights = m->net.sample_labels = NULL;
  free(fs.sw_labels);
  free(fs.sw_weights);
  if (fs.stream) st_iterator_destroy(fs.stream->it);
  free(fs.stream);
  st_status hs = st__fit_copy_history(&fs.l, out);
  keep_position(m, &fs.l.pos);
  if (s == ST_OK && o->backup_dir && st__strategy_is_chief(m->strategy))
    st__checkpoint_remove_all(o->backup_dir);
  return s != ST_OK ? s : hs;
}

/* ---- evaluate / predict ---- */
static st_status eval_step(st_model *m, const st_batch *b, st_step_stats *tot, void *arg) {
  float **pred = arg;
  st_status s = m->strategy->vt->eval_step(m->strategy, &m->net, b, tot, pred ? *pred : NULL);
  if (s == ST_OK && pred) *pred += (size_t)b->size * st__net_output_size(&m->net);
  return s;
}

/* m, ds and out of evaluate / predict (fn names the function). */
static st_status check_pass_args(const st_model *m, const st_dataset *ds, const void *out,
                                 const char *fn) {
  if (!out) return st_error(ST_ERR_INVALID, "%s: out is NULL", fn);
  st_status s = st__model_check(m, fn, true);
  if (s != ST_OK) return s;
  return ds ? ST_OK : st_error(ST_ERR_INVALID, "%s: ds is NULL", fn);
}

/* evaluate / predict's steps (fn names the function). */
static st_status check_steps(const st_dataset *ds, int64_t steps, const char *fn) {
  if (steps < 0)
    return st_error(ST_ERR_INVALID, "%s: steps %lld is negative (0 = a whole pass)", fn,
                    (long long)steps);
  return check_finite(ds, steps, fn, "the dataset",
                      "give steps (st_model_evaluate_steps / st_model_predict_steps, Keras's steps)");
}

static st_status evaluate(st_model *m, st_dataset *ds, int64_t steps, st_eval_result *out,
                         const char *fn);

st_status st_model_evaluate(st_model *m, st_dataset *ds, st_eval_result *out) {
  return evaluate(m, ds, 0, out, "st_model_evaluate");
}

st_status st_model_evaluate_steps(st_model *m, st_dataset *ds, int64_t steps,
                                  st_eval_result *out) {
  return evaluate(m, ds, steps, out, "st_model_evaluate_steps");
}

/* evaluate over `steps` batches (0: the whole pass); fn names the function. */
static st_status evaluate(st_model *m, st_dataset *ds, int64_t steps, st_eval_result *out,
                         const char *fn) {
  char nolabels[96];
  snprintf(nolabels, sizeof nolabels, "%s: the dataset has no labels", fn);
  st_status s = check_pass_args(m, ds, out, fn);
  if (out) memset(out, 0, sizeof *out);
  if (s == ST_OK) s = st__strategy_reentry(m->strategy, fn, true);
  if (s == ST_OK) s = check_data(m, ds, "evaluate", nolabels, 0);
  if (s == ST_OK) s = check_steps(ds, steps, fn);
  if (s != ST_OK) return s;
  st_step_stats tot = {0};
  if ((s = run_pass(m, ds, eval_step, NULL, &tot, steps)) != ST_OK) return s;
  out->examples = tot.examples;
  out->loss = tot.examples ? tot.loss_sum / (double)tot.examples : 0.0;
  out->accuracy = tot.metric_count ? (double)tot.correct / (double)tot.metric_count : 0.0;
  out->noutputs = m->net.n_outputs > 1 ? m->net.n_outputs : 0;
  for (int j = 0; j < out->noutputs; j++) {
    out->output_loss[j] = tot.examples ? tot.out_loss[j] / (double)tot.examples : 0.0;
    out->output_accuracy[j] =
        tot.out_count[j] ? (double)tot.out_correct[j] / (double)tot.out_count[j] : 0.0;
  }
  return ST_OK;
}

static st_status count_examples(st_dataset *ds, int64_t steps, int64_t *n) {
  st_iterator *it = NULL;
  st_status s = st_dataset_iterate(ds, &it);
  *n = 0;
  for (int64_t k = 0; s == ST_OK && (steps <= 0 || k < steps); k++) {
    bool end = false;
    st_batch b;
    if ((s = st_iterator_next(it, &b, &end)) != ST_OK || end) break;
    *n += b.size;
  }
  st_iterator_destroy(it);
  return s;
}

static st_status predict(st_model *m, st_dataset *ds, int64_t steps, st_tensor *out,
                        const char *fn);

st_status st_model_predict(st_model *m, st_dataset *ds, st_tensor *out) {
  return predict(m, ds, 0, out, "st_model_predict");
}

st_status st_model_predict_steps(st_model *m, st_dataset *ds, int64_t steps, st_tensor *out) {
  return predict(m, ds, steps, out, "st_model_predict_steps");
}

/* predict over `steps` batches (0: the whole pass); fn names the function. */
static st_status predict(st_model *m, st_dataset *ds, int64_t steps, st_tensor *out,
                        const char *fn) {
  st_status s = check_pass_args(m, ds, out, fn);
  if (out) memset(out, 0, sizeof *out);
  if (s == ST_OK) s = st__strategy_reentry(m->strategy, fn, true);
  if (s == ST_OK) s = check_data(m, ds, "predict", NULL, 0);
  if (s == ST_OK) s = check_steps(ds, steps, fn);
  int64_t n = 0;
  if (s != ST_OK || (s = count_examples(ds, steps, &n)) != ST_OK) return s;
  size_t cols = st__net_output_size(&m->net);
  float *buf = calloc((size_t)n * cols + 1, sizeof(float));
  if (!buf) return st_error(ST_ERR_NOMEM, "predict: out of memory for %lld rows", (long long)n);
  float *cursor = buf;
  st_step_stats tot = {0};
  if ((s = run_pass(m, ds, eval_step, &cursor, &tot, steps)) != ST_OK || tot.examples != n) {
    free(buf);
    return s != ST_OK ? s : st_error(ST_ERR_INTERNAL, "predict: dataset changed between passes");
  }
  out->dtype = ST_F32;
  out->rank = 2;
  out->dims[0] = n;
  out->dims[1] = (int64_t)cols;
  out->data = buf;
  return ST_OK;
}
