/* The MPI transport when Strata was built without MPI (CMake found none):
 * every entry point says so. Install libopenmpi-dev and rebuild to get
 * mpi.c instead. */
#include "distribute/collective/collective.h"
#include "distribute/collective/mpi/mpi_fault.h"

static st_status not_built(void) {
  return st_error(ST_ERR_NOT_BUILT,
                  "this build of Strata has no MPI: install libopenmpi-dev (Debian) "
                  "and rebuild (make) to use multi_worker_mirrored");
}

st_status st__mpi_world(int *rank, int *size) {
  *rank = 0, *size = 1;
  return not_built();
}

int st__mpi_node_size(void) { return 1; }
bool st__mpi_built(void) { return false; }

st_status st__collective_mpi_create(double timeout_s, const int64_t *step, st_collective **out) {
  (void)timeout_s, (void)step;
  *out = NULL;
  return not_built();
}

void st__collective_mpi_leave(st_collective *c, const char *why) { (void)c, (void)why; }

st_status st__collective_mpi_create_group(int color, double timeout_s, const int64_t *step,
                                          st_collective **out) {
  (void)color, (void)timeout_s, (void)step;
  *out = NULL;
  return not_built();
}

void st__collective_mpi_test_cut(st_collective *c, int peer) { (void)c, (void)peer; }
bool st__collective_mpi_uses_shm(const st_collective *c) { (void)c; return false; }
