/* Internal: small file-system helpers shared by the writers that replace a
 * file atomically (temp file, fsync, rename, fsync of the directory). */
#ifndef STRATA_BASE_FILEIO_H
#define STRATA_BASE_FILEIO_H

/* fsync the directory holding path so a rename into it is durable; 0 or -1
 * with errno set. */
int st__fsync_parent_dir(const char *path);

#endif
