/* The MPI transport's LOST reports (mpi_lost.h): a process-wide communicator,
 * the reports received so far (guarded: any transport's thread may look), and
 * the naming of the missing rank from them. */
#include "distribute/collective/mpi/mpi_lost.h"

#include <pthread.h>
#include <string.h>

enum { TAG_LOST = 32003 }; /* mpi.c's tags are below it, on other communicators */

static MPI_Comm g_lost_comm = MPI_COMM_NULL;
static pthread_mutex_t g_lost_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_lost_from;                 /* world ranks that sent a LOST message */
static uint64_t g_lost_missing[ST_MAX_WORKERS]; /* the world ranks each one missed */

void st__mpi_lost_init(void) {
  if (MPI_Comm_dup(MPI_COMM_WORLD, &g_lost_comm) == MPI_SUCCESS)
    MPI_Comm_set_errhandler(g_lost_comm, MPI_ERRORS_RETURN);
  else
    g_lost_comm = MPI_COMM_NULL;
}

void st__mpi_lost_report(const st__lost_msg *msg, int self, int world_size, uint64_t skip,
                         MPI_Request *reqs) {
  if (g_lost_comm == MPI_COMM_NULL) return;
  for (int j = 0; j < world_size; j++)
    if (j != self && !(skip >> j & 1))
      MPI_Isend(msg, (int)sizeof *msg, MPI_BYTE, j, TAG_LOST, g_lost_comm, &reqs[j]);
}

uint64_t st__mpi_lost_receive(uint64_t missing[ST_MAX_WORKERS]) {
  pthread_mutex_lock(&g_lost_mu);
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (g_lost_comm == MPI_COMM_NULL ||
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_LOST, g_lost_comm, &flag, &st) != MPI_SUCCESS || !flag)
      break;
    st__lost_msg m = {0, 0};
    if (MPI_Recv(&m, (int)sizeof m, MPI_BYTE, st.MPI_SOURCE, TAG_LOST, g_lost_comm,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    g_lost_from |= 1ull << st.MPI_SOURCE;
    g_lost_missing[st.MPI_SOURCE] |= m.missing;
  }
  uint64_t from = g_lost_from;
  memcpy(missing, g_lost_missing, sizeof g_lost_missing);
  pthread_mutex_unlock(&g_lost_mu);
  return from;
}

static int lowest_rank(uint64_t mask) { return mask ? __builtin_ctzll(mask) : -1; }

int st__mpi_lost_name(uint64_t waited, uint64_t from, const uint64_t *missing, int self, int *via) {
  uint64_t reach = waited, seen = 0, reported = 0;
  while (reach & ~seen) {
    int p = lowest_rank(reach & ~seen);
    seen |= 1ull << p;
    if (from >> p & 1) reported |= 1ull << p, reach |= missing[p];
  }
  reach &= ~(1ull << self);
  int who = lowest_rank(reach & ~reported);
  if (who < 0) who = lowest_rank(waited);
  *via = -1;
  if (!(waited >> who & 1))
    for (uint64_t w = waited & reported; w && *via < 0; w &= w - 1)
      if (missing[lowest_rank(w)] >> who & 1) *via = lowest_rank(w);
  if (!(waited >> who & 1) && *via < 0) *via = lowest_rank(waited & reported);
  return who;
}
