/* The MPI transport's shared-memory all-reduce, for a communicator whose
 * processes all run on one machine (private to collective/mpi: mpi.c and
 * mpi_shm.c). See mpi_shm.c for the algorithm. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_MPI_MPI_SHM_H
#define STRATA_DISTRIBUTE_COLLECTIVE_MPI_MPI_SHM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "distribute/collective/collective.h"
#include "distribute/collective/rank_sum.h"

typedef struct st__mpi_shm st__mpi_shm;

/* Collective over comm (every rank calls it, in the same order as its other
 * collectives): a segment of shared memory mapped by every rank, or NULL when
 * the ranks are not all on one machine, STRATA_MPI_SHM=0 is set on any rank,
 * or shared memory cannot be had (the transport sends messages then). */
st__mpi_shm *st__mpi_shm_open(MPI_Comm comm, int me, int size);
void st__mpi_shm_close(st__mpi_shm *s);

/* Called between polls of a wait for the ranks of the mask `missing`
 * (spins: polls so far in this wait, 0 at its start). Returns ST_OK to go on
 * waiting, or the failure that ends the all-reduce (timeout, a peer that
 * left). It pauses as it sees fit. */
typedef st_status (*st__mpi_shm_wait_fn)(void *ctx, uint64_t missing, int spins);

/* In-place all-reduce of buf[0, n) through the segment: every element is
 * summed in rank order 0, 1, ..., size-1 (and scaled by 1/size for MEAN),
 * the bits of the message exchange's result. */
st_status st__mpi_shm_all_reduce(st__mpi_shm *s, float *buf, size_t n, st_reduce_op op,
                                 st__mpi_shm_wait_fn wait, void *ctx);


#endif
