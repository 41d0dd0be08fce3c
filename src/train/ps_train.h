/* Internal: the chief of a parameter-server job on the train side
 * (train/ps_train.c, train/ps_coordinator.c): ps/chief.h's cluster side with
 * what needs the model, checkpoints and history: the job's options, the
 * backups written and read, the position of the backup restored last. */
#ifndef STRATA_TRAIN_PS_TRAIN_H
#define STRATA_TRAIN_PS_TRAIN_H

#include "ps/chief.h"
#include "strata/ps.h"
#include "train/fit_loop.h"
#include "train/ps_model.h"

typedef struct st__ps_run {
  st__ps_chief c;
  const st_ps_train_options *a;
  st_dataset *val;           /* borrowed: validation at epoch ends (NULL: none) */
  st_fit_options fo;         /* fit's loop: epochs, callbacks, validation */
  st__fit_loop fl;           /* fit's loop: its position (the epochs finished: saved in backups) */
  st_train_position pos;     /* the position of the backup restored last (owned logs) */
  int64_t resumed_step;      /* the global step a rerun resumed from (-1: a fresh start) */
} st__ps_run;

/* The options a job cannot run with, named. */
st_status st__ps_check_options(const st_ps_train_options *o);
/* r for options a (kept, borrowed): the cluster (this task must be the
 * chief; what names the entry point in the error), the job, the hooks.
 * Free with st__ps_run_free, also on failure. */
st_status st__ps_run_init(st__ps_run *r, const st_ps_train_options *a, const char *what);
/* The job's model built, a->prepare called, the variables placed on the ps. */
st_status st__ps_run_model(st__ps_run *r);
void st__ps_run_free(st__ps_run *r);
/* The per-ps counters of STATS (rows of st__ps_chief_gather_stats). */
void st__ps_stats_fill(st_ps_stats *ps, const uint64_t *row);
/* out->model and out->strategy take the chief's model. */
void st__ps_run_give_model(st__ps_run *r, st_ps_train_result *out);

#endif
