/* The LOST reports of the MPI transport (private to collective/mpi): after a
 * timeout a process tells every other which ranks it waited for, so that each
 * survivor can name the rank that is really missing rather than a survivor
 * that waits for it too (mpi.c's opening comment has the whole story). The
 * reports travel on a duplicate of the world communicator owned by the
 * process, in world ranks; they are the same for every transport. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_MPI_MPI_LOST_H
#define STRATA_DISTRIBUTE_COLLECTIVE_MPI_MPI_LOST_H

#include <mpi.h>
#include <stdint.h>

#include "distribute/collective/collective.h" /* ST_MAX_WORKERS */

/* The LOST message (MPI_BYTE): the sender's wait timed out, these world
 * ranks' messages were missing (bit r: rank r). */
typedef struct st__lost_msg {
  uint64_t op;      /* the sender's operation number */
  uint64_t missing; /* ranks it waited for */
} st__lost_msg;
_Static_assert(ST_MAX_WORKERS <= 64, "st__lost_msg.missing is a 64-bit rank mask");

/* Once, after MPI_Init, by the thread that initialises the transport. */
void st__mpi_lost_init(void);

/* Send *msg (which must stay alive: the sends are never waited for, the lost
 * rank is among the peers) to every world rank but `self` and those of the
 * mask `skip`; reqs[j] gets rank j's request. No-op without the communicator. */
void st__mpi_lost_report(const st__lost_msg *msg, int self, int world_size, uint64_t skip,
                         MPI_Request *reqs);

/* Receive the reports that have arrived (any thread; one at a time);
 * returns the world ranks that have reported, and copies what each missed. */
uint64_t st__mpi_lost_receive(uint64_t missing[ST_MAX_WORKERS]);

/* The world rank to name after a timeout of world rank `self` that missed the
 * world ranks of `waited`: the ranks reachable from them through the reports
 * (`from` reported, missing what `missing` says) that sent none (a rank that
 * reports is alive); the lowest of them, or, when every one reported (they
 * wait for one another), the lowest of `waited`. *via: a rank of `waited`
 * whose report named it (-1: waited for directly). */
int st__mpi_lost_name(uint64_t waited, uint64_t from, const uint64_t *missing, int self, int *via);

#endif
