/* The rank-order sum of the process transports (rank_sum.h). */
#include "distribute/collective/rank_sum.h"

#include <string.h>

void st__sum_in_rank_order(float *out, float *copy, const float *const *src, int size,
                           size_t len, st_reduce_op op) {
  enum { BLOCK = 1024 };
  float acc[BLOCK], f = 1.0f / (float)size;
  for (size_t lo = 0; lo < len; lo += BLOCK) {
    size_t nb = len - lo < BLOCK ? len - lo : BLOCK;
    memcpy(acc, src[0] + lo, nb * sizeof(float));
    for (int j = 1; j < size; j++)
      for (size_t e = 0; e < nb; e++) acc[e] += src[j][lo + e];
    if (op == ST_REDUCE_MEAN)
      for (size_t e = 0; e < nb; e++) acc[e] *= f;
    memcpy(out + lo, acc, nb * sizeof(float));
    if (copy) memcpy(copy + lo, acc, nb * sizeof(float));
  }
}
