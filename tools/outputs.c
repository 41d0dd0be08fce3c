/* The checks of outputs.h: what a run writes is looked at before training,
 * so a device node, a FIFO, an input file or a clash between two outputs is
 * a usage error (exit 2, nothing written) rather than silent data loss at
 * the end. Files are compared by device and inode: an output that exists by
 * its own; one that does not yet by its parent directory and name. */
#define _GNU_SOURCE
#include "outputs.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The identity of a path: (dev, ino) of the file when it exists, else of its
 * parent directory plus the last component. */
typedef struct ident {
  dev_t dev;
  ino_t ino;
  bool exists;
  char name[NAME_MAX + 1];
} ident;

static bool ident_of(const char *path, ident *id) {
  struct stat sb;
  memset(id, 0, sizeof *id);
  if (stat(path, &sb) == 0) {
    id->dev = sb.st_dev, id->ino = sb.st_ino, id->exists = true;
    return true;
  }
  char *a = strdup(path), *b = strdup(path);
  bool ok = a && b && stat(dirname(a), &sb) == 0;
  if (ok) {
    id->dev = sb.st_dev, id->ino = sb.st_ino;
    snprintf(id->name, sizeof id->name, "%s", basename(b));
  }
  free(a), free(b);
  return ok;
}

static bool same(const ident *x, const ident *y) {
  return x->dev == y->dev && x->ino == y->ino && x->exists == y->exists &&
         (x->exists || !strcmp(x->name, y->name));
}

static const char *kind_of(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

/* An existing output must be of the type we write (links followed: a link
 * to a device is refused too). */
static bool check_type(const char *cmd, const cli_path *p, bool dir) {
  struct stat sb;
  if (!p->path || stat(p->path, &sb) != 0) return true;
  if (dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode)) return true;
  fprintf(stderr, "strata %s: %s %s: exists and is %s, not %s: refusing to replace it\n", cmd,
          p->opt, p->path, kind_of(sb.st_mode), dir ? "a directory" : "a regular file");
  return false;
}

/* The absolute, link-free path of dir (which may not exist yet, nor its
 * parents: the first existing ancestor is resolved and the rest appended),
 * malloc'd; NULL if nothing resolves. */
static char *resolve_dir(const char *dir) {
  char *r = realpath(dir, NULL);
  if (r) return r;
  char *a = strdup(dir), *b = strdup(dir), *out = NULL;
  char *up = a ? dirname(a) : NULL;
  char *parent = up && strcmp(up, dir) ? resolve_dir(up) : NULL;
  if (parent && b && (out = malloc(strlen(parent) + strlen(b) + 2)))
    sprintf(out, "%s/%s", strcmp(parent, "/") ? parent : "", basename(b));
  free(a), free(b), free(parent);
  return out;
}

/* x is y or below it. */
static bool within(const char *x, const char *y) {
  size_t n = strlen(y);
  return !strncmp(x, y, n) && (x[n] == '\0' || x[n] == '/' || (n == 1 && y[0] == '/'));
}

static bool check_dirs_nested(const char *cmd, const cli_path *dirs, int ndirs) {
  for (int i = 0; i < ndirs; i++)
    for (int j = i + 1; j < ndirs; j++) {
      if (!dirs[i].path || !dirs[j].path) continue; /* (the first two only: see outputs.h) */
      char *x = resolve_dir(dirs[i].path), *y = resolve_dir(dirs[j].path);
      bool clash = x && y && (within(x, y) || within(y, x));
      if (clash)
        fprintf(stderr, "strata %s: %s %s and %s %s are %s: each run needs its own\n", cmd,
                dirs[i].opt, dirs[i].path, dirs[j].opt, dirs[j].path,
                !strcmp(x, y) ? "the same directory" : "nested directories");
      free(x), free(y);
      if (clash) return false;
    }
  return true;
}

/* No output file inside the backup directory (dirs[0]): it is deleted when
 * training completes. */
static bool check_not_in_backup(const char *cmd, const cli_path *files, int nfiles,
                                const cli_path *backup) {
  char *b = backup->path ? resolve_dir(backup->path) : NULL;
  bool ok = true;
  for (int i = 0; b && ok && i < nfiles; i++) {
    char *f = files[i].path ? resolve_dir(files[i].path) : NULL;
    if (f && within(f, b) && strcmp(f, b)) {
      fprintf(stderr, "strata %s: %s %s is inside %s %s, which is deleted when training "
              "completes\n", cmd, files[i].opt, files[i].path, backup->opt, backup->path);
      ok = false;
    }
    free(f);
  }
  free(b);
  return ok;
}

/* The inputs: those given plus the IDX files of data_dir that exist. */
static int collect_inputs(const cli_path *inputs, int ninputs, const char *data_dir,
                          cli_path *in, char (*buf)[PATH_MAX], int cap) {
  static const char *const idx[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                    "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  int n = 0;
  for (int i = 0; i < ninputs && n < cap; i++)
    if (inputs[i].path) in[n++] = inputs[i];
  for (int i = 0; data_dir && i < 8 && n < cap; i++) {
    snprintf(buf[n], PATH_MAX, "%s/%s%s", data_dir, idx[i / 2], i % 2 ? ".gz" : "");
    struct stat sb;
    if (stat(buf[n], &sb) == 0) in[n] = (cli_path){"--data", buf[n]}, n++;
  }
  return n;
}

/* No output file is an input, an output directory or another output file:
 * in[0..nin) are the inputs, then come the ndirs directories. */
static bool check_files_distinct(const char *cmd, const cli_path *files, int nfiles,
                                 const cli_path *in, int nin, const cli_path *dirs, int ndirs) {
  for (int i = 0; i < nfiles; i++) {
    ident a, b;
    if (!files[i].path || !ident_of(files[i].path, &a)) continue;
    for (int j = 0; j < nin + ndirs + nfiles; j++) {
      int k = j - nin - ndirs; /* index into files when >= 0 */
      const cli_path *o = j < nin ? &in[j] : k < 0 ? &dirs[j - nin] : &files[k];
      if ((k >= 0 && k <= i) || !o->path || !ident_of(o->path, &b) || !same(&a, &b)) continue;
      fprintf(stderr, "strata %s: %s %s and %s %s are the same %s: %s\n", cmd, files[i].opt,
              files[i].path, o->opt, o->path, j < nin || k >= 0 ? "file" : "path",
              j < nin ? "an output may not replace an input" : "two outputs may not share it");
      return false;
    }
  }
  return true;
}

bool cli_check_outputs(const char *cmd, const cli_path *files, int nfiles, const cli_path *dirs,
                       int ndirs, const cli_path *inputs, int ninputs, const char *data_dir) {
  for (int i = 0; i < nfiles; i++)
    if (!check_type(cmd, &files[i], false)) return false;
  for (int i = 0; i < ndirs; i++)
    if (!check_type(cmd, &dirs[i], true)) return false;
  cli_path in[24];
  char buf[24][PATH_MAX];
  int nin = collect_inputs(inputs, ninputs < 16 ? ninputs : 16, data_dir, in, buf, 24);
  return check_files_distinct(cmd, files, nfiles, in, nin, dirs, ndirs) &&
         check_dirs_nested(cmd, dirs, ndirs < 2 ? ndirs : 2) &&
         (ndirs < 1 || check_not_in_backup(cmd, files, nfiles, &dirs[0]));
}
