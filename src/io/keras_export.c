/* st_model_to_keras_json: a model as Keras 3's `model.to_json()` writes it —
 * "Sequential" for a Sequential model, "Functional" (layers with their
 * inbound_nodes as args/kwargs of __keras_tensor__ values) for a graph — so
 * that Keras and st_model_from_keras_json read it back. Each layer kind's
 * config comes from st_layer_get_options (one writer per class below).
 * Any thread; the model is only read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "io/keras.h"
#include "model/model.h"

static json_t *init_json(st_init i) {
  static const char *const cls[ST_INIT_COUNT] = {
      [ST_INIT_GLOROT_UNIFORM] = "GlorotUniform", [ST_INIT_HE_NORMAL] = "HeNormal",
      [ST_INIT_ZEROS] = "Zeros", [ST_INIT_ONES] = "Ones",
      [ST_INIT_RANDOM_UNIFORM] = "RandomUniform"};
  json_t *cfg = json_object();
  if (i == ST_INIT_GLOROT_UNIFORM || i == ST_INIT_HE_NORMAL || i == ST_INIT_RANDOM_UNIFORM)
    json_object_set_new(cfg, "seed", json_null());
  if (i == ST_INIT_RANDOM_UNIFORM) {
    json_object_set_new(cfg, "minval", json_real(-0.05));
    json_object_set_new(cfg, "maxval", json_real(0.05));
  }
  return json_pack("{s:s, s:s, s:o, s:n}", "module", "keras.initializers", "class_name",
                   cls[i] ? cls[i] : st_init_name(i), "config", cfg, "registered_name");
}

#define SET(key, value) json_object_set_new(cfg, key, value)

static json_t *pair(int a, int b) { return json_pack("[i, i]", a, b); }
static const char *padding(st_padding p) { return p == ST_PAD_SAME ? "same" : "valid"; }

static void conv_common(json_t *cfg, st_padding pad, st_activation act, bool use_bias) {
  SET("padding", json_string(pad == ST_PAD_CAUSAL ? "causal" : padding(pad)));
  SET("data_format", json_string("channels_last"));
  SET("activation", json_string(st_activation_name(act)));
  SET("use_bias", json_boolean(use_bias));
}

/* Issue 28's layers: the options of l into cfg; false for no writer. */
static bool graph_config(const char *cls, const st_layer_options *o, json_t *cfg) {
  if (!strncmp(cls, "Global", 6)) {
    SET("data_format", json_string("channels_last"));
    SET("keepdims", json_false());
  } else if (!strcmp(cls, "ZeroPadding2D")) {
    const st_zeropad2d_options *z = &o->zeropad2d;
    SET("padding", json_pack("[[i, i], [i, i]]", z->top, z->bottom, z->left, z->right));
    SET("data_format", json_string("channels_last"));
  } else if (!strcmp(cls, "ReLU")) {
    SET("max_value", isinf(o->relu.max_value) ? json_null() : json_real(o->relu.max_value));
    SET("negative_slope", json_real(o->relu.negative_slope));
    SET("threshold", json_real(o->relu.threshold));
  } else if (!strcmp(cls, "LeakyReLU")) {
    SET("negative_slope", json_real(o->relu.negative_slope));
  } else if (!strcmp(cls, "Conv1D")) {
    SET("filters", json_integer(o->conv1d.filters));
    SET("kernel_size", json_pack("[i]", o->conv1d.kernel_size));
    SET("strides", json_pack("[i]", o->conv1d.strides));
    conv_common(cfg, o->conv1d.padding, o->conv1d.activation, o->conv1d.use_bias);
    SET("kernel_initializer", init_json(o->conv1d.kernel_init));
    SET("bias_initializer", init_json(o->conv1d.bias_init));
  } else if (!strcmp(cls, "DepthwiseConv2D")) {
    const st_depthwise_conv2d_options *d = &o->depthwise;
    SET("kernel_size", pair(d->kh, d->kw));
    SET("strides", pair(d->sh, d->sw));
    SET("depth_multiplier", json_integer(d->depth_multiplier));
    conv_common(cfg, d->padding, d->activation, d->use_bias);
    SET("depthwise_initializer", init_json(d->depthwise_init));
    SET("bias_initializer", init_json(d->bias_init));
  } else if (!strcmp(cls, "Embedding")) {
    SET("input_dim", json_integer(o->embedding.input_dim));
    SET("output_dim", json_integer(o->embedding.output_dim));
    SET("embeddings_initializer", init_json(o->embedding.embeddings_init));
    SET("mask_zero", json_false());
  } else if (!strcmp(cls, "LayerNormalization")) {
    SET("axis", json_integer(-1));
    SET("epsilon", json_real(o->layernorm.epsilon));
    SET("center", json_boolean(o->layernorm.center));
    SET("scale", json_boolean(o->layernorm.scale));
  } else if (!strcmp(cls, "PositionEmbedding")) {
    SET("sequence_length", json_integer(o->position_embedding.sequence_length));
    SET("initializer", init_json(o->position_embedding.initializer));
  } else if (!strcmp(cls, "Concatenate")) {
    SET("axis", json_integer(o->concat_axis));
  } else if (!strcmp(cls, "MultiHeadAttention")) {
    const st_mha_options *a = &o->mha;
    SET("num_heads", json_integer(a->num_heads));
    SET("key_dim", json_integer(a->key_dim));
    SET("value_dim", json_integer(a->value_dim ? a->value_dim : a->key_dim));
    SET("dropout", json_real(a->dropout));
    SET("use_bias", json_boolean(a->use_bias));
    SET("output_shape", a->output_dim ? json_pack("[i]", a->output_dim) : json_null());
    SET("kernel_initializer", init_json(a->kernel_init));
    SET("bias_initializer", init_json(a->bias_init));
  } else if (strcmp(cls, "Add") && strcmp(cls, "Subtract") && strcmp(cls, "Multiply")) {
    return false;
  }
  return true;
}

