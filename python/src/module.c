/* strata._strata's module (issue 14; split by concern in issue 27): the
 * module table and its init, which gathers the functions of every file of
 * python/src (ext.h lists them), and the helpers they share: Strata errors
 * as Python exceptions, the model and dataset capsules, NumPy arrays through
 * __array_interface__ (the buffer protocol is in the limited API only from
 * CPython 3.11: a dataset keeps a reference to each array it borrows) and
 * shape tuples. */
#include <stdlib.h>
#include <string.h>

#include "ext.h"

/* ---- errors ------------------------------------------------------------- */

/* Raise the Python exception for status s with Strata's last message; NULL. */
PyObject *st__py_raise(st_status s, const char *what) {
  const char *msg = st_last_error();
  PyObject *type = PyExc_RuntimeError;
  switch (s) {
    case ST_ERR_INVALID:
    case ST_ERR_FORMAT:
    case ST_ERR_NONFINITE: type = PyExc_ValueError; break;
    case ST_ERR_IO: type = PyExc_OSError; break;
    case ST_ERR_NOMEM: type = PyExc_MemoryError; break;
    case ST_ERR_NOT_BUILT: type = PyExc_NotImplementedError; break;
    default: break;
  }
  if (!msg || !*msg) msg = st_status_string(s);
  size_t n = strlen(what);
  if (!strncmp(msg, what, n) && msg[n] == ':') PyErr_SetString(type, msg); /* already says it */
  else PyErr_Format(type, "%s: %s", what, msg);
  return NULL;
}

/* ---- capsules ------------------------------------------------------------ */

const char *const ST__PY_CAP_STRATEGY = "strata.strategy";
const char *const ST__PY_CAP_MODEL = "strata.model";
const char *const ST__PY_CAP_DATASET = "strata.dataset";

static void model_capsule_free(PyObject *cap) {
  py_model *pm = PyCapsule_GetPointer(cap, ST__PY_CAP_MODEL);
  if (!pm) return;
  st_model_destroy(pm->m);
  Py_XDECREF(pm->strategy);
  free(pm);
}

static void dataset_capsule_free(PyObject *cap) {
  py_dataset *d = PyCapsule_GetPointer(cap, ST__PY_CAP_DATASET);
  if (!d) return;
  st_dataset_destroy(d->ds);
  Py_XDECREF(d->keep[0]);
  Py_XDECREF(d->keep[1]);
  for (int i = 0; i < d->nowned; i++) free(d->owned[i]);
  free(d);
}

PyObject *st__py_model_capsule(st_model *m, PyObject *strategy) {
  py_model *pm = calloc(1, sizeof *pm);
  if (!pm) {
    st_model_destroy(m);
    return PyErr_NoMemory();
  }
  pm->m = m;
  if (strategy != Py_None) {
    Py_INCREF(strategy);
    pm->strategy = strategy;
  }
  PyObject *cap = PyCapsule_New(pm, ST__PY_CAP_MODEL, model_capsule_free);
  if (!cap) {
    st_model_destroy(pm->m);
    Py_XDECREF(pm->strategy);
    free(pm);
  }
  return cap;
}

PyObject *st__py_dataset_capsule(py_dataset *d) {
  PyObject *cap = PyCapsule_New(d, ST__PY_CAP_DATASET, dataset_capsule_free);
  if (!cap) {
    st_dataset_destroy(d->ds);
    Py_XDECREF(d->keep[0]);
    Py_XDECREF(d->keep[1]);
    for (int i = 0; i < d->nowned; i++) free(d->owned[i]);
    free(d);
  }
  return cap;
}

void *st__py_cap_get(PyObject *cap, const char *kind) {
  if (!PyCapsule_IsValid(cap, kind)) {
    PyErr_Format(PyExc_TypeError, "expected a %s handle", kind);
    return NULL;
  }
  return PyCapsule_GetPointer(cap, kind);
}

st_model *st__py_model_of(PyObject *cap) {
  py_model *pm = st__py_cap_get(cap, ST__PY_CAP_MODEL);
  return pm ? pm->m : NULL;
}

