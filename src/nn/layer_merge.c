/* Merge layers (Keras classes Add, Subtract, Multiply, Concatenate): layers of
 * several inputs xs[j] [batch, in_shapes[j]] (see nn/layer.h). Add and
 * Subtract go through the backend (copies as the identity activation, axpy,
 * scale); Concatenate copies row blocks with the identity activation, so all
 * three run on any backend. Multiply's element-wise products are plain loops
 * over the buffers (valid for host backends: cpu, reference; a device backend
 * needs a kernel for them). No Keras broadcasting: shapes must match. */
#include <stdio.h>

#include "base/args.h"
#include "nn/layer.h"

typedef enum merge_kind { M_ADD = 0, M_SUB, M_MUL, M_CONCAT } merge_kind;

typedef struct merge_config {
  merge_kind kind;
  int axis;              /* Concatenate: as given (Keras counting) */
  int a;                 /* Concatenate: per-example axis, set by build */
  int64_t outer;         /* Concatenate: per-example product of dims before a */
  int64_t inner[ST_LAYER_MAX_INPUTS]; /* Concatenate: input j's floats per outer row */
} merge_config;

/* "Add 'res_1'" or "Add" when the layer has no name yet. */
static const char *who(const st_layer *l, char *buf, size_t n) {
  if (l->name[0])
    snprintf(buf, n, "%s '%s'", l->vt->class_name, l->name);
  else
    snprintf(buf, n, "%s", l->vt->class_name);
  return buf;
}

static st_status mismatch(const st_layer *l, int j, const char *what) {
  char w[96], a[64], b[64];
  return st_error(ST_ERR_INVALID, "%s: input %d has shape %s, input 0 %s%s", who(l, w, sizeof w),
                  j, st_shape_format(l->in_shapes[j], a, sizeof a),
                  st_shape_format(l->in_shapes[0], b, sizeof b), what);
}

static st_status same_build(st_layer *l) {
  for (int j = 1; j < l->n_inputs; j++)
    if (!st_shape_equal(l->in_shapes[j], l->in_shapes[0])) return mismatch(l, j, "");
  l->out_shape = l->in_shapes[0];
  return ST_OK;
}

static st_status concat_build(st_layer *l) {
  merge_config *mc = l->config;
  int r = l->in_shapes[0].rank;
  char w[96], a[64];
  if (mc->axis == 0 || mc->axis < -r || mc->axis > r)
    return st_error(ST_ERR_INVALID, "%s: axis %d does not fit the input shape %s (the "
                    "batch axis 0 cannot be concatenated; valid: 1..%d or -%d..-1)",
                    who(l, w, sizeof w), mc->axis,
                    st_shape_format(l->in_shapes[0], a, sizeof a), r, r);
  mc->a = mc->axis < 0 ? r + mc->axis : mc->axis - 1;
  st_shape out = l->in_shapes[0];
  out.dims[mc->a] = 0;
  for (int j = 0; j < l->n_inputs; j++) {
    st_shape s = l->in_shapes[j];
    bool ok = s.rank == r;
    for (int d = 0; ok && d < r; d++) ok = d == mc->a || s.dims[d] == out.dims[d];
    if (!ok) return mismatch(l, j, mc->axis == -1 ? "" : " (on axes other than the concat axis)");
    out.dims[mc->a] += s.dims[mc->a];
  }
  mc->outer = 1;
  for (int d = 0; d < mc->a; d++) mc->outer *= out.dims[d];
  for (int j = 0; j < l->n_inputs; j++)
    mc->inner[j] = (int64_t)(st_shape_size(l->in_shapes[j]) / (size_t)mc->outer);
  l->out_shape = out;
  return ST_OK;
}

static size_t n_of(const st_layer *l, const st_layer_args *c) {
  return (size_t)c->batch * st_shape_size(l->out_shape);
}

/* dst[n] = src[n] (the identity activation is the backend's copy). */
static void copy(const st_layer_args *c, size_t rows, size_t cols, const float *src,
                 float *dst) {
  if (rows && cols) c->be->act_forward(c->ctx, ST_ACT_LINEAR, (int)rows, (int)cols, src, dst);
}

static void sum_forward(const st_layer *l, st_layer_args *c) {
  const merge_config *mc = l->config;
  size_t n = n_of(l, c);
  if (!n) return;
  copy(c, 1, n, c->xs[0], c->y);
  for (int j = 1; j < l->n_inputs; j++)
    c->be->axpy(c->ctx, n, mc->kind == M_SUB ? -1.0f : 1.0f, c->xs[j], c->y);
}

static void sum_backward(const st_layer *l, st_layer_args *c) {
  const merge_config *mc = l->config;
  size_t n = n_of(l, c);
  for (int j = 0; n && j < l->n_inputs; j++) {
    if (!c->dxs[j]) continue;
    copy(c, 1, n, c->dy, c->dxs[j]);
    if (mc->kind == M_SUB && j == 1) c->be->scale(c->ctx, n, -1.0f, c->dxs[j]);
  }
}

