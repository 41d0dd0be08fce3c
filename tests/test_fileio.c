/* base/fileio: the atomic writer (content, no temp left, old file untouched on
 * every failure, a temp name planted in advance never written through) and
 * st__read_all (content + NUL, the limit, errors naming the file). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "check.h"

static char g_dir[] = "/tmp/strata_fileio_XXXXXX";

static void path_of(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", g_dir, name);
}

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) fputs(text, f), fclose(f);
}

/* The file's whole text ("" when it cannot be read). */
static const char *text_of(const char *path) {
  static char buf[256];
  buf[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return buf;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* Entries of g_dir whose name holds ".tmp." */
static int temps_left(void) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q '\\.tmp\\.'", g_dir);
  return system(cmd) == 0;
}

static int fill_hello(FILE *f, void *ctx) {
  return fputs((const char *)ctx, f) < 0 ? -1 : 0;
}

static int fill_enospc(FILE *f, void *ctx) {
  fputs("partial", f);
  errno = ENOSPC;
  return -1;
}

static void test_atomic_write(void) {
  char p[512];
  path_of(p, sizeof p, "a.txt");
  CHECK_OK(st__atomic_write(p, fill_hello, "first\n"));
  CHECK(strcmp(text_of(p), "first\n") == 0);
  CHECK_OK(st__atomic_write(p, fill_hello, "second\n"));
  CHECK(strcmp(text_of(p), "second\n") == 0);
  CHECK(!temps_left());

  /* A failed write: ST_ERR_IO naming the file and the reason, old file kept. */
  CHECK(st__atomic_write(p, fill_enospc, NULL) == ST_ERR_IO);
  CHECK_MSG(strstr(st_last_error(), "a.txt: writing ") &&
                strstr(st_last_error(), "No space left on device"),
            "%s", st_last_error());
  CHECK(strcmp(text_of(p), "second\n") == 0);
  CHECK(!temps_left());

  /* The writer's own failure: abort keeps the old file, leaves no temp. */
  st__atomic_file a;
  CHECK_OK(st__atomic_open(&a, p));
  fputs("never", a.f);
  st__atomic_abort(&a);
  CHECK(strcmp(text_of(p), "second\n") == 0);
  CHECK(!temps_left());

  /* A directory that does not exist: the message names path and temp. */
  char q[512];
  path_of(q, sizeof q, "no/such/dir/b.txt");
  CHECK(st__atomic_write(q, fill_hello, "x") == ST_ERR_IO);
  CHECK_MSG(strstr(st_last_error(), "b.txt: cannot create ") &&
                strstr(st_last_error(), "No such file or directory"),
            "%s", st_last_error());
}

/* Two temp files for one path at once get different, not only-pid names; a
 * symlink planted at the old predictable "<path>.tmp.<pid>" is not followed. */
static void test_temp_names(void) {
  char p[512], victim[512], planted[600];
  path_of(p, sizeof p, "c.txt");
  path_of(victim, sizeof victim, "victim.txt");
  put(victim, "precious\n");
  snprintf(planted, sizeof planted, "%s.tmp.%ld", p, (long)getpid());
  CHECK(symlink(victim, planted) == 0);
  st__atomic_file a, b;
  CHECK_OK(st__atomic_open(&a, p));
  CHECK_OK(st__atomic_open(&b, p));
  CHECK(strcmp(a.tmp, b.tmp) != 0 && strcmp(a.tmp, planted) != 0);
  CHECK(strlen(a.tmp) > strlen(planted) + 8);
  fputs("new\n", a.f);
  CHECK_OK(st__atomic_commit(&a, 0));
  st__atomic_abort(&b);
  CHECK(strcmp(text_of(p), "new\n") == 0);
  CHECK(strcmp(text_of(victim), "precious\n") == 0);
  unlink(planted);
  CHECK(!temps_left());
}

static void test_read_all(void) {
  char p[512];
  path_of(p, sizeof p, "r.txt");
  put(p, "hello");
  char *buf = NULL;
  size_t len = 0;
  CHECK_OK(st__read_all(p, 5, &buf, &len));
  CHECK(buf && len == 5 && memcmp(buf, "hello", 6) == 0); /* NUL-terminated */
  free(buf);

  CHECK(st__read_all(p, 4, &buf, &len) == ST_ERR_FORMAT && buf == NULL);
  CHECK_MSG(strstr(st_last_error(), "r.txt: file is 5 bytes, more than the 4-byte limit"), "%s",
            st_last_error());
  CHECK(st__read_all(p, 16u << 20, &buf, &len) == ST_OK);
  free(buf);

  put(p, "");
  CHECK_OK(st__read_all(p, 16, &buf, &len));
  CHECK(buf && len == 0 && buf[0] == 0);
  free(buf);

  char q[512];
  path_of(q, sizeof q, "missing.txt");
  CHECK(st__read_all(q, 16, &buf, &len) == ST_ERR_IO && buf == NULL);
  CHECK_MSG(strstr(st_last_error(), "missing.txt: cannot open: No such file"), "%s",
            st_last_error());
  CHECK(st__read_all(g_dir, 16, &buf, &len) == ST_ERR_FORMAT);
  CHECK_MSG(strstr(st_last_error(), "not a regular file"), "%s", st_last_error());

  path_of(q, sizeof q, "fifo"); /* opened O_NONBLOCK: refused, not waited on */
  if (mkfifo(q, 0600) == 0) {
    CHECK(st__read_all(q, 16, &buf, &len) == ST_ERR_FORMAT);
    unlink(q);
  }
}

static const check_case cases[] = {CHECK_CASE(test_atomic_write), CHECK_CASE(test_temp_names),
                                   CHECK_CASE(test_read_all)};

int main(int argc, char **argv) {
  if (!mkdtemp(g_dir)) check_skip("cannot create a temporary directory");
  int rc = CHECK_MAIN(argc, argv, cases);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "could not remove %s\n", g_dir);
    rc = rc ? rc : 1;
  }
  return rc;
}
