/* strata._strata's functional API (issue 28, Python part): symbolic tensors
 * (st_input nodes and st_layer_call outputs) and layers not yet in a model
 * as capsules, Model(inputs, outputs) through st_functional_create, the
 * merge layers and MultiHeadAttention, a model's Keras 3 JSON
 * (st_model_to_keras_json) and the built-in graph models.
 *
 * Ownership: a layer capsule owns its st_layer until a model takes it (then
 * it keeps the model capsule alive, since the layer's call nodes live as
 * long as the model); a node capsule keeps its layer capsule alive (a call
 * node belongs to its layer) or owns its input node until a model takes it
 * (then it keeps the model capsule alive). */
#include <stdlib.h>
#include <string.h>

#include "ext.h"

static const char *const CAP_LAYER = "strata.layer";
static const char *const CAP_NODE = "strata.node";

typedef struct py_layer {
  st_layer *l;     /* NULL until a constructor fills it */
  PyObject *model; /* the model capsule that owns l, or NULL */
} py_layer;

typedef struct py_node {
  st_node *n;
  PyObject *owner; /* call node: its layer capsule; input: the model capsule once taken */
  int input;       /* an st_input node (owned here while owner is NULL) */
} py_node;

static void layer_free(PyObject *cap) {
  py_layer *p = PyCapsule_GetPointer(cap, CAP_LAYER);
  if (!p) return;
  if (!p->model) st_layer_destroy(p->l);
  Py_XDECREF(p->model);
  free(p);
}

static void node_free(PyObject *cap) {
  py_node *p = PyCapsule_GetPointer(cap, CAP_NODE);
  if (!p) return;
  if (p->input && !p->owner) st_node_destroy(p->n);
  Py_XDECREF(p->owner);
  free(p);
}

/* ---- the layer constructors' target: a model or an empty layer capsule ---- */
int st__py_target_check(PyObject *cap) {
  if (PyCapsule_IsValid(cap, CAP_LAYER)) {
    if (((py_layer *)PyCapsule_GetPointer(cap, CAP_LAYER))->l) {
      PyErr_SetString(PyExc_ValueError, "this layer handle already holds a layer");
      return -1;
    }
    return 0;
  }
  return st__py_model_of(cap) ? 0 : -1;
}

st_layer *st__py_layer_of(PyObject *cap) {
  py_layer *p = PyCapsule_IsValid(cap, CAP_LAYER) ? PyCapsule_GetPointer(cap, CAP_LAYER) : NULL;
  if (!p || !p->l) PyErr_SetString(PyExc_ValueError, "not a made layer handle");
  return p ? p->l : NULL;
}

PyObject *st__py_target_add(PyObject *cap, st_status s, st_layer *l, const char *what) {
  if (s != ST_OK) return st__py_raise(s, what);
  if (PyCapsule_IsValid(cap, CAP_LAYER)) {
    ((py_layer *)PyCapsule_GetPointer(cap, CAP_LAYER))->l = l;
    Py_RETURN_NONE;
  }
  st_model *m = st__py_model_of(cap);
  if (!m) {
    st_layer_destroy(l);
    return NULL;
  }
  if ((s = st_model_add(m, l)) != ST_OK) return st__py_raise(s, what);
  Py_RETURN_NONE;
}

/* layer_new() -> an empty layer handle for the add_* constructors */
static PyObject *py_layer_new(PyObject *self, PyObject *unused) {
  py_layer *p = calloc(1, sizeof *p);
  if (!p) return PyErr_NoMemory();
  PyObject *cap = PyCapsule_New(p, CAP_LAYER, layer_free);
  if (!cap) free(p);
  return cap;
}

static PyObject *node_capsule(st_node *n, PyObject *owner, int input) {
  py_node *p = calloc(1, sizeof *p);
  if (!p) {
    if (input) st_node_destroy(n);
    return PyErr_NoMemory();
  }
  p->n = n, p->input = input, p->owner = owner;
  Py_XINCREF(owner);
  PyObject *cap = PyCapsule_New(p, CAP_NODE, node_free);
  if (!cap) {
    if (input) st_node_destroy(n);
    Py_XDECREF(owner);
    free(p);
  }
  return cap;
}