/* Host loops (see the file comment). */
static void mul_forward(const st_layer *l, st_layer_args *c) {
  size_t n = n_of(l, c);
  for (size_t i = 0; i < n; i++) {
    float p = c->xs[0][i];
    for (int j = 1; j < l->n_inputs; j++) p *= c->xs[j][i];
    c->y[i] = p;
  }
}

/* dxs[j] = dy * prod over k != j of xs[k] (no division: zeros are fine). */
static void mul_backward(const st_layer *l, st_layer_args *c) {
  size_t n = n_of(l, c);
  for (int j = 0; j < l->n_inputs; j++) {
    float *dx = c->dxs[j];
    if (!dx) continue;
    for (size_t i = 0; i < n; i++) {
      float p = c->dy[i];
      for (int k = 0; k < l->n_inputs; k++)
        if (k != j) p *= c->xs[k][i];
      dx[i] = p;
    }
  }
}

/* y[row, off_j + (0..inner_j)] = xs[j][row, 0..inner_j] for each of the
 * batch*outer rows; backward is the same copy the other way. */
static void concat_copy(const st_layer *l, st_layer_args *c, bool backward) {
  const merge_config *mc = l->config;
  int64_t rows = (int64_t)c->batch * mc->outer, total = 0, off = 0;
  for (int j = 0; j < l->n_inputs; j++) total += mc->inner[j];
  for (int j = 0; j < l->n_inputs; off += mc->inner[j], j++) {
    int64_t in = mc->inner[j];
    if (backward && !c->dxs[j]) continue;
    for (int64_t r = 0; r < rows; r++) {
      if (backward)
        copy(c, 1, (size_t)in, c->dy + r * total + off, c->dxs[j] + r * in);
      else
        copy(c, 1, (size_t)in, c->xs[j] + r * in, c->y + r * total + off);
    }
  }
}

static void concat_forward(const st_layer *l, st_layer_args *c) { concat_copy(l, c, false); }
static void concat_backward(const st_layer *l, st_layer_args *c) { concat_copy(l, c, true); }

static void concat_options(const st_layer *l, st_layer_options *out) {
  out->concat_axis = ((const merge_config *)l->config)->axis;
}

/* Add and Subtract: backward copies dy (and negates it): reads no input and
 * not the output. */
static bool sum_backward_reads(const st_layer *l, bool output) {
  (void)l, (void)output;
  return false;
}

static const st_layer_vtable add_vtable = {
    .class_name = "Add", .base_name = "add", .min_inputs = 2, .max_inputs = ST_LAYER_MAX_INPUTS,
    .build = same_build, .forward = sum_forward, .backward = sum_backward,
    .backward_reads = sum_backward_reads,
};
static const st_layer_vtable subtract_vtable = {
    .class_name = "Subtract", .base_name = "subtract", .min_inputs = 2, .max_inputs = 2,
    .build = same_build, .forward = sum_forward, .backward = sum_backward,
    .backward_reads = sum_backward_reads,
};
static const st_layer_vtable multiply_vtable = {
    .class_name = "Multiply", .base_name = "multiply", .min_inputs = 2,
    .max_inputs = ST_LAYER_MAX_INPUTS, .build = same_build, .forward = mul_forward,
    .backward = mul_backward,
    .host_loops = true,
};
static const st_layer_vtable concatenate_vtable = {
    .class_name = "Concatenate", .base_name = "concatenate", .min_inputs = 2,
    .max_inputs = ST_LAYER_MAX_INPUTS, .build = concat_build, .forward = concat_forward,
    .backward = concat_backward, .get_options = concat_options,
};

static st_status merge_new(const st_layer_vtable *vt, merge_kind kind, int axis,
                           st_layer **out) {
  if (!out) return st_error(ST_ERR_INVALID, "%s: out is NULL", vt->class_name);
  merge_config mc = {.kind = kind, .axis = axis};
  return st__layer_new(vt, &mc, sizeof mc, NULL, out);
}

/* New unbuilt merge layers (caller owns them until added to a model). */
st_status st_add(st_layer **out) {
  ST_REQUIRE(out);
  return merge_new(&add_vtable, M_ADD, 0, out);
}
st_status st_subtract(st_layer **out) {
  ST_REQUIRE(out);
  return merge_new(&subtract_vtable, M_SUB, 0, out);
}
st_status st_multiply(st_layer **out) {
  ST_REQUIRE(out);
  return merge_new(&multiply_vtable, M_MUL, 0, out);
}

/* axis 0 (the batch axis) is refused here; an axis beyond the input's rank
 * when the layer is built. */
st_status st_concatenate(int axis, st_layer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  if (axis == 0 || axis < -ST_MAX_RANK || axis > ST_MAX_RANK)
    return st_error(ST_ERR_INVALID, "Concatenate: axis %d is not supported (the batch axis 0 "
                    "cannot be concatenated; valid: 1..%d or -%d..-1)", axis, ST_MAX_RANK,
                    ST_MAX_RANK);
  return merge_new(&concatenate_vtable, M_CONCAT, axis, out);
}
