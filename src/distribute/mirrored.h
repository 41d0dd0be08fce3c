/* Internal: the mirrored engine, shared by MirroredStrategy (mirrored.c, one
 * process) and MultiWorkerMirroredStrategy (multi_worker.c), which gives it
 * process transports so that its collectives span every worker. */
#ifndef STRATA_DISTRIBUTE_MIRRORED_H
#define STRATA_DISTRIBUTE_MIRRORED_H

#include "distribute/collective/collective.h"
#include "distribute/strategy.h"

/* s->local_replicas replicas of m in this process. net_group / net_reducer
 * (borrowed, both NULL for one process) are the process transports of the
 * replica group and of the gradient reducer: with them every all-reduce and
 * broadcast spans all processes (hier.c). Variables start as process 0's
 * replica 0's (broadcast). */
st_status st__mirrored_attach(st_strategy *s, st_net *m, st_collective *net_group,
                              st_collective *net_reducer);
void st__mirrored_detach(st_strategy *s);
/* One step on this process's share b of a global batch of `global` examples
 * (the loss is scaled by 1/global); out gets this process's sums. */
st_status st__mirrored_train_step(st_strategy *s, st_net *m, const st_batch *b, int global,
                                  st_step_stats *out);
/* The devices or replicas and cross_device_ops; the placement
 * (st__mirrored_placement, or st__sharded_placement with shard_optimizer). */
extern const st_var_placement st__mirrored_placement, st__sharded_placement;
st_status st__mirrored_check(const st_strategy_options *o, st__strategy_setup *out);

#endif
