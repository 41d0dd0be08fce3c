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

#include "distribute/strategy.h" /* st__strategy_hold */

st_status st_sequential_create(const st_model_options *o, st_model **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_sequential_create: out is NULL");
  *out = NULL;
  if (!o) return st_error(ST_ERR_INVALID, "st_sequential_create: o is NULL");
  if (o->input_shape.rank < 1 || o->input_shape.rank > ST_MAX_RANK)
    return st_error(ST_ERR_INVALID, "model: input shape rank %d (expected 1..%d)",
                    o->input_shape.rank, ST_MAX_RANK);
  for (int i = 0; i < o->input_shape.rank; i++)
    if (o->input_shape.dims[i] <= 0)
      return st_error(ST_ERR_INVALID, "model: input dimension %d is %d (must be > 0)",
                      i, o->input_shape.dims[i]);
  st_status s = st__model_new(o, "sequential", out);
  if (s != ST_OK) return s;
  (*out)->net.input_shape = o->input_shape;
  (*out)->net.n_inputs = 1;
  (*out)->net.inputs[0] = o->input_shape;
  return ST_OK;
}

st_status st__model_new(const st_model_options *o, const char *name, st_model **out) {
  if (o->strategy) {
    st_status s = st__strategy_hold(o->strategy);
    if (s != ST_OK) return s;
  }
  st_model *m = calloc(1, sizeof *m);
  if (!m) {
    st__strategy_release(o->strategy);
    return st_error(ST_ERR_NOMEM, "model: out of memory");
  }
  snprintf(m->name, sizeof m->name, "%s", o->name ? o->name : name);
  m->net.seed = o->seed;
  m->net.init_seed = o->seed;
  m->strategy = o->strategy;
  m->holds_strategy = o->strategy != NULL;
  *out = m;
  return ST_OK;
}

st_status st_model_set_init_seed(st_model *m, uint64_t seed) {
  st_status s = st__model_check(m, "st_model_set_init_seed", false);
  if (s != ST_OK) return s;
  if (m->compiled)
    return st_error(ST_ERR_INVALID, "st_model_set_init_seed: model '%s' is compiled: its "
                    "weights are initialised already", m->name);
  m->net.init_seed = seed;
  return ST_OK;
}

st_status st__model_check(const st_model *m, const char *fn, bool need_compiled) {
  if (!m) return st_error(ST_ERR_INVALID, "%s: m is NULL", fn);
  if (m->strategy && m->strategy->destroyed)
    return st_error(ST_ERR_INVALID, "%s: its strategy was destroyed (st_strategy_destroy "
                    "before st_model_destroy): the model can only be destroyed", fn);
  if (need_compiled && !m->compiled)
    return st_error(ST_ERR_INVALID, "%s: the model is not compiled (st_model_compile)", fn);
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

/* Adds l (taken) or fails with s, recording the first failure for compile:
 * "layer 3 (Dense) was not added: ...". */
static st_status add_failed(st_model *m, st_layer *l, st_status s) {
  if (!m->add_error[0])
    snprintf(m->add_error, sizeof m->add_error, "layer %d%s%s%s was not added: %s",
             m->adds - 1, l ? " (" : "", l ? l->vt->class_name : "", l ? ")" : "",
             st_last_error());
  st__layer_free(l);
  return s;
}

/* A layer that is already in a model is refused and left to its model. */
st_status st_model_add(st_model *m, st_layer *l) {
  if (!m) {
    if (l && !l->in_model) st__layer_free(l); /* taken, as promised */
    return st_error(ST_ERR_INVALID, "st_model_add: m is NULL");
  }
  if (l && l->in_model)
    return st_error(ST_ERR_INVALID, "st_model_add: layer '%s' already belongs to a model "
                    "(a layer belongs to one model; create another)", l->name);
  if (m->functional) {
    st__layer_free(l);
    return st_error(ST_ERR_INVALID, "st_model_add: model '%s' is functional: its layers are "
                    "the graph st_functional_create was given", m->name);
  }
  m->adds++;
  if (!l)
    return add_failed(m, NULL, st_error(ST_ERR_INVALID, "st_model_add: layer is NULL (did its "
                                        "constructor fail? last error: %s)", st_last_error()));
  if (m->compiled)
    return add_failed(m, l, st_error(ST_ERR_INVALID, "model: cannot add layer after compile"));
  if (l->call_nodes)
    return add_failed(m, l, st_error(ST_ERR_INVALID, "st_model_add: layer '%s' was called on "
                                     "graph tensors (st_layer_call): build a functional model "
                                     "with st_functional_create", st_layer_name(l)));

  if (m->net.nlayers == m->net.cap) {
    int cap = m->net.cap ? m->net.cap * 2 : 8;
    st_layer **grown = realloc(m->net.layers, (size_t)cap * sizeof *grown);
    if (!grown) return add_failed(m, l, st_error(ST_ERR_NOMEM, "model: out of memory"));
    m->net.layers = grown;
    m->net.cap = cap;
  }
  if (!l->named_by_user) auto_name(m, l);
  st_status s;
  if ((s = check_unique_name(m, l)) != ST_OK) return add_failed(m, l, s);
  st_shape in = st_model_output_shape(m);
  if ((s = st__layer_build(l, in)) != ST_OK)
    return add_failed(m, l, st_error_prefix(s, "layer %d ('%s'): ", m->net.nlayers, l->name));
  for (int p = 0; p < l->nparams; p++) {
    size_t *total = l->params[p].trainable ? &m->net.n_params : &m->net.n_state;
    l->params[p].offset = *total;
    *total += st_shape_size(l->params[p].shape);
  }
  st_layer *prev = m->net.nlayers ? m->net.layers[m->net.nlayers - 1] : NULL;
  if (l->folds_input_relu && prev && prev->out_activation == ST_ACT_RELU)
    l->input_relu_folded = prev->act_grad_folded = true;
  int src = m->net.nnodes ? m->net.nnodes - 1 : st__net_input_tensor(0);
  m->net.layers[m->net.nlayers++] = l;
  if ((s = st__net_add_node(&m->net, m->net.nlayers - 1, &src, 1)) != ST_OK) {
    m->net.nlayers--;
    return add_failed(m, l, s);
  }
  l->in_model = true;
  m->net.output = m->net.nnodes - 1;
  return ST_OK;
}

int st_model_layer_count(const st_model *m) { return m ? m->net.nlayers : 0; }
const st_layer *st_model_layer(const st_model *m, int i) {
  return (m && i >= 0 && i < m->net.nlayers) ? m->net.layers[i] : NULL;
}
size_t st_model_param_count(const st_model *m, bool trainable_only) {
  if (!m) return 0;
  return trainable_only ? m->net.n_params : m->net.n_params + m->net.n_state;
}
st_shape st_model_output_shape(const st_model *m) {
  return m ? st__net_output_shape(&m->net) : (st_shape){0};
}
st_shape st_model_input_shape(const st_model *m) { return m ? m->net.input_shape : (st_shape){0}; }
