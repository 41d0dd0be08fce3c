/* MultiWorkerMirroredStrategy: the mirrored engine (mirrored.c) in every
 * process of the job, its collectives spanning the processes (hier.c over a
 * process transport: mpi/mpi.c when an MPI launcher started the job,
 * gloo/gloo.c when each worker was started with its TF_CONFIG; process.c
 * chooses). Process = worker; rank 0 is the chief (TF_CONFIG's chief task
 * when there is one, else worker 0).
 *
 * Input (TensorFlow's AutoShardPolicy): every worker runs the same input
 * pipeline (same seed). With DATA (the default; AUTO resolves to it here:
 * the CLI resolves AUTO to FILE for TFRecord data) worker w keeps its contiguous
 * share of each global batch, the slice st__split gives it. (TensorFlow's
 * DATA keeps every W-th element of the stream: the same examples per step,
 * grouped differently. Contiguous shares make W workers of L replicas split a
 * batch as W*L mirrored replicas do, so 2 one-replica workers reproduce a
 * 2-thread single process bit for bit, Adam included.) With OFF each worker
 * trains on all of its own batches and the global batch is their union; FILE
 * (each worker's pipeline reads its own files) trains the same way. Before each
 * step the workers exchange their batch sizes: the pass ends for all of them
 * as soon as one has no batch left (no worker runs an extra step), and with
 * DATA every worker must have drawn the same global batch.
 *
 * Each worker's replicas split its share; the loss is scaled by 1/global
 * batch, gradients are summed over every replica of every worker in a fixed
 * order, so the update equals the single-device one (up to float rounding)
 * and repeats are bit-identical. Loss and metric sums are gathered from every
 * worker and added in rank order, so callbacks (EarlyStopping, schedules)
 * decide the same thing everywhere.
 *
 * Consistency: the cluster (cluster.c) checks at attach that every worker
 * runs the same model and flags, and at the start of fit the same fit
 * arguments, naming the rank and the field that differ.
 *
 * Errors: a worker that fails outside the collectives (e.g. the chief cannot
 * write a checkpoint) tells its peers when its model is destroyed (its last
 * error, st__collective_process_leave), so they fail at once with ST_ERR_PEER
 * ("rank 0 failed: ...") instead of waiting for --collective-timeout. A NaN
 * loss needs nothing of the kind: the losses are gathered, so every worker
 * sees the same one and stops at the same step.
 *
 * Each thread that communicates across processes has a transport of its own:
 * the control exchanges (cluster.c, caller's thread), the replica group
 * (broadcasts, synchronized BatchNorm, moving statistics) and the gradient
 * reducer (communication threads). */
#include <stdio.h>

#include "base/sysinfo.h"
#include "distribute/devices.h"
#include "distribute/mirrored.h"
#include "distribute/replica_group.h"

/* Local devices or replicas when given (one replica otherwise) and
 * cross_device_ops, then this process's place in the job. */
static st_status mw_check(const st_strategy_options *o, st__strategy_setup *out) {
  st_status s = o->devices || o->replicas ? st__replica_count(o, &out->local_replicas) : ST_OK;
  if (s == ST_OK && o->cross_device_ops)
    s = st__cross_device_ops_parse(o->cross_device_ops,
                                   (st_cross_device_ops *)&out->cross_device_ops);
  out->vars = o->shard_optimizer ? &st__sharded_placement : &st__mirrored_placement;
  return s == ST_OK ? st__cluster_create(o, out->local_replicas, &out->cluster) : s;
}

static st_status mw_attach(st_strategy *s, st_net *m) {
  struct st_cluster *c = s->cluster;
  /* a single local replica uses its share of the machine's cores */
  if (!s->opts.threads) s->opts.threads = st__cpu_count() / st__cluster_node_procs(c);
  if (s->opts.threads < 1) s->opts.threads = 1;
  st_collective *net_group = NULL, *net_reducer = NULL;
  st_status st = st__cluster_open(c, m);
  if (st == ST_OK) st = st__cluster_transport(c, m, &net_group);
  if (st == ST_OK) st = st__cluster_transport(c, m, &net_reducer);
  if (st == ST_OK) st = st__mirrored_attach(s, m, net_group, net_reducer);
  if (st != ST_OK) st__cluster_close(c, st_last_error());
  return st;
}

/* The model is destroyed: when that happens because this worker failed, the
 * thread's last error says why, and the peers still waiting for it hear so. */
static void mw_detach(st_strategy *s) {
  char why[512];
  snprintf(why, sizeof why, "%s", st_last_error());
  st__mirrored_detach(s);
  st__cluster_close(s->cluster, why);
}

static st_status mw_train_step(st_strategy *s, st_net *m, const st_batch *b,
                               const st__side_task *side, st_step_stats *out) {
  (void)side; /* the update runs in the replica tasks: nothing to overlap */
  struct st_cluster *c = s->cluster;
  st_batch local;
  st_step_stats mine = {0};
  st__cluster_shard_batch(c, m, b, &local);
  st_status st = st__mirrored_train_step(s, m, &local, st__cluster_global(c), &mine);
  return st == ST_OK ? st__cluster_gather_stats(c, &mine, out) : st;
}

/* Evaluation: each worker its shard, sums gathered. Predictions (pred set):
 * every worker computes the whole batch, so each has all of them. */
static st_status mw_eval_step(st_strategy *s, st_net *m, const st_batch *b, st_step_stats *out,
                              float *pred) {
  struct st_cluster *c = s->cluster;
  if (pred) return st__group_eval(s->group, m, b, out, pred);
  st_batch local;
  st_step_stats mine = {0};
  st__cluster_shard_batch(c, m, b, &local);
  st_status st = st__group_eval(s->group, m, &local, &mine, NULL);
  return st == ST_OK ? st__cluster_gather_stats(c, &mine, out) : st;
}

const st_strategy_vtable st__multi_worker_vtable = {
    .name = "multi_worker_mirrored",
    .check = mw_check,
    .shards_optimizer = true,
    .attach = mw_attach,
    .detach = mw_detach,
    .train_step = mw_train_step,
    .eval_step = mw_eval_step,
};
