/* The pipeline's executed schedule, replayed on a logical clock: every stage
 * records the order in which it ran its passes (forward k as k+1, backward k
 * as -(k+1)); each pass takes one time unit and starts when the stage is free
 * and its input is there (forward k of stage s after forward k of stage s-1;
 * backward k after backward k of stage s+1, or after its own forward k on the
 * last stage). A stage's idle fraction is 1 - 2M / makespan: for GPipe (and
 * 1F1B) with S stages and M micro-batches the makespan is 2(M+S-1) and the
 * idle fraction (S-1)/(M+S-1), the bubble of the GPipe paper, independent of
 * how fast this machine happened to be. The in-flight count of a stage is its
 * forwards done minus backwards done, at most M for GPipe, S-s for 1F1B. */
#include <stdlib.h>

#include "distribute/pipeline.h"

st_status st__pipe_replay(int S, int M, const int *log, double *idle, int *in_flight) {
  size_t n = (size_t)S * (size_t)M;
  long *fend = malloc(sizeof(long) * n), *bend = malloc(sizeof(long) * n);
  int *pos = calloc((size_t)S, sizeof(int));
  long *free_at = calloc((size_t)S, sizeof(long));
  st_status st = ST_OK;
  if (!fend || !bend || !pos || !free_at) {
    st = st_error(ST_ERR_NOMEM, "pipeline: out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) fend[i] = bend[i] = -1;
  long makespan = 0;
  for (int left = 2 * S * M; left > 0;) { /* run every pass whose input is ready */
    int ran = 0;
    for (int s = 0; s < S; s++) {
      if (pos[s] == 2 * M) continue;
      int e = log[(size_t)s * 2 * (size_t)M + (size_t)pos[s]], k = (e > 0 ? e : -e) - 1;
      long dep;
      if (e > 0) dep = s ? fend[(size_t)(s - 1) * (size_t)M + (size_t)k] : 0;
      else dep = s < S - 1 ? bend[(size_t)(s + 1) * (size_t)M + (size_t)k]
                           : fend[(size_t)s * (size_t)M + (size_t)k];
      if (dep < 0) continue;
      long t = (dep > free_at[s] ? dep : free_at[s]) + 1;
      (e > 0 ? fend : bend)[(size_t)s * (size_t)M + (size_t)k] = t;
      free_at[s] = t;
      if (t > makespan) makespan = t;
      pos[s]++, left--, ran++;
    }
    if (!ran) {
      st = st_error(ST_ERR_INTERNAL, "pipeline: the executed schedule cannot be replayed (a pass "
                    "before its input)");
      goto done;
    }
  }
  for (int s = 0; s < S; s++) {
    idle[s] = makespan ? 1.0 - 2.0 * M / (double)makespan : 0.0;
    int f = 0, b = 0, mx = 0;
    for (int i = 0; i < 2 * M; i++) {
      if (log[(size_t)s * 2 * (size_t)M + (size_t)i] > 0) f++;
      else b++;
      if (f - b > mx) mx = f - b;
    }
    in_flight[s] = mx;
  }
done:
  free(fend), free(bend), free(pos), free(free_at);
  return st;
}
