/* The file helpers of fileio.h: atomic replacement of a file (an unpredictable
 * temp name created exclusively beside it, fsync, rename, fsync of the
 * directory) and reading a whole regular file under a size limit. Every
 * writer and reader of a whole file in Strata goes through these, so the
 * durability and the error messages are the same everywhere.
 * Any thread: the only shared state is an atomic counter for temp names. */
#define _GNU_SOURCE
#include "base/fileio.h"
#include "base/args.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <limits.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TMP_TRIES 16 /* names tried before st__atomic_open gives up */

/* ---- temp names ---------------------------------------------------------- */

/* 64 unpredictable bits: the kernel's generator, or (where it is not ready)
 * the clock mixed with a counter, so two calls never get the same bits. */
uint64_t st__random_u64(void) {
  static atomic_uint_fast64_t counter;
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
  r ^= (atomic_fetch_add(&counter, 1) + 1) * 0x9e3779b97f4a7c15u; /* splitmix64 step */
  r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9u;
  r = (r ^ (r >> 27)) * 0x94d049bb133111ebu;
  return r ^ (r >> 31);
}

/* Create "<path>.tmp.<pid>.<hex>" exclusively, or "<dir>/.st-tmp-<hex>"
 * when the target's name is too long for the suffix (NAME_MAX); fd or -1
 * with errno set. */
static int create_temp(const char *path, char *tmp, size_t cap) {
  int fd = -1;
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  bool short_name = strlen(base) + 48 > NAME_MAX;
  int dirlen = (int)(base - path);
  for (int i = 0; i < TMP_TRIES && fd < 0; i++) {
    unsigned long long r = (unsigned long long)st__random_u64();
    if (short_name)
      snprintf(tmp, cap, "%.*s.st-tmp-%016llx", dirlen, path, r);
    else
      snprintf(tmp, cap, "%s.tmp.%ld.%016llx", path, (long)getpid(), r);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  return fd;
}

/* ---- atomic replacement -------------------------------------------------- */

st_status st__atomic_open(st__atomic_file *a, const char *path) {
  ST_ASSERT(a && path);
  size_t cap = strlen(path) + 48; /* ".tmp." + pid + "." + 16 hex + NUL */
  a->path = path;
  a->f = NULL;
  a->tmp = NULL;
  struct stat sb; /* a device, FIFO or socket (or a link to one) is never replaced */
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
    return st_error(ST_ERR_INVALID, "%s: exists and is not a regular file: not replaced", path);
  a->tmp = malloc(cap);
  if (!a->tmp) return st_error(ST_ERR_NOMEM, "%s: out of memory for the temp file name", path);
  int fd = create_temp(path, a->tmp, cap);
  int err = errno;
  a->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (fd >= 0 && !a->f) {
    err = errno;
    close(fd);
    unlink(a->tmp);
  }
  if (a->f) return ST_OK;
  st_status s = st_error(ST_ERR_IO, "%s: cannot create %s: %s", path, a->tmp, strerror(err));
  free(a->tmp);
  a->tmp = NULL;
  return s;
}

void st__atomic_abort(st__atomic_file *a) {
  if (!a->tmp) return;
  if (a->f) fclose(a->f);
  unlink(a->tmp);
  free(a->tmp);
  a->f = NULL;
  a->tmp = NULL;
}

/* Push the temp file to the disk and close it; 0 or the errno at fault. */
static int finish_temp(st__atomic_file *a, int err) {
  if (!err && ferror(a->f)) err = EIO; /* a write the caller did not check */
  if (!err && fflush(a->f) != 0) err = errno;
  if (!err && fsync(fileno(a->f)) != 0) err = errno;
  if (fclose(a->f) != 0 && !err) err = errno;
  a->f = NULL;
  return err;
}

st_status st__atomic_commit(st__atomic_file *a, int write_errno) {
  ST_ASSERT(a && a->f && a->tmp);
  st_status s = ST_OK;
  int err = finish_temp(a, write_errno);
  if (err)
    s = st_error(ST_ERR_IO, "%s: writing %s: %s", a->path, a->tmp, strerror(err));
  else if (rename(a->tmp, a->path) != 0)
    s = st_error(ST_ERR_IO, "%s: renaming %s: %s", a->path, a->tmp, strerror(errno));
  if (s != ST_OK) {
    unlink(a->tmp);
  } else if (st__fsync_parent_dir(a->path) != 0) {
    /* The file is complete and in place; only its durability is unknown. */
    s = st_error(ST_ERR_IO, "%s: fsync of its directory: %s", a->path, strerror(errno));
  }
  free(a->tmp);
  a->tmp = NULL;
  return s;
}

st_status st__atomic_write(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx) {
  st__atomic_file a;
  st_status s = st__atomic_open(&a, path);
  if (s != ST_OK) return s;
  int err = fill(a.f, ctx) == 0 ? 0 : errno ? errno : EIO;
  return st__atomic_commit(&a, err);
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
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(dir);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  int saved = errno;
  close(fd);
  errno = saved;
  return rc;
}

/* ---- stale temp files ---------------------------------------------------- */

/* name is "<base>.tmp.<pid>.<16 hex>"; the pid in *pid. */
static bool stale_name(const char *name, const char *base, long *pid) {
  size_t n = strlen(base);
  if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0) return false;
  const char *p = name + n + 5, *q = p;
  while (*q >= '0' && *q <= '9') q++;
  if (q == p || q - p > 10 || *q != '.') return false;
  *pid = strtol(p, NULL, 10);
  if (strlen(q + 1) != 16) return false;
  for (const char *h = q + 1; *h; h++)
    if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f'))) return false;
  return true;
}

