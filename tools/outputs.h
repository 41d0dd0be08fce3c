/* The CLI's checks of the paths a run will write, made before it starts
 * (outputs.c): outputs that exist must be of the right type (a regular file,
 * a directory), no output may be an input or another output, and the backup
 * and checkpoint directories may not be the same or nested. */
#ifndef STRATA_TOOLS_OUTPUTS_H
#define STRATA_TOOLS_OUTPUTS_H

#include <stdbool.h>

/* Where "--data fashion-mnist" reads from (the Debian dataset). */
#define CLI_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* One path given to an option; path NULL when the option is absent. */
typedef struct cli_path {
  const char *opt; /* "--save" */
  const char *path;
} cli_path;

/* files: output files (replaced atomically at the end); dirs: output
 * directories, of which the first two (backup and checkpoint) may not be the
 * same or nested, and no file may be inside the first (the backup, deleted
 * when training completes); inputs: files read (absent ones skipped); data_dir: a
 * directory of IDX inputs (its MNIST file names, plain and .gz, become
 * inputs) or NULL. Prints "strata CMD: OPT PATH: ..." naming both paths of a
 * clash and returns false on the first problem (exit 2: nothing written). */
bool cli_check_outputs(const char *cmd, const cli_path *files, int nfiles, const cli_path *dirs,
                       int ndirs, const cli_path *inputs, int ninputs, const char *data_dir);

#endif
