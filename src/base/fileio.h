/* Internal: the two file helpers every reader and writer of Strata uses
 * (fileio.c): replacing a file atomically (temp file beside it, fsync, rename,
 * fsync of the directory) and reading a whole file under a size limit.
 * Any thread; nothing is shared between calls but the temp-name counter. */
#ifndef STRATA_BASE_FILEIO_H
#define STRATA_BASE_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "strata/base.h"

/* A file being replaced atomically. st__atomic_open creates the temp file
 * "<path>.tmp.<pid>.<16 random hex digits>" beside path (or, when path's
 * last component is too long to take that suffix within NAME_MAX,
 * ".st-tmp-<16 random hex digits>" in the same directory) with
 * O_CREAT|O_EXCL|O_NOFOLLOW (so a name planted in advance, a symlink
 * included, is never written through; up to 16 names are tried) and mode
 * 0666 less the umask, as fopen would. The caller writes into f (or into
 * fileno(f) directly when it does not also use f's buffer), then calls
 * st__atomic_commit or st__atomic_abort, exactly one of them. */
typedef struct st__atomic_file {
  FILE *f;          /* the temp file, open for writing */
  const char *path; /* the target (borrowed; must outlive the st__atomic_file) */
  char *tmp;        /* the temp file's path (owned) */
} st__atomic_file;

/* Create the temp file for path. ST_ERR_INVALID "<path>: exists and is not
 * a regular file: not replaced" (a device node, FIFO, socket, directory, or a
 * link to one); ST_ERR_IO "<path>: cannot create <tmp>:
 * <reason>" or ST_ERR_NOMEM; on failure nothing is left to release. */
st_status st__atomic_open(st__atomic_file *a, const char *path);

/* Finish: write_errno is 0 when every write into a->f succeeded, else the
 * errno of the first that failed (ENOSPC, EFBIG under `ulimit -f`, ...).
 * Flushes, fsyncs and closes the temp file, renames it over path, fsyncs the
 * directory. ST_ERR_IO "<path>: writing <tmp>: <reason>" or "<path>: renaming
 * <tmp>: <reason>" leaves the old file at path untouched and removes the temp
 * file; "<path>: fsync of its directory: <reason>" means the new file is in
 * place but its durability is unknown. Always releases a. */
st_status st__atomic_commit(st__atomic_file *a, int write_errno);

/* Give up (the writer failed with its own status): close and remove the
 * temp file, release a. The file at path is untouched. */
void st__atomic_abort(st__atomic_file *a);

/* The whole of one replacement: open, fill(f, ctx), commit. fill returns 0,
 * or -1 with errno set when a write failed (the commit then names the temp
 * file and the reason). */
st_status st__atomic_write(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx);

/* Open the input file at path for reading without ever blocking in open()
 * (O_NONBLOCK, then cleared), and require a regular file: a FIFO, device or
 * socket is refused. The fd (O_CLOEXEC) in *fd, its stat in *sb (may be
 * NULL). ST_ERR_IO "<path>: cannot open: <reason>" (the real reason:
 * "Permission denied" is not "not found"); ST_ERR_FORMAT "<path>: not a
 * regular file". On failure *fd is -1. */
st_status st__open_input(const char *path, int *fd, struct stat *sb);

/* Read the regular file at path into *buf (malloc'd, NUL-terminated one byte
 * past *len, so text users can treat it as a string; caller frees), at most
 * max_bytes bytes. Errors name the path: ST_ERR_IO "cannot open: <reason>" or
 * "offset N: read failed: <reason>"; ST_ERR_FORMAT "not a regular file",
 * "file is N bytes, more than the <limit> limit" or "file grew while being
 * read"; ST_ERR_NOMEM. On failure *buf is NULL. Opened O_NONBLOCK, so a FIFO
 * put in the way does not block. */
st_status st__read_all(const char *path, size_t max_bytes, char **buf, size_t *len);

/* Remove temp files of path left by an earlier process killed while writing
 * it (kill -9 during a save): only entries named exactly
 * "<name>.tmp.<pid>.<16 hex>" beside path, whose pid is not this process and
 * no longer alive, that are regular files owned by the effective user and
 * last modified before `before` (the run's start); never through a link
 * (fstatat AT_SYMLINK_NOFOLLOW, unlinkat on the opened directory). Returns
 * how many were removed. Any thread. */
int st__clean_stale_temps(const char *path, time_t before);

/* A run's exclusive hold on a backup or checkpoint directory: the file
 * "<dir>/.lock" (ST__DIR_LOCK_NAME), created O_NOFOLLOW, flock'ed
 * LOCK_EX|LOCK_NB for as long as the run holds it, the holder's pid written
 * in it, then (optionally) a line saying who it is. */
#define ST__DIR_LOCK_NAME ".lock"
typedef struct st__dir_lock {
  int fd;       /* the locked file; -1 when nothing is held */
  int created;  /* 1 when acquiring created dir (removed again on release if empty) */
} st__dir_lock;

/* Take the lock of dir, creating dir (one level) when missing; who (NULL:
 * nothing) describes the holder in the lock file (one line, e.g. "worker 0
 * of the multi-worker job at 127.0.0.1:2222"). dir itself must be a
 * directory, not a symlink. ST_ERR_INVALID "<dir> is in use by pid N[, WHO]
 * (lock file <dir>/.lock)" when another process holds it (fails at once,
 * never waits), "<dir>: not a directory (a symbolic link is not followed)",
 * "<dir>/.lock: not a regular file"; ST_ERR_IO with the reason otherwise. On
 * failure l->fd is -1 and nothing is left behind. Any thread. */
st_status st__dir_lock_acquire(st__dir_lock *l, const char *dir, const char *who);
/* Release: remove the lock file if it is still ours, then dir if acquiring
 * created it and it is empty. Accepts a lock never taken (fd -1). */
void st__dir_lock_release(st__dir_lock *l, const char *dir);

/* 64 unpredictable bits for temp names: getrandom, or (where the kernel's
 * generator is not ready) the clock mixed with a counter. Any thread. */
uint64_t st__random_u64(void);

/* fsync the directory holding path so a rename into it is durable; 0 or -1
 * with errno set. */
int st__fsync_parent_dir(const char *path);

#endif
