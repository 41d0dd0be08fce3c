/* The Gloo transport when the build found no Gloo (libgloo-dev): it answers
 * "not built", naming the package. */
#include "distribute/collective/collective.h"

bool st__gloo_built(void) { return false; }

static st_status not_built(void) {
  return st_error(ST_ERR_NOT_BUILT, "multi-worker training from TF_CONFIG needs the Gloo "
                  "transport, which this build does not have (install libgloo-dev and rebuild)");
}

st_status st__gloo_world_join(int rank, int size, const char *const *addresses) {
  (void)rank, (void)size, (void)addresses;
  return not_built();
}

st_status st__collective_gloo_create(double timeout_s, const int64_t *step, st_collective **out) {
  (void)timeout_s, (void)step;
  *out = NULL;
  return not_built();
}

void st__collective_gloo_leave(st_collective *c, const char *why) { (void)c, (void)why; }
