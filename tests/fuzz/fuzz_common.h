/* Shared helpers for the libFuzzer targets in tests/fuzz/ (and for
 * tests/test_fuzz_regressions.c, which compiles the same target files with
 * STRATA_FUZZ_NO_MAIN defined and replays the corpus and regression inputs).
 *
 * The readers take file paths, so each target owns one scratch file per
 * process, created on first use under /dev/shm (or $TMPDIR, or /tmp), rewritten
 * for every input with pwrite + ftruncate and removed at exit. */
#ifndef STRATA_TESTS_FUZZ_COMMON_H
#define STRATA_TESTS_FUZZ_COMMON_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/base.h"

typedef struct st_fuzz_file {
  int fd;         /* 0 until opened (then >= 3: stdio holds 0..2) */
  char path[512];
} st_fuzz_file;

/* Directory for scratch files: /dev/shm when writable, else $TMPDIR, else /tmp. */
static inline const char *st_fuzz_tmpdir(void) {
  if (access("/dev/shm", W_OK) == 0) return "/dev/shm";
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

#define ST_FUZZ_MAX_FILES 16
static char st_fuzz_cleanup_paths_[ST_FUZZ_MAX_FILES][512];
static int st_fuzz_cleanup_n_ = 0;
static void st_fuzz_cleanup_(void) {
  for (int i = 0; i < st_fuzz_cleanup_n_; i++) unlink(st_fuzz_cleanup_paths_[i]);
  st_fuzz_cleanup_n_ = 0;
}
/* Remove path at exit (files only; directories are removed by their owner). */
static inline void st_fuzz_remove_at_exit(const char *path) {
  if (st_fuzz_cleanup_n_ == 0) atexit(st_fuzz_cleanup_);
  if (st_fuzz_cleanup_n_ < ST_FUZZ_MAX_FILES)
    snprintf(st_fuzz_cleanup_paths_[st_fuzz_cleanup_n_++], 512, "%s", path);
}

/* Quiet the library once: failures are the expected outcome for most inputs. */
static inline void st_fuzz_init_once(void) {
  static int done = 0;
  if (!done) {
    done = 1;
    st_log_set_level(ST_LOG_OFF);
  }
}

/* Replace the contents of f (opened on first use, named after tag) by data. */
static inline int st_fuzz_file_put(st_fuzz_file *f, const char *tag, const void *data,
                                   size_t size) {
  if (f->fd <= 0) {
    snprintf(f->path, sizeof f->path, "%s/strata-fuzz-%s-%ld", st_fuzz_tmpdir(), tag,
             (long)getpid());
    f->fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (f->fd < 0) {
      perror(f->path);
      abort();
    }
    st_fuzz_remove_at_exit(f->path);
  }
  const unsigned char *p = data;
  size_t done = 0;
  while (done < size) {
    ssize_t k = pwrite(f->fd, p + done, size - done, (off_t)done);
    if (k <= 0) {
      perror(f->path);
      abort();
    }
    done += (size_t)k;
  }
  if (ftruncate(f->fd, (off_t)size) != 0) {
    perror(f->path);
    abort();
  }
  return 0;
}

/* Write a whole file at path (create or replace), aborting on failure. */
static inline void st_fuzz_write_path(const char *path, const void *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    perror(path);
    abort();
  }
  const unsigned char *p = data;
  size_t done = 0;
  while (done < size) {
    ssize_t k = write(fd, p + done, size - done);
    if (k <= 0) {
      perror(path);
      abort();
    }
    done += (size_t)k;
  }
  close(fd);
}

#endif
