/* Internal: the reduction every process transport ends with: elements summed
 * in rank order 0, 1, ..., size-1, whatever order the parts arrived in, so
 * results are bit-identical on every rank, from run to run and from one
 * transport to another (MPI messages, MPI shared memory, Gloo). Pure; any
 * thread. */
#ifndef STRATA_DISTRIBUTE_COLLECTIVE_RANK_SUM_H
#define STRATA_DISTRIBUTE_COLLECTIVE_RANK_SUM_H

#include <stddef.h>

#include "strata/distribute.h" /* st_reduce_op */

/* out[0, len) = src[0] + src[1] + ... + src[size-1], element by element in
 * that order, times 1/size for MEAN (out may be one of the sources); the
 * same into copy[0, len) unless copy is NULL. */
void st__sum_in_rank_order(float *out, float *copy, const float *const *src, int size,
                           size_t len, st_reduce_op op);

#endif
