/* Internal: the model of a parameter-server job (train/ps_model.c), built
 * from its st__ps_job (ps/job.h) as every task builds it: the built-in model
 * or Keras JSON file named, compiled for one device. */
#ifndef STRATA_TRAIN_PS_MODEL_H
#define STRATA_TRAIN_PS_MODEL_H

#include "model/model.h"
#include "ps/job.h"

/* What an st__ps_model's owner is. */
typedef struct st__ps_built {
  st_strategy *strategy;
  st_model *model;
} st__ps_built;

/* An st__ps_build_fn: out->owner is a malloc'd st__ps_built. */
st_status st__ps_build_model(const st__ps_job *j, st__ps_model *out);
/* The model of an st__ps_model built above (NULL when none). */
static inline st_model *st__ps_model_of(const st__ps_model *m) {
  return m->owner ? ((st__ps_built *)m->owner)->model : NULL;
}

#endif
