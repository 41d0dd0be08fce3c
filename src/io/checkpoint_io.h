/* Internal: the file-system side of checkpoints (checkpoint_io.c). */
#ifndef STRATA_IO_CHECKPOINT_IO_H
#define STRATA_IO_CHECKPOINT_IO_H

#include "strata/train.h"

st_status st__fsync_path(const char *path);
st_status st__mkdir_p(const char *dir);
/* "ckpt-000017" -> 17; -1 for any other name. */
long st__ckpt_seq(const char *name);
/* 1 + the highest ckpt-* number in dir (1 for none). */
long st__ckpt_next_seq(const char *dir);
/* Point dir/latest at name (with its CRC32C), atomically. */
st_status st__ckpt_write_latest(const char *dir, const char *name);
/* Keep the newest `keep` checkpoints (and `current`), drop temporaries. */
void st__ckpt_prune(const char *dir, int keep, long current);
void st__remove_tree(const char *path);

#endif
