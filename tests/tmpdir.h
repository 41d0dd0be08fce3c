/* A C test's scratch directory: tmpdir_make("strata_test_x") creates
 * /tmp/strata_test_x_XXXXXX (mkdtemp), tmp_path(name) names a file in it
 * (eight rotating buffers, so a call may take two or three paths at once),
 * tmpdir_remove() deletes it with everything in it. Header-only, like
 * check.h; the tests that write files run one main each, so one directory
 * per process. */
#ifndef STRATA_TESTS_TMPDIR_H
#define STRATA_TESTS_TMPDIR_H
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static char g_dir[64];

/* False (after perror) when the directory cannot be made. */
static inline bool tmpdir_make(const char *prefix) {
  snprintf(g_dir, sizeof g_dir, "/tmp/%s_XXXXXX", prefix);
  if (mkdtemp(g_dir)) return true;
  perror("mkdtemp");
  return false;
}

static inline const char *tmp_path(const char *name) {
  static char buf[8][256];
  static int k = 0;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static inline void tmpdir_remove(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}
#endif