/* The class-specific options of l into cfg; false for a class with no writer. */
static bool class_config(const st_layer *l, const st_layer_options *o, json_t *cfg) {
  const char *cls = st_layer_class(l);
  if (l->tied) { /* ReversibleEmbedding: the Embedding it reads, by name */
    json_object_set_new(cfg, "embedding", json_string(l->tied->name));
  } else if (!strcmp(cls, "Dense")) {
    json_object_set_new(cfg, "units", json_integer(o->dense.units));
    json_object_set_new(cfg, "activation", json_string(st_activation_name(o->dense.activation)));
    json_object_set_new(cfg, "use_bias", json_boolean(o->dense.use_bias));
    json_object_set_new(cfg, "kernel_initializer", init_json(o->dense.kernel_init));
    json_object_set_new(cfg, "bias_initializer", init_json(o->dense.bias_init));
  } else if (!strcmp(cls, "Conv2D")) {
    const st_conv2d_options *c = &o->conv2d;
    json_object_set_new(cfg, "filters", json_integer(c->filters));
    json_object_set_new(cfg, "kernel_size", pair(c->kh, c->kw));
    json_object_set_new(cfg, "strides", pair(c->sh, c->sw));
    json_object_set_new(cfg, "padding", json_string(padding(c->padding)));
    json_object_set_new(cfg, "data_format", json_string("channels_last"));
    json_object_set_new(cfg, "activation", json_string(st_activation_name(c->activation)));
    json_object_set_new(cfg, "use_bias", json_boolean(c->use_bias));
    json_object_set_new(cfg, "kernel_initializer", init_json(c->kernel_init));
    json_object_set_new(cfg, "bias_initializer", init_json(c->bias_init));
  } else if (!strcmp(cls, "MaxPooling2D") || !strcmp(cls, "AveragePooling2D")) {
    const st_pool2d_options *p = &o->pool2d;
    json_object_set_new(cfg, "pool_size", pair(p->ph, p->pw));
    json_object_set_new(cfg, "strides", pair(p->sh ? p->sh : p->ph, p->sw ? p->sw : p->pw));
    json_object_set_new(cfg, "padding", json_string(padding(p->padding)));
    json_object_set_new(cfg, "data_format", json_string("channels_last"));
  } else if (!strcmp(cls, "Flatten")) {
    json_object_set_new(cfg, "data_format", json_string("channels_last"));
  } else if (!strcmp(cls, "Dropout")) {
    json_object_set_new(cfg, "rate", json_real(o->dropout_rate));
  } else if (!strcmp(cls, "BatchNormalization")) {
    const st_batchnorm_options *b = &o->batchnorm;
    json_object_set_new(cfg, "axis", json_integer(-1));
    json_object_set_new(cfg, "momentum", json_real(b->momentum));
    json_object_set_new(cfg, "epsilon", json_real(b->epsilon));
    json_object_set_new(cfg, "center", json_boolean(b->center));
    json_object_set_new(cfg, "scale", json_boolean(b->scale));
    if (b->synchronized) json_object_set_new(cfg, "synchronized", json_true());
  } else if (!strcmp(cls, "Activation")) {
    json_object_set_new(cfg, "activation", json_string(st_activation_name(o->activation)));
  } else if (!strcmp(cls, "Reshape")) {
    json_t *t = json_array();
    for (int i = 0; i < o->target_shape.rank; i++)
      json_array_append_new(t, json_integer(o->target_shape.dims[i]));
    json_object_set_new(cfg, "target_shape", t);
  } else {
    return graph_config(cls, o, cfg);
  }
  return true;
}

