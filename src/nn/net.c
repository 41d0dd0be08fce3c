/* The network's derived figures (output shape and size, largest activation,
 * whether a layer runs collectives) and the seeded initialisation of its
 * variables. Pure functions of the net; any thread. */
#include "nn/net.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>

st_shape st__net_output_shape(const st_net *m) {
  if (m->n_outputs > 1) { /* the outputs' concatenation */
    size_t w = 0;
    for (int j = 0; j < m->n_outputs; j++) w += st__net_out_size(m, j);
    return st_shape1((int64_t)w);
  }
  return m->nnodes ? st__net_tensor_shape(m, m->output) : m->input_shape;
}

size_t st__net_output_size(const st_net *m) {
  return st_shape_size(st__net_output_shape(m));
}

size_t st__net_loss_positions(const st_net *m) {
  if (!st_loss_is_sparse(m->loss)) return 1;
  st_shape o = st__net_output_shape(m);
  return o.rank > 1 ? st_shape_size(o) / (size_t)o.dims[o.rank - 1] : 1;
}

int st__net_loss_cols(const st_net *m) {
  return (int)(st__net_output_size(m) / st__net_loss_positions(m));
}

size_t st__net_label_size(const st_net *m) {
  return st_loss_is_sparse(m->loss) ? st__net_loss_positions(m) : st__net_output_size(m);
}

void st__net_loss(const st_net *m, st_backend_ctx *ctx, int n, const float *out, const float *y,
                  float scale, float *loss_rows, float *dy) {
  size_t P = st__net_loss_positions(m);
  ctx->be->loss(ctx, m->loss, (int)((size_t)n * P), st__net_loss_cols(m), out, y,
                scale / (float)P, loss_rows, dy);
  if (P == 1) return;
  bool host = st__be_is_host(ctx->be);
  float *rows = host ? loss_rows : malloc((size_t)n * P * sizeof(float) + sizeof(float));
  if (!rows) { /* out of host memory: the device's rows stay per position */
    ctx->be->fill(ctx, (size_t)n, NAN, loss_rows);
    return;
  }
  if (!host) st__be_to_host(ctx, rows, loss_rows, (size_t)n * P * sizeof(float));
  for (int i = 0; i < n; i++) { /* in place: row i reads [i*P, i*P + P), all >= i */
    double s = 0.0;
    for (size_t p = 0; p < P; p++) s += rows[(size_t)i * P + p];
    rows[i] = (float)(s / (double)P);
  }
  if (!host) {
    st__be_to_device(ctx, loss_rows, rows, (size_t)n * sizeof(float));
    st__be_synchronize(ctx);
    free(rows);
  }
}
static st_status check_output_labels(const st_net *m, const float *y, int n, int64_t first);

st_status st__net_check_labels(const st_net *m, const float *y, int n, int64_t first) {
  if (m->n_outputs > 1) return check_output_labels(m, y, n, first);
  if (!st_loss_is_sparse(m->loss)) return ST_OK;
  int64_t classes = st__net_loss_cols(m);
  size_t P = st__net_loss_positions(m);
  for (size_t i = 0; i < (size_t)n * P; i++) {
    float v = y[i];
    if (!(v >= 0.0f && v < (float)classes) || v != (float)(int64_t)v) {
      char pos[48] = "";
      if (P > 1) snprintf(pos, sizeof pos, " at position %zu", i % P);
      return st_error(ST_ERR_INVALID, "label %g of example %lld%s is not a class index in "
                      "[0, %lld) for a model with %lld outputs", (double)v,
                      (long long)(first + (int64_t)(i / P)), pos, (long long)classes,
                      (long long)classes);
    }
  }
  return ST_OK;
}

/* Several outputs: each sparse output's labels are class indices. */
static st_status check_output_labels(const st_net *m, const float *y, int n, int64_t first) {
  size_t lw = st__net_label_width(m), at = 0;
  for (int j = 0; j < m->n_outputs; j++) {
    int64_t classes = (int64_t)st__net_out_size(m, j);
    for (int i = 0; st_loss_is_sparse(m->out_loss[j]) && i < n; i++) {
      float v = y[(size_t)i * lw + at];
      if (!(v >= 0.0f && v < (float)classes) || v != (float)(int64_t)v)
        return st_error(ST_ERR_INVALID, "label %g of output %d of example %lld is not a class "
                        "index in [0, %lld)", (double)v, j, (long long)(first + i),
                        (long long)classes);
    }
    at += st__net_out_label_width(m, j);
  }
  return ST_OK;
}

