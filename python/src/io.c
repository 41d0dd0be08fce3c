/* strata._strata's files: a Keras model.to_json() text as a model (the
 * library's Keras JSON reader, st_model_from_keras_json_text, the one
 * `strata train --model FILE.json` uses), the MNIST IDX files of
 * tf.keras.datasets, and TensorBoard event files. */
#include <stdlib.h>
#include <string.h>

#include "ext.h"

static const char *const CAP_TB = "strata.tensorboard";

static void tb_capsule_free(PyObject *cap) {
  st_tensorboard_destroy(PyCapsule_GetPointer(cap, CAP_TB));
}

/* The model's name: the public API shows it only in the summary's first
 * line, Model: "name" (the importer made it printable). */
static PyObject *model_name(const st_model *m) {
  char *text = NULL;
  st_status s = st_model_summary(m, &text);
  if (s != ST_OK) return st__py_raise(s, "model_from_json");
  char *nl = strchr(text, '\n');
  if (nl) *nl = 0;
  char *a = strchr(text, '"'), *b = strrchr(text, '"');
  PyObject *r = a && b > a ? PyUnicode_FromStringAndSize(a + 1, b - a - 1)
                           : PyUnicode_FromString("sequential");
  free(text);
  return r;
}

/* model_from_keras_json(text, seed, strategy or None) -> (model handle,
 * input shape, name): the Sequential the JSON describes, bound to the
 * strategy. Errors (ValueError) name "model_from_json", the layer's
 * position, name and class, and the option, as the CLI's name the file. */
static PyObject *py_model_from_keras_json(PyObject *self, PyObject *args) {
  const char *text;
  Py_ssize_t len;
  unsigned long long seed;
  PyObject *strategy;
  if (!PyArg_ParseTuple(args, "s#KO", &text, &len, &seed, &strategy)) return NULL;
  st_model_options o = st_model_default_options(st_shape1(1));
  o.seed = seed;
  o.name = NULL; /* the config's name */
  if (strategy != Py_None && !(o.strategy = st__py_cap_get(strategy, ST__PY_CAP_STRATEGY)))
    return NULL;
  st_model *m = NULL;
  st_status s = st_model_from_keras_json_text(text, (size_t)len, "model_from_json", &o, &m);
  if (s != ST_OK) return st__py_raise(s, "model_from_json");
  PyObject *name = model_name(m);
  PyObject *shape = st__py_shape_tuple(st_model_input_shape(m));
  PyObject *cap = st__py_model_capsule(m, strategy);
  if (!cap || !name || !shape) {
    Py_XDECREF(name);
    Py_XDECREF(shape);
    Py_XDECREF(cap);
    return NULL;
  }
  return Py_BuildValue("(NNN)", cap, shape, name);
}

static PyObject *tensor_to_py(st_tensor *t) {
  PyObject *shape = PyTuple_New(t->rank);
  for (int i = 0; shape && i < t->rank; i++)
    PyTuple_SetItem(shape, i, PyLong_FromLongLong(t->dims[i]));
  PyObject *buf = PyByteArray_FromStringAndSize(
      (const char *)t->data, (Py_ssize_t)(st_tensor_count(t) * st_dtype_size(t->dtype)));
  if (!shape || !buf) {
    Py_XDECREF(shape);
    Py_XDECREF(buf);
    return NULL;
  }
  return Py_BuildValue("(NNs)", buf, shape, st_dtype_name(t->dtype));
}

/* mnist_load(dir) -> ((buf, shape, dtype) x 4): train x, train y, test x, test y */
static PyObject *py_mnist_load(PyObject *self, PyObject *args) {
  const char *dir;
  if (!PyArg_ParseTuple(args, "s", &dir)) return NULL;
  st_mnist mn;
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_mnist_load(dir, &mn);
  Py_END_ALLOW_THREADS
  if (s != ST_OK) return st__py_raise(s, "load_data");
  PyObject *r = Py_BuildValue("(NNNN)", tensor_to_py(&mn.train_x), tensor_to_py(&mn.train_y),
                              tensor_to_py(&mn.test_x), tensor_to_py(&mn.test_y));
  st_mnist_destroy(&mn);
  return r;
}

static PyObject *py_tb_create(PyObject *self, PyObject *args) {
  const char *dir;
  if (!PyArg_ParseTuple(args, "s", &dir)) return NULL;
  st_tensorboard *tb = NULL;
  st_status s = st_tensorboard_create(dir, &tb);
  if (s != ST_OK) return st__py_raise(s, "TensorBoard");
  PyObject *cap = PyCapsule_New(tb, CAP_TB, tb_capsule_free);
  if (!cap) st_tensorboard_destroy(tb);
  return cap;
}

static PyObject *py_tb_scalar(PyObject *self, PyObject *args) {
  PyObject *cap;
  int val;
  const char *tag;
  long long step;
  double v;
  if (!PyArg_ParseTuple(args, "OpsLd", &cap, &val, &tag, &step, &v)) return NULL;
  st_tensorboard *tb = st__py_cap_get(cap, CAP_TB);
  if (!tb) return NULL;
  st_status s = st_tensorboard_scalar(tb, val, tag, step, v);
  if (s == ST_OK) s = st_tensorboard_flush(tb);
  if (s != ST_OK) return st__py_raise(s, "TensorBoard");
  Py_RETURN_NONE;
}

/* example_serialize([(name, kind, data, count), ...]) -> bytes: the C
 * serializer's tf.train.Example (st_example_serialize, protobuf-c). kind
 * 0 float_list (data: count little-endian float32), 1 int64_list (count
 * int64), 2 one bytes value (count bytes). For the tests that check
 * tf.train.Example.SerializeToString against it. */
static PyObject *py_example_serialize(PyObject *self, PyObject *args) {
  PyObject *list;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return NULL;
  Py_ssize_t n = PyList_Size(list);
  st_feature_value *f = calloc((size_t)n + 1, sizeof *f);
  if (!f) return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n; i++) {
    int kind;
    Py_ssize_t len, count;
    if (!PyArg_ParseTuple(PyList_GetItem(list, i), "siy#n", &f[i].name, &kind, (const char **)&f[i].data,
                          &len, &count)) {
      free(f);
      return NULL;
    }
    f[i].dtype = (st_feature_dtype)kind;
    f[i].count = (size_t)count;
  }
  void *out = NULL;
  size_t size = 0;
  st_status s = st_example_serialize(f, (int)n, &out, &size);
  free(f);
  if (s != ST_OK) return st__py_raise(s, "example_serialize");
  PyObject *r = PyBytes_FromStringAndSize(out, (Py_ssize_t)size);
  free(out);
  return r;
}

static PyMethodDef methods[] = {
    {"example_serialize", py_example_serialize, METH_VARARGS, "a tf.train.Example by the C serializer"},
    {"model_from_keras_json", py_model_from_keras_json, METH_VARARGS,
     "(model handle, input shape, name) of a Keras model.to_json() text"},
    {"mnist_load", py_mnist_load, METH_VARARGS, "the four IDX files of a directory"},
    {"tb_create", py_tb_create, METH_VARARGS, "TensorBoard event writer"},
    {"tb_scalar", py_tb_scalar, METH_VARARGS, "write and flush one scalar"},
    {NULL, NULL, 0, NULL}};

int st__py_io_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