/* input(shape, name or None) -> node handle */
static PyObject *py_input(PyObject *self, PyObject *args) {
  PyObject *shape;
  const char *name;
  st_shape s;
  if (!PyArg_ParseTuple(args, "Oz", &shape, &name)) return NULL;
  if (st__py_parse_shape(shape, "Input shape", &s)) return NULL;
  st_node *n = NULL;
  st_status rc = st_input(s, name, &n);
  if (rc != ST_OK) return st__py_raise(rc, "Input");
  return node_capsule(n, NULL, 1);
}

/* nodes[0..n) from a list of node handles; -1 with the error. */
static int node_list(PyObject *list, st_node **out, int max, const char *what) {
  if (!PyList_Check(list) || PyList_Size(list) < 1 || PyList_Size(list) > max) {
    PyErr_Format(PyExc_ValueError, "%s: expected a list of 1 to %d tensors", what, max);
    return -1;
  }
  int n = (int)PyList_Size(list);
  for (int j = 0; j < n; j++) {
    py_node *p = st__py_cap_get(PyList_GetItem(list, j), CAP_NODE);
    if (!p) return -1;
    out[j] = p->n;
  }
  return n;
}

/* layer_call(layer handle, [node handles], what) -> (node handle, shape) */
static PyObject *py_layer_call(PyObject *self, PyObject *args) {
  PyObject *lcap, *list;
  const char *what;
  if (!PyArg_ParseTuple(args, "OOs", &lcap, &list, &what)) return NULL;
  py_layer *p = st__py_cap_get(lcap, CAP_LAYER);
  if (!p) return NULL;
  if (!p->l) return PyErr_Format(PyExc_ValueError, "%s: the layer was not made", what);
  st_node *in[8], *out = NULL;
  int n = node_list(list, in, 8, what);
  if (n < 0) return NULL;
  st_status s = st_layer_call(p->l, in, n, &out);
  if (s != ST_OK) return st__py_raise(s, what);
  PyObject *cap = node_capsule(out, lcap, 0);
  return cap ? Py_BuildValue("(NN)", cap, st__py_shape_tuple(st_node_shape(out))) : NULL;
}

/* After st_functional_create: the layers and inputs the model took keep it
 * alive; returns [engine layer index or -1 per layer handle]. */
static PyObject *mark_taken(PyObject *mcap, st_model *m, PyObject *layers, PyObject *inputs) {
  Py_ssize_t nl = PyList_Size(layers);
  PyObject *idx = PyList_New(nl);
  for (Py_ssize_t i = 0; idx && i < nl; i++) {
    py_layer *p = PyCapsule_GetPointer(PyList_GetItem(layers, i), CAP_LAYER);
    long at = -1;
    for (int k = 0; p && k < st_model_layer_count(m); k++)
      if (st_model_layer(m, k) == p->l) at = k;
    if (at >= 0 && !p->model) {
      Py_INCREF(mcap);
      p->model = mcap;
    }
    PyList_SetItem(idx, i, PyLong_FromLong(at));
  }
  for (Py_ssize_t j = 0; j < PyList_Size(inputs); j++) {
    py_node *p = PyCapsule_GetPointer(PyList_GetItem(inputs, j), CAP_NODE);
    if (p && !p->owner) {
      Py_INCREF(mcap);
      p->owner = mcap;
    }
  }
  return idx;
}

/* functional_create([input nodes], [output nodes], [layer handles], seed,
 * strategy or None, name, sync_batchnorm) -> (model handle, [engine index
 * of each layer handle, -1 when not in the model]) */
