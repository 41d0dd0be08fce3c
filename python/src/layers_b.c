/* strata._strata's constructors of the issue 28 layers Conv1D,
 * DepthwiseConv2D, Embedding and LayerNormalization (added to a model as
 * model.c's add_* do), and their options as dicts in the Python classes'
 * terms (model.c's layer_options_dict asks here first). */
#include <string.h>

#include "ext.h"

/* to the model or layer handle cap (functional.c's st__py_target_add) */
static PyObject *add(PyObject *cap, st_status s, st_layer *l, const char *what) {
  return st__py_target_add(cap, s, l, what);
}

/* activation and initializer names; -1 with the exception set. */
static int act_init(const char *act, st_activation *a, const char *i1, st_init *o1,
                    const char *i2, st_init *o2) {
  if (act && st_activation_parse(act, a) != ST_OK) return st__py_raise(ST_ERR_INVALID, "activation"), -1;
  if (i1 && st_init_parse(i1, o1) != ST_OK) return st__py_raise(ST_ERR_INVALID, "initializer"), -1;
  if (i2 && st_init_parse(i2, o2) != ST_OK) return st__py_raise(ST_ERR_INVALID, "initializer"), -1;
  return 0;
}

/* add_conv1d(model, filters, kernel_size, strides, padding, activation,
 * use_bias, kernel_initializer, bias_initializer, name) */
static PyObject *py_add_conv1d(PyObject *self, PyObject *args) {
  PyObject *cap;
  int filters, k, s, bias;
  const char *pad, *act, *ki, *bi, *name;
  if (!PyArg_ParseTuple(args, "Oiiisspssz", &cap, &filters, &k, &s, &pad, &act, &bias, &ki,
                        &bi, &name))
    return NULL;
  if (st__py_target_check(cap)) return NULL;
  st_conv1d_options o = st_conv1d_default_options(filters, k);
  o.strides = s, o.use_bias = bias, o.name = name;
  o.padding = !strcmp(pad, "same") ? ST_PAD_SAME : !strcmp(pad, "causal") ? ST_PAD_CAUSAL
                                                                          : ST_PAD_VALID;
  if (act_init(act, &o.activation, ki, &o.kernel_init, bi, &o.bias_init)) return NULL;
  st_layer *l = NULL;
  st_status rc = st_conv1d_ex(o, &l);
  return add(cap, rc, l, "Conv1D");
}

/* add_depthwise_conv2d(model, kh, kw, sh, sw, depth_multiplier, same,
 * activation, use_bias, depthwise_initializer, bias_initializer, name) */
static PyObject *py_add_depthwise(PyObject *self, PyObject *args) {
  PyObject *cap;
  int kh, kw, sh, sw, dm, same, bias;
  const char *act, *di, *bi, *name;
  if (!PyArg_ParseTuple(args, "Oiiiiipspssz", &cap, &kh, &kw, &sh, &sw, &dm, &same, &act, &bias,
                        &di, &bi, &name))
    return NULL;
  if (st__py_target_check(cap)) return NULL;
  st_depthwise_conv2d_options o = st_depthwise_conv2d_default_options(kh, kw);
  o.sh = sh, o.sw = sw, o.depth_multiplier = dm, o.use_bias = bias, o.name = name;
  o.padding = same ? ST_PAD_SAME : ST_PAD_VALID;
  if (act_init(act, &o.activation, di, &o.depthwise_init, bi, &o.bias_init)) return NULL;
  st_layer *l = NULL;
  st_status rc = st_depthwise_conv2d_ex(o, &l);
  return add(cap, rc, l, "DepthwiseConv2D");
}

/* add_embedding(model, input_dim, output_dim, embeddings_initializer, name) */
static PyObject *py_add_embedding(PyObject *self, PyObject *args) {
  PyObject *cap;
  int in, out;
  const char *ei, *name;
  if (!PyArg_ParseTuple(args, "Oiisz", &cap, &in, &out, &ei, &name)) return NULL;
  if (st__py_target_check(cap)) return NULL;
  st_embedding_options o = st_embedding_default_options(in, out);
  o.name = name;
  if (act_init(NULL, NULL, ei, &o.embeddings_init, NULL, NULL)) return NULL;
  st_layer *l = NULL;
  st_status rc = st_embedding_ex(o, &l);
  return add(cap, rc, l, "Embedding");
}

/* add_layernorm(model, epsilon, center, scale, name) */
static PyObject *py_add_layernorm(PyObject *self, PyObject *args) {
  PyObject *cap;
  double eps;
  int center, scale;
  const char *name;
  if (!PyArg_ParseTuple(args, "Odppz", &cap, &eps, &center, &scale, &name)) return NULL;
  if (st__py_target_check(cap)) return NULL;
  st_layernorm_options o = st_layernorm_default_options();
  o.epsilon = (float)eps, o.center = center, o.scale = scale, o.name = name;
  st_layer *l = NULL;
  st_status rc = st_layernorm_ex(o, &l);
  return add(cap, rc, l, "LayerNormalization");
}

static const char *pad_name(st_padding p) {
  return p == ST_PAD_SAME ? "same" : p == ST_PAD_CAUSAL ? "causal" : "valid";
}

