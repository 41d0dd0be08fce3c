/* A fault switch of the MPI transport, for tests only: it emulates a link
 * between two processes that is cut while both keep running, so that the
 * naming of the missing rank after a timeout (mpi.c: every survivor names the
 * rank that is really missing, not a survivor that waits for it too) can be
 * tested under a plain `mpirun -np 3`, without network namespaces
 * (tests/test_mpi_lost_peer.c). */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_MPI_MPI_FAULT_H
#define STRATA_DISTRIBUTE_COLLECTIVE_MPI_MPI_FAULT_H

#include <stdbool.h>

#include "distribute/collective/collective.h"

/* From now on c, a process transport (st__collective_mpi_create), posts no
 * message to `peer` and none from it: a receive from it completes at once
 * with zeros, a send to it is dropped. No-op without MPI. */
void st__collective_mpi_test_cut(st_collective *c, int peer);

/* Whether c's all-reduces go through shared memory (collective/shm.c: every rank
 * on one machine, STRATA_MPI_SHM not 0 when it was made). The cut above
 * emulates a network link: tests of it set STRATA_MPI_SHM=0. */
bool st__collective_mpi_uses_shm(const st_collective *c);

#endif
