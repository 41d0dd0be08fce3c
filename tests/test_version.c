/* The version macros of strata/version.h (generated from the project() version)
 * and st_version() agree: the library linked reports the headers' version, and
 * MAJOR.MINOR.PATCH spell STRATA_VERSION. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "strata/strata.h"

static void test_version_string(void) {
  CHECK(st_version() != NULL);
  CHECK_STREQ(st_version(), STRATA_VERSION);
}

static void test_version_parts(void) {
  char buf[64];
  snprintf(buf, sizeof buf, "%d.%d.%d", STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR,
           STRATA_VERSION_PATCH);
  CHECK_STREQ(buf, STRATA_VERSION);
  CHECK_GE(STRATA_VERSION_MAJOR, 0);
}

int main(int argc, char **argv) {
  static const check_case cases[] = {CHECK_CASE(test_version_string),
                                     CHECK_CASE(test_version_parts)};
  return CHECK_MAIN(argc, argv, cases);
}