st_dataset *st__py_dataset_of(PyObject *cap) {
  py_dataset *d = st__py_cap_get(cap, ST__PY_CAP_DATASET);
  if (d && !d->ds) {
    PyErr_SetString(PyExc_ValueError, "this dataset handle was consumed by a failed transform");
    return NULL;
  }
  return d ? d->ds : NULL;
}

int st__py_claim(PyObject *mcap, PyObject *d1, PyObject *d2, const char *what) {
  py_model *pm = st__py_cap_get(mcap, ST__PY_CAP_MODEL);
  py_dataset *a = d1 ? st__py_cap_get(d1, ST__PY_CAP_DATASET) : NULL, *b = d2 ? st__py_cap_get(d2, ST__PY_CAP_DATASET) : NULL;
  if (!pm || (d1 && !a) || (d2 && !b)) return -1;
  if (pm->busy || (a && a->busy) || (b && b->busy)) {
    PyErr_Format(PyExc_RuntimeError, "%s: the model or dataset is in use by a running fit, evaluate "
                 "or predict (another thread, or a callback of that fit)", what);
    return -1;
  }
  pm->busy = 1;
  if (a) a->busy = 1;
  if (b) b->busy = 1;
  return 0;
}

void st__py_release(PyObject *mcap, PyObject *d1, PyObject *d2) {
  ((py_model *)PyCapsule_GetPointer(mcap, ST__PY_CAP_MODEL))->busy = 0;
  if (d1) ((py_dataset *)PyCapsule_GetPointer(d1, ST__PY_CAP_DATASET))->busy = 0;
  if (d2) ((py_dataset *)PyCapsule_GetPointer(d2, ST__PY_CAP_DATASET))->busy = 0;
}

/* ---- arrays through __array_interface__ ----------------------------------- */

/* t <- a C-contiguous NumPy array's memory (borrowed) and shape; dtype from
 * its typestr (|u1, <f4, <i4). What an array must be is said in the error. */
int st__py_tensor_from_array(PyObject *arr, const char *what, st_tensor *t) {
  memset(t, 0, sizeof *t);
  /* only numpy.ndarray: its interface describes memory it owns */
  PyObject *np = PyImport_ImportModule("numpy");
  PyObject *nd = np ? PyObject_GetAttrString(np, "ndarray") : NULL;
  int is = nd ? PyObject_IsInstance(arr, nd) : -1;
  Py_XDECREF(nd);
  Py_XDECREF(np);
  if (is < 0) return -1;
  if (!is) {
    PyErr_Format(PyExc_TypeError, "%s: a numpy.ndarray is expected", what);
    return -1;
  }
  PyObject *ai = PyObject_GetAttrString(arr, "__array_interface__");
  if (!ai) return -1;
  int rc = -1;
  if (!PyDict_Check(ai)) {
    PyErr_Format(PyExc_TypeError, "%s: __array_interface__ is not a dict", what);
    goto done;
  }
  PyObject *data = PyDict_GetItemString(ai, "data");
  PyObject *shape = PyDict_GetItemString(ai, "shape");
  PyObject *typestr = PyDict_GetItemString(ai, "typestr");
  PyObject *strides = PyDict_GetItemString(ai, "strides");
  if (!data || !PyTuple_Check(data) || PyTuple_Size(data) < 1 || !shape || !PyTuple_Check(shape) ||
      !typestr || !PyUnicode_Check(typestr)) {
    PyErr_Format(PyExc_TypeError, "%s: not a NumPy array", what);
    goto done;
  }
  if (strides && strides != Py_None) {
    PyErr_Format(PyExc_ValueError, "%s: the array is not C-contiguous", what);
    goto done;
  }
  Py_ssize_t rank = PyTuple_Size(shape);
  if (rank < 1 || rank > ST_MAX_RANK + 1) {
    PyErr_Format(PyExc_ValueError, "%s: rank %zd (expected 1..%d)", what, rank, ST_MAX_RANK + 1);
    goto done;
  }
  if (PyUnicode_CompareWithASCIIString(typestr, "|u1") == 0) t->dtype = ST_U8;
  else if (PyUnicode_CompareWithASCIIString(typestr, "<f4") == 0) t->dtype = ST_F32;
  else if (PyUnicode_CompareWithASCIIString(typestr, "<i4") == 0) t->dtype = ST_I32;
  else {
    PyErr_Format(PyExc_ValueError, "%s: dtype %S (expected uint8, float32 or int32)", what, typestr);
    goto done;
  }
  t->rank = (int)rank;
  for (Py_ssize_t i = 0; i < rank; i++) {
    long long d = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
    if (d == -1 && PyErr_Occurred()) goto done;
    if (d < 0 || d > 0x7fffffffLL) {
      PyErr_Format(PyExc_ValueError, "%s: dimension %zd is %lld", what, i, d);
      goto done;
    }
    t->dims[i] = d;
  }
  t->data = PyLong_AsVoidPtr(PyTuple_GetItem(data, 0));
  if (!t->data && PyErr_Occurred()) goto done;
  if (!t->data && st_tensor_count(t) > 0) {
    PyErr_Format(PyExc_ValueError, "%s: the array has no data pointer", what);
    goto done;
  }
  rc = 0;
done:
  Py_DECREF(ai);
  return rc;
}