int st__clean_stale_temps(const char *path, time_t before) {
  char *dir = strdup(path);
  if (!dir) return 0;
  char *slash = strrchr(dir, '/');
  const char *base = slash ? path + (slash - dir) + 1 : path;
  if (!slash) strcpy(dir, ".");
  else if (slash == dir) slash[1] = '\0';
  else *slash = '\0';
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), removed = 0;
  free(dir);
  int fd = dfd >= 0 ? dup(dfd) : -1;
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d && fd >= 0) close(fd);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    struct stat sb;
    long pid = 0;
    if (!stale_name(e->d_name, base, &pid) || pid == (long)getpid() ||
        !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
      continue; /* another name, or a process still alive that may be writing it */
    if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
        sb.st_uid == geteuid() && sb.st_mtime < before && unlinkat(dfd, e->d_name, 0) == 0)
      removed++;
  }
  if (d) closedir(d);
  if (dfd >= 0) close(dfd);
  return removed;
}

/* ---- directory locks ---------------------------------------------------- */

/* The pid written in a held lock file (0 when unreadable). */
/* The holder's pid and, after ", ", its description ("" when it gave none). */
static long lock_holder(int fd, char *who, size_t cap) {
  char buf[320];
  ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
  who[0] = '\0';
  if (k <= 0) return 0;
  buf[k] = 0;
  char *nl = strchr(buf, '\n');
  if (nl && nl[1]) {
    nl[1 + strcspn(nl + 1, "\n")] = '\0';
    snprintf(who, cap, ", %s", nl + 1);
  }
  return strtol(buf, NULL, 10);
}

/* The lock is held by another process: who, or why it cannot be taken. */
static st_status lock_busy(int fd, const char *dir) {
  if (errno != EWOULDBLOCK)
    return st_error(ST_ERR_IO, "%s/%s: cannot lock: %s", dir, ST__DIR_LOCK_NAME, strerror(errno));
  char holder[300];
  long pid = lock_holder(fd, holder, sizeof holder);
  return st_error(ST_ERR_INVALID, "%s is in use by pid %ld%s (lock file %s/%s)", dir, pid, holder,
                  dir, ST__DIR_LOCK_NAME);
}

/* One attempt on the lock file in dfd: ST_OK with the held fd in *out, or
 * ST_OK with *again set when the file was removed or replaced between open
 * and flock (by a holder releasing it), or an error. */
static st_status lock_once(int dfd, const char *dir, const char *who, int *out, int *again) {
  struct stat sb, now;
  *again = 0;
  int fd = openat(dfd, ST__DIR_LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                  0644);
  if (fd < 0)
    return st_error(errno == ELOOP ? ST_ERR_INVALID : ST_ERR_IO,
                    "%s/%s: cannot open the lock file: %s", dir, ST__DIR_LOCK_NAME,
                    strerror(errno));
  st_status s = ST_OK;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    s = st_error(ST_ERR_INVALID, "%s/%s: not a regular file", dir, ST__DIR_LOCK_NAME);
  else if (flock(fd, LOCK_EX | LOCK_NB) != 0)
    s = lock_busy(fd, dir);
  else if (fstatat(dfd, ST__DIR_LOCK_NAME, &now, AT_SYMLINK_NOFOLLOW) != 0 ||
           now.st_ino != sb.st_ino || now.st_dev != sb.st_dev)
    *again = 1; /* the previous holder removed it as we opened it */
  if (s == ST_OK && !*again) {
    char pid[320];
    int n = snprintf(pid, sizeof pid, "%ld\n%.250s%s", (long)getpid(), who ? who : "",
                     who ? "\n" : "");
    if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) == n) {
      *out = fd;
      return ST_OK;
    }
    s = st_error(ST_ERR_IO, "%s/%s: cannot write the pid: %s", dir, ST__DIR_LOCK_NAME,
                 strerror(errno));
  }
  close(fd);
  return s;
}

