/* Internal: what the process may use of the machine (src/base/sysinfo.c).
 * Thread-safe. */
#ifndef STRATA_BASE_SYSINFO_H
#define STRATA_BASE_SYSINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Usable CPU cores of this process (affinity mask), at least 1. */
int st__cpu_count(void);

/* The memory this process can still have, in bytes: the least of
 * MemAvailable (/proc/meminfo), the cgroup v2 limit left (memory.max less
 * memory.current of the process's cgroup, when it has a limit), RLIMIT_AS
 * less the address space in use (VmSize) and RLIMIT_DATA less the data in
 * use (VmData) when those limits are set. *what (may be NULL) names the
 * smallest ("MemAvailable", "the cgroup's memory.max", "ulimit -v
 * (RLIMIT_AS)", "RLIMIT_DATA"). False when none can be read (not Linux). */
bool st__memory_available(uint64_t *bytes, const char **what);

#endif
