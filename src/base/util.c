/* Small process utilities: a monotonic clock in seconds for timing, the peak
 * resident set size of this process. Thread-safe. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/base.h"

#include <sys/resource.h>
#include <time.h>

double st_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Linux reports ru_maxrss in kilobytes. */
size_t st_peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss < 0) return 0;
  return (size_t)ru.ru_maxrss * 1024u;
}
