/* The pieces of one synchronous step (step.h): sums, slices, the replica
 * step and the ranged optimizer update. */
#include "distribute/step.h"

#include "base/split.h"

#include <stdlib.h>

void st__step_metrics(const st_net *m, const float *pred, const float *y,
                      int rows, st_step_stats *out) {
  if (rows > 0 && y && m->n_outputs > 1) {
    int64_t c[ST_NET_MAX_IO] = {0}, k[ST_NET_MAX_IO] = {0};
    st__net_outputs_metrics(m, pred, y, rows, out->out_loss, c, k);
    out->out_rows += rows;
    for (int j = 0; j < m->n_outputs; j++) {
      out->out_correct[j] += c[j], out->out_count[j] += k[j];
      out->correct += c[j], out->metric_count += k[j];
    }
    return;
  }
  if (rows <= 0 || m->nmetrics == 0 || !y) return; /* y NULL: no labels (predict) */
  int cols = st__net_loss_cols(m);
  rows *= (int)st__net_loss_positions(m); /* sparse over [T, classes]: every position */
  st_metric_kind k = m->metrics[0];
  out->correct += st_metric_correct(k, m->loss, rows, cols, pred, y);
  bool binary = k == ST_METRIC_BINARY_ACCURACY ||
                (k == ST_METRIC_ACCURACY && (m->loss == ST_LOSS_BCE ||
                                             m->loss == ST_LOSS_BCE_LOGITS));
  out->metric_count += binary ? (int64_t)rows * cols : rows;
}

st_batch st__batch_rows(const st_net *m, const st_batch *b, int start, int count) {
  size_t xs = st_shape_size(m->input_shape);
  size_t ys = st__net_label_width(m);
  return (st_batch){count, b->x ? b->x + (size_t)start * xs : NULL,
                    b->y ? b->y + (size_t)start * ys : NULL};
}

st_batch st__batch_slice(const st_net *m, const st_batch *b, int parts, int i, int *start) {
  int first, count;
  st__split(b->size, parts, i, &first, &count);
  if (start) *start = first;
  return st__batch_rows(m, b, first, count);
}

void st__replica_step(const st_net *m, st_replica *r, const st_batch *slice, int64_t global,
                      bool must_run, st_grads_ready_fn ready, void *ready_ctx,
                      st_step_stats *out) {
  const float *kept = NULL; /* a device's outputs, read after backward */
  if (slice->size || must_run) {
    const float *pred = st__replica_forward(m, r, slice->x, slice->size, true, m->step);
    if (m->nmetrics && slice->y && slice->size &&
        !(kept = st__replica_keep_output(m, r, pred, slice->size)))
      st__step_metrics(m, st__replica_output_host(m, r, pred, slice->size), slice->y, slice->size, out);
  }
  out->loss_sum += st__replica_loss_backward(m, r, slice->x, slice->y, slice->size, global,
                                             m->step, ready, ready_ctx);
  if (kept)
    st__step_metrics(m, st__replica_output_host(m, r, kept, slice->size), slice->y, slice->size, out);
  out->examples += slice->size;
}

void st__clip_grads(const st_net *m, st_backend_ctx *ctx, float *grads) {
  if (!(m->optimizer.global_clipnorm > 0.0f)) return;
  double ss = 0.0;
  const float *h = grads;
  float *copy = NULL;
  if (ctx->be->to_device) { /* device memory: read a host copy */
    copy = malloc(m->n_params * sizeof(float) + 1);
    ST_ASSERT(copy);
    st__be_to_host(ctx, copy, grads, m->n_params * sizeof(float));
    h = copy;
  }
  for (size_t i = 0; i < m->n_params; i++) ss += (double)h[i] * (double)h[i];
  free(copy);
  float f = st_optimizer_clip_factor(&m->optimizer, ss);
  if (f != 1.0f) ctx->be->scale(ctx, m->n_params, f, grads);
}

void st__apply_range(const st_net *m, st_backend_ctx *ctx, float *params, const float *grads,
                     float *const *slots, size_t slot_off, size_t len) {
  float *at[4] = {0};
  for (int k = 0; k < m->n_slots; k++) at[k] = slots[k] + slot_off;
  st_optimizer_apply(&m->optimizer, ctx, m->step, len, params, grads, at);
}