static PyObject *py_functional_create(PyObject *self, PyObject *args) {
  PyObject *ins, *outs, *layers, *strategy;
  unsigned long long seed;
  const char *name;
  int sync_bn;
  if (!PyArg_ParseTuple(args, "O!O!O!KOzp", &PyList_Type, &ins, &PyList_Type, &outs,
                        &PyList_Type, &layers, &seed, &strategy, &name, &sync_bn))
    return NULL;
  st_node *in[8], *out[8];
  int n_in = node_list(ins, in, 8, "Model inputs"), n_out = 0;
  if (n_in < 0 || (n_out = node_list(outs, out, 8, "Model outputs")) < 0) return NULL;
  for (Py_ssize_t i = 0; i < PyList_Size(layers); i++)
    if (!st__py_cap_get(PyList_GetItem(layers, i), CAP_LAYER)) return NULL;
  st_model_options o = st_model_default_options(st_node_shape(in[0]));
  o.seed = seed, o.name = name, o.sync_batchnorm = sync_bn;
  if (strategy != Py_None && !(o.strategy = st__py_cap_get(strategy, ST__PY_CAP_STRATEGY)))
    return NULL;
  st_model *m = NULL;
  st_status s = st_functional_create(in, n_in, out, n_out, &o, &m);
  if (s != ST_OK) return st__py_raise(s, "Model");
  PyObject *cap = st__py_model_capsule(m, strategy);
  if (!cap) return NULL;
  PyObject *idx = mark_taken(cap, m, layers, ins);
  if (!idx) {
    Py_DECREF(cap); /* the layers keep their own references */
    return NULL;
  }
  return Py_BuildValue("(NN)", cap, idx);
}

/* add_merge(target, kind, arg, name): Add, Subtract, Multiply (arg None),
 * Concatenate (arg axis), MultiHeadAttention (arg (num_heads, key_dim,
 * value_dim or 0, dropout, use_bias, output_dim or 0, causal,
 * kernel_initializer, bias_initializer)). The merge layers take the
 * automatic name (their C constructors have no name option). */
static PyObject *py_add_merge(PyObject *self, PyObject *args) {
  PyObject *cap, *arg;
  const char *kind, *name;
  if (!PyArg_ParseTuple(args, "OsOz", &cap, &kind, &arg, &name)) return NULL;
  if (st__py_target_check(cap)) return NULL;
  st_layer *l = NULL;
  st_status s;
  if (!strcmp(kind, "Add")) return s = st_add(&l), st__py_target_add(cap, s, l, kind);
  if (!strcmp(kind, "Subtract")) return s = st_subtract(&l), st__py_target_add(cap, s, l, kind);
  if (!strcmp(kind, "Multiply")) return s = st_multiply(&l), st__py_target_add(cap, s, l, kind);
  if (!strcmp(kind, "Concatenate")) {
    long axis = PyLong_AsLong(arg);
    if (axis == -1 && PyErr_Occurred()) return NULL;
    s = st_concatenate((int)axis, &l);
    return st__py_target_add(cap, s, l, kind);
  }
  if (!strcmp(kind, "MultiHeadAttention")) {
    int h, kd, vd, bias, od, causal;
    double drop;
    const char *ki, *bi;
    if (!PyArg_ParseTuple(arg, "iiidpipss", &h, &kd, &vd, &drop, &bias, &od, &causal, &ki, &bi))
      return NULL;
    st_mha_options o = st_multi_head_attention_default_options(h, kd);
    o.value_dim = vd, o.dropout = (float)drop, o.use_bias = bias, o.output_dim = od;
    o.use_causal_mask = causal, o.name = name;
    if (st_init_parse(ki, &o.kernel_init) != ST_OK || st_init_parse(bi, &o.bias_init) != ST_OK)
      return st__py_raise(ST_ERR_INVALID, kind);
    s = st_multi_head_attention_ex(o, &l);
    return st__py_target_add(cap, s, l, kind);
  }
  return PyErr_Format(PyExc_NotImplementedError, "layer %s is not supported by Strata", kind);
}

/* The merge layers' and attention's options as a dict (NULL without an
 * exception for another class). */
