/* What the process may use of the machine: its usable CPU cores. Thread-safe. */
#define _GNU_SOURCE
#include "base/sysinfo.h"

#include <sched.h>

int st__cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return 1;
}
