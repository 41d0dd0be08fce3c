/* The process transports' all-reduce through shared memory, for a job whose
 * processes all run on one machine (shm.c has the algorithm): the MPI
 * transport (mpi/mpi.c) and the Gloo transport (gloo/gloo.c) open it with
 * their own collectives. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_SHM_H
#define STRATA_DISTRIBUTE_COLLECTIVE_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "distribute/collective/collective.h"
#include "distribute/collective/rank_sum.h"

typedef struct st__shm st__shm;

/* The opening's two collectives, in the transport's terms: the minimum of v
 * over every rank, and rank 0's n bytes of buf into every rank's. */
typedef struct st__shm_setup {
  void *ctx;
  int (*all_min)(void *ctx, int v);
  void (*bcast)(void *ctx, char *buf, size_t n);
} st__shm_setup;

/* Collective (every rank calls it, in the same order as its other
 * collectives): a segment of shared memory mapped by every rank, or NULL when
 * a rank is not on the machine of the others (same_machine false there),
 * STRATA_MPI_SHM=0 is set on any rank, or shared memory cannot be had (the
 * transport sends messages then). */
st__shm *st__shm_open(const st__shm_setup *setup, int me, int size, bool same_machine);
void st__shm_close(st__shm *s); /* accepts NULL */

/* Called between polls of a wait for the ranks of the mask `missing`
 * (spins: polls so far in this wait, 0 at its start). Returns ST_OK to go on
 * waiting, or the failure that ends the all-reduce (timeout, a peer that
 * left). It pauses as it sees fit (st__shm_pause). */
typedef st_status (*st__shm_wait_fn)(void *ctx, uint64_t missing, int spins);

/* In-place all-reduce of buf[0, n) through the segment: every element is
 * summed in rank order 0, 1, ..., size-1 (and scaled by 1/size for MEAN),
 * the bits of the message exchange's result. */
st_status st__shm_all_reduce(st__shm *s, float *buf, size_t n, st_reduce_op op,
                             st__shm_wait_fn wait, void *ctx);

/* The same segment for the small operations of a transport whose messages
 * are slow to start (Gloo's): recv[size * n] = every rank's send[n] in rank
 * order (n at most ST__SHM_GATHER_MAX floats; 0: a barrier), and buf[n] =
 * root's. */
#define ST__SHM_GATHER_MAX 262144
st_status st__shm_all_gather(st__shm *s, const float *send, size_t n, float *recv,
                             st__shm_wait_fn wait, void *ctx);
st_status st__shm_broadcast(st__shm *s, float *buf, size_t n, int root, st__shm_wait_fn wait,
                            void *ctx);

/* The pause between polls of a wait that has lasted `waited` seconds over
 * `spins` polls: none at first, then sched_yield, then 50 us sleeps. */
void st__shm_pause(int spins, double waited);

#endif