PyObject *st__py_layer_options_merge(const st_layer *l, const st_layer_options *o) {
  const char *c = st_layer_class(l);
  if (!strcmp(c, "Add") || !strcmp(c, "Subtract") || !strcmp(c, "Multiply")) return PyDict_New();
  if (!strcmp(c, "Concatenate")) return Py_BuildValue("{si}", "axis", o->concat_axis);
  if (strcmp(c, "MultiHeadAttention")) return NULL;
  const st_mha_options *a = &o->mha;
  PyObject *vd = a->value_dim ? PyLong_FromLong(a->value_dim) : (Py_INCREF(Py_None), Py_None);
  PyObject *od = a->output_dim ? PyLong_FromLong(a->output_dim) : (Py_INCREF(Py_None), Py_None);
  return Py_BuildValue("{si si sN sd sN sN ss ss sN}", "num_heads", a->num_heads, "key_dim",
                       a->key_dim, "value_dim", vd, "dropout", (double)a->dropout, "use_bias",
                       PyBool_FromLong(a->use_bias), "output_shape", od, "kernel_initializer",
                       st_init_name(a->kernel_init), "bias_initializer",
                       st_init_name(a->bias_init), "_use_causal_mask",
                       PyBool_FromLong(a->use_causal_mask));
}

/* model_to_keras_json(model) -> str (Keras 3's model.to_json()) */
static PyObject *py_to_keras_json(PyObject *self, PyObject *cap) {
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  char *text = NULL;
  st_status s = st_model_to_keras_json(m, &text);
  if (s != ST_OK) return st__py_raise(s, "to_json");
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

static PyObject *py_is_functional(PyObject *self, PyObject *cap) {
  st_model *m = st__py_model_of(cap);
  return m ? PyBool_FromLong(st_model_is_functional(m)) : NULL;
}

/* builtin_model(name, seed, strategy or None, sync_batchnorm, input shape or
 * None) -> (model handle, input shape) */
static PyObject *py_builtin_model(PyObject *self, PyObject *args) {
  const char *name;
  unsigned long long seed;
  PyObject *strategy, *shape;
  int sync_bn;
  if (!PyArg_ParseTuple(args, "sKOpO", &name, &seed, &strategy, &sync_bn, &shape)) return NULL;
  st_shape in = st_shape3(28, 28, 1);
  if (shape != Py_None && st__py_parse_shape(shape, "input_shape", &in)) return NULL;
  st_model_options o = st_model_default_options(in);
  o.seed = seed, o.sync_batchnorm = sync_bn, o.name = NULL;
  if (strategy != Py_None && !(o.strategy = st__py_cap_get(strategy, ST__PY_CAP_STRATEGY)))
    return NULL;
  st_model *m = NULL;
  st_status s = st_builtin_model_create(name, &o, &m);
  if (s != ST_OK) return st__py_raise(s, name);
  PyObject *cap = st__py_model_capsule(m, strategy);
  return cap ? Py_BuildValue("(NN)", cap, st__py_shape_tuple(st_model_input_shape(m))) : NULL;
}

static PyMethodDef methods[] = {
    {"layer_new", py_layer_new, METH_NOARGS, "an empty layer handle for add_* constructors"},
    {"input", py_input, METH_VARARGS, "input(shape, name) -> node"},
    {"layer_call", py_layer_call, METH_VARARGS, "layer_call(layer, [nodes], what) -> (node, shape)"},
    {"functional_create", py_functional_create, METH_VARARGS, "Model(inputs, outputs)"},
    {"add_merge", py_add_merge, METH_VARARGS, "make Add/Subtract/Multiply/Concatenate/MHA"},
    {"model_to_keras_json", py_to_keras_json, METH_O, "Keras 3 JSON of a model"},
    {"model_is_functional", py_is_functional, METH_O, "whether a model is functional"},
    {"builtin_model", py_builtin_model, METH_VARARGS, "a built-in model"},
    {NULL, NULL, 0, NULL}};

int st__py_functional_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
