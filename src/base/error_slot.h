/* Internal: a failure carried from the thread where it happened (whose
 * st_last_error holds the message) to the thread that reports it. */
#ifndef STRATA_BASE_ERROR_SLOT_H
#define STRATA_BASE_ERROR_SLOT_H

#include "strata/base.h"

typedef struct st_error_slot {
  st_status status; /* ST_OK: nothing failed */
  char msg[1024]; /* as long as st_last_error can be */
} st_error_slot;

/* On the failing thread: keep s and this thread's message (s != ST_OK, and
 * only when the slot holds no failure yet). Returns s. Not thread-safe per
 * slot: one slot per thread, or a lock around it. */
st_status st__error_keep(st_error_slot *slot, st_status s);
/* On the reporting thread: make the kept failure this thread's last error and
 * return its status (ST_OK when none). */
st_status st__error_raise(const st_error_slot *slot);

#endif
