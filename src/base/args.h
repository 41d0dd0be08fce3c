/* Argument checks at the entry of public functions (issue 34): every pointer
 * argument is checked before any is used, so a NULL one is ST_ERR_INVALID
 * "<function>: <argument> is NULL", never a crash
 * (tests: the generated test_null_args, scripts/gen_null_test.py). */
#ifndef STRATA_BASE_ARGS_H
#define STRATA_BASE_ARGS_H

#include "strata/base.h"

/* return ST_ERR_INVALID "<this function>: <p> is NULL" when p is NULL */
#define ST_REQUIRE(p)                                                         \
  do {                                                                        \
    if (!(p)) return st_error(ST_ERR_INVALID, "%s: %s is NULL", __func__, #p); \
  } while (0)

#endif
