/* The parameter server's test hooks from the environment (tests only,
 * RELIABILITY.md P1-P5): STRATA_PS_TEST_CHUNK_BYTES, STRATA_PS_TEST_FAULT,
 * STRATA_PS_TEST_STEP_DELAY_MS and STRATA_PS_TEST_NET, handed to the library
 * through its private test API (ps/test_hooks.h): the library itself reads
 * no environment variable for them. */
#include <stdio.h>
#include <stdlib.h>

#include "ps.h"
#include "ps/test_hooks.h"

void ps_test_hooks_from_env(void) {
  st__ps_test_hooks h = {0};
  const char *v;
  if ((v = getenv("STRATA_PS_TEST_CHUNK_BYTES"))) h.chunk_bytes = atoll(v);
  if ((v = getenv("STRATA_PS_TEST_FAULT"))) snprintf(h.fault, sizeof h.fault, "%s", v);
  if ((v = getenv("STRATA_PS_TEST_STEP_DELAY_MS"))) h.step_delay_ms = atoi(v);
  if ((v = getenv("STRATA_PS_TEST_NET"))) snprintf(h.net, sizeof h.net, "%s", v);
  st__ps_set_test_hooks(&h);
}
