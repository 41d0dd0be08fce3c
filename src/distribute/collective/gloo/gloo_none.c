/* The Gloo transport when the build found no Gloo (libgloo-dev): it answers
 * "not built", naming the package. */
#include "distribute/collective/collective.h"

bool st__gloo_built(void) { return false; }

st_status st__collective_gloo_create(int rank, int size, const char *const *addresses,
                                     double timeout_s, const int64_t *step, st_collective **out) {
  (void)rank, (void)size, (void)addresses, (void)timeout_s, (void)step;
  *out = NULL;
  return st_error(ST_ERR_NOT_BUILT, "multi-worker training from TF_CONFIG needs the Gloo "
                  "transport, which this build does not have (install libgloo-dev and rebuild)");
}
