/* Internal: the even split of `total` items over n parts that every strategy
 * and transport uses (batch slices over replicas, buffer chunks over ranks):
 * part i gets [total*i/n, total*(i+1)/n), so sizes differ by at most one and
 * a part may be empty. Pure; any thread. */
#ifndef STRATA_BASE_SPLIT_H
#define STRATA_BASE_SPLIT_H

#include <stdint.h>

/* Slice i of a batch of `total` examples over n replicas. */
static inline void st__split(int total, int n, int i, int *start, int *count) {
  int lo = (int)((int64_t)total * i / n), hi = (int)((int64_t)total * (i + 1) / n);
  *start = lo;
  *count = hi - lo;
}

#endif