/* [null, d0, d1, ...]: a per-example shape with Keras's batch dimension. */
static json_t *batch_shape(st_shape s) {
  json_t *a = json_pack("[n]");
  for (int i = 0; i < s.rank; i++) json_array_append_new(a, json_integer(s.dims[i]));
  return a;
}

static json_t *input_layer(const char *name, st_shape shape, bool functional) {
  json_t *e = json_pack("{s:s, s:s, s:{s:o, s:s, s:b, s:s}, s:n}", "module", "keras.layers",
                        "class_name", "InputLayer", "config", "batch_shape", batch_shape(shape),
                        "dtype", "float32", "sparse", 0, "name", name, "registered_name");
  if (functional) {
    json_object_set_new(e, "name", json_string(name));
    json_object_set_new(e, "inbound_nodes", json_array());
  }
  return e;
}

/* A layer entry without inbound_nodes; NULL (error set) for a class with no writer. */
static json_t *layer_entry(const st_layer *l) {
  st_layer_options o;
  if (st_layer_get_options(l, &o) != ST_OK) return NULL;
  json_t *cfg = json_pack("{s:s, s:b, s:s}", "name", st_layer_name(l), "trainable", 1, "dtype",
                          "float32");
  if (!class_config(l, &o, cfg)) {
    json_decref(cfg);
    st_error(ST_ERR_INVALID, "st_model_to_keras_json: layer '%s' (%s) has no Keras JSON writer",
             st_layer_name(l), st_layer_class(l));
    return NULL;
  }
  json_t *build = json_pack("{s:o}", "input_shape", batch_shape(l->in_shape));
  return json_pack("{s:s, s:s, s:o, s:n, s:o}", "module", "keras.layers", "class_name",
                   st_layer_class(l), "config", cfg, "registered_name", "build_config", build);
}

/* Tensor t as a call argument: {"class_name": "__keras_tensor__", ...}. */
static json_t *keras_tensor(const st_model *m, int t) {
  const char *name;
  int call = 0;
  if (t < 0) {
    name = m->input_nodes[-1 - t]->name;
  } else {
    int layer = m->net.nodes[t].layer;
    for (int k = 0; k < t; k++) call += m->net.nodes[k].layer == layer;
    name = m->net.layers[layer]->name;
  }
  return json_pack("{s:s, s:{s:o, s:s, s:[s, i, i]}}", "class_name", "__keras_tensor__", "config",
                   "shape", batch_shape(st__net_tensor_shape(&m->net, t)), "dtype", "float32",
                   "keras_history", name, call, 0);
}

/* One call as Keras 3 records it: args [x], [[a, b, ...]] for merge layers,
 * [query, value] and kwargs key, use_causal_mask for attention. */
