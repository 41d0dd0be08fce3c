/* The MPI transport's process-wide state (private to collective/mpi):
 * mpi_world.c initialises MPI once (collective.h: st__mpi_world) and finalises
 * it at exit unless a transport of this process failed. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_MPI_MPI_WORLD_H
#define STRATA_DISTRIBUTE_COLLECTIVE_MPI_MPI_WORLD_H

#include <stdbool.h>

/* A transport failed with requests pending or a peer lost: MPI_Finalize is
 * skipped at exit (it would wait for the missing peer). Any thread. */
void st__mpi_mark_broken(void);
/* Whether st__mpi_mark_broken was called. Any thread. */
bool st__mpi_broken(void);

#endif
