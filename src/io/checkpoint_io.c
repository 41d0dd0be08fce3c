/* Checkpoint directories on disk: numbering (ckpt-<seq>), the `latest`
 * pointer (name plus its CRC32C, so a damaged pointer is detected rather than
 * followed to an older checkpoint), fsync of files and directories, pruning
 * to the newest K, and removal. The format of one checkpoint is in
 * checkpoint.c. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "io/checkpoint_io.h"

st_status st__fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO planted there: no wait */
  if (fd < 0) return st_error(ST_ERR_IO, "%s: cannot open for fsync: %s", path, strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  return rc == 0 ? ST_OK : st_error(ST_ERR_IO, "%s: fsync failed: %s", path, strerror(err));
}

st_status st__mkdir_p(const char *dir) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
    return st_error(ST_ERR_INVALID, "%s: path too long", dir);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return st_error(ST_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  return ST_OK;
}

/* "ckpt-000017" -> 17; -1 if name is not a checkpoint name. */
long st__ckpt_seq(const char *name) {
  if (strncmp(name, "ckpt-", 5) != 0 || strlen(name) != 11) return -1;
  for (const char *p = name + 5; *p; p++)
    if (*p < '0' || *p > '9') return -1;
  return strtol(name + 5, NULL, 10);
}

static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}

/* Sequence numbers of every ckpt-* entry in dir, ascending: a full scan, no
 * limit on their number. *seqs is malloc'd (caller frees; NULL for none). */
static long list_ckpts(const char *dir, long **seqs) {
  long n = 0, cap = 0;
  *seqs = NULL;
  DIR *d = opendir(dir);
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    long s = st__ckpt_seq(e->d_name);
    if (s < 0) continue;
    if (n == cap) {
      long *g = realloc(*seqs, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *g);
      if (!g) break; /* keep what we have: pruning is best effort */
      *seqs = g;
    }
    (*seqs)[n++] = s;
  }
  closedir(d);
  if (n) qsort(*seqs, (size_t)n, sizeof **seqs, cmp_long);
  return n;
}

long st__ckpt_next_seq(const char *dir) {
  long next = 1;
  DIR *d = opendir(dir);
  if (!d) return next;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    long s = st__ckpt_seq(e->d_name);
    if (s >= next) next = s + 1;
  }
  closedir(d);
  return next;
}

/* ---- removal: never through a link, only what Strata created ------------- */

/* name in dirfd, not followed, is of type (S_IFDIR, S_IFREG) and owned by
 * this process's effective user; its stat in *sb. */
static bool ours(int dirfd, const char *name, mode_t type, struct stat *sb) {
  return fstatat(dirfd, name, sb, AT_SYMLINK_NOFOLLOW) == 0 && (sb->st_mode & S_IFMT) == type &&
         sb->st_uid == geteuid();
}

/* The files a checkpoint holds, and their temporaries ("<file>.tmp.*"). */
static bool ckpt_file_name(const char *name) {
  static const char *const files[] = {"weights.safetensors", "optimizer.safetensors",
                                      "state.json"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    size_t n = strlen(files[i]);
    if (!strncmp(name, files[i], n) && (!name[n] || !strncmp(name + n, ".tmp.", 5))) return true;
  }
  return false;
}

/* Remove the checkpoint directory name in dirfd: only a real directory owned
 * by us (a planted symlink or someone else's entry is left alone), opened
 * without following links and checked to be the one stat'ed; inside it only
 * our own regular files; then the directory, if that emptied it. */