static json_t *call_json(const st_model *m, const st_net_node *d) {
  const st_layer *l = m->net.layers[d->layer];
  json_t *args = json_array();
  if (!strcmp(st_layer_class(l), "MultiHeadAttention")) {
    st_layer_options o;
    json_t *kw = json_object();
    json_array_append_new(args, keras_tensor(m, d->in[0]));
    json_array_append_new(args, keras_tensor(m, d->in[1]));
    if (d->n_in > 2) json_object_set_new(kw, "key", keras_tensor(m, d->in[2]));
    if (st_layer_get_options(l, &o) == ST_OK && o.mha.use_causal_mask)
      json_object_set_new(kw, "use_causal_mask", json_true());
    return json_pack("{s:o, s:o}", "args", args, "kwargs", kw);
  }
  if (l->vt->max_inputs > 1) {
    json_t *list = json_array();
    for (int j = 0; j < d->n_in; j++) json_array_append_new(list, keras_tensor(m, d->in[j]));
    json_array_append_new(args, list);
  } else {
    json_array_append_new(args, keras_tensor(m, d->in[0]));
  }
  return json_pack("{s:o, s:{}}", "args", args, "kwargs");
}

static json_t *functional_layers(const st_model *m) {
  json_t *layers = json_array();
  for (int j = 0; j < m->net.n_inputs; j++)
    json_array_append_new(layers, input_layer(m->input_nodes[j]->name, m->net.inputs[j], true));
  for (int i = 0; i < m->net.nlayers; i++) {
    const st_layer *l = m->net.layers[i];
    json_t *e = layer_entry(l);
    if (!e) {
      json_decref(layers);
      return NULL;
    }
    json_t *calls = json_array();
    for (int k = 0; k < m->net.nnodes; k++)
      if (m->net.nodes[k].layer == i) json_array_append_new(calls, call_json(m, &m->net.nodes[k]));
    json_object_set_new(e, "name", json_string(l->name));
    json_object_set_new(e, "inbound_nodes", calls);
    json_array_append_new(layers, e);
  }
  return layers;
}

/* output_layers: [[layer name, call index, 0], ...], one per model output
 * (Keras's node index is the layer's call). */
static json_t *output_layers(const st_net *n) {
  json_t *outs = json_array();
  for (int j = 0; j < (n->n_outputs > 1 ? n->n_outputs : 1); j++) {
    int t = n->n_outputs > 1 ? n->outputs[j] : n->output, call = 0;
    for (int k = 0; k < t; k++) call += n->nodes[k].layer == n->nodes[t].layer;
    const char *name = n->layers[n->nodes[t].layer]->name;
    json_array_append_new(outs, json_pack("[s, i, i]", name, call, 0));
  }
  return outs;
}

static json_t *document(const st_model *m) {
  json_t *layers;
  if (m->functional) {
    if (!(layers = functional_layers(m))) return NULL;
  } else {
    layers = json_array();
    json_array_append_new(layers, input_layer("input_layer", m->net.input_shape, false));
    for (int i = 0; i < m->net.nlayers; i++) {
      json_t *e = layer_entry(m->net.layers[i]);
      if (!e) {
        json_decref(layers);
        return NULL;
      }
      json_array_append_new(layers, e);
    }
  }
  json_t *cfg = json_pack("{s:s, s:b, s:o}", "name", m->name, "trainable", 1, "layers", layers);
  if (m->functional) {
    json_t *ins = json_array();
    for (int j = 0; j < m->net.n_inputs; j++)
      json_array_append_new(ins, json_pack("[s, i, i]", m->input_nodes[j]->name, 0, 0));
    json_object_set_new(cfg, "input_layers", ins);
    json_object_set_new(cfg, "output_layers", output_layers(&m->net));
  }
  return json_pack("{s:s, s:s, s:o, s:s}", "module", "keras", "class_name",
                   m->functional ? "Functional" : "Sequential", "config", cfg, "registered_name",
                   m->functional ? "Functional" : "Sequential");
}

st_status st_model_to_keras_json(const st_model *m, char **out) {
  if (!out) return st_error(ST_ERR_INVALID, "st_model_to_keras_json: out is NULL");
  *out = NULL;
  if (!m) return st_error(ST_ERR_INVALID, "st_model_to_keras_json: m is NULL");
  if (m->net.nlayers == 0)
    return st_error(ST_ERR_INVALID, "st_model_to_keras_json: the model has no layers");
  json_t *doc = document(m);
  if (!doc) return ST_ERR_INVALID;
  *out = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(doc);
  return *out ? ST_OK : st_error(ST_ERR_NOMEM, "st_model_to_keras_json: out of memory");
}
