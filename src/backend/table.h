/* Internal: the completeness check every backend table runs. After `name`,
 * st_backend holds only function pointers, so it can be read as an array of
 * them: ST__BACKEND_SLOTS is their count (a backend file static_asserts its
 * own count against it, so adding a slot fails the build until each backend
 * fills it), and st__backend_table_complete() checks at first use that no slot
 * was left NULL (each slot read with memcpy: no pointer is type-punned). */
#ifndef STRATA_SRC_BACKEND_TABLE_H
#define STRATA_SRC_BACKEND_TABLE_H

#include <stddef.h>

#include "strata/backend.h"

typedef void (*st__any_fn)(void);
#define ST__BACKEND_SLOTS \
  ((sizeof(st_backend) - offsetof(st_backend, alloc)) / sizeof(st__any_fn))
bool st__backend_table_complete(const st_backend *be);

#endif