st_status st__dir_lock_acquire(st__dir_lock *l, const char *dir, const char *who) {
  ST_ASSERT(l && dir);
  l->fd = -1;
  l->created = mkdir(dir, 0777) == 0;
  if (!l->created && errno != EEXIST)
    return st_error(ST_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return st_error(errno == ELOOP || errno == ENOTDIR ? ST_ERR_INVALID : ST_ERR_IO,
                    "%s: not a directory we can open: %s (a symbolic link is not followed)", dir,
                    strerror(errno));
  st_status s = ST_OK;
  for (int i = 0, again = 1; i < 8 && again && s == ST_OK; i++)
    s = lock_once(dfd, dir, who, &l->fd, &again);
  if (s == ST_OK && l->fd < 0)
    s = st_error(ST_ERR_IO, "%s/%s: replaced while locking", dir, ST__DIR_LOCK_NAME);
  close(dfd);
  if (s != ST_OK && l->created) rmdir(dir);
  if (s != ST_OK) l->created = 0;
  return s;
}

void st__dir_lock_release(st__dir_lock *l, const char *dir) {
  if (!l || l->fd < 0) return;
  struct stat sb, now;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd >= 0 && fstat(l->fd, &sb) == 0 &&
      fstatat(dfd, ST__DIR_LOCK_NAME, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
      now.st_ino == sb.st_ino && now.st_dev == sb.st_dev)
    unlinkat(dfd, ST__DIR_LOCK_NAME, 0); /* before unlocking: a waiter then retries */
  if (dfd >= 0) close(dfd);
  close(l->fd);
  if (l->created) rmdir(dir); /* only if empty */
  l->fd = -1;
  l->created = 0;
}

/* ---- reading a whole file ------------------------------------------------ */

/* "16 MiB" when the limit is whole MiB, else "N bytes". */
static const char *limit_text(size_t max_bytes, char *buf, size_t n) {
  if (max_bytes >= (1u << 20) && max_bytes % (1u << 20) == 0)
    snprintf(buf, n, "%zu MiB", max_bytes >> 20);
  else
    snprintf(buf, n, "%zu-byte", max_bytes);
  return buf;
}

/* Read up to want bytes (one more than the size fstat gave, to see growth). */
static st_status read_fd(int fd, const char *path, char *buf, size_t want, size_t *got) {
  *got = 0;
  while (*got < want) {
    ssize_t k = read(fd, buf + *got, want - *got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0)
      return st_error(ST_ERR_IO, "%s: offset %zu: read failed: %s", path, *got, strerror(errno));
    if (k == 0) break;
    *got += (size_t)k;
  }
  return ST_OK;
}

st_status st__open_input(const char *path, int *fd, struct stat *sb) {
  struct stat own;
  if (!sb) sb = &own;
  *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0) return st_error(ST_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  int fl = fcntl(*fd, F_GETFL);
  if (fstat(*fd, sb) == 0 && S_ISREG(sb->st_mode) && fl >= 0 &&
      fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) == 0)
    return ST_OK;
  close(*fd);
  *fd = -1;
  return st_error(ST_ERR_FORMAT, "%s: not a regular file", path);
}

/* Open path and check it is a regular file within the limit; its size in *size. */
static st_status open_checked(const char *path, size_t max_bytes, int *fd, size_t *size) {
  struct stat sb;
  char lim[48];
  st_status s = st__open_input(path, fd, &sb);
  if (s != ST_OK) return s;
  if ((uint64_t)sb.st_size > (uint64_t)max_bytes)
    s = st_error(ST_ERR_FORMAT, "%s: file is %lld bytes, more than the %s limit", path,
                 (long long)sb.st_size, limit_text(max_bytes, lim, sizeof lim));
  if (s != ST_OK) {
    close(*fd);
    *fd = -1;
  }
  *size = s == ST_OK ? (size_t)sb.st_size : 0;
  return s;
}

st_status st__read_all(const char *path, size_t max_bytes, char **buf, size_t *len) {
  ST_ASSERT(path && buf && len);
  *buf = NULL;
  *len = 0;
  int fd = -1;
  size_t size = 0, got = 0;
  st_status s = open_checked(path, max_bytes, &fd, &size);
  if (s != ST_OK) return s;
  char *b = malloc(size + 1);
  if (!b) s = st_error(ST_ERR_NOMEM, "%s: cannot allocate %zu bytes to read it", path, size + 1);
  if (s == ST_OK) s = read_fd(fd, path, b, size + 1, &got);
  if (s == ST_OK && got > size)
    s = st_error(ST_ERR_FORMAT, "%s: file grew while being read", path);
  close(fd);
  if (s != ST_OK) {
    free(b);
    return s;
  }
  b[got] = '\0';
  *buf = b;
  *len = got;
  return ST_OK;
}

/* The public names (strata/base.h) of the two helpers above. */
st_status st_write_file_atomic(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx) {
  return st__atomic_write(path, fill, ctx);
}

st_status st_read_file(const char *path, size_t max_bytes, char **buf, size_t *len) {
  ST_REQUIRE(path);
  ST_REQUIRE(buf);
  ST_REQUIRE(len);
  return st__read_all(path, max_bytes, buf, len);
}