static void remove_ckpt_at(int dirfd, const char *name) {
  struct stat sb, in, fs;
  if (!ours(dirfd, name, S_IFDIR, &sb)) return;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  DIR *d = NULL;
  if (fstat(fd, &in) != 0 || in.st_dev != sb.st_dev || in.st_ino != sb.st_ino ||
      !(d = fdopendir(fd))) {
    close(fd); /* swapped under us */
    return;
  }
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (ckpt_file_name(e->d_name) && ours(fd, e->d_name, S_IFREG, &fs)) unlinkat(fd, e->d_name, 0);
  closedir(d); /* closes fd */
  unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* The directory dir itself, not followed if it is a link; -1 if not. */
static int open_dir(const char *dir) {
  return open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

void st__ckpt_remove(const char *dir, const char *name) {
  int fd = open_dir(dir);
  if (fd < 0) return;
  remove_ckpt_at(fd, name);
  close(fd);
}

/* Unlink name in dirfd if it is our own regular file. */
static void remove_file_at(int dirfd, const char *name) {
  struct stat sb;
  if (ours(dirfd, name, S_IFREG, &sb)) unlinkat(dirfd, name, 0);
}

/* Temporaries of interrupted saves: ".tmp-ckpt-*" directories and
 * "latest.tmp.*" files. */
static void prune_temps(int dirfd) {
  int fd = dup(dirfd);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    return;
  }
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!strncmp(e->d_name, ".tmp-ckpt-", 10))
      remove_ckpt_at(dirfd, e->d_name);
    else if (!strncmp(e->d_name, "latest.tmp.", 11))
      remove_file_at(dirfd, e->d_name);
  }
  closedir(d);
}

void st__ckpt_prune(const char *dir, int keep, long current) {
  int dirfd = open_dir(dir);
  if (dirfd < 0) return;
  long *seqs = NULL, n = list_ckpts(dir, &seqs);
  for (long i = 0; keep > 0 && i < n - keep; i++) {
    if (seqs[i] == current) continue;
    char name[32];
    snprintf(name, sizeof name, "ckpt-%06ld", seqs[i]);
    remove_ckpt_at(dirfd, name);
  }
  free(seqs);
  prune_temps(dirfd);
  close(dirfd);
}

st_status st__ckpt_write_latest(const char *dir, const char *name) {
  char dst[4096], line[64];
  snprintf(dst, sizeof dst, "%s/latest", dir);
  int len = snprintf(line, sizeof line, "%s %08x\n", name, st_crc32c(0, name, strlen(name)));
  st__atomic_file a;
  st_status s = st__atomic_open(&a, dst); /* "latest.tmp.*": pruned if left behind */
  if (s == ST_OK) s = st__atomic_commit(&a, fwrite(line, 1, (size_t)len, a.f) == (size_t)len ? 0 : errno);
  return s;
}

st_status st_checkpoint_latest(const char *dir, char *out, size_t n) {
  if (!dir || !dir[0])
    return st_error(ST_ERR_INVALID, "st_checkpoint_latest: dir is %s", dir ? "empty" : "NULL");
  if (!out || n == 0) return st_error(ST_ERR_INVALID, "st_checkpoint_latest: out is NULL or n is 0");
  char path[4096], name[32], *line = NULL;
  unsigned crc = 0;
  size_t got = 0;
  snprintf(path, sizeof path, "%s/latest", dir);
  st_status s = st__read_all(path, 127, &line, &got); /* "ckpt-NNNNNN xxxxxxxx\n" */
  if (s == ST_ERR_IO) return st_error_prefix(s, "no checkpoint: ");
  bool ok = s == ST_OK && got > 0 && sscanf(line, "%31s %8x", name, &crc) == 2 &&
            st__ckpt_seq(name) >= 0 && crc == st_crc32c(0, name, strlen(name)) &&
            strchr(line, '\n') == line + strlen(line) - 1;
  free(line);
  if (!ok)
    return st_error(ST_ERR_FORMAT, "%s: damaged checkpoint pointer (expected 'ckpt-NNNNNN <crc32c>')",
                    path);
  if ((size_t)snprintf(out, n, "%s/%s", dir, name) >= n)
    return st_error(ST_ERR_INVALID, "%s: path too long", dir);
  return ST_OK;
}

void st__checkpoint_remove_all(const char *dir) {
  int dirfd = open_dir(dir);
  if (dirfd < 0) return;
  long *seqs = NULL, n = list_ckpts(dir, &seqs);
  remove_file_at(dirfd, "latest");
  for (long i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "ckpt-%06ld", seqs[i]);
    remove_ckpt_at(dirfd, name);
  }
  free(seqs);
  prune_temps(dirfd);
  remove_file_at(dirfd, ST__DIR_LOCK_NAME); /* the run's lock (st__dir_lock), if any */
  close(dirfd);
  rmdir(dir); /* only if empty; never follows a link */
}
