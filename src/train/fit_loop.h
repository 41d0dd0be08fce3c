/* Internal: fit's epoch loop (train/fit_loop.c), one for every way of
 * training: epochs from a position, the callbacks' epoch begin and end, the
 * scheduled learning rate, validation, the history and the position kept for
 * backups, stop requests (m->stop_training). What runs an epoch's steps is a
 * step source: the local dataset loop of st_model_fit (train/fit.c) or the
 * parameter-server chief's closures of st_ps_train (train/ps_train.c). */
#ifndef STRATA_TRAIN_FIT_LOOP_H
#define STRATA_TRAIN_FIT_LOOP_H

#include "distribute/strategy.h"
#include "model/model.h"

typedef struct st__fit_loop {
  const st_fit_options *o; /* epochs, callbacks, validation (its freq / epochs) */
  st_train_position pos;   /* where training stands (saved in backups); its logs: the
                              epochs finished (the history) */
  int epoch;               /* the epoch running */
  int begun;               /* the last epoch whose on_epoch_begin ran (-1: none) */
  bool rewound;            /* the source went back to pos (a backup reloaded): the loop
                              goes on from pos.epoch */
  double timed_seconds;    /* the history's training time and examples (the source's) */
  int64_t timed_samples;
} st__fit_loop;

typedef struct st__step_source {
  void *user;
  /* The global step the epoch starts at (its learning rate is logged). */
  int64_t (*step)(void *user, st_model *m, const st__fit_loop *fl);
  /* The steps of epoch fl->epoch from fl->pos on; *tot holds the running
   * sums (from fl->pos's) and fl->pos.step_in_epoch the steps done. */
  st_status (*pass)(void *user, st_model *m, st__fit_loop *fl, st_step_stats *tot);
  /* After the steps, before validation and the epoch-end callbacks: the
   * model made ready for them (NULL: nothing to do). */
  st_status (*before_end)(void *user, st_model *m, st__fit_loop *fl);
  /* After the epoch-end callbacks, fl->pos at the next epoch: progress,
   * the backup of this position. */
  st_status (*after_end)(void *user, st_model *m, st__fit_loop *fl, const st_epoch_logs *lg);
} st__step_source;

/* The epochs from fl->pos.epoch to fl->o->epochs (fewer once a callback
 * stops training), then the callbacks' on_train_end. Callbacks that save a
 * checkpoint save fl->pos (m->fit_pos) meanwhile. */
st_status st__fit_run_epochs(st_model *m, st__fit_loop *fl, const st__step_source *src);
/* The history of fl (its logs copied, its timing). */
st_status st__fit_copy_history(const st__fit_loop *fl, st_history *out);

#endif
