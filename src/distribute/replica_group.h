/* Internal: a group of replicas driven in lock step by a thread pool — the
 * engine under the synchronous strategies. A global batch is split into
 * contiguous slices as evenly as possible (a replica may get an empty slice
 * and still takes part); each replica runs forward and backward on its slice
 * with the loss scaled by 1/global batch; the gradients are then summed in a
 * fixed order (replica 0, 1, 2, ...), chunk by chunk in parallel, so the result
 * is bit-identical from run to run. */
#ifndef STRATA_DISTRIBUTE_REPLICA_GROUP_H
#define STRATA_DISTRIBUTE_REPLICA_GROUP_H

#include "base/split.h"   /* st__split */
#include "base/sysinfo.h" /* st__cpu_count */
#include "distribute/collective/collective.h"
#include "distribute/step.h"

typedef struct st_group_rank {
  st_collective *coll;
  int rank;
} st_group_rank;

typedef struct st_replica_group {
  int n;
  st_replica **reps;    /* [n] */
  st_threadpool *pool;  /* n-1 workers + the caller; NULL when n == 1 */
  st_collective *coll;  /* the replicas' collective (threads; hierarchical over
                           net when there is one) */
  st_collective *net;   /* process transport (borrowed) or NULL: one process */
  st_group_rank ranks[ST_MAX_REPLICAS]; /* reps[i]->all_reduce_ctx = &ranks[i] */
  bool must_run;        /* the model runs collectives: no replica may skip */
} st_replica_group;

/* n replicas for m. Replica 0 uses the model's variables (m->params,
 * m->state). Replicas 1.. use the model's params too, or (own_params) their
 * own zeroed copy for the strategy to fill; each has its own copy of the
 * non-trainable state (BatchNorm moving statistics, updated in forward), kept
 * equal by st__group_sync_state. */
st_status st__group_create(st_net *m, int n, bool own_params, st_cross_device_ops algo,
                           st_collective *net, st_replica_group **out);
void st__group_destroy(st_replica_group *g); /* accepts NULL */

/* One training step: forward + backward of every replica on its slice, then
 * in parallel chunks the sum of all replicas' gradients into reps[0]->grads
 * (= the gradient of the mean loss over the global batch) and the optimizer
 * update of m->params with it: each thread applies the chunk it has just
 * summed, so the two need one hand-off, not two. The side task (may be NULL)
 * runs beside those chunks: the update is memory-bound and splits into more
 * chunks than threads, so whichever thread does not run the side task takes
 * more of them. Adds the batch's loss and metric sums to out. */
st_status st__group_train(st_replica_group *g, st_net *m, const st_batch *b,
                          st_step_stats *out, const st__side_task *side);
/* Inference on every replica's slice; pred (may be NULL) gets [b->size, out]. */
st_status st__group_eval(st_replica_group *g, st_net *m, const st_batch *b,
                         st_step_stats *out, float *pred);
/* After a training step: every replica's state := the mean over replicas (in
 * replica order), as TensorFlow aggregates ON_READ variables. No-op without
 * state or with one replica. With a process transport, the mean is taken
 * over every replica of every process. Call outside the parallel section. */
void st__group_sync_state(st_replica_group *g, st_net *m);
/* Run fn(arg, i) for every replica i in parallel. */
void st__group_run(st_replica_group *g, void (*fn)(void *arg, int i), void *arg);
/* The same with ntasks tasks (any number; the threads share them). */
void st__group_run_tasks(st_replica_group *g, int ntasks, void (*fn)(void *arg, int i),
                         void *arg);

/* BLAS threads for a group of n replicas: one each, or every core (or
 * `threads` when > 0) for a single replica. */
void st__group_set_blas_threads(int n, int threads);

#endif
