/* Internal: float buffers reserved as address space, of which only chosen
 * ranges are memory. A pipeline stage keeps the net's whole variable layout
 * (every offset stays valid) but commits only its own layers' range; the
 * rest costs no memory (PROT_NONE: not counted in RLIMIT_DATA nor resident)
 * until a save or restore commits it for a while. Linux/POSIX mmap. */
#ifndef STRATA_BASE_VMEM_H
#define STRATA_BASE_VMEM_H

#include <stddef.h>

#include "strata/base.h"

/* n floats of address space, no memory (NULL + ST_ERR_NOMEM naming the bytes
 * on failure). Release with st__vm_release(p, n). */
float *st__vm_reserve(size_t n, const char *what);
/* Make floats [lo, lo + len) of p memory (read/write; zero where never
 * written or decommitted): whole pages covering the range. ST_ERR_NOMEM
 * naming `what` and the bytes when the system refuses (a memory limit). */
st_status st__vm_commit(float *p, size_t n, size_t lo, size_t len, const char *what);
/* Give back the pages of p (n floats) that hold nothing of [lo, lo + len):
 * their contents are lost, reading them faults until committed again. */
void st__vm_keep_only(float *p, size_t n, size_t lo, size_t len);
/* The same keeping two ranges (either may be empty). */
void st__vm_keep_two(float *p, size_t n, size_t lo1, size_t len1, size_t lo2, size_t len2);
void st__vm_release(float *p, size_t n); /* accepts NULL */

#endif
