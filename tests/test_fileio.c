/* base/fileio: the atomic writer (content, no temp left, old file untouched on
 * every failure, a temp name planted in advance never written through) and
 * st__read_all (content + NUL, the limit, errors naming the file). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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


/* st__open_input: a regular file opens (blocking reads again); a FIFO is
 * refused at once, naming the path; a missing file gives the real reason. */
static void test_open_input(void) {
  char p[512], q[512];
  int fd = -1;
  path_of(p, sizeof p, "in.txt");
  put(p, "x");
  CHECK_OK(st__open_input(p, &fd, NULL));
  CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
  if (fd >= 0) close(fd);
  path_of(q, sizeof q, "in.fifo");
  CHECK(mkfifo(q, 0600) == 0);
  CHECK(st__open_input(q, &fd, NULL) == ST_ERR_FORMAT && fd == -1);
  CHECK_MSG(strstr(st_last_error(), "in.fifo: not a regular file"), "%s", st_last_error());
  unlink(q);
  CHECK(st__open_input(q, &fd, NULL) == ST_ERR_IO);
  CHECK_MSG(strstr(st_last_error(), "in.fifo: cannot open: No such file"), "%s", st_last_error());
}

/* The atomic writer never replaces a FIFO (or a link to one): it stays. */
static void test_atomic_refuses_special(void) {
  char p[512], l[512];
  struct stat sb;
  path_of(p, sizeof p, "out.fifo");
  path_of(l, sizeof l, "out.link");
  CHECK(mkfifo(p, 0600) == 0 && symlink(p, l) == 0);
  CHECK(st__atomic_write(p, fill_hello, "x") == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "out.fifo: exists and is not a regular file"), "%s",
            st_last_error());
  CHECK(st__atomic_write(l, fill_hello, "x") == ST_ERR_INVALID);
  CHECK(lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode));
  CHECK(lstat(l, &sb) == 0 && S_ISLNK(sb.st_mode));
  CHECK(!temps_left());
  unlink(p), unlink(l);
}

/* Target names up to NAME_MAX work: the temp name is shortened. */
static void test_long_name(void) {
  char name[NAME_MAX + 1], p[1024];
  for (int len = 200; len <= NAME_MAX; len += 11) {
    memset(name, 'n', (size_t)len);
    name[len] = 0;
    path_of(p, sizeof p, name);
    CHECK_MSG(st__atomic_write(p, fill_hello, "long\n") == ST_OK, "%d: %s", len, st_last_error());
    CHECK(strcmp(text_of(p), "long\n") == 0);
    unlink(p);
  }
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -q st-tmp", g_dir);
  CHECK(system(cmd) != 0); /* no temp left */
}

/* A directory lock: a second holder fails at once naming our pid; release
 * removes the lock file and the directory acquiring created. */
static void test_dir_lock(void) {
  char d[512], lockf[600], want[96];
  path_of(d, sizeof d, "locked");
  snprintf(lockf, sizeof lockf, "%s/.lock", d);
  st__dir_lock a, b;
  CHECK_OK(st__dir_lock_acquire(&a, d, "worker 0 of the test"));
  CHECK(a.fd >= 0 && a.created);
  snprintf(want, sizeof want, "%ld\nworker 0 of the test\n", (long)getpid());
  CHECK(strcmp(text_of(lockf), want) == 0);
  CHECK(st__dir_lock_acquire(&b, d, NULL) == ST_ERR_INVALID && b.fd == -1);
  snprintf(want, sizeof want, "is in use by pid %ld, worker 0 of the test (lock", (long)getpid());
  CHECK_MSG(strstr(st_last_error(), want), "%s", st_last_error());
  st__dir_lock_release(&b, d); /* never taken: a no-op */
  CHECK(access(lockf, F_OK) == 0);
  st__dir_lock_release(&a, d);
  CHECK(access(d, F_OK) != 0); /* created by the lock, empty: removed */
  /* A lock file planted as a symlink is not followed. */
  char victim[512];
  path_of(victim, sizeof victim, "lockvictim");
  put(victim, "keep");
  CHECK(mkdir(d, 0700) == 0 && symlink(victim, lockf) == 0);
  CHECK(st__dir_lock_acquire(&a, d, NULL) == ST_ERR_INVALID && a.fd == -1);
  CHECK(strcmp(text_of(victim), "keep") == 0);
  unlink(lockf), rmdir(d);
}

/* A message longer than the buffer keeps its start and its reason. */
static void test_long_error(void) {
  char path[3001];
  memset(path, 'p', 3000);
  path[3000] = 0;
  st_error(ST_ERR_IO, "/%s: cannot create /%s: %s", path, path, "Disk quota exceeded");
  const char *e = st_last_error();
  size_t n = strlen(e);
  CHECK(n < 1024 && n > 900);
  CHECK(e[0] == '/' && strstr(e, " ... "));
  CHECK_MSG(n > 20 && !strcmp(e + n - 21, ": Disk quota exceeded"), "%s", e + n - 30);
  st_error_prefix(ST_ERR_IO, "backup: ");
  e = st_last_error();
  n = strlen(e);
  CHECK(!strncmp(e, "backup: /ppp", 12) && !strcmp(e + n - 21, ": Disk quota exceeded"));
  /* a multi-byte character at the cut is never split */
  char u[2400];
  for (int i = 0; i < 1199; i++) memcpy(u + 2 * i, "\xc3\xa9", 2);
  u[2398] = 0;
  st_error(ST_ERR_IO, "%s", u);
  e = st_last_error();
  const char *mark = strstr(e, " ... ");
  CHECK(mark && (mark - e) % 2 == 0 && strlen(mark + 5) % 2 == 0);
}

static const check_case cases[] = {
    CHECK_CASE(test_atomic_write),  CHECK_CASE(test_temp_names),
    CHECK_CASE(test_read_all),      CHECK_CASE(test_open_input),
    CHECK_CASE(test_atomic_refuses_special), CHECK_CASE(test_long_name),
    CHECK_CASE(test_dir_lock),      CHECK_CASE(test_long_error)};

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
