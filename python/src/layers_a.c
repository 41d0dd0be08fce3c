/* strata._strata's layers of issue 28 (layers-a) added to a Sequential:
 * GlobalAverage/MaxPooling1D/2D, ZeroPadding2D, ReLU (other than its
 * defaults, which python/strata/keras/layers.py adds as Activation('relu')),
 * LeakyReLU. */
#include <math.h>
#include <string.h>

#include "ext.h"

/* The layer of kind made from arg (see py_add_layer_a); ST_OK or a status
 * (a Python error is already set when arg does not parse: *l stays NULL and
 * ST_ERR_INVALID comes back with *parsed = false). */
static st_status make(const char *kind, PyObject *arg, const char *name, st_layer **l,
                      bool *parsed) {
  *parsed = true;
  if (!strcmp(kind, "GlobalAveragePooling2D")) return st_global_avgpool2d(l);
  if (!strcmp(kind, "GlobalMaxPooling2D")) return st_global_maxpool2d(l);
  if (!strcmp(kind, "GlobalAveragePooling1D")) return st_global_avgpool1d(l);
  if (!strcmp(kind, "GlobalMaxPooling1D")) return st_global_maxpool1d(l);
  if (!strcmp(kind, "ZeroPadding2D")) {
    st_zeropad2d_options o = st_zeropad2d_default_options(0);
    *parsed = PyArg_ParseTuple(arg, "iiii", &o.top, &o.bottom, &o.left, &o.right);
    o.name = name;
    return *parsed ? st_zeropad2d_ex(o, l) : ST_ERR_INVALID;
  }
  if (!strcmp(kind, "ReLU")) {
    st_relu_options o = st_relu_default_options();
    double mv, ns, th;
    *parsed = PyArg_ParseTuple(arg, "ddd", &mv, &ns, &th);
    o.max_value = (float)mv, o.negative_slope = (float)ns, o.threshold = (float)th;
    o.name = name;
    return *parsed ? st_relu_ex(o, l) : ST_ERR_INVALID;
  }
  if (!strcmp(kind, "LeakyReLU")) {
    double ns = PyFloat_AsDouble(arg);
    *parsed = !(ns == -1.0 && PyErr_Occurred());
    return *parsed ? st_leaky_relu((float)ns, l) : ST_ERR_INVALID;
  }
  *parsed = false;
  PyErr_Format(PyExc_NotImplementedError, "layer %s is not supported by Strata", kind);
  return ST_ERR_INVALID;
}

/* add_layer_a(model, kind, arg, name): ZeroPadding2D arg (top, bottom, left,
 * right); ReLU (max_value (inf = None), negative_slope, threshold); LeakyReLU
 * negative_slope; global poolings None. name: None = automatic (the global
 * poolings and LeakyReLU always take the automatic one, as Flatten). */
static PyObject *py_add_layer_a(PyObject *self, PyObject *args) {
  PyObject *cap, *arg;
  const char *kind, *name;
  if (!PyArg_ParseTuple(args, "OsOz", &cap, &kind, &arg, &name)) return NULL;
  if (st__py_target_check(cap)) return NULL;
  st_layer *l = NULL;
  bool parsed;
  st_status s = make(kind, arg, name, &l, &parsed);
  if (!parsed) return NULL;
  return st__py_target_add(cap, s, l, kind);
}

static PyMethodDef methods[] = {
    {"add_layer_a", py_add_layer_a, METH_VARARGS,
     "add a global pooling, ZeroPadding2D, ReLU or LeakyReLU layer"},
    {NULL, NULL, 0, NULL}};

int st__py_layers_a_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
