/* The outputs every process of a multi-process job (MPI: pipeline,
 * multi_worker_mirrored) must be given alike (issue 29 D14): --save,
 * --backup-dir and --checkpoint-dir given to one rank only made the ranks
 * run different exchanges (the chief streams every stage's tensors, the
 * others serve them) and they waited for each other until
 * --collective-timeout ("rank 0 did not join receive #41 ..."), blaming a
 * rank that had not died. Each process's set of such flags is exchanged
 * (st_strategy_reduce over a vector with one entry per rank) after the model
 * is built, before anything runs; a difference is exit 2 on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_check_rank_flags(const char *cmd, st_strategy *s, const char *const *opts,
                         const bool *given, int n) {
  int w = st_strategy_worker_count(s), me = st_strategy_worker_rank(s);
  if (w <= 1 || n > 24) return EXIT_OK;
  /* per_replica: this process's replicas' vectors (only the first set) */
  float *v = calloc((size_t)ST_MAX_REPLICAS * (size_t)w, sizeof *v), *all = calloc((size_t)w, sizeof *all);
  if (!v || !all) {
    free(v), free(all);
    fprintf(stderr, "strata %s: out of memory\n", cmd);
    return EXIT_FAIL;
  }
  int mask = 0;
  for (int i = 0; i < n; i++) mask |= given[i] ? 1 << i : 0;
  v[me] = (float)mask;
  st_status st = st_strategy_reduce(s, ST_REDUCE_SUM, v, (size_t)w, all);
  int rc = st == ST_OK ? EXIT_OK : cli_fail(cmd, st);
  for (int r = 1; rc == EXIT_OK && r < w; r++) {
    int a = (int)all[0], b = (int)all[r];
    for (int i = 0; i < n && rc == EXIT_OK; i++)
      if (((a ^ b) >> i) & 1) {
        fprintf(stderr, "strata %s: %s is given to rank %d but not to rank %d: every process of "
                "the job must be given the same outputs (the chief writes them, the others send "
                "it their share)\n", cmd, opts[i], (b >> i) & 1 ? r : 0, (b >> i) & 1 ? 0 : r);
        rc = EXIT_USAGE;
      }
  }
  free(v), free(all);
  return rc;
}