/* A shape tuple of 1..4 positive ints into *out. */
int st__py_parse_shape(PyObject *tup, const char *what, st_shape *out) {
  if (!PyTuple_Check(tup)) {
    PyErr_Format(PyExc_TypeError, "%s must be a tuple of ints", what);
    return -1;
  }
  Py_ssize_t n = PyTuple_Size(tup);
  if (n < 1 || n > ST_MAX_RANK) {
    PyErr_Format(PyExc_ValueError, "%s %R: rank %zd (expected 1..%d)", what, tup, n, ST_MAX_RANK);
    return -1;
  }
  memset(out, 0, sizeof *out);
  out->rank = (int)n;
  for (Py_ssize_t i = 0; i < n; i++) {
    long d = PyLong_AsLong(PyTuple_GetItem(tup, i));
    if (d == -1 && PyErr_Occurred()) return -1;
    if (d <= 0 || d > 0x7fffffffL) {
      PyErr_Format(PyExc_ValueError, "%s %R: dimension %zd must be positive", what, tup, i);
      return -1;
    }
    out->dims[i] = (int)d;
  }
  return 0;
}

PyObject *st__py_shape_tuple(st_shape s) {
  PyObject *t = PyTuple_New(s.rank);
  for (int i = 0; t && i < s.rank; i++) PyTuple_SetItem(t, i, PyLong_FromLong(s.dims[i]));
  return t;
}

/* The OpenBLAS core libstrata forces on this CPU (src/backend/blas.c's
 * choice), or None: strata/__init__.py exports it as OPENBLAS_CORETYPE before
 * NumPy loads the same libopenblas, so that both use the kernels the CLI
 * uses (same bits). */
static PyObject *py_blas_coretype(PyObject *self, PyObject *unused) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return PyUnicode_FromString("SkylakeX");
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return PyUnicode_FromString("Haswell");
#endif
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"blas_coretype", py_blas_coretype, METH_NOARGS, "the OpenBLAS core libstrata forces, or None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_strata",
                                    "Strata's C engine (libstrata) for the strata package.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__strata(void) {
  int (*const parts[])(PyObject *) = {st__py_model_register, st__py_train_register,
                                      st__py_data_register,  st__py_strategy_register,
                                      st__py_io_register,    st__py_ps_register,
                                      st__py_layers_a_register /* issue 28 */,
                                      st__py_layers_b_register, st__py_functional_register};
  PyObject *m = PyModule_Create(&module);
  for (size_t i = 0; m && i < sizeof parts / sizeof parts[0]; i++)
    if (parts[i](m) < 0) Py_CLEAR(m);
  if (m && PyModule_AddStringConstant(m, "version", STRATA_VERSION) < 0) Py_CLEAR(m);
  return m;
}
