/* Models with several outputs (Keras's Model(inputs, [a, b]) compiled with
 * loss=[...], loss_weights=[...]): the layout of the concatenated output
 * and label rows, and the replica's part — gathering the outputs into one
 * row per example, each output's loss against its own labels scaled by its
 * weight, and each output's gradient written to the gradient slot the
 * backward walk starts from (st_exec.n_seed). Host memory only (compile
 * refuses device backends for such models). The replica's thread. */
#include <stdlib.h>
#include <string.h>

#include "nn/net.h"

size_t st__net_out_size(const st_net *m, int j) {
  return st_shape_size(st__net_tensor_shape(m, m->outputs[j]));
}

size_t st__net_out_label_width(const st_net *m, int j) {
  return st_loss_is_sparse(m->out_loss[j]) ? 1 : st__net_out_size(m, j);
}

size_t st__net_label_width(const st_net *m) {
  if (m->n_outputs <= 1) return st__net_label_size(m); /* positions of a sparse loss */
  size_t w = 0;
  for (int j = 0; j < m->n_outputs; j++) w += st__net_out_label_width(m, j);
  return w;
}

/* Output j's columns of the concatenated rows, and its labels' columns. */
static void out_offsets(const st_net *m, int j, size_t *col, size_t *lab) {
  *col = *lab = 0;
  for (int q = 0; q < j; q++) {
    *col += st__net_out_size(m, q);
    *lab += st__net_out_label_width(m, q);
  }
}

/* dst [n, w] = columns [at, at + w) of src [n, row]. */
static void take_cols(float *dst, const float *src, int n, size_t row, size_t at, size_t w) {
  for (int i = 0; i < n; i++)
    memcpy(dst + (size_t)i * w, src + (size_t)i * row + at, w * sizeof(float));
}

st_status st__replica_outputs_alloc(const st_net *m, st_replica *r, int n) {
  if (m->n_outputs <= 1) return ST_OK;
  size_t mx = 1, per = n > 0 ? (size_t)n : 1;
  for (int j = 0; j < m->n_outputs; j++)
    if (st__net_out_size(m, j) > mx) mx = st__net_out_size(m, j);
  r->outcat = r->be->alloc(r->ctx, per * st__net_output_size(m) * sizeof(float));
  r->ylab = r->be->alloc(r->ctx, per * mx * sizeof(float));
  r->out_rows = r->be->alloc(r->ctx, per * sizeof(float));
  return r->outcat && r->ylab && r->out_rows ? ST_OK : ST_ERR_NOMEM;
}

void st__replica_outputs_free(st_replica *r) {
  r->be->free(r->ctx, r->outcat);
  r->be->free(r->ctx, r->ylab);
  r->be->free(r->ctx, r->out_rows);
  r->outcat = r->ylab = r->out_rows = NULL;
}

const float *st__replica_outputs_gather(const st_net *m, st_replica *r, int n) {
  size_t row = st__net_output_size(m), at = 0;
  for (int j = 0; j < m->n_outputs; j++) {
    size_t w = st__net_out_size(m, j);
    const float *src = r->acts[m->outputs[j]];
    for (int i = 0; i < n; i++)
      memcpy(r->outcat + (size_t)i * row + at, src + (size_t)i * w, w * sizeof(float));
    at += w;
  }
  return r->outcat;
}

double st__replica_outputs_loss(const st_net *m, st_replica *r, const float *y, int n,
                                float scale, bool grads) {
  size_t lw = st__net_label_width(m);
  for (int i = 0; i < n; i++) r->loss_rows[i] = 0.0f;
  for (int j = 0; j < m->n_outputs; j++) {
    size_t col, lab, w = st__net_out_label_width(m, j);
    out_offsets(m, j, &col, &lab);
    take_cols(r->ylab, y, n, lw, lab, w);
    r->be->loss(r->ctx, m->out_loss[j], n, (int)st__net_out_size(m, j), r->acts[m->outputs[j]],
                r->ylab, scale * m->out_weight[j], r->out_rows, grads ? r->gslots[j] : NULL);
    for (int i = 0; i < n; i++) r->loss_rows[i] += m->out_weight[j] * r->out_rows[i];
  }
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += r->loss_rows[i];
  return sum;
}

void st__replica_outputs_scatter_dy(const st_net *m, st_replica *r, const float *dy, int n) {
  size_t row = st__net_output_size(m);
  for (int j = 0; j < m->n_outputs; j++) {
    size_t col, lab;
    out_offsets(m, j, &col, &lab);
    take_cols(r->gslots[j], dy, n, row, col, st__net_out_size(m, j));
  }
}

void st__replica_outputs_grads_out(const st_net *m, st_replica *r, float *dy, int n) {
  size_t row = st__net_output_size(m);
  for (int j = 0; j < m->n_outputs; j++) {
    size_t col, lab, w = st__net_out_size(m, j);
    out_offsets(m, j, &col, &lab);
    for (int i = 0; i < n; i++)
      memcpy(dy + (size_t)i * row + col, r->gslots[j] + (size_t)i * w, w * sizeof(float));
  }
}

void st__exec_seed_outputs(const st_net *m, st_exec *e) {
  if (m->n_outputs <= 1) return;
  e->n_seed = m->n_outputs;
  for (int j = 0; j < m->n_outputs; j++) e->seed_id[j] = m->outputs[j];
}

void st__net_outputs_metrics(const st_net *m, const float *pred, const float *y, int rows,
                             double *loss, int64_t *correct, int64_t *count) {
  size_t row = st__net_output_size(m), lw = st__net_label_width(m), mx = 1;
  for (int j = 0; j < m->n_outputs; j++)
    if (st__net_out_size(m, j) > mx) mx = st__net_out_size(m, j);
  float *p = malloc((size_t)rows * mx * sizeof(float));
  float *t = malloc((size_t)rows * mx * sizeof(float));
  float *l = malloc((size_t)rows * sizeof(float));
  ST_ASSERT(p && t && l);
  const st_backend *ref = st_backend_reference(); /* host loops: the ctx is not read */
  for (int j = 0; j < m->n_outputs; j++) {
    size_t col, lab, w = st__net_out_size(m, j), yw = st__net_out_label_width(m, j);
    out_offsets(m, j, &col, &lab);
    take_cols(p, pred, rows, row, col, w);
    take_cols(t, y, rows, lw, lab, yw);
    ref->loss(NULL, m->out_loss[j], rows, (int)w, p, t, 1.0f, l, NULL);
    for (int i = 0; i < rows; i++) loss[j] += l[i];
    if (m->nmetrics == 0) continue;
    st_metric_kind k = m->metrics[0];
    correct[j] += st_metric_correct(k, m->out_loss[j], rows, (int)w, p, t);
    bool binary = k == ST_METRIC_BINARY_ACCURACY ||
                  (k == ST_METRIC_ACCURACY &&
                   (m->out_loss[j] == ST_LOSS_BCE || m->out_loss[j] == ST_LOSS_BCE_LOGITS));
    count[j] += binary ? (int64_t)rows * (int64_t)w : rows;
  }
  free(p), free(t), free(l);
}
