/* Internal: the strategy table. A strategy is attached to a model's network
 * (st_net, nn/net.h) when the model is compiled; from then on fit / evaluate /
 * predict hand it global batches and it decides how they are split across
 * replicas, where the variables live and how gradients become updates.
 * distribute/ works on the st_net only: it never sees the model around it
 * (src/model/), which sits a layer above.
 *
 * The files of distribute/ form a straight stack (scripts/code_stats.py
 * lists any circle): strategy.c (this registry) reaches the strategies only
 * through their tables; the strategies (one_device, central_storage,
 * mirrored, multi_worker, pipeline*) call down into replica_group.c,
 * reducer.c, shard.c, cluster.c, devices.c and step.c, never back up here.
 *
 * Adding a strategy: eleven places (what adding the pipeline touched,
 * counted; the compiler catches 1, 2 and 5, scripts/check_complete.py via
 * tests/test_completeness.sh catches 7, 8 and 9):
 *  1. include/strata/distribute.h: an ST_STRATEGY_* value before
 *     ST_STRATEGY_COUNT, and the st_strategy_options fields it reads (their
 *     defaults in st_strategy_default_options, strategy.c);
 *  2. strategy.c: its name in kind_names[] and its table in tables[] (a
 *     _Static_assert counts each);
 *  3. src/distribute/<kind>.c (and its own headers/files): its
 *     st_strategy_vtable — check (its options, naming the field at fault;
 *     the placement it uses; a cluster when it spans processes), attach,
 *     detach, train_step (no m->step++: the registry counts it), eval_step,
 *     shards_optimizer — built from replica_group.h, step.h, cluster.h;
 *  4. its variable placement (placement.h): one of the tables listed there,
 *     or a new st_var_placement in its file, added to that list;
 *  5. the extern declaration of its table at the end of this header;
 *  6. a C test of its arithmetic (tests/test_strategy.c's equivalence with
 *     one device, or a test file of its own as tests/test_pipeline.c), plus
 *     an MPI test when it spans processes;
 *  7. tools/cmd_train.c: --strategy's help and checks, and its options;
 *  8. README.md: its name in the "strategies" row;
 *  9. python/strata/distribute/: its tf.distribute class, or its entry in
 *     PYTHON_ABSENT (scripts/check_complete.py) saying why not;
 * 10. docs/API.md: its options and what they mean;
 * 11. bench/weights_identity.sh: a configuration comparing its weights with
 *     the baseline binary's. */
#ifndef STRATA_DISTRIBUTE_STRATEGY_H
#define STRATA_DISTRIBUTE_STRATEGY_H

#include "distribute/cluster.h"
#include "distribute/placement.h"
#include "distribute/step.h"

/* What a strategy's check function makes of its options (st_strategy_create
 * copies it into the strategy). */
typedef struct st__strategy_setup {
  int local_replicas;             /* this process's replicas (1 if not set) */
  int num_replicas;               /* every worker's together; 0: local x workers */
  int cross_device_ops;           /* st_cross_device_ops (mirrored engines) */
  struct st_cluster *cluster;     /* the processes (cluster.h), or NULL */
  int pipeline_stages;            /* pipeline: stages (0 otherwise) */
  int pipeline_bounds[ST_MAX_REPLICAS]; /* pipeline: first layer of stage i+1,
                                           or -1: balanced at attach */
  const st_var_placement *vars;   /* where the variables live (placement.h) */
} st__strategy_setup;

typedef struct st_strategy_vtable {
  const char *name;
  /* The options this strategy reads, checked (naming the field and value at
   * fault) and turned into *out (zeroed but for local_replicas = 1 and
   * cross_device_ops = all-reduce). A cluster it creates is freed by the
   * registry on a later failure. */
  st_status (*check)(const st_strategy_options *o, st__strategy_setup *out);
  /* Whether shard_optimizer may be set (each replica holds its own copy of
   * the weights). */
  bool shards_optimizer;
  /* Create replicas for m (compiled: variables exist in m->params/state). */
  st_status (*attach)(st_strategy *s, st_net *m);
  void (*detach)(st_strategy *s);
  /* One training step on a global batch: forward, backward, reduce, apply;
   * side (may be NULL) as st__side_task says. The registry counts the step
   * (st__strategy_train_step): a table does not touch m->step. */
  st_status (*train_step)(st_strategy *s, st_net *m, const st_batch *b,
                          const st__side_task *side, st_step_stats *out);
  /* Inference on a global batch; pred (may be NULL) receives [b->size, out]
   * in batch order. */
  st_status (*eval_step)(st_strategy *s, st_net *m, const st_batch *b,
                         st_step_stats *out, float *pred);
} st_strategy_vtable;

