/* Internal: the strategy table. A strategy is attached to a model's network
 * (st_net, nn/net.h) when the model is compiled; from then on fit / evaluate /
 * predict hand it global batches and it decides how they are split across
 * replicas, where the variables live and how gradients become updates.
 * distribute/ works on the st_net only: it never sees the model around it
 * (src/model/), which sits a layer above.
 *
 * Adding a strategy (the compiler catches 2-4 when one is missed):
 *  1. the kind: an ST_STRATEGY_* value before ST_STRATEGY_COUNT in
 *     include/strata/distribute.h;
 *  2. its name in kind_names[] (strategy.c; a _Static_assert counts them);
 *  3. a file src/distribute/<kind>.c exporting its table
 *     (st__<kind>_vtable: attach, detach, train_step, eval_step,
 *     sync_to_model, sync_from_model);
 *  4. the extern declaration of that table at the end of this header;
 *  5. a case in st_strategy_create (strategy.c) choosing the table and
 *     checking the options it uses;
 *  6. the equivalence test in tests/test_strategy.c (N replicas give the
 *     one-device weights), and the CLI's --strategy help and checks in
 *     tools/cmd_train.c. */
#ifndef STRATA_DISTRIBUTE_STRATEGY_H
#define STRATA_DISTRIBUTE_STRATEGY_H

#include "nn/net.h"
#include "strata/distribute.h"

/* Sums over one global batch, reduced across replicas. */
typedef struct st_step_stats {
  double loss_sum;       /* sum of per-example losses */
  int64_t examples;      /* examples in the batch */
  int64_t correct;       /* metric numerator */
  int64_t metric_count;  /* metric denominator */
} st_step_stats;

/* Work fit gives a training step to run beside the optimizer update, once
 * the batch has been read (assembling the next batch); fn NULL: none. A
 * strategy that cannot overlap it ignores it (fit then does the work itself:
 * its function records that it ran). It runs on one of the strategy's threads
 * with the floating-point state of the thread that called train_step. */
typedef struct st__side_task {
  void (*fn)(void *arg);
  void *arg;
} st__side_task;

typedef struct st_strategy_vtable {
  const char *name;
  /* Create replicas for m (compiled: variables exist in m->params/state). */
  st_status (*attach)(st_strategy *s, st_net *m);
  void (*detach)(st_strategy *s);
  /* One training step on a global batch: forward, backward, reduce, apply. */
  st_status (*train_step)(st_strategy *s, st_net *m, const st_batch *b,
                          st_step_stats *out);
  /* Inference on a global batch; pred (may be NULL) receives [b->size, out]
   * in batch order. */
  st_status (*eval_step)(st_strategy *s, st_net *m, const st_batch *b,
                         st_step_stats *out, float *pred);
  /* Make m->params/m->state hold the current values (mirrored copies are
   * always in sync; a no-op for strategies that use the net's buffers). */
  void (*sync_to_model)(st_strategy *s, st_net *m);
  /* After m->params/state were changed (weights loaded): push to replicas. */
  void (*sync_from_model)(st_strategy *s, st_net *m);
} st_strategy_vtable;

struct st_strategy {
  const st_strategy_vtable *vt;
  st_strategy_options opts;   /* string fields cleared: not retained */
  int num_replicas;           /* every worker's replicas together */
  int local_replicas;         /* this process's replicas */
  struct st_cluster *cluster; /* multi-worker: the processes; NULL otherwise */
  int cross_device_ops;       /* st_cross_device_ops (mirrored) */
  st_net *net;     /* the attached (compiled) network, or NULL */
  void *impl;       /* strategy-specific state */
  struct st_replica_group *group; /* the replicas (set by attach) */
  bool mirrored_vars;             /* each replica owns a copy of the variables */
  st__side_task side;             /* set by fit around each train_step */
  float **(*replica_slots)(struct st_strategy *s, int rank); /* optimizer slots */
  /* Sharded optimizer state (NULL otherwise): every worker calls it before a
   * checkpoint is written (a collective); the chief's net->slots then hold
   * every slot. */
  st_status (*gather_slots)(struct st_strategy *s, st_net *m);
  /* Pipeline across processes (NULL otherwise; pipeline_procs.c).
   * place_vars: compile calls it instead of allocating the net's variables:
   * it reserves the whole layout and commits and initialises only this
   * process's stage (st_net.reserved). gather_vars: a collective every
   * process calls before reading every variable (get_weights): afterwards
   * every process's net holds them all (the next step gives them back). expose_vars: local, before every variable
   * of the net is written (restore, load): the whole layout becomes memory;
   * sync_from_model then keeps the stage's share and gives the rest back. */
  st_status (*place_vars)(struct st_strategy *s, st_net *m);
  st_status (*gather_vars)(struct st_strategy *s, st_net *m);
  st_status (*expose_vars)(struct st_strategy *s, st_net *m);
  /* Pipeline across processes: save_weights streams the variables to the
   * chief tensor by tensor, so it holds one tensor of another stage at a
   * time (checkpoints too, with the slots). send_vars (every process but the
   * chief): the first replica of each stage sends its layers' variables,
   * layer by layer, each layer's parameters in order, then (with_slots) for
   * each slot its trainable ones in the same order; the other replicas send
   * nothing. recv_var (the chief, in that same order over the whole model):
   * parameter p of layer l (slot -1) or its optimizer slot, the chief's own
   * or received into buf (room for the largest variable). */
  st_status (*send_vars)(struct st_strategy *s, st_net *m, bool with_slots);
  st_status (*recv_var)(struct st_strategy *s, st_net *m, int layer, int param, int slot,
                        float *buf, const float **data);
  /* The chief's side of a streamed save (NULL where recv_var is): it asks a
   * stage for each tensor before recv_var receives it, and a stage sends
   * nothing unasked. begin_vars before a save's first recv_var (with_slots
   * as the stages' send_vars); end_vars after its last, or where the save
   * failed (failed: its status, whose message stays): every stage not asked
   * for all its tensors is told to stop, so its send_vars fails at once
   * (ST_ERR_PEER) instead of waiting for --collective-timeout. */
  void (*begin_vars)(struct st_strategy *s, st_net *m, bool with_slots);
  void (*end_vars)(struct st_strategy *s, st_net *m, st_status failed);
  /* Lifetime: models created with this strategy (st__strategy_hold) keep it
   * alive. st_strategy_destroy with models left only marks it destroyed
   * (those models then refuse their verbs); the last st__strategy_release
   * frees it. Caller's thread (models and strategies are not shared by
   * threads). */
  int models;
  bool destroyed;
  int pipeline_stages;                     /* pipeline: stages (0 otherwise) */
  int pipeline_bounds[ST_MAX_REPLICAS];    /* pipeline: first layer of stage i+1,
                                              or -1: balanced at attach */
};

