/* What the process may use of the machine: its usable CPU cores and the
 * memory it can still have (MemAvailable lowered by a cgroup v2 limit and
 * the rlimits). Linux files; elsewhere the memory is "unknown". Thread-safe. */
#define _GNU_SOURCE
#include "base/sysinfo.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

int st__cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return 1;
}

/* The value in kB of the line "key: N kB" of a /proc file, in bytes. */
static bool proc_kb(const char *path, const char *key, uint64_t *bytes) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[256];
  size_t n = strlen(key);
  bool found = false;
  unsigned long long kb = 0;
  while (!found && fgets(line, sizeof line, f))
    found = !strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &kb) == 1;
  fclose(f);
  if (found) *bytes = (uint64_t)kb * 1024u;
  return found;
}

/* One number from a file ("max" or unreadable: false). */
static bool file_u64(const char *path, uint64_t *v) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  unsigned long long x = 0;
  bool ok = fscanf(f, "%llu", &x) == 1;
  fclose(f);
  if (ok) *v = (uint64_t)x;
  return ok;
}

/* cgroup v2: memory.max less memory.current of this process's cgroup
 * ("0::/path" in /proc/self/cgroup) or of one above it with a limit. */
static bool cgroup_left(uint64_t *left) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return false;
  char line[1024], path[1200];
  bool v2 = false;
  while (!v2 && fgets(line, sizeof line, f)) v2 = !strncmp(line, "0::", 3);
  fclose(f);
  if (!v2) return false;
  line[strcspn(line, "\n")] = 0;
  char *rel = line + 3;
  bool any = false;
  for (;;) { /* the cgroup, then its parents: the tightest limit */
    uint64_t max, cur;
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", strcmp(rel, "/") ? rel : "");
    if (file_u64(path, &max)) {
      snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", strcmp(rel, "/") ? rel : "");
      if (!file_u64(path, &cur)) cur = 0;
      uint64_t l = max > cur ? max - cur : 0;
      if (!any || l < *left) *left = l;
      any = true;
    }
    char *slash = strrchr(rel, '/');
    if (!slash || slash == rel) break;
    *slash = 0;
  }
  return any;
}

/* An rlimit set (not infinity) less what is in use (the /proc/self/status key). */
static bool rlimit_left(int resource, const char *key, uint64_t *left) {
  struct rlimit rl;
  uint64_t used = 0;
  if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return false;
  (void)proc_kb("/proc/self/status", key, &used);
  *left = (uint64_t)rl.rlim_cur > used ? (uint64_t)rl.rlim_cur - used : 0;
  return true;
}

bool st__memory_available(uint64_t *bytes, const char **what) {
  uint64_t v;
  bool any = false;
  const char *w = NULL;
  if (proc_kb("/proc/meminfo", "MemAvailable", &v)) *bytes = v, w = "MemAvailable", any = true;
  if (cgroup_left(&v) && (!any || v < *bytes)) *bytes = v, w = "the cgroup's memory.max", any = true;
  if (rlimit_left(RLIMIT_AS, "VmSize", &v) && (!any || v < *bytes))
    *bytes = v, w = "ulimit -v (RLIMIT_AS)", any = true;
  if (rlimit_left(RLIMIT_DATA, "VmData", &v) && (!any || v < *bytes))
    *bytes = v, w = "RLIMIT_DATA", any = true;
  if (what) *what = w;
  return any;
}
