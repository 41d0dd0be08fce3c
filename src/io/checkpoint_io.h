/* Internal: the file-system side of checkpoints (checkpoint_io.c). */
#ifndef STRATA_IO_CHECKPOINT_IO_H
#define STRATA_IO_CHECKPOINT_IO_H

#include "strata/train.h"

st_status st__fsync_path(const char *path);
st_status st__mkdir_p(const char *dir);
/* "ckpt-000017" -> 17; -1 for any other name. */
long st__ckpt_seq(const char *name);
/* 1 + the highest ckpt-* number in dir (1 for none), from a full scan. */
long st__ckpt_next_seq(const char *dir);
/* Point dir/latest at name (with its CRC32C), atomically. */
st_status st__ckpt_write_latest(const char *dir, const char *name);
/* Keep the newest `keep` checkpoints (and `current`), drop temporaries
 * (".tmp-ckpt-*" directories, "latest.tmp.*" files). Removal never follows a
 * link: dir is opened O_DIRECTORY|O_NOFOLLOW (a dir that is itself a symlink
 * is not pruned), entries are checked with fstatat(AT_SYMLINK_NOFOLLOW) and
 * removed with unlinkat relative to it, and only entries of Strata's own
 * names, of the expected type and owned by the effective user are removed
 * (a planted symlink is left alone, its target untouched). Best effort. */
void st__ckpt_prune(const char *dir, int keep, long current);
/* Remove the checkpoint (or checkpoint temp) directory dir/name, with the
 * same rules. Best effort. */
void st__ckpt_remove(const char *dir, const char *name);

#endif
