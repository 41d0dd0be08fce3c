/* The Sequential model's structure: layers in order, automatic Keras-style names,
 * building each layer against the previous output shape, and laying out every
 * parameter in the net's flat params/state buffers. Compile is compile.c; fit
 * and friends live in src/train/. */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

st_model_options st_model_default_options(st_shape input_shape) {
  st_model_options o;
  memset(&o, 0, sizeof o);
  o.input_shape = input_shape;
  o.name = "sequential";
  return o;
}

st_status st_sequential_create(const st_model_options *o, st_model **out) {
  *out = NULL;
  if (o->input_shape.rank < 1 || o->input_shape.rank > ST_MAX_RANK)
    return st_error(ST_ERR_INVALID, "model: input shape rank %d (expected 1..%d)",
                    o->input_shape.rank, ST_MAX_RANK);
  for (int i = 0; i < o->input_shape.rank; i++)
    if (o->input_shape.dims[i] <= 0)
      return st_error(ST_ERR_INVALID, "model: input dimension %d is %d (must be > 0)",
                      i, o->input_shape.dims[i]);
  st_model *m = calloc(1, sizeof *m);
  if (!m) return st_error(ST_ERR_NOMEM, "model: out of memory");
  snprintf(m->name, sizeof m->name, "%s", o->name ? o->name : "sequential");
  m->net.input_shape = o->input_shape;
  m->net.seed = o->seed;
  m->strategy = o->strategy;
  *out = m;
  return ST_OK;
}

/* "dense", then "dense_1", "dense_2", ... as Keras names them. */
static void auto_name(st_model *m, st_layer *l) {
  const char *base = l->vt->base_name;
  int count = 0;
  for (int i = 0; i < m->net.nlayers; i++)
    if (!m->net.layers[i]->named_by_user && strcmp(m->net.layers[i]->vt->base_name, base) == 0)
      count++;
  if (count == 0)
    snprintf(l->name, sizeof l->name, "%s", base);
  else
    snprintf(l->name, sizeof l->name, "%s_%d", base, count);
}

static st_status check_unique_name(const st_model *m, const st_layer *l) {
  for (int i = 0; i < m->net.nlayers; i++)
    if (strcmp(m->net.layers[i]->name, l->name) == 0)
      return st_error(ST_ERR_INVALID, "model: layer %d: duplicate layer name '%s'",
                      m->net.nlayers, l->name);
  return ST_OK;
}

st_status st_model_add(st_model *m, st_layer *l) {
  st_status s = ST_OK;
  if (!l) return st_error(ST_ERR_INVALID, "model: st_model_add got no layer (%s)",
                          st_last_error());
  if (m->compiled) {
    s = st_error(ST_ERR_INVALID, "model: cannot add layer after compile");
    goto fail;
  }
  if (m->net.nlayers == m->net.cap) {
    int cap = m->net.cap ? m->net.cap * 2 : 8;
    st_layer **grown = realloc(m->net.layers, (size_t)cap * sizeof *grown);
    if (!grown) { s = st_error(ST_ERR_NOMEM, "model: out of memory"); goto fail; }
    m->net.layers = grown;
    m->net.cap = cap;
  }
  if (!l->named_by_user) auto_name(m, l);
  if ((s = check_unique_name(m, l)) != ST_OK) goto fail;
  st_shape in = st_model_output_shape(m);
  if ((s = st__layer_build(l, in)) != ST_OK) {
    st_error_prefix(s, "layer %d ('%s'): ", m->net.nlayers, l->name);
    goto fail;
  }
  for (int p = 0; p < l->nparams; p++) {
    size_t *total = l->params[p].trainable ? &m->net.n_params : &m->net.n_state;
    l->params[p].offset = *total;
    *total += st_shape_size(l->params[p].shape);
  }
  st_layer *prev = m->net.nlayers ? m->net.layers[m->net.nlayers - 1] : NULL;
  if (l->folds_input_relu && prev && prev->out_activation == ST_ACT_RELU)
    l->input_relu_folded = prev->act_grad_folded = true;
  m->net.layers[m->net.nlayers++] = l;
  return ST_OK;
fail:
  st_layer_destroy(l);
  return s;
}

int st_model_layer_count(const st_model *m) { return m->net.nlayers; }
const st_layer *st_model_layer(const st_model *m, int i) {
  return (i >= 0 && i < m->net.nlayers) ? m->net.layers[i] : NULL;
}
size_t st_model_param_count(const st_model *m, bool trainable_only) {
  return trainable_only ? m->net.n_params : m->net.n_params + m->net.n_state;
}
st_shape st_model_output_shape(const st_model *m) { return st__net_output_shape(&m->net); }