PyObject *st__py_layer_options_b(const st_layer *l, const st_layer_options *o) {
  const char *c = st_layer_class(l);
  if (!strcmp(c, "Conv1D"))
    return Py_BuildValue("{si si si ss ss sN ss ss}", "filters", o->conv1d.filters,
                         "kernel_size", o->conv1d.kernel_size, "strides", o->conv1d.strides,
                         "padding", pad_name(o->conv1d.padding), "activation",
                         st_activation_name(o->conv1d.activation), "use_bias",
                         PyBool_FromLong(o->conv1d.use_bias), "kernel_initializer",
                         st_init_name(o->conv1d.kernel_init), "bias_initializer",
                         st_init_name(o->conv1d.bias_init));
  if (!strcmp(c, "DepthwiseConv2D"))
    return Py_BuildValue("{s(ii) s(ii) si ss ss sN ss ss}", "kernel_size", o->depthwise.kh,
                         o->depthwise.kw, "strides", o->depthwise.sh, o->depthwise.sw,
                         "depth_multiplier", o->depthwise.depth_multiplier, "padding",
                         pad_name(o->depthwise.padding), "activation",
                         st_activation_name(o->depthwise.activation), "use_bias",
                         PyBool_FromLong(o->depthwise.use_bias), "depthwise_initializer",
                         st_init_name(o->depthwise.depthwise_init), "bias_initializer",
                         st_init_name(o->depthwise.bias_init));
  if (!strcmp(c, "Embedding"))
    return Py_BuildValue("{si si ss}", "input_dim", o->embedding.input_dim, "output_dim",
                         o->embedding.output_dim, "embeddings_initializer",
                         st_init_name(o->embedding.embeddings_init));
  if (!strcmp(c, "LayerNormalization"))
    return Py_BuildValue("{sd sN sN}", "epsilon", (double)o->layernorm.epsilon, "center",
                         PyBool_FromLong(o->layernorm.center), "scale",
                         PyBool_FromLong(o->layernorm.scale));
  return NULL; /* not one of these classes; no exception */
}

/* add_position_embedding(target, sequence_length, initializer, name) */
static PyObject *py_add_position_embedding(PyObject *self, PyObject *args) {
  PyObject *cap;
  int len;
  const char *init, *name;
  if (!PyArg_ParseTuple(args, "Oisz", &cap, &len, &init, &name)) return NULL;
  if (st__py_target_check(cap)) return NULL;
  st_position_embedding_options o = st_position_embedding_default_options(len);
  o.name = name;
  if (act_init(NULL, NULL, init, &o.initializer, NULL, NULL)) return NULL;
  st_layer *l = NULL;
  st_status rc = st_position_embedding_ex(o, &l);
  return add(cap, rc, l, "PositionEmbedding");
}

/* add_reversible_embedding(target, embedding layer handle): the tied head */
static PyObject *py_add_reversible_embedding(PyObject *self, PyObject *args) {
  PyObject *cap, *emb;
  if (!PyArg_ParseTuple(args, "OO", &cap, &emb)) return NULL;
  if (st__py_target_check(cap)) return NULL;
  st_layer *e = st__py_layer_of(emb);
  if (!e) return NULL;
  st_layer *l = NULL;
  st_status rc = st_reversible_embedding(e, &l);
  return add(cap, rc, l, "ReversibleEmbedding");
}

/* gpt_weights(model, op, (n_layer, n_head, n_embd, seq_len, vocab), arg):
 * op "init" (arg: the seed), "load_llmc", "save_llmc", "load_hf", "save_hf"
 * (arg: the path) on a compiled GPT model (st_gpt_*). */
static PyObject *py_gpt_weights(PyObject *self, PyObject *args) {
  PyObject *cap, *arg;
  const char *op;
  st_gpt_config c;
  if (!PyArg_ParseTuple(args, "Os(iiiii)O", &cap, &op, &c.n_layer, &c.n_head, &c.n_embd,
                        &c.seq_len, &c.vocab, &arg))
    return NULL;
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  st_status s;
  if (!strcmp(op, "init")) {
    unsigned long long seed = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    s = st_gpt_init_weights(m, seed);
  } else {
    PyObject *bytes = PyUnicode_AsUTF8String(arg);
    const char *path = bytes ? PyBytes_AsString(bytes) : NULL;
    if (!path) {
      Py_XDECREF(bytes);
      return NULL;
    }
    s = !strcmp(op, "load_llmc") ? st_gpt_load_llmc(m, &c, path)
        : !strcmp(op, "save_llmc") ? st_gpt_save_llmc(m, &c, path)
        : !strcmp(op, "load_hf") ? st_gpt_load_hf(m, &c, path)
        : !strcmp(op, "save_hf") ? st_gpt_save_hf(m, &c, path)
        : st_error(ST_ERR_INVALID, "gpt_weights: unknown op '%s'", op);
    Py_DECREF(bytes);
  }
  if (s != ST_OK) return st__py_raise(s, op);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"add_conv1d", py_add_conv1d, METH_VARARGS, "add a Conv1D layer"},
    {"add_depthwise_conv2d", py_add_depthwise, METH_VARARGS, "add a DepthwiseConv2D layer"},
    {"add_embedding", py_add_embedding, METH_VARARGS, "add an Embedding layer"},
    {"add_layernorm", py_add_layernorm, METH_VARARGS, "add a LayerNormalization layer"},
    {"add_position_embedding", py_add_position_embedding, METH_VARARGS, "make a PositionEmbedding"},
    {"gpt_weights", py_gpt_weights, METH_VARARGS, "GPT-2 weights: init, llm.c and HF files"},
    {"add_reversible_embedding", py_add_reversible_embedding, METH_VARARGS,
     "make a ReversibleEmbedding head tied to an Embedding layer handle"},
    {NULL, NULL, 0, NULL}};

int st__py_layers_b_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
