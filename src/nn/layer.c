/* Layer objects: allocation with a copied config, parameter declaration,
 * building against an input shape, and the public accessors. A layer holds
 * configuration and build results only; tensors belong to the caller (see
 * nn/layer.h). Not thread-safe while building; read-only afterwards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layer.h"

/* Writes a new unbuilt layer owning a copy of config to *out (NULL on
 * failure). The name (NULL or "" = automatic, chosen by the model) is copied. */
st_status st__layer_new(const st_layer_vtable *vt, const void *config,
                        size_t config_size, const char *name, st_layer **out) {
  *out = NULL;
  if (name && strlen(name) >= ST_NAME_MAX) {
    return st_error(ST_ERR_INVALID, "%s: layer name '%.20s...' is longer than %d bytes",
                    vt->class_name, name, ST_NAME_MAX - 1);
  }
  st_layer *l = calloc(1, sizeof *l);
  if (!l) {
    return st_error(ST_ERR_NOMEM, "%s: out of memory creating layer", vt->class_name);
  }
  l->vt = vt;
  if (config_size) {
    l->config = malloc(config_size);
    if (!l->config) {
      free(l);
      return st_error(ST_ERR_NOMEM, "%s: out of memory creating layer", vt->class_name);
    }
    memcpy(l->config, config, config_size);
  }
  if (name && name[0]) {
    snprintf(l->name, sizeof l->name, "%s", name);
    l->named_by_user = true;
  }
  *out = l;
  return ST_OK;
}

/* Declares the next parameter; returns its index. Too many is a bug. */
int st__layer_add_param(st_layer *l, const char *name, st_shape shape,
                        st_init init, bool trainable) {
  ST_ASSERT(l->nparams < ST_LAYER_MAX_PARAMS);
  st_param_spec *p = &l->params[l->nparams];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->shape = shape;
  p->init = init;
  p->trainable = trainable;
  return l->nparams++;
}

/* Sets in_shape, forgets any earlier build, and calls vt->build. */
st_status st__layer_build_inputs(st_layer *l, const st_shape *in, int n) {
  int lo = l->vt->min_inputs ? l->vt->min_inputs : 1;
  int hi = l->vt->max_inputs ? l->vt->max_inputs : 1;
  if (n < lo || n > hi || n > ST_LAYER_MAX_INPUTS) {
    if (lo == hi)
      return st_error(ST_ERR_INVALID, "%s: called on %d inputs (it takes %d)",
                      l->vt->class_name, n, lo);
    return st_error(ST_ERR_INVALID, "%s: called on %d inputs (it takes %d to %d)",
                    l->vt->class_name, n, lo, hi > ST_LAYER_MAX_INPUTS ? ST_LAYER_MAX_INPUTS : hi);
  }
  for (int j = 0; j < n; j++)
    if (in[j].rank < 1 || in[j].rank > ST_MAX_RANK || st_shape_size(in[j]) == 0) {
      char buf[64];
      return st_error(ST_ERR_INVALID, "%s: invalid input shape %s%s", l->vt->class_name,
                      st_shape_format(in[j], buf, sizeof buf), n > 1 ? " (an input)" : "");
    }
  memset(l->in_shapes, 0, sizeof l->in_shapes);
  for (int j = 0; j < n; j++) l->in_shapes[j] = in[j];
  l->n_inputs = n;
  l->in_shape = in[0];
  l->out_shape = in[0];
  l->nparams = 0;
  l->cache_per_example = 0;
  return l->vt->build(l);
}

st_status st__layer_build(st_layer *l, st_shape in) { return st__layer_build_inputs(l, &in, 1); }

/* Frees an unowned layer; one added to a model is the model's to free. */
void st_layer_destroy(st_layer *l) {
  if (l && !l->in_model) st__layer_free(l);
}

void st__layer_free(st_layer *l) {
  if (!l) return;
  st__layer_free_nodes(l);
  if (l->vt && l->vt->destroy_config)
    l->vt->destroy_config(l);
  else
    free(l->config);
  free(l);
}

const char *st_layer_name(const st_layer *l) { return l ? l->name : ""; }
const char *st_layer_class(const st_layer *l) { return l ? l->vt->class_name : ""; }
st_shape st_layer_output_shape(const st_layer *l) { return l ? l->out_shape : (st_shape){0}; }

size_t st_layer_param_count(const st_layer *l) {
  size_t n = 0;
  if (!l) return 0;
  for (int i = 0; i < l->nparams; i++) n += st_shape_size(l->params[i].shape);
  return n;
}

st_status st_layer_set_init_seed(st_layer *l, int param, uint64_t seed) {
  if (!l) return st_error(ST_ERR_INVALID, "st_layer_set_init_seed: l is NULL");
  if (param < 0 || param >= ST_LAYER_MAX_PARAMS)
    return st_error(ST_ERR_INVALID, "st_layer_set_init_seed: %s: param %d is out of range "
                    "[0, %d)", l->name, param, ST_LAYER_MAX_PARAMS);
  l->init_seed[param] = seed;
  l->init_seeded |= 1u << param;
  return ST_OK;
}

st_activation st_layer_output_activation(const st_layer *l) {
  return l ? l->out_activation : ST_ACT_LINEAR;
}

st_status st_layer_get_options(const st_layer *l, st_layer_options *out) {
  if (!l || !out)
    return st_error(ST_ERR_INVALID, "st_layer_get_options: %s is NULL", l ? "out" : "l");
  memset(out, 0, sizeof *out);
  if (l->vt->get_options) l->vt->get_options(l, out);
  return ST_OK;
}

st_status st__layer_check_input(const st_layer *l, const float *x, int n, int64_t first) {
  return l->vt->check_input ? l->vt->check_input(l, x, n, first) : ST_OK;
}
