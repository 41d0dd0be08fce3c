/* Internal: the gradient reducer of the mirrored strategies. Gradients are
 * packed into buckets of about bytes_per_pack bytes (0 = one bucket), made of
 * whole layers taken from the last layer backwards, since backward produces
 * them in that order. With overlap on, each replica has a communication thread
 * with its own collective: a bucket's all-reduce (SUM) starts as soon as
 * backward has finished the bucket's first layer, while backward goes on with
 * earlier layers (the net's params are laid out in layer order, so a bucket
 * is one contiguous range of the flat gradient buffer). With overlap off the
 * buckets are all-reduced one after another once backward is done. Either
 * way the reduced values are the same bytes: buckets and overlap only change
 * when each sum is taken, never which values are added nor in what order. */
#ifndef STRATA_DISTRIBUTE_REDUCER_H
#define STRATA_DISTRIBUTE_REDUCER_H

#include "distribute/collective/collective.h"
#include "nn/net.h"

typedef struct st_bucket {
  size_t lo, len;  /* floats of the gradient buffer */
  int first_layer; /* ready when this layer's backward is done */
} st_bucket;

typedef struct st_reducer st_reducer;

/* For n replicas of m; grads[i] is replica i's gradient buffer. net (borrowed,
 * may be NULL): a process transport the buckets are also reduced across.
 * device_ctxs (NULL: host memory): the gradients are device memory of
 * replica i's context device_ctxs[i], staged through the host (overlap must
 * then be false: the buckets are reduced after backward). */
st_status st__reducer_create(const st_net *m, int n, float *const *grads, size_t bytes_per_pack,
                             bool overlap, st_cross_device_ops algo, st_collective *net,
                             st_backend_ctx *const *device_ctxs, st_reducer **out);
void st__reducer_destroy(st_reducer *r); /* accepts NULL; joins the threads */
int st__reducer_bucket_count(const st_reducer *r);
const st_bucket *st__reducer_bucket(const st_reducer *r, int k);

/* Replica `rank`'s compute thread: layer_done is the st_grads_ready_fn of
 * backward (ctx from st__reducer_ctx); finish returns once every bucket of
 * this step is reduced. */
void *st__reducer_ctx(st_reducer *r, int rank);
void st__reducer_layer_done(void *ctx, int layer);
st_status st__reducer_finish(st_reducer *r, int rank);

#endif