/* Floats per example label: the positions for sparse losses, the outputs
 * otherwise; several outputs: their labels side by side. */
static size_t label_width(const st_net *m) { return st__net_label_width(m); }

int64_t st__net_example_class(const st_net *m, const float *y) {
  size_t w = label_width(m);
  if (w == 1) return (int64_t)nearbyintf(y[0]); /* tf.round: half to even */
  size_t best = 0;
  for (size_t j = 1; j < w; j++)
    if (y[j] > y[best]) best = j;
  return (int64_t)best;
}

st_status st__net_check_classes(const st_net *m, const float *y, int n, int64_t first) {
  if (!m->class_weight) return ST_OK;
  size_t w = label_width(m);
  for (int i = 0; i < n; i++) {
    const float *row = y + (size_t)i * w;
    double cls = w > 1 ? (double)st__net_example_class(m, row) : (double)nearbyint(row[0]);
    if (!(cls >= 0.0 && cls < (double)m->n_class_weight))
      return st_error(ST_ERR_INVALID, "class_weight: example %lld has class %g, which has no "
                      "weight (class_weight covers classes 0 to %d)", (long long)(first + i),
                      cls, m->n_class_weight - 1);
  }
  return ST_OK;
}

void st__net_apply_example_weights(const st_net *m, st_replica *r, const float *y, int n,
                                 int cols, float *loss, float *dpred) {
  if (!m->class_weight && !m->sample_weights) return;
  size_t w = label_width(m);
  size_t first = m->sample_weights ? (size_t)(y - m->sample_labels) / w : 0;
  for (int i = 0; i < n; i++) {
    float cw = m->sample_weights ? m->sample_weights[first + (size_t)i]
                                 : m->class_weight[st__net_example_class(m, y + (size_t)i * w)];
    if (loss) loss[i] *= cw;
    if (dpred) r->be->scale(r->ctx, (size_t)cols, cw, dpred + (size_t)i * (size_t)cols);
  }
}

bool st__net_uses_collectives(const st_net *m) {
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i]->uses_collectives) return true;
  return false;
}

size_t st__net_max_activation(const st_net *m) {
  size_t mx = st_shape_size(m->input_shape);
  for (int i = 0; i < m->nlayers; i++) {
    size_t s = st_shape_size(m->layers[i]->out_shape);
    for (int j = 0; j < m->layers[i]->n_inputs; j++) /* a model input's gradient */
      if (st_shape_size(m->layers[i]->in_shapes[j]) > s) s = st_shape_size(m->layers[i]->in_shapes[j]);
    if (s > mx) mx = s;
  }
  return mx;
}

void st__net_init_variables(const st_net *m, float *params, float *state) {
  st__net_init_layers(m, 0, m->nlayers, params, state);
}

void st__net_init_layers(const st_net *m, int lo, int hi, float *params, float *state) {
  for (int i = lo; i < hi; i++) {
    const st_layer *l = m->layers[i];
    for (int p = 0; p < l->nparams; p++) {
      bool own = (l->init_seeded >> p) & 1u;
      st_rng rng = own ? st_rng_make(l->init_seed[p], (uint64_t)p)
                       : st_rng_make(m->init_seed, st__layer_init_stream(i, p));
      st__init_fill(l->params[p].init, l->params[p].shape,
                    st__var_ptr(l, p, params, state), &rng);
    }
  }
}

st_status st__net_check_inputs(const st_net *m, const float *x, int n, int64_t first) {
  size_t row = st_shape_size(m->input_shape);
  for (int k = 0; k < m->nnodes; k++)
    for (int j = 0; j < m->nodes[k].n_in; j++) {
      int t = m->nodes[k].in[j];
      if (t >= 0) continue;
      const st_layer *l = m->layers[m->nodes[k].layer];
      if (!l->vt->check_input) continue;
      if (m->n_inputs == 1) {
        st_status s = st__layer_check_input(l, x, n, first);
        if (s != ST_OK) return s;
        continue;
      }
      size_t at = 0; /* input -1 - t's place in an example's row */
      for (int q = 0; q < -1 - t; q++) at += st_shape_size(m->inputs[q]);
      for (int i = 0; i < n; i++) {
        st_status s = st__layer_check_input(l, x + (size_t)i * row + at, 1, first + i);
        if (s != ST_OK) return s;
      }
    }
  return ST_OK;
}