struct st_strategy {
  const st_strategy_vtable *vt;
  const st_var_placement *vars; /* where the variables live (placement.h) */
  st_strategy_options opts;   /* string fields cleared: not retained */
  int num_replicas;           /* every worker's replicas together */
  int local_replicas;         /* this process's replicas */
  struct st_cluster *cluster; /* the processes (cluster.h); NULL in one process */
  int cross_device_ops;       /* st_cross_device_ops (mirrored) */
  st_net *net;     /* the attached (compiled) network, or NULL */
  void *impl;       /* strategy-specific state */
  struct st_replica_group *group; /* the replicas (set by attach) */
  bool mirrored_vars;             /* each replica owns a copy of the variables */
  /* Lifetime: models created with this strategy (st__strategy_hold) keep it
   * alive. st_strategy_destroy with models left only marks it destroyed
   * (those models then refuse their verbs); the last st__strategy_release
   * frees it. Caller's thread (models and strategies are not shared by
   * threads). */
  int models;
  bool destroyed;
  /* Re-entrancy (issue 34): ST__BUSY_RUN while st_strategy_run runs its
   * step functions, ST__BUSY_FIT while st_model_fit runs; set by the
   * caller's thread, read by every verb from any thread (a step function runs
   * on replica threads): __atomic builtins. */
  int busy;
  int pipeline_stages;                     /* pipeline: stages (0 otherwise) */
  int pipeline_bounds[ST_MAX_REPLICAS];    /* pipeline: first layer of stage i+1,
                                              or -1: balanced at attach */
  /* GPUs (devices.h): on_gpus when the device list names GPUs; the net then
   * runs on the cuda backend, replica i on physical GPU gpu_of[i]. */
  bool on_gpus;
  int gpu_of[ST_MAX_REPLICAS];
};

/* central_storage.c: the table entries of strategies whose replicas share the
 * net's variables (central storage, and one device's worker threads). */
void st__shared_detach(st_strategy *s);
st_status st__shared_train_step(st_strategy *s, st_net *m, const st_batch *b,
                                const st__side_task *side, st_step_stats *out);
st_status st__shared_eval_step(st_strategy *s, st_net *m, const st_batch *b,
                               st_step_stats *out, float *pred);
extern const st_var_placement st__shared_placement;

/* strategy.c: what fit asks of the workers, the same call with or without a
 * cluster (caller's thread).
 * Before each step or inference batch (every worker, caller's thread):
 * have_size = this worker's batch size, or -1 when its pass is over; *go is
 * false on every worker once one has no batch. stop_here: this worker was
 * asked to stop (st_request_stop); *stop (may be NULL) is true on every
 * worker when one was, so all stop at the same step. Without a cluster:
 * go = have, stop = stop_here. */
st_status st__strategy_agree(st_strategy *s, int have_size, bool stop_here, bool *go,
                             bool *stop);
/* Every worker waits for the others (OK at once without a cluster). */
st_status st__strategy_barrier(st_strategy *s);
/* Start of fit: every worker was given the same batch size, steps, epochs and
 * resume position (epoch, step in that epoch) (names the rank and field
 * otherwise). OK without a cluster. */
st_status st__strategy_check_fit(st_strategy *s, const st_net *m, int64_t global_batch,
                                 int64_t steps_per_epoch, int epochs, int64_t resume_epoch,
                                 int64_t resume_step);
bool st__strategy_is_chief(const st_strategy *s);
/* multi_worker_mirrored created with auto_shard AUTO over more than one
 * worker: true with *workers and *rank (fit then shards a file pipeline by
 * file, data/autoshard.h). */
bool st__strategy_auto_shard(const st_strategy *s, int *workers, int *rank);
/* on: every worker trains its own batches whole (AUTO resolved to FILE for
 * one fit); off: back to the policy the strategy was created with. */
void st__strategy_file_shard(st_strategy *s, bool on);
/* A model created with s holds it (fails once s was destroyed); its
 * destroy releases it, freeing s when it was destroyed and no model is left. */
st_status st__strategy_hold(st_strategy *s);
/* One training step (vt->train_step), counted in m->step when it succeeds. */
st_status st__strategy_train_step(st_strategy *s, st_net *m, const st_batch *b,
                                  const st__side_task *side, st_step_stats *out);
void st__strategy_release(st_strategy *s); /* accepts NULL */

/* Re-entrancy: what a strategy is running (st_strategy.busy). */
enum { ST__BUSY_IDLE = 0, ST__BUSY_RUN, ST__BUSY_FIT };
/* ST_ERR_INVALID "<fn>: cannot be called from inside st_strategy_run's step
 * function" while s runs st_strategy_run, and (unless fit_ok) "<fn>: cannot
 * be called from inside st_model_fit (a callback or a map function of its
 * data)" while s runs fit; ST_OK otherwise (and for NULL s). Any thread. */
st_status st__strategy_reentry(const st_strategy *s, const char *fn, bool fit_ok);
/* Mark s busy with what (ST__BUSY_RUN / _FIT) when it is idle: the
 * re-entry error above (naming fn) otherwise. st__strategy_leave marks it
 * idle again. Caller's thread. */
st_status st__strategy_enter(st_strategy *s, int what, const char *fn);
void st__strategy_leave(st_strategy *s);

extern const st_strategy_vtable st__one_device_vtable;
extern const st_strategy_vtable st__multi_worker_vtable;
extern const st_strategy_vtable st__mirrored_vtable;
extern const st_strategy_vtable st__central_storage_vtable;
extern const st_strategy_vtable st__pipeline_vtable;

#endif
