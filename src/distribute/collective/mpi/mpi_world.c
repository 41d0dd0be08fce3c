/* The MPI job of this process (collective.h: st__mpi_world): MPI initialised
 * once, with MPI_THREAD_MULTIPLE, and finalised at exit unless a transport
 * failed (st__mpi_mark_broken: a peer that is gone would make MPI_Finalize
 * wait forever). Split from mpi.c, which calls it. */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "distribute/collective/collective.h"
#include "distribute/collective/mpi/mpi_lost.h"
#include "distribute/collective/mpi/mpi_world.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static st_status g_init_status = ST_OK;
static char g_init_error[256];
static int g_rank, g_size, g_node_size = 1;
static atomic_bool g_broken; /* a collective failed: do not finalise */

void st__mpi_mark_broken(void) { atomic_store(&g_broken, true); }
bool st__mpi_broken(void) { return atomic_load(&g_broken); }

static void finalize_at_exit(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !atomic_load(&g_broken)) MPI_Finalize();
}

static void init_once(void) {
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      g_init_status = ST_ERR_PEER;
      snprintf(g_init_error, sizeof g_init_error, "MPI_Init_thread failed");
      return;
    }
    atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    g_init_status = ST_ERR_NOT_BUILT;
    snprintf(g_init_error, sizeof g_init_error,
             "this MPI library provides thread level %d, Strata needs MPI_THREAD_MULTIPLE (%d)",
             provided, MPI_THREAD_MULTIPLE);
    return;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &g_node_size);
    MPI_Comm_free(&node);
  }
  st__mpi_lost_init();
}

bool st__mpi_built(void) { return true; }

int st__mpi_node_size(void) { return g_node_size > 0 ? g_node_size : 1; }

st_status st__mpi_world(int *rank, int *size) {
  pthread_once(&g_once, init_once);
  if (g_init_status != ST_OK) return st_error(g_init_status, "MPI: %s", g_init_error);
  *rank = g_rank;
  *size = g_size;
  return ST_OK;
}
