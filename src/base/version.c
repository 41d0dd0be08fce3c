/* st_version: the version of the library linked at run time (the macros of
 * strata/version.h give that of the headers compiled against). */
#include "strata/version.h"

const char *st_version(void) { return STRATA_VERSION; }
