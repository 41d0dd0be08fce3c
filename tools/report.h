/* The --report JSON writer of the strata CLI. */
#ifndef STRATA_TOOLS_REPORT_H
#define STRATA_TOOLS_REPORT_H
#include "strata/strata.h"

typedef struct report_info {
  const char *model, *strategy, *optimizer;
  int replicas, batch;
  uint64_t seed;
  double lr;
  int64_t n_train, n_val;
  const st_history *history;
  st_eval_result test;
  double wall_seconds;
  const st_strategy *pipeline; /* pipeline: per-stage figures (may be NULL) */
} report_info;

/* Write the report over path atomically (st_write_file_atomic): 0 on success; -1 if
 * the file could not be written (st_last_error says why; an old file at path
 * is left as it was). */
int report_write(const char *path, const report_info *r);
/* report_write with one more member: name = the JSON object extra_json (text). */
int report_write_extra(const char *path, const report_info *r, const char *name,
                       const char *extra_json);
#endif
