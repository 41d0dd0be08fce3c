/* Internal: what the process may use of the machine (src/base/sysinfo.c).
 * Thread-safe. */
#ifndef STRATA_BASE_SYSINFO_H
#define STRATA_BASE_SYSINFO_H

/* Usable CPU cores of this process (affinity mask), at least 1. */
int st__cpu_count(void);

#endif
