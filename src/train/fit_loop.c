/* fit's epoch loop (train/fit_loop.h): epochs, callbacks, learning rate,
 * validation, history and position around a step source that runs each
 * epoch's steps (st_model_fit's dataset loop, st_ps_train's closures). */
#include <stdlib.h>
#include <string.h>

#include "train/callbacks_impl.h"
#include "train/fit_loop.h"

static double ratio(int64_t a, int64_t b) { return b ? (double)a / (double)b : 0.0; }

static st_status call_epoch_begin(st_model *m, const st_fit_options *o, int epoch) {
  st_status s = ST_OK;
  for (int c = 0; c < o->ncallbacks && s == ST_OK; c++)
    if (o->callbacks[c].on_epoch_begin) s = o->callbacks[c].on_epoch_begin(o->callbacks[c].user, m, epoch);
  return s;
}

static st_status call_epoch_end(st_model *m, const st_fit_options *o, const st_epoch_logs *lg) {
  st_status s = ST_OK;
  for (int c = 0; c < o->ncallbacks && s == ST_OK; c++)
    if (o->callbacks[c].on_epoch_end) s = o->callbacks[c].on_epoch_end(o->callbacks[c].user, m, lg);
  return s;
}

/* The epoch is done: it joins the logs and the position moves to the next. */
static st_status close_epoch(st_train_position *p, const st_epoch_logs *lg) {
  st_epoch_logs *grown = realloc(p->logs, (size_t)(p->nlogs + 1) * sizeof *grown);
  if (!grown) return st_error(ST_ERR_NOMEM, "fit: out of memory");
  p->logs = grown;
  p->logs[p->nlogs++] = *lg;
  p->epoch = lg->epoch + 1;
  p->step_in_epoch = p->examples = p->correct = p->metric_count = 0;
  p->loss_sum = 0;
  return ST_OK;
}

/* Keras's _should_eval: validation after 1-based epoch e when e is listed in
 * o->validation_epochs, else when e is a multiple of o->validation_freq. */
static bool should_validate(const st_fit_options *o, int epoch) {
  int e = epoch + 1;
  if (o->nvalidation_epochs > 0) {
    for (int i = 0; i < o->nvalidation_epochs; i++)
      if (o->validation_epochs[i] == e) return true;
    return false;
  }
  return o->validation_freq <= 1 || e % o->validation_freq == 0;
}

/* The epoch's figures once its steps ran (lg->epoch, lr set), validated. */
static st_status epoch_logs(st_model *m, const st__fit_loop *fl, const st_step_stats *tot, double t0,
                            st_epoch_logs *lg) {
  const st_fit_options *o = fl->o;
  if (tot->examples == 0)
    return st_error(ST_ERR_INVALID, "fit: the training dataset yielded no examples");
  lg->seconds = st_now_seconds() - t0;
  lg->steps = fl->pos.step_in_epoch;
  lg->examples = tot->examples;
  lg->loss = tot->loss_sum / (double)tot->examples;
  lg->accuracy = ratio(tot->correct, tot->metric_count);
  lg->noutputs = m->net.n_outputs > 1 ? m->net.n_outputs : 0;
  for (int j = 0; j < lg->noutputs; j++) { /* the epoch's steps since it (re)started */
    lg->output_loss[j] = tot->out_rows ? tot->out_loss[j] / (double)tot->out_rows : 0.0;
    lg->output_accuracy[j] = ratio(tot->out_correct[j], tot->out_count[j]);
  }
  if (o->validation && should_validate(o, fl->epoch)) {
    st_eval_result ev;
    st_status s = st_model_evaluate_steps(m, o->validation, o->validation_steps, &ev);
    if (s != ST_OK) return st_error_prefix(s, "validation: ");
    lg->has_validation = true;
    lg->val_loss = ev.loss;
    lg->val_accuracy = ev.accuracy;
    for (int j = 0; j < ev.noutputs; j++)
      lg->val_output_loss[j] = ev.output_loss[j], lg->val_output_accuracy[j] = ev.output_accuracy[j];
  }
  return ST_OK;
}

/* Epoch fl->epoch from fl->pos; returns early with fl->rewound set when the
 * source went back to another position. */
static st_status run_epoch(st_model *m, st__fit_loop *fl, const st__step_source *src) {
  st_status s;
  if (fl->epoch > fl->begun) { /* once per epoch, also when a rollback runs it again */
    if ((s = call_epoch_begin(m, fl->o, fl->epoch)) != ST_OK) return s;
    fl->begun = fl->epoch;
  }
  double t0 = st_now_seconds();
  st_train_position *p = &fl->pos;
  st_step_stats tot = {.loss_sum = p->loss_sum, .examples = p->examples, .correct = p->correct,
                       .metric_count = p->metric_count};
  st_epoch_logs lg = {.epoch = fl->epoch};
  lg.lr = st_schedule_lr(&m->net.optimizer.lr, src->step(src->user, m, fl));
  if ((s = src->pass(src->user, m, fl, &tot)) != ST_OK || fl->rewound) return s;
  if (src->before_end && ((s = src->before_end(src->user, m, fl)) != ST_OK || fl->rewound)) return s;
  if ((s = epoch_logs(m, fl, &tot, t0, &lg)) != ST_OK || (s = close_epoch(p, &lg)) != ST_OK ||
      (s = call_epoch_end(m, fl->o, &lg)) != ST_OK)
    return s;
  return src->after_end(src->user, m, fl, &lg);
}

st_status st__fit_run_epochs(st_model *m, st__fit_loop *fl, const st__step_source *src) {
  st_status s = ST_OK;
  m->stop_training = false;
  m->fit_pos = &fl->pos;
  fl->begun = -1;
  for (fl->epoch = (int)fl->pos.epoch; fl->epoch < fl->o->epochs && !m->stop_training;) {
    if ((s = run_epoch(m, fl, src)) != ST_OK) break;
    if (fl->rewound) fl->rewound = false;
    fl->epoch = (int)fl->pos.epoch;
  }
  m->fit_pos = NULL;
  if (s == ST_OK) s = st__callbacks_train_end(m, fl->o->callbacks, fl->o->ncallbacks);
  return s;
}

st_status st__fit_copy_history(const st__fit_loop *fl, st_history *out) {
  const st_train_position *p = &fl->pos;
  out->logs = calloc((size_t)p->nlogs + 1, sizeof *out->logs);
  if (!out->logs) return st_error(ST_ERR_NOMEM, "fit: out of memory");
  if (p->nlogs) memcpy(out->logs, p->logs, (size_t)p->nlogs * sizeof *out->logs);
  out->epochs = p->nlogs;
  out->train_seconds = fl->timed_seconds;
  out->train_samples = fl->timed_samples;
  out->samples_per_sec = fl->timed_seconds > 0 ? (double)fl->timed_samples / fl->timed_seconds : 0;
  return ST_OK;
}
