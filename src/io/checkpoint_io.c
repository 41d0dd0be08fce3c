/* Checkpoint directories on disk: numbering (ckpt-<seq>), the `latest`
 * pointer (name plus its CRC32C, so a damaged pointer is detected rather than
 * followed to an older checkpoint), fsync of files and directories, pruning
 * to the newest K, and removal. The format of one checkpoint is in
 * checkpoint.c. */
#define _GNU_SOURCE
#include <dirent.h>
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
  int fd = open(path, O_RDONLY | O_CLOEXEC);
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

/* Sequence numbers of the ckpt-* directories in dir, ascending. */
static int list_ckpts(const char *dir, long *seqs, int cap) {
  DIR *d = opendir(dir);
  int n = 0;
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    long s = st__ckpt_seq(e->d_name);
    if (s >= 0 && n < cap) seqs[n++] = s;
  }
  closedir(d);
  for (int i = 1; i < n; i++) /* insertion sort: a handful of entries */
    for (int j = i; j > 0 && seqs[j - 1] > seqs[j]; j--) {
      long t = seqs[j];
      seqs[j] = seqs[j - 1];
      seqs[j - 1] = t;
    }
  return n;
}

long st__ckpt_next_seq(const char *dir) {
  long seqs[1024];
  int n = list_ckpts(dir, seqs, 1024);
  return n ? seqs[n - 1] + 1 : 1;
}

/* rm -r of a directory Strata wrote (files one level deep). */
void st__remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char f[4096];
      snprintf(f, sizeof f, "%s/%s", path, e->d_name);
      unlink(f);
    }
    closedir(d);
  }
  rmdir(path);
}

void st__ckpt_prune(const char *dir, int keep, long current) {
  long seqs[1024];
  int n = list_ckpts(dir, seqs, 1024);
  for (int i = 0; keep > 0 && i < n - keep; i++) {
    if (seqs[i] == current) continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/ckpt-%06ld", dir, seqs[i]);
    st__remove_tree(p);
  }
  DIR *d = opendir(dir); /* temporaries of interrupted saves */
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (!strncmp(e->d_name, ".tmp-ckpt-", 10) || !strncmp(e->d_name, "latest.tmp", 10)) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      if (e->d_name[0] == '.')
        st__remove_tree(p);
      else
        unlink(p);
    }
  closedir(d);
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
  long seqs[1024];
  int n = list_ckpts(dir, seqs, 1024);
  char p[4096];
  snprintf(p, sizeof p, "%s/latest", dir);
  unlink(p);
  for (int i = 0; i < n; i++) {
    snprintf(p, sizeof p, "%s/ckpt-%06ld", dir, seqs[i]);
    st__remove_tree(p);
  }
  st__ckpt_prune(dir, 1, -1); /* temporaries */
  rmdir(dir);                 /* only if empty */
}
