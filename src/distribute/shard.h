/* Internal: sharded optimizer state (ZeRO stage 1) for the mirrored engine.
 * The G replicas of every process (global rank = process * L + local) split
 * the flat parameter buffer [0, n): replica g owns [g*q, g*q + q) with
 * q = n / G, and every replica also owns the tail [G*q, n) (fewer than G
 * floats). A replica keeps optimizer slots for its shard and the tail only
 * (q + n - G*q floats per slot). A step: reduce-scatter of the gradients
 * (SUM; each element summed in the same order as the all-reduce of the
 * unsharded run: the same bits), all-reduce of the tail, the optimizer on the
 * shard and on the tail (per-element kernels: the same bits), all-gather of
 * the updated weights. The model's own slot buffers (st_net.slots) are a
 * staging area, NULL between checkpoints: filled by st__shard_gather for a
 * checkpoint, read by st__shard_scatter after a restore. */
#ifndef STRATA_DISTRIBUTE_SHARD_H
#define STRATA_DISTRIBUTE_SHARD_H

#include "distribute/replica_group.h"

typedef struct st_shard st_shard;

/* For the replicas of g (g->net: the process transport, NULL for one
 * process). Takes the model's slots (zero, or restored) into the shards and
 * frees them (m->slots[k] = NULL). */
st_status st__shard_create(st_net *m, st_replica_group *g, st_shard **out);
void st__shard_destroy(st_shard *sh); /* accepts NULL */
/* Local replica i's task, after backward: reduce-scatter, update, all-gather
 * through g->coll. */
st_status st__shard_step(st_shard *sh, int i);
/* Caller's thread, before a step: free the model's staging slots (a
 * checkpoint's gather left them). */
void st__shard_release_model_slots(st_shard *sh);
/* Caller's thread, every process at once (a collective over g->net): the
 * full slots into m->slots on the chief (process 0; allocated when NULL);
 * the other processes take part with a temporary buffer. */
st_status st__shard_gather(st_shard *sh);
/* Caller's thread: when m->slots hold values (a restore), each local
 * replica's shard takes its part; then they are freed. */
void st__shard_scatter(st_shard *sh);
/* Floats of optimizer state per slot that replica i keeps (reports, tests). */
size_t st__shard_floats(const st_shard *sh);

#endif