/* out += in (callers add in a fixed order: replica, then worker). */
static inline void st__step_stats_add(st_step_stats *out, const st_step_stats *in) {
  out->loss_sum += in->loss_sum;
  out->examples += in->examples;
  out->correct += in->correct;
  out->metric_count += in->metric_count;
}

/* Shared helper: metric numerator/denominator for rows of pred against y. */
void st__step_metrics(const st_net *m, const float *pred, const float *y,
                      int rows, st_step_stats *out);

/* central_storage.c: the table entries of strategies whose replicas share the
 * net's variables (central storage, and one device's worker threads). */
void st__shared_detach(st_strategy *s);
st_status st__shared_train_step(st_strategy *s, st_net *m, const st_batch *b,
                                st_step_stats *out);
st_status st__shared_eval_step(st_strategy *s, st_net *m, const st_batch *b,
                               st_step_stats *out, float *pred);
void st__shared_sync_to_model(st_strategy *s, st_net *m);
void st__shared_sync_from_model(st_strategy *s, st_net *m);

/* multi_worker.c: the processes of a multi-worker strategy, and the
 * cluster side of the st__strategy_* calls below (c not NULL). */
st_status st__cluster_create(const st_strategy_options *o, struct st_cluster **out);
void st__cluster_destroy(struct st_cluster *c); /* accepts NULL */
int st__cluster_rank(const struct st_cluster *c);
int st__cluster_size(const struct st_cluster *c);
st_status st__cluster_agree(struct st_cluster *c, int have_size, bool stop_here, bool *go,
                            bool *stop);
st_status st__cluster_barrier(struct st_cluster *c);
/* The policy created with (AUTO kept), and the one in effect (see
 * st__strategy_file_shard). */
st_auto_shard st__cluster_auto_shard(const struct st_cluster *c);
void st__cluster_set_shard(struct st_cluster *c, st_auto_shard effective);
st_status st__cluster_check_fit(st_strategy *s, const st_net *m, int64_t global_batch,
                                int64_t steps_per_epoch, int epochs, int64_t resume_epoch,
                                int64_t resume_step);
/* CRC32C of the network's structure: each layer's class, name and output
 * shape, each parameter's name and shape (what the multi-worker consistency
 * check compares; backups record it to refuse resuming another model). */
uint32_t st__net_structure_crc(const st_net *m);
/* The cluster of a strategy with an engine of its own (pipeline): open its
 * control transport (model consistency checked first), close it telling the
 * peers why (its error, or ""), and its collective timeout in seconds. */
st_status st__cluster_open(st_strategy *s, st_net *m);
void st__cluster_close(struct st_cluster *c, const char *why);
double st__cluster_timeout(const struct st_cluster *c);
/* Custom training loops across workers (custom_loop.c): this worker's
 * examples of a global batch as fit takes them (its contiguous share under
 * auto-shard DATA, the whole batch otherwise; no copy), and an all-gather
 * of n floats per worker over the control transport (recv[size * n],
 * worker-major; the bytes as they are). ST_ERR_INVALID when the cluster's
 * transport is not open (no model attached). */
void st__cluster_shard_batch(const struct st_cluster *c, const st_net *m, const st_batch *b,
                             st_batch *out);
st_status st__cluster_all_gather(struct st_cluster *c, const float *send, size_t n, float *recv);

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
void st__strategy_release(st_strategy *s); /* accepts NULL */

extern const st_strategy_vtable st__one_device_vtable;
extern const st_strategy_vtable st__multi_worker_vtable;
extern const st_strategy_vtable st__mirrored_vtable;
extern const st_strategy_vtable st__central_storage_vtable;
extern const st_strategy_vtable st__pipeline_vtable;
/* pipeline.c: the pipeline options' checks (stage count against the devices
 * counted in *stages (0: none given), boundary syntax, micro-batches,
 * schedule); *stages = the stage count (0: none given), bounds[0..
 * stages-1) = the layers where stages 1.. start, or -1 each: balanced at
 * attach. */
st_status st__pipeline_check_options(const st_strategy_options *o,
                                     int bounds[ST_MAX_REPLICAS], int *stages);
/* Whether this process was started by an MPI launcher with more than one
 * process (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_SIZE > 1): the pipeline
 * then runs one stage per process. */
bool st__pipeline_launched(void);
/* procs processes: *stages (0: one per process) must divide them; the
 * quotient is the data-parallel replicas of each stage. */
st_status st__pipeline_check_processes(int procs, int *stages);
/* Set the place/gather/expose hooks of a pipeline strategy with a cluster. */
void st__pipeline_procs_hooks(st_strategy *s);

#endif
