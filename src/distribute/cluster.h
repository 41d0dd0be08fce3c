/* Internal: the cluster — the processes of a job (MPI or TF_CONFIG) as the
 * workers of one strategy (multi_worker_mirrored; the pipeline across
 * processes). Below the strategies (cluster.c calls nothing of theirs):
 * membership, the
 * per-step agreement, the barrier, the consistency checks of the model and
 * of fit's arguments, the auto-shard policy and this worker's share of a
 * batch, the gathering of every worker's step sums. Caller's thread
 * throughout (the control transport is that thread's). */
#ifndef STRATA_DISTRIBUTE_CLUSTER_H
#define STRATA_DISTRIBUTE_CLUSTER_H

#include "distribute/collective/collective.h"
#include "distribute/step.h"

struct st_cluster;

/* This process's place in the job (o: auto_shard, collective_timeout,
 * shard_optimizer checked and kept; local_replicas: this worker's replicas,
 * compared across workers when a model is attached). */
st_status st__cluster_create(const st_strategy_options *o, int local_replicas,
                             struct st_cluster **out);
void st__cluster_destroy(struct st_cluster *c); /* accepts NULL */
int st__cluster_rank(const struct st_cluster *c);
int st__cluster_size(const struct st_cluster *c);
/* Workers on this machine (they share its cores). */
int st__cluster_node_procs(const struct st_cluster *c);
double st__cluster_timeout(const struct st_cluster *c);

/* Open the control transport and check that every worker attached the same
 * model (structure, parameters, optimizer, loss, local replicas, seed,
 * shard_optimizer; names the rank and field otherwise). Every worker. */
st_status st__cluster_open(struct st_cluster *c, st_net *m);
/* A further process transport owned by the cluster (the mirrored engine's
 * replica group and gradient reducer each have one: each communicating
 * thread its own); closed with the cluster. At most 2. */
st_status st__cluster_transport(struct st_cluster *c, st_net *m, st_collective **out);
/* Close every transport, telling the peers still waiting why (this worker's
 * error, or ""). */
void st__cluster_close(struct st_cluster *c, const char *why);

/* Before each step or inference batch: have_size = this worker's batch
 * size, or -1 when its pass is over; *go false on every worker once one has
 * no batch; *stop true on every worker when one was asked to stop. Checks
 * that every worker drew the same batch under auto-shard DATA and records
 * the step's global batch (st__cluster_global). */
st_status st__cluster_agree(struct st_cluster *c, int have_size, bool stop_here, bool *go,
                            bool *stop);
int st__cluster_global(const struct st_cluster *c);
st_status st__cluster_barrier(struct st_cluster *c);
/* Start of fit: every worker has the same model and fit arguments. */
st_status st__cluster_check_fit(struct st_cluster *c, const st_net *m, int64_t global_batch,
                                int64_t steps_per_epoch, int epochs, int64_t resume_epoch,
                                int64_t resume_step);
/* The policy created with (AUTO kept), and setting the one in effect:
 * OFF (each worker trains its own batches whole) or DATA. */
st_auto_shard st__cluster_auto_shard(const struct st_cluster *c);
void st__cluster_set_shard(struct st_cluster *c, st_auto_shard effective);
/* This worker's examples of a global batch as fit takes them (its
 * contiguous share under DATA, the whole batch otherwise; no copy). */
void st__cluster_shard_batch(const struct st_cluster *c, const st_net *m, const st_batch *b,
                             st_batch *out);
/* out += every worker's sums, added in rank order (the same everywhere). */
st_status st__cluster_gather_stats(struct st_cluster *c, const st_step_stats *mine,
                                   st_step_stats *out);
/* n floats per worker over the control transport (recv[size * n],
 * worker-major; the bytes as they are). ST_ERR_INVALID when it is not open
 * (no model attached). */
st_status st__cluster_all_gather(struct st_cluster *c, const float *send, size_t n, float *recv);

/* CRC32C of the network's structure: each layer's class, name and output
 * shape, each parameter's name and shape (what the consistency check
 * compares; backups record it to refuse resuming another model). */
uint32_t st__net_structure_crc(const st_net *m);

#endif
