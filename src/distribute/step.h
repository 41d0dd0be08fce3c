/* Internal: the pieces of one synchronous step, written once and used by
 * every strategy and by custom loops (custom_loop.c): the step's loss and
 * metric sums, the batch slice a replica (or a worker, or a micro-batch)
 * takes, the replica step (forward, metrics, loss and backward of one slice)
 * and the optimizer update of a range of the variables. Below the
 * strategies: it calls nothing of theirs. */
#ifndef STRATA_DISTRIBUTE_STEP_H
#define STRATA_DISTRIBUTE_STEP_H

#include "nn/net.h"
#include "strata/distribute.h"

/* Sums over one global batch, reduced across replicas. */
typedef struct st_step_stats {
  double loss_sum;       /* sum of per-example losses */
  int64_t examples;      /* examples in the batch */
  int64_t correct;       /* metric numerator */
  int64_t metric_count;  /* metric denominator */
  /* Several outputs (st_net.n_outputs > 1): per output, the sum of its
   * per-example losses (unweighted) and its metric's numerator and
   * denominator (correct / metric_count are their sums). Summed by
   * st__step_stats_add; strategies that reduce across processes refuse
   * such models. */
  double out_loss[ST_NET_MAX_IO];
  int64_t out_correct[ST_NET_MAX_IO], out_count[ST_NET_MAX_IO];
  int64_t out_rows;      /* the examples out_loss sums over */
} st_step_stats;

/* Work fit gives a training step to run beside the optimizer update, once
 * the batch has been read (assembling the next batch); NULL or fn NULL:
 * none. A strategy that cannot overlap it ignores it (fit then does the work
 * itself: its function records that it ran). It runs on one of the
 * strategy's threads with the floating-point state of the thread that called
 * train_step. */
typedef struct st__side_task {
  void (*fn)(void *arg);
  void *arg;
} st__side_task;

/* out += in (callers add in a fixed order: replica, then worker). */
static inline void st__step_stats_add(st_step_stats *out, const st_step_stats *in) {
  out->loss_sum += in->loss_sum;
  out->examples += in->examples;
  out->correct += in->correct;
  out->metric_count += in->metric_count;
  out->out_rows += in->out_rows;
  for (int j = 0; j < ST_NET_MAX_IO; j++) {
    out->out_loss[j] += in->out_loss[j];
    out->out_correct[j] += in->out_correct[j];
    out->out_count[j] += in->out_count[j];
  }
}

/* global_clipnorm: scale grads [n_params] (host memory) so that their L2 norm
 * is at most the optimizer's global_clipnorm (no-op when off). */
void st__clip_grads(const st_net *m, st_backend_ctx *ctx, float *grads);

/* Metric numerator/denominator for rows of pred against y (y NULL: none). */
void st__step_metrics(const st_net *m, const float *pred, const float *y,
                      int rows, st_step_stats *out);

/* The batch slice: part i of `parts` of b (st__split: contiguous, as even as
 * possible, maybe empty), its rows of x and y (no copy; a NULL x or y stays
 * NULL). *start (may be NULL) gets the slice's first row in b. */
st_batch st__batch_slice(const st_net *m, const st_batch *b, int parts, int i, int *start);
/* Rows [start, start + count) of b (no copy; NULL stays NULL). */
st_batch st__batch_rows(const st_net *m, const st_batch *b, int start, int count);

/* The replica step: forward of slice on r (when it has examples, or when
 * must_run: the model's collectives need every replica), its metric sums,
 * then the loss scaled by 1/global and backward into r->grads (ready, may be
 * NULL, hears each layer whose gradients are final). out gets the slice's
 * loss sum, examples and metric sums (added). */
void st__replica_step(const st_net *m, st_replica *r, const st_batch *slice, int64_t global,
                      bool must_run, st_grads_ready_fn ready, void *ready_ctx,
                      st_step_stats *out);

/* The ranged optimizer update: len floats of params and grads (each pointing
 * at the range's first float), the slot floats from slot_off in each of the
 * net's n_slots slot buffers, at the net's step, with ctx's kernels. */
void st__apply_range(const st_net *m, st_backend_ctx *ctx, float *params, const float *grads,
                     float *const *slots, size_t slot_off, size_t len);

#endif
