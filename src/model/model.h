/* Internal: the Sequential model (the public st_model) — a layer above
 * distribute/ and below io/ and train/.
 *
 * A model is its network (st_net, nn/net.h: layers, variables, optimizer,
 * loss, step: all a strategy works on) plus what only the verbs above need:
 * its name, the compile options as given, the strategy it is bound to and
 * the flags compile and callbacks set. model.c builds the layer stack,
 * compile.c allocates the variables and attaches the strategy to the net.
 *
 * The training position (st_train_position) belongs to fit (src/train/fit.c),
 * which passes it to the checkpoint writer and reader. The model keeps only
 * what the public st_checkpoint_save / st_checkpoint_restore need when they
 * are called outside a running fit: a pointer to fit's position while fit
 * runs (a callback that saves a checkpoint saves where fit stands), and the
 * position fit last ended at or st_checkpoint_restore last read. */
#ifndef STRATA_MODEL_MODEL_H
#define STRATA_MODEL_MODEL_H

#include "nn/net.h"
#include "strata/train.h"

/* Where training stands: epochs done, batches done in the current epoch and
 * that partial epoch's sums, and the logs of finished epochs of this fit.
 * Saved in checkpoints; a fit resumed from one goes on from here. */
typedef struct st_train_position {
  int64_t epoch, step_in_epoch;
  double loss_sum;
  int64_t examples, correct, metric_count;
  int nlogs;
  st_epoch_logs *logs; /* malloc'd [nlogs], owned by the holder */
} st_train_position;

struct st_model {
  char name[ST_NAME_MAX];
  st_net net;                 /* embedded: strategies get &m->net */
  st_compile_options compile; /* as given to compile (the live optimizer
                                 options, learning rate included, are
                                 net.optimizer) */
  st_strategy *strategy;      /* borrowed (held: st__strategy_hold), or owned
                                 when owns_strategy */
  bool owns_strategy;
  bool holds_strategy;        /* created with it: released on destroy */
  bool compiled;
  bool stop_training;         /* set by a callback: fit ends after this epoch */
  int adds;                   /* st_model_add calls, failed ones included */
  char add_error[512];        /* the first failed add ("" when none):
                                 compile refuses the model */
  /* For st_checkpoint_save/restore outside fit's own calls (see above). */
  const st_train_position *fit_pos; /* fit's, while fit runs; else NULL */
  st_train_position last_pos;       /* owned logs */
  bool functional;            /* made by st_functional_create */
  int n_input_nodes;          /* the input nodes it took (owned) */
  st_node *input_nodes[ST_NET_MAX_IO];
  float *pending_vars;        /* loaded before compile: [n_params + n_state]
                                 (params, then state), owned; compile uses
                                 them instead of the initializers */
};

/* The position a checkpoint saved now holds: fit's while it runs, else
 * last_pos. Caller's thread. */
static inline const st_train_position *st__model_position(const st_model *m) {
  return m->fit_pos ? m->fit_pos : &m->last_pos;
}
/* The checks a public model function starts with, fn naming it: m is not
 * NULL, (need_compiled) the model is compiled, and its strategy was not
 * destroyed. ST_ERR_INVALID with "fn: ..." otherwise. */
st_status st__model_check(const st_model *m, const char *fn, bool need_compiled);

/* A new empty model (o's name or `name`, seed, strategy held) into *out. */
st_status st__model_new(const st_model_options *o, const char *name, st_model **out);

/* Frees p's logs and zeroes it. */
void st__train_position_clear(st_train_position *p);

#endif
