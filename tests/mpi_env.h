/* The environment a C test sets before it starts `mpirun` (the C tests'
 * counterpart of tests/mpi_common.bash): OpenMPI may run as root and
 * oversubscribe this machine's cores, and in sanitizer builds (where CTest
 * passes STRATA_SOURCE_DIR) reports from inside OpenMPI are suppressed by
 * tests/lsan-mpi.supp and tests/tsan-mpi.supp (the files say why); nothing of
 * Strata's own code is. Header-only, like check.h. */
#ifndef STRATA_TESTS_MPI_ENV_H
#define STRATA_TESTS_MPI_ENV_H
#include <stdio.h>
#include <stdlib.h>

#include "distribute/collective/collective.h" /* st__mpi_built */

/* Why the MPI tests cannot run here, for their skip line (NULL: they can). */
static inline const char *mpi_test_missing(void) {
  if (system("command -v mpirun >/dev/null 2>&1") != 0)
    return "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)";
  if (!st__mpi_built())
    return "this build of Strata has no MPI transport (libopenmpi-dev missing at build time)";
  return NULL;
}

static inline void mpi_test_env(void) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  const char *src = getenv("STRATA_SOURCE_DIR");
  if (!src) return;
  char v[4096];
  snprintf(v, sizeof v, "suppressions=%s/tests/lsan-mpi.supp:fast_unwind_on_malloc=0", src);
  setenv("LSAN_OPTIONS", v, 1);
  const char *t = getenv("TSAN_OPTIONS");
  snprintf(v, sizeof v, "%s suppressions=%s/tests/tsan-mpi.supp", t ? t : "", src);
  setenv("TSAN_OPTIONS", v, 1);
}

#endif
