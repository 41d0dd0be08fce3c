/* The functional API's symbolic tensors: model inputs (st_input) and calls of
 * layers on them (st_layer_call), which build a layer on its first call and
 * check the shapes of later ones (shared weights). A layer owns its call
 * nodes; the graph becomes a model in src/model/functional.c. Not
 * thread-safe: one thread builds a graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layer.h"

st_status st_input(st_shape shape, const char *name, st_node **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_input: out is NULL");
  *out = NULL;
  if (shape.rank < 1 || shape.rank > ST_MAX_RANK)
    return st_error(ST_ERR_INVALID, "st_input: shape rank %d (expected 1..%d)", shape.rank,
                    ST_MAX_RANK);
  for (int i = 0; i < shape.rank; i++)
    if (shape.dims[i] <= 0)
      return st_error(ST_ERR_INVALID, "st_input: shape dimension %d is %d (must be > 0)", i,
                      shape.dims[i]);
  if (name && strlen(name) >= ST_NAME_MAX)
    return st_error(ST_ERR_INVALID, "st_input: name '%.20s...' is longer than %d bytes", name,
                    ST_NAME_MAX - 1);
  st_node *t = calloc(1, sizeof *t);
  if (!t) return st_error(ST_ERR_NOMEM, "st_input: out of memory");
  t->shape = shape;
  if (name) snprintf(t->name, sizeof t->name, "%s", name);
  *out = t;
  return ST_OK;
}

const char *st__layer_label(const st_layer *l, char *buf, size_t n) {
  if (l->name[0]) snprintf(buf, n, "'%s' (%s)", l->name, l->vt->class_name);
  else snprintf(buf, n, "a %s layer", l->vt->class_name);
  return buf;
}

/* "[28, 28, 1], [10]": the inputs' shapes. */
static const char *shapes(st_node *const *in, int n, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = 0;
  for (int j = 0; j < n && at < cap; j++) {
    char s[64];
    at += (size_t)snprintf(buf + at, cap - at, "%s%s", j ? ", " : "",
                           st_shape_format(in[j]->shape, s, sizeof s));
  }
  return buf;
}

/* Later calls of a built layer: the same count and shapes as its build. */
static st_status check_rebuild(const st_layer *l, st_node *const *in, int n) {
  bool same = n == l->n_inputs;
  for (int j = 0; same && j < n; j++) same = st_shape_equal(in[j]->shape, l->in_shapes[j]);
  if (same) return ST_OK;
  char w[96], a[256], b[64];
  return st_error(ST_ERR_INVALID, "st_layer_call: %s was built for input shape %s and is "
                  "called again on %s (a layer called twice shares its weights: its inputs "
                  "must have the same shapes)", st__layer_label(l, w, sizeof w),
                  st_shape_format(l->in_shape, b, sizeof b), shapes(in, n, a, sizeof a));
}

st_status st_layer_call(st_layer *l, st_node *const *inputs, int n, st_node **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_layer_call: out is NULL");
  *out = NULL;
  if (!l) return st_error(ST_ERR_INVALID, "st_layer_call: l is NULL");
  if (!inputs) return st_error(ST_ERR_INVALID, "st_layer_call: inputs is NULL");
  if (n < 1 || n > ST_LAYER_MAX_INPUTS)
    return st_error(ST_ERR_INVALID, "st_layer_call: n is %d (expected 1..%d)", n,
                    ST_LAYER_MAX_INPUTS);
  for (int j = 0; j < n; j++)
    if (!inputs[j])
      return st_error(ST_ERR_INVALID, "st_layer_call: inputs[%d] is NULL (did the call that "
                      "made it fail? last error: %s)", j, st_last_error());
  char w[96], a[256];
  if (l->in_model)
    return st_error(ST_ERR_INVALID, "st_layer_call: %s belongs to a model (a layer belongs to "
                    "one model; create another)", st__layer_label(l, w, sizeof w));
  st_status s;
  if (l->call_nodes) {
    if ((s = check_rebuild(l, inputs, n)) != ST_OK) return s;
  } else {
    st_shape in[ST_LAYER_MAX_INPUTS];
    for (int j = 0; j < n; j++) in[j] = inputs[j]->shape;
    if ((s = st__layer_build_inputs(l, in, n)) != ST_OK)
      return st_error_prefix(s, "st_layer_call: %s on %s: ", st__layer_label(l, w, sizeof w),
                             shapes(inputs, n, a, sizeof a));
  }
  st_node *t = calloc(1, sizeof *t);
  if (!t) return st_error(ST_ERR_NOMEM, "st_layer_call: out of memory");
  t->layer = l;
  t->n_in = n;
  for (int j = 0; j < n; j++) t->in[j] = inputs[j];
  t->shape = l->out_shape;
  t->next = l->call_nodes;
  l->call_nodes = t;
  *out = t;
  return ST_OK;
}

st_shape st_node_shape(const st_node *t) { return t ? t->shape : (st_shape){0}; }
const st_layer *st_node_layer(const st_node *t) { return t ? t->layer : NULL; }

void st_node_destroy(st_node *t) {
  if (t && !t->layer && !t->in_model) free(t);
}

void st__layer_free_nodes(st_layer *l) {
  while (l->call_nodes) {
    st_node *t = l->call_nodes;
    l->call_nodes = t->next;
    free(t);
  }
}
