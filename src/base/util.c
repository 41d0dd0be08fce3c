/* Small process utilities: a monotonic clock in seconds for timing, the peak
 * resident set size of this process, and fsync of a file's directory.
 * Thread-safe. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"
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

int st__fsync_parent_dir(const char *path) {
  char *dir = strdup(path);
  if (!dir) return -1;
  char *slash = strrchr(dir, '/');
  if (!slash)
    strcpy(dir, ".");
  else if (slash == dir)
    slash[1] = '\0';
  else
    *slash = '\0';
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  free(dir);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  int saved = errno;
  close(fd);
  errno = saved;
  return rc;
}
