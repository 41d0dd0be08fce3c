/* strata._strata: the CPython extension under the `strata` package (issue 14).
 * A thin layer over libstrata's public C API (the headers in include/strata/), written
 * against the limited API of CPython 3.8 (abi3: one build serves every
 * CPython 3.8+). Handles (strategy, model, dataset, TensorBoard writer) are
 * capsules that the pure-Python layer (python/strata/) wraps in Keras-shaped
 * classes. NumPy arrays come in without a copy through NumPy's
 * __array_interface__ (the buffer protocol is in the limited API only from
 * CPython 3.11): a dataset keeps a reference to each array it borrows.
 * Training runs with the GIL released; Python callbacks and Ctrl-C checks take
 * it back at each step and epoch boundary. Strata errors become ValueError
 * (bad arguments, shapes, data), OSError (files), MemoryError or RuntimeError
 * with Strata's message; nothing here aborts the interpreter. */
#define Py_LIMITED_API 0x03080000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strata/strata.h"

/* ---- errors ------------------------------------------------------------- */

/* Raise the Python exception for status s with Strata's last message; NULL. */
static PyObject *st_py_raise(st_status s, const char *what) {
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

static const char *const CAP_STRATEGY = "strata.strategy";
static const char *const CAP_MODEL = "strata.model";
static const char *const CAP_DATASET = "strata.dataset";
static const char *const CAP_TB = "strata.tensorboard";

typedef struct py_model {
  st_model *m;
  PyObject *strategy; /* the strategy capsule, kept alive with the model */
  int busy;           /* fit / evaluate / predict running (GIL released) */
} py_model;

typedef struct py_dataset {
  st_dataset *ds;
  PyObject *keep[2]; /* the arrays whose memory the source borrows */
  int busy;          /* being iterated by a verb running without the GIL */
  void *owned[8];    /* malloc'd state of its C map stages (freed with it) */
  int nowned;
} py_dataset;

static void strategy_capsule_free(PyObject *cap) {
  st_strategy_destroy(PyCapsule_GetPointer(cap, CAP_STRATEGY));
}

static void model_capsule_free(PyObject *cap) {
  py_model *pm = PyCapsule_GetPointer(cap, CAP_MODEL);
  if (!pm) return;
  st_model_destroy(pm->m);
  Py_XDECREF(pm->strategy);
  free(pm);
}

static void dataset_capsule_free(PyObject *cap) {
  py_dataset *d = PyCapsule_GetPointer(cap, CAP_DATASET);
  if (!d) return;
  st_dataset_destroy(d->ds);
  Py_XDECREF(d->keep[0]);
  Py_XDECREF(d->keep[1]);
  for (int i = 0; i < d->nowned; i++) free(d->owned[i]);
  free(d);
}

static void tb_capsule_free(PyObject *cap) {
  st_tensorboard_destroy(PyCapsule_GetPointer(cap, CAP_TB));
}

/* The pointer in a capsule of that kind, or NULL with TypeError. */
static void *cap_get(PyObject *cap, const char *kind) {
  if (!PyCapsule_IsValid(cap, kind)) {
    PyErr_Format(PyExc_TypeError, "expected a %s handle", kind);
    return NULL;
  }
  return PyCapsule_GetPointer(cap, kind);
}

static st_model *model_of(PyObject *cap) {
  py_model *pm = cap_get(cap, CAP_MODEL);
  return pm ? pm->m : NULL;
}

static st_dataset *dataset_of(PyObject *cap) {
  py_dataset *d = cap_get(cap, CAP_DATASET);
  if (d && !d->ds) {
    PyErr_SetString(PyExc_ValueError, "this dataset handle was consumed by a failed transform");
    return NULL;
  }
  return d ? d->ds : NULL;
}

/* A verb that releases the GIL claims the model and its datasets first (a
 * model or an iterator is used by one thread at a time): RuntimeError when
 * another thread, or a callback of a running fit, is already using them. */
static int claim(PyObject *mcap, PyObject *d1, PyObject *d2, const char *what) {
  py_model *pm = cap_get(mcap, CAP_MODEL);
  py_dataset *a = d1 ? cap_get(d1, CAP_DATASET) : NULL, *b = d2 ? cap_get(d2, CAP_DATASET) : NULL;
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

static void release(PyObject *mcap, PyObject *d1, PyObject *d2) {
  ((py_model *)PyCapsule_GetPointer(mcap, CAP_MODEL))->busy = 0;
  if (d1) ((py_dataset *)PyCapsule_GetPointer(d1, CAP_DATASET))->busy = 0;
  if (d2) ((py_dataset *)PyCapsule_GetPointer(d2, CAP_DATASET))->busy = 0;
}

/* ---- arrays through __array_interface__ ----------------------------------- */

/* t <- a C-contiguous NumPy array's memory (borrowed) and shape; dtype from
 * its typestr (|u1, <f4, <i4). What an array must be is said in the error. */
static int tensor_from_array(PyObject *arr, const char *what, st_tensor *t) {
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

/* ---- strategies ------------------------------------------------------------ */

static PyObject *py_strategy_create(PyObject *self, PyObject *args) {
  const char *kind, *devices = NULL, *device = NULL, *ops = NULL;
  int replicas = 0, threads = 0;
  if (!PyArg_ParseTuple(args, "s|zizzi", &kind, &devices, &replicas, &ops, &device, &threads))
    return NULL;
  st_strategy_kind k;
  if (st_strategy_kind_parse(kind, &k) != ST_OK) return st_py_raise(ST_ERR_INVALID, "strategy");
  st_strategy_options o = st_strategy_default_options(k);
  o.devices = devices;
  o.replicas = replicas;
  if (ops) o.cross_device_ops = ops;
  if (device) o.device = device;
  o.threads = threads;
  st_strategy *s = NULL;
  st_status rc = st_strategy_create(&o, &s);
  if (rc != ST_OK) return st_py_raise(rc, "strategy");
  PyObject *cap = PyCapsule_New(s, CAP_STRATEGY, strategy_capsule_free);
  if (!cap) st_strategy_destroy(s);
  return cap;
}

static PyObject *py_strategy_replicas(PyObject *self, PyObject *cap) {
  st_strategy *s = cap_get(cap, CAP_STRATEGY);
  if (!s) return NULL;
  return PyLong_FromLong(st_strategy_num_replicas_in_sync(s));
}

static PyObject *py_strategy_workers(PyObject *self, PyObject *cap) {
  st_strategy *s = cap_get(cap, CAP_STRATEGY);
  if (!s) return NULL;
  return Py_BuildValue("(ii)", st_strategy_worker_rank(s), st_strategy_worker_count(s));
}

/* ---- models ------------------------------------------------------------------ */

/* A shape tuple of 1..4 positive ints into *out. */
static int parse_shape(PyObject *tup, const char *what, st_shape *out) {
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

static PyObject *shape_tuple(st_shape s) {
  PyObject *t = PyTuple_New(s.rank);
  for (int i = 0; t && i < s.rank; i++) PyTuple_SetItem(t, i, PyLong_FromLong(s.dims[i]));
  return t;
}

static PyObject *py_model_create(PyObject *self, PyObject *args) {
  PyObject *shape, *strategy;
  unsigned long long seed;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "OKO|z", &shape, &seed, &strategy, &name)) return NULL;
  st_model_options o;
  st_shape in;
  if (parse_shape(shape, "input_shape", &in)) return NULL;
  o = st_model_default_options(in);
  o.seed = seed;
  if (name) o.name = name;
  if (strategy != Py_None && !(o.strategy = cap_get(strategy, CAP_STRATEGY))) return NULL;
  py_model *pm = calloc(1, sizeof *pm);
  if (!pm) return PyErr_NoMemory();
  st_status s = st_sequential_create(&o, &pm->m);
  if (s != ST_OK) {
    free(pm);
    return st_py_raise(s, "Sequential");
  }
  if (strategy != Py_None) {
    Py_INCREF(strategy);
    pm->strategy = strategy;
  }
  PyObject *cap = PyCapsule_New(pm, CAP_MODEL, model_capsule_free);
  if (!cap) {
    st_model_destroy(pm->m);
    Py_XDECREF(pm->strategy);
    free(pm);
  }
  return cap;
}

/* st_model_add of a layer a constructor made (status s); None or raises. */
static PyObject *add_layer(st_model *m, st_status s, st_layer **lp, const char *what) {
  if (s != ST_OK) return st_py_raise(s, what);
  st_layer *l = *lp;
  if ((s = st_model_add(m, l)) != ST_OK) return st_py_raise(s, what);
  Py_RETURN_NONE;
}

static int parse_act(const char *name, st_activation *a) {
  if (st_activation_parse(name, a) != ST_OK) {
    st_py_raise(ST_ERR_INVALID, "activation");
    return -1;
  }
  return 0;
}

static int parse_init(const char *name, st_init *i) {
  if (st_init_parse(name, i) != ST_OK) {
    st_py_raise(ST_ERR_INVALID, "initializer");
    return -1;
  }
  return 0;
}

static PyObject *py_add_dense(PyObject *self, PyObject *args) {
  PyObject *cap;
  int units, bias;
  const char *act, *kinit, *binit, *name;
  if (!PyArg_ParseTuple(args, "Oispssz", &cap, &units, &act, &bias, &kinit, &binit, &name))
    return NULL;
  st_model *m = model_of(cap);
  if (!m) return NULL;
  st_dense_options o = st_dense_default_options(units);
  o.use_bias = bias;
  o.name = name;
  if (parse_act(act, &o.activation) || parse_init(kinit, &o.kernel_init) ||
      parse_init(binit, &o.bias_init))
    return NULL;
  st_layer *l = NULL;
  return add_layer(m, st_dense_ex(o, &l), &l, "Dense");
}

static PyObject *py_add_conv2d(PyObject *self, PyObject *args) {
  PyObject *cap;
  int filters, kh, kw, sh, sw, same, bias;
  const char *act, *kinit, *binit, *name;
  if (!PyArg_ParseTuple(args, "Oiiiiipspssz", &cap, &filters, &kh, &kw, &sh, &sw, &same, &act,
                        &bias, &kinit, &binit, &name))
    return NULL;
  st_model *m = model_of(cap);
  if (!m) return NULL;
  st_conv2d_options o = st_conv2d_default_options(filters, kh, kw);
  o.sh = sh, o.sw = sw;
  o.padding = same ? ST_PAD_SAME : ST_PAD_VALID;
  o.use_bias = bias;
  o.name = name;
  if (parse_act(act, &o.activation) || parse_init(kinit, &o.kernel_init) ||
      parse_init(binit, &o.bias_init))
    return NULL;
  st_layer *l = NULL;
  return add_layer(m, st_conv2d_ex(o, &l), &l, "Conv2D");
}

static PyObject *py_add_pool2d(PyObject *self, PyObject *args) {
  PyObject *cap;
  int is_max, ph, pw, sh, sw, same;
  const char *name;
  if (!PyArg_ParseTuple(args, "Opiiiipz", &cap, &is_max, &ph, &pw, &sh, &sw, &same, &name))
    return NULL;
  st_model *m = model_of(cap);
  if (!m) return NULL;
  st_pool2d_options o = st_pool2d_default_options(ph);
  o.ph = ph, o.pw = pw, o.sh = sh, o.sw = sw;
  o.padding = same ? ST_PAD_SAME : ST_PAD_VALID;
  o.name = name;
  st_layer *l = NULL;
  st_status s = is_max ? st_maxpool2d_ex(o, &l) : st_avgpool2d_ex(o, &l);
  return add_layer(m, s, &l, is_max ? "MaxPooling2D" : "AveragePooling2D");
}

/* Flatten, Dropout(rate), Activation(name), Reshape(shape), BatchNormalization. */
static PyObject *py_add_simple(PyObject *self, PyObject *args) {
  PyObject *cap, *arg = Py_None;
  const char *kind;
  if (!PyArg_ParseTuple(args, "Os|O", &cap, &kind, &arg)) return NULL;
  st_model *m = model_of(cap);
  if (!m) return NULL;
  st_layer *l = NULL;
  if (!strcmp(kind, "Flatten")) return add_layer(m, st_flatten(&l), &l, kind);
  if (!strcmp(kind, "Dropout")) {
    double rate = PyFloat_AsDouble(arg);
    if (rate == -1.0 && PyErr_Occurred()) return NULL;
    return add_layer(m, st_dropout((float)rate, &l), &l, kind);
  }
  if (!strcmp(kind, "Activation")) {
    st_activation a;
    PyObject *b = PyUnicode_Check(arg) ? PyUnicode_AsUTF8String(arg) : NULL;
    if (!b) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Activation: a name is expected");
      return NULL;
    }
    int bad = parse_act(PyBytes_AsString(b), &a);
    Py_DECREF(b);
    if (bad) return NULL;
    return add_layer(m, st_activation_layer(a, &l), &l, kind);
  }
  if (!strcmp(kind, "Reshape")) {
    st_shape target;
    if (parse_shape(arg, "Reshape target_shape", &target)) return NULL;
    return add_layer(m, st_reshape(target, &l), &l, kind);
  }
  if (!strcmp(kind, "BatchNormalization")) {
    st_batchnorm_options o = st_batchnorm_default_options();
    double mom, eps;
    int center, scale;
    const char *name = NULL;
    if (!PyTuple_Check(arg)) {
      PyErr_SetString(PyExc_TypeError, "BatchNormalization: a (momentum, epsilon, center, scale[, name]) tuple is expected");
      return NULL;
    }
    if (!PyArg_ParseTuple(arg, "ddpp|z", &mom, &eps, &center, &scale, &name)) return NULL;
    o.momentum = (float)mom, o.epsilon = (float)eps, o.center = center, o.scale = scale;
    o.name = name;
    return add_layer(m, st_batchnorm_ex(o, &l), &l, kind);
  }
  PyErr_Format(PyExc_NotImplementedError, "layer %s is not supported by Strata", kind);
  return NULL;
}

/* [(name, class, output_shape, params), ...] */
static PyObject *py_model_layers(PyObject *self, PyObject *cap) {
  st_model *m = model_of(cap);
  if (!m) return NULL;
  int n = st_model_layer_count(m);
  PyObject *list = PyList_New(n);
  for (int i = 0; list && i < n; i++) {
    const st_layer *l = st_model_layer(m, i);
    PyObject *shape = shape_tuple(st_layer_output_shape(l));
    PyObject *item = shape ? Py_BuildValue("(ssNn)", st_layer_name(l), st_layer_class(l), shape,
                                           (Py_ssize_t)st_layer_param_count(l))
                           : NULL;
    if (!item) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SetItem(list, i, item);
  }
  return list;
}

static PyObject *py_model_summary(PyObject *self, PyObject *cap) {
  st_model *m = model_of(cap);
  if (!m) return NULL;
  char *text = NULL;
  st_status s = st_model_summary(m, &text);
  if (s != ST_OK) return st_py_raise(s, "summary");
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

/* compile(model, optimizer, schedule(kind, initial, decay_steps, decay_rate,
 * staircase, alpha), momentum, nesterov, beta1, beta2, epsilon, rho,
 * weight_decay, loss, metrics list) */
static PyObject *py_model_compile(PyObject *self, PyObject *args) {
  PyObject *cap, *metrics;
  const char *opt, *loss, *sched;
  double lr, rate, alpha, mom, b1, b2, eps, rho, wd;
  long long decay_steps;
  int staircase, nesterov;
  if (!PyArg_ParseTuple(args, "Os(sdLdpd)dpdddddsO", &cap, &opt, &sched, &lr, &decay_steps, &rate,
                        &staircase, &alpha, &mom, &nesterov, &b1, &b2, &eps, &rho, &wd, &loss,
                        &metrics))
    return NULL;
  st_model *m = model_of(cap);
  if (!m) return NULL;
  st_compile_options o = st_compile_default_options();
  st_optimizer_kind ok;
  if (st_optimizer_parse(opt, &ok) != ST_OK) return st_py_raise(ST_ERR_INVALID, "optimizer");
  o.optimizer = st_optimizer_default_options(ok);
  st_schedule *s = &o.optimizer.lr;
  *s = st_schedule_constant((float)lr);
  if (!strcmp(sched, "exponential")) s->kind = ST_SCHEDULE_EXPONENTIAL;
  else if (!strcmp(sched, "cosine")) s->kind = ST_SCHEDULE_COSINE;
  s->decay_steps = decay_steps, s->decay_rate = (float)rate, s->staircase = staircase;
  s->alpha = (float)alpha;
  o.optimizer.momentum = (float)mom, o.optimizer.nesterov = nesterov;
  o.optimizer.beta1 = (float)b1, o.optimizer.beta2 = (float)b2, o.optimizer.epsilon = (float)eps;
  o.optimizer.rho = (float)rho, o.optimizer.weight_decay = (float)wd;
  if (st_loss_parse(loss, &o.loss) != ST_OK) return st_py_raise(ST_ERR_INVALID, "loss");
  if (!PyList_Check(metrics) || PyList_Size(metrics) > 4) {
    PyErr_SetString(PyExc_ValueError, "metrics: a list of at most 4 names");
    return NULL;
  }
  o.nmetrics = (int)PyList_Size(metrics);
  for (int i = 0; i < o.nmetrics; i++) {
    long k = PyLong_AsLong(PyList_GetItem(metrics, i));
    if (k == -1 && PyErr_Occurred()) return NULL;
    if (k < 0 || k >= ST_METRIC_COUNT) {
      PyErr_Format(PyExc_ValueError, "metrics: unknown metric code %ld", k);
      return NULL;
    }
    o.metrics[i] = (st_metric_kind)k;
  }
  st_status rc = st_model_compile(m, &o);
  if (rc != ST_OK) return st_py_raise(rc, "compile");
  Py_RETURN_NONE;
}

/* ---- datasets --------------------------------------------------------------- */

/* from_arrays(x, y or None, scale) -> dataset handle borrowing x and y. */
static PyObject *py_dataset_from_arrays(PyObject *self, PyObject *args) {
  PyObject *xa, *ya;
  double scale = 1.0;
  if (!PyArg_ParseTuple(args, "OO|d", &xa, &ya, &scale)) return NULL;
  st_tensor x, y;
  if (tensor_from_array(xa, "x", &x)) return NULL;
  if (ya != Py_None && tensor_from_array(ya, "y", &y)) return NULL;
  py_dataset *d = calloc(1, sizeof *d);
  if (!d) return PyErr_NoMemory();
  st_status s = st_dataset_from_tensor_slices(&x, ya == Py_None ? NULL : &y, (float)scale, false,
                                              &d->ds);
  if (s != ST_OK) {
    free(d);
    return st_py_raise(s, "dataset");
  }
  Py_INCREF(xa);
  d->keep[0] = xa;
  if (ya != Py_None) {
    Py_INCREF(ya);
    d->keep[1] = ya;
  }
  PyObject *cap = PyCapsule_New(d, CAP_DATASET, dataset_capsule_free);
  if (!cap) {
    st_dataset_destroy(d->ds);
    Py_XDECREF(d->keep[0]);
    Py_XDECREF(d->keep[1]);
    free(d);
  }
  return cap;
}

/* transform(ds, op, a, b, c): replaces the handle's pipeline by the next stage
 * ("shuffle" buffer seed reshuffle, "batch" size drop, "repeat" count,
 * "take"/"skip" count, "shard" n index, "prefetch" size). */
static PyObject *py_dataset_transform(PyObject *self, PyObject *args) {
  PyObject *cap;
  const char *op;
  long long a = 0, b = 0, c = 0;
  if (!PyArg_ParseTuple(args, "Os|LLL", &cap, &op, &a, &b, &c)) return NULL;
  py_dataset *d = cap_get(cap, CAP_DATASET);
  if (!d || !dataset_of(cap)) return NULL;
  st_status s;
  if (!strcmp(op, "shuffle")) s = st_dataset_shuffle(d->ds, a, (uint64_t)b, c != 0, &d->ds);
  else if (!strcmp(op, "batch")) {
    if (a <= 0 || a > 0x7fffffffLL) {
      PyErr_Format(PyExc_ValueError, "batch_size %lld must be positive", a);
      return NULL;
    }
    s = st_dataset_batch(d->ds, (int)a, b != 0, &d->ds);
  } else if (!strcmp(op, "repeat")) s = st_dataset_repeat(d->ds, a, &d->ds);
  else if (!strcmp(op, "take")) s = st_dataset_take(d->ds, a, &d->ds);
  else if (!strcmp(op, "skip")) s = st_dataset_skip(d->ds, a, &d->ds);
  else if (!strcmp(op, "shard")) {
    if (a < 1 || a > 0x7fffffffLL || b < 0 || b >= a) {
      PyErr_Format(PyExc_ValueError, "shard(%lld, %lld): index must be in [0, num_shards)", a, b);
      return NULL;
    }
    s = st_dataset_shard(d->ds, (int)a, (int)b, &d->ds);
  } else if (!strcmp(op, "prefetch")) s = st_dataset_prefetch(d->ds, a > 0 && a < 64 ? (int)a : 2, &d->ds);
  else {
    PyErr_Format(PyExc_ValueError, "unknown dataset transform '%s'", op);
    return NULL;
  }
  if (s != ST_OK) return st_py_raise(s, op);
  Py_RETURN_NONE;
}

static PyObject *py_dataset_cardinality(PyObject *self, PyObject *cap) {
  st_dataset *ds = dataset_of(cap);
  return ds ? PyLong_FromLongLong(st_dataset_cardinality(ds)) : NULL;
}

/* ---- traced maps and file datasets (tf.data.TFRecordDataset, list_files) ---- */

/* An element-wise map a traced Python function reduced to: ops on every x
 * value in order, each in float32 as NumPy computes it (x * c, x / c, x + c,
 * x - c, c - x, c / x), after an optional "round255" that recovers a raw byte
 * from the TFRecord source's byte * (1/255) (exact: the product is within
 * half a unit of the byte / 255). */
enum { MAP_MUL, MAP_DIV, MAP_ADD, MAP_SUB, MAP_RSUB, MAP_RDIV, MAP_ROUND255, MAP_OPS };
typedef struct py_map_ops {
  int n;
  int kind[32];
  float c[32];
} py_map_ops;

static st_status map_ops_apply(void *user, float *x, size_t nx, float *y, size_t ny) {
  const py_map_ops *m = user;
  (void)y;
  (void)ny;
  for (int k = 0; k < m->n; k++) {
    const float c = m->c[k];
    switch (m->kind[k]) {
      case MAP_MUL: for (size_t i = 0; i < nx; i++) x[i] = x[i] * c; break;
      case MAP_DIV: for (size_t i = 0; i < nx; i++) x[i] = x[i] / c; break;
      case MAP_ADD: for (size_t i = 0; i < nx; i++) x[i] = x[i] + c; break;
      case MAP_SUB: for (size_t i = 0; i < nx; i++) x[i] = x[i] - c; break;
      case MAP_RSUB: for (size_t i = 0; i < nx; i++) x[i] = c - x[i]; break;
      case MAP_RDIV: for (size_t i = 0; i < nx; i++) x[i] = c / x[i]; break;
      default: for (size_t i = 0; i < nx; i++) x[i] = floorf(x[i] * 255.0f + 0.5f); break;
    }
  }
  return ST_OK;
}

/* dataset_map_ops(ds, [(kind, constant), ...]): the ops as a C map stage. */
static PyObject *py_dataset_map_ops(PyObject *self, PyObject *args) {
  PyObject *cap, *ops;
  if (!PyArg_ParseTuple(args, "OO", &cap, &ops)) return NULL;
  py_dataset *d = cap_get(cap, CAP_DATASET);
  if (!d || !dataset_of(cap)) return NULL;
  if (!PyList_Check(ops) || PyList_Size(ops) > 32 || d->nowned >= 8) {
    PyErr_SetString(PyExc_ValueError, "map: at most 32 ops in a list, 8 maps a dataset");
    return NULL;
  }
  py_map_ops *m = calloc(1, sizeof *m);
  if (!m) return PyErr_NoMemory();
  m->n = (int)PyList_Size(ops);
  for (int k = 0; k < m->n; k++) {
    double c = 0;
    PyObject *op = PyList_GetItem(ops, k);
    if (!PyTuple_Check(op) || !PyArg_ParseTuple(op, "id", &m->kind[k], &c) || m->kind[k] < 0 ||
        m->kind[k] >= MAP_OPS) {
      free(m);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "map: unknown op");
      return NULL;
    }
    m->c[k] = (float)c;
  }
  st_status s = st_dataset_map(d->ds, map_ops_apply, m, &d->ds);
  if (s != ST_OK) {
    free(m);
    return st_py_raise(s, "map");
  }
  d->owned[d->nowned++] = m;
  Py_RETURN_NONE;
}

/* list_files(pattern, shuffle, seed) -> [names] (st_list_files' order) */
static PyObject *py_list_files(PyObject *self, PyObject *args) {
  const char *pattern;
  int shuffle;
  unsigned long long seed;
  if (!PyArg_ParseTuple(args, "spK", &pattern, &shuffle, &seed)) return NULL;
  char **files = NULL;
  int n = 0;
  st_status s = st_list_files(pattern, shuffle != 0, seed, &files, &n);
  if (s != ST_OK) return st_py_raise(s, "list_files");
  PyObject *out = PyList_New(n);
  for (int i = 0; out && i < n; i++) {
    PyObject *name = PyUnicode_DecodeFSDefault(files[i]);
    if (!name) {
      Py_CLEAR(out);
      break;
    }
    PyList_SetItem(out, i, name);
  }
  st_list_files_free(files, n);
  return out;
}

static const char *const CAP_READER = "strata.tfrecord_reader";

static void reader_capsule_free(PyObject *cap) {
  st_tfrecord_reader_destroy(PyCapsule_GetPointer(cap, CAP_READER));
}

/* Record options from a compression name and a buffer size (0: default). */
static int record_options(const char *compression, long long buffer, st_tfrecord_options *o) {
  *o = st_tfrecord_default_options();
  if (st_compression_parse(compression ? compression : "", &o->compression) != ST_OK) {
    st_py_raise(ST_ERR_INVALID, "compression_type");
    return -1;
  }
  if (buffer < 0) {
    PyErr_Format(PyExc_ValueError, "buffer_size %lld must be >= 0", buffer);
    return -1;
  }
  if (buffer > 0) o->buffer_size = (size_t)buffer;
  return 0;
}

/* tfrecord_reader(path, compression, buffer_size) -> reader handle */
static PyObject *py_tfrecord_reader(PyObject *self, PyObject *args) {
  const char *path, *comp;
  long long buffer;
  if (!PyArg_ParseTuple(args, "szL", &path, &comp, &buffer)) return NULL;
  st_tfrecord_options o;
  if (record_options(comp, buffer, &o)) return NULL;
  st_tfrecord_reader *r = NULL;
  st_status s = st_tfrecord_reader_create(path, &o, &r);
  if (s != ST_OK) return st_py_raise(s, "TFRecordDataset");
  PyObject *cap = PyCapsule_New(r, CAP_READER, reader_capsule_free);
  if (!cap) st_tfrecord_reader_destroy(r);
  return cap;
}

/* tfrecord_next(reader) -> the next record's bytes, or None at the end */
static PyObject *py_tfrecord_next(PyObject *self, PyObject *cap) {
  st_tfrecord_reader *r = cap_get(cap, CAP_READER);
  if (!r) return NULL;
  const void *data;
  size_t size;
  bool end;
  st_status s = st_tfrecord_reader_next(r, &data, &size, &end);
  if (s != ST_OK) return st_py_raise(s, "TFRecordDataset");
  if (end) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(data, (Py_ssize_t)size);
}

/* tfrecord_write(path, compression, [bytes]) writes every record, then
 * renames the file into place. */
static PyObject *py_tfrecord_write(PyObject *self, PyObject *args) {
  const char *path, *comp;
  PyObject *records;
  if (!PyArg_ParseTuple(args, "szO!", &path, &comp, &PyList_Type, &records)) return NULL;
  st_tfrecord_options o;
  if (record_options(comp, 0, &o)) return NULL;
  st_tfrecord_writer *w = NULL;
  st_status s = st_tfrecord_writer_create(path, &o, &w);
  for (Py_ssize_t i = 0; s == ST_OK && i < PyList_Size(records); i++) {
    PyObject *r = PyList_GetItem(records, i);
    char *data = PyBytes_AsString(r);
    if (!data) {
      st_tfrecord_writer_destroy(w);
      return NULL;
    }
    s = st_tfrecord_writer_write(w, data, (size_t)PyBytes_Size(r));
  }
  if (s != ST_OK) {
    st_tfrecord_writer_destroy(w);
    return st_py_raise(s, "TFRecordWriter");
  }
  if ((s = st_tfrecord_writer_close(w)) != ST_OK) return st_py_raise(s, "TFRecordWriter");
  Py_RETURN_NONE;
}

/* A feature spec from (name, dtype name, shape tuple). */
static int feature_spec(PyObject *t, st_feature_spec *f) {
  const char *name, *dtype;
  PyObject *shape;
  if (!PyArg_ParseTuple(t, "ssO", &name, &dtype, &shape)) return -1;
  memset(f, 0, sizeof *f);
  if (strlen(name) >= sizeof f->name) {
    PyErr_Format(PyExc_ValueError, "feature name '%s' is too long", name);
    return -1;
  }
  strcpy(f->name, name);
  if (!strcmp(dtype, "float32")) f->dtype = ST_FEATURE_FLOAT32;
  else if (!strcmp(dtype, "int64")) f->dtype = ST_FEATURE_INT64;
  else if (!strcmp(dtype, "uint8")) f->dtype = ST_FEATURE_UINT8;
  else {
    PyErr_Format(PyExc_ValueError, "feature '%s': dtype %s", name, dtype);
    return -1;
  }
  return PyTuple_Size(shape) == 0 ? 0 : parse_shape(shape, "feature shape", &f->shape);
}

/* dataset_tfrecord([file names as bytes], compression, buffer_size, x spec, y spec or None,
 * cycle_length, block_length) -> dataset handle */
static PyObject *py_dataset_tfrecord(PyObject *self, PyObject *args) {
  PyObject *files, *xs, *ys;
  const char *comp;
  long long buffer;
  int cycle, block;
  if (!PyArg_ParseTuple(args, "OzLOOii", &files, &comp, &buffer, &xs, &ys, &cycle, &block))
    return NULL;
  st_tfrecord_dataset_options o = st_tfrecord_dataset_default_options();
  if (record_options(comp, buffer, &o.record) || feature_spec(xs, &o.spec.x) ||
      (ys != Py_None && feature_spec(ys, &o.spec.y)))
    return NULL;
  o.cycle_length = cycle;
  o.block_length = block;
  if (!PyList_Check(files) || PyList_Size(files) < 1 || PyList_Size(files) > 1000000) {
    PyErr_SetString(PyExc_ValueError, "TFRecordDataset: a non-empty list of file names expected");
    return NULL;
  }
  int n = (int)PyList_Size(files);
  const char **names = calloc((size_t)n, sizeof *names);
  if (!names) return PyErr_NoMemory();
  for (int i = 0; i < n; i++)
    if (!(names[i] = PyBytes_AsString(PyList_GetItem(files, i)))) { /* os.fsencode()d */
      free(names);
      return NULL;
    }
  py_dataset *d = calloc(1, sizeof *d);
  st_status s = d ? st_dataset_tfrecord(names, n, &o, &d->ds) : ST_ERR_NOMEM;
  free(names);
  if (!d) return PyErr_NoMemory();
  if (s != ST_OK) {
    free(d);
    return st_py_raise(s, "TFRecordDataset");
  }
  PyObject *cap = PyCapsule_New(d, CAP_DATASET, dataset_capsule_free);
  if (!cap) {
    st_dataset_destroy(d->ds);
    free(d);
  }
  return cap;
}

/* ---- fit and its callbacks ------------------------------------------------- */

/* The one C callback of a Python fit: it calls the Python callback list
 * (obj.on_epoch_begin / on_batch_end / on_epoch_end) with the GIL, checks
 * for Ctrl-C at every step, and stops fit (ST_ERR_STOPPED) when Python
 * raised; the exception is kept and raised again once fit has returned. */
typedef struct py_fit_cb {
  PyObject *obj;
  int batch_every; /* call on_batch_end every N steps; 0 = never */
  int epoch_offset;
  PyObject *et, *ev, *tb; /* the exception Python raised */
} py_fit_cb;

static st_status cb_fail(py_fit_cb *c) {
  if (!c->et) PyErr_Fetch(&c->et, &c->ev, &c->tb);
  else PyErr_Clear();
  return st_error(ST_ERR_STOPPED, "a Python callback raised an exception");
}

static st_status cb_epoch_begin(void *user, st_model *m, int epoch) {
  py_fit_cb *c = user;
  PyGILState_STATE g = PyGILState_Ensure();
  st_status s = ST_OK;
  PyObject *r = PyObject_CallMethod(c->obj, "on_epoch_begin", "i", epoch + c->epoch_offset);
  if (!r) s = cb_fail(c);
  Py_XDECREF(r);
  PyGILState_Release(g);
  return s;
}

static st_status cb_batch_end(void *user, st_model *m, const st_batch_logs *l) {
  py_fit_cb *c = user;
  PyGILState_STATE g = PyGILState_Ensure();
  st_status s = ST_OK;
  if (PyErr_CheckSignals() < 0) {
    /* Ctrl-C: keep KeyboardInterrupt and let fit stop at this step boundary
     * as on SIGTERM (writing BackupAndRestore's backup there, if any). */
    if (!c->et) PyErr_Fetch(&c->et, &c->ev, &c->tb);
    else PyErr_Clear();
    st_request_stop();
  } else if (c->batch_every > 0 && (l->step + 1) % c->batch_every == 0) {
    PyObject *r = PyObject_CallMethod(c->obj, "on_batch_end", "iLLdd", l->epoch + c->epoch_offset,
                                      (long long)l->step, (long long)l->steps, l->loss, l->accuracy);
    if (!r) s = cb_fail(c);
    Py_XDECREF(r);
  }
  PyGILState_Release(g);
  return s;
}

static PyObject *epoch_logs_tuple(const st_epoch_logs *l, int offset) {
  return Py_BuildValue("(iddidddd LL)", l->epoch + offset, l->loss, l->accuracy,
                       (int)l->has_validation, l->val_loss, l->val_accuracy, l->lr, l->seconds,
                       (long long)l->steps, (long long)l->examples);
}

static st_status cb_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  py_fit_cb *c = user;
  PyGILState_STATE g = PyGILState_Ensure();
  st_status s = ST_OK;
  PyObject *t = epoch_logs_tuple(l, c->epoch_offset);
  PyObject *r = t ? PyObject_CallMethod(c->obj, "on_epoch_end", "(O)", t) : NULL;
  if (!r) s = cb_fail(c);
  Py_XDECREF(r);
  Py_XDECREF(t);
  PyGILState_Release(g);
  return s;
}

/* fit(model, train, epochs, val or None, callbacks obj, batch_every,
 * epoch_offset[, backup_dir, backup_every_steps]) -> (list of epoch log
 * tuples, samples_per_sec) */
/* fit's validation epochs (1-based ints, None = every epoch) and class
 * weights (floats, None = none) as the C arrays st_fit_options borrows. */
typedef struct fit_lists {
  int *epochs;
  float *weights;
} fit_lists;

static void fit_lists_free(fit_lists *fl) {
  PyMem_Free(fl->epochs);
  PyMem_Free(fl->weights);
  fl->epochs = NULL;
  fl->weights = NULL;
}

static int fit_lists_parse(PyObject *vepochs, PyObject *cweights, fit_lists *fl,
                           st_fit_options *o) {
  if (vepochs != Py_None) {
    Py_ssize_t n = PySequence_Size(vepochs);
    if (n < 0) return -1;
    if (!(fl->epochs = PyMem_Calloc((size_t)n + 1, sizeof(int)))) goto nomem;
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *v = PySequence_GetItem(vepochs, i);
      long e = v ? PyLong_AsLong(v) : -1;
      Py_XDECREF(v);
      if (e == -1 && PyErr_Occurred()) goto fail;
      fl->epochs[i] = e < 1 || e > INT_MAX ? 0 : (int)e; /* 0: fit names it */
    }
    o->validation_epochs = fl->epochs;
    o->nvalidation_epochs = (int)n;
  }
  if (cweights != Py_None) {
    Py_ssize_t n = PySequence_Size(cweights);
    if (n < 0) goto fail;
    if (!(fl->weights = PyMem_Calloc((size_t)n + 1, sizeof(float)))) goto nomem;
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *v = PySequence_GetItem(cweights, i);
      double w = v ? PyFloat_AsDouble(v) : -1.0;
      Py_XDECREF(v);
      if (w == -1.0 && PyErr_Occurred()) goto fail;
      fl->weights[i] = (float)w;
    }
    o->class_weight = fl->weights;
    o->nclass_weight = (int)n;
  }
  return 0;
nomem:
  PyErr_NoMemory();
fail:
  fit_lists_free(fl);
  return -1;
}

static PyObject *py_model_fit(PyObject *self, PyObject *args) {
  PyObject *mcap, *tcap, *vcap, *obj;
  int epochs, batch_every, offset;
  const char *backup = NULL;
  long long backup_every = 0;
  PyObject *vepochs = Py_None, *cweights = Py_None;
  int sw_column = 0;
  if (!PyArg_ParseTuple(args, "OOiOOii|zLOOp", &mcap, &tcap, &epochs, &vcap, &obj, &batch_every,
                        &offset, &backup, &backup_every, &vepochs, &cweights, &sw_column))
    return NULL;
  st_model *m = model_of(mcap);
  st_dataset *train = m ? dataset_of(tcap) : NULL;
  if (!train) return NULL;
  st_fit_options o = st_fit_default_options();
  o.epochs = epochs;
  fit_lists fl = {0};
  if (fit_lists_parse(vepochs, cweights, &fl, &o)) return NULL;
  o.sample_weight_column = sw_column != 0;
  if (vcap != Py_None && !(o.validation = dataset_of(vcap))) return NULL;
  py_fit_cb c = {obj, batch_every, offset, NULL, NULL, NULL};
  st_callback cb = {&c, cb_epoch_begin, cb_batch_end, cb_epoch_end, NULL};
  o.callbacks = &cb;
  o.ncallbacks = 1;
  o.backup_dir = backup;
  o.backup_every_steps = backup_every;
  st_clear_stop_request();
  st_history h;
  st_status s;
  if (claim(mcap, tcap, vcap == Py_None ? NULL : vcap, "fit")) {
    fit_lists_free(&fl);
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  s = st_model_fit(m, train, &o, &h);
  Py_END_ALLOW_THREADS
  fit_lists_free(&fl);
  release(mcap, tcap, vcap == Py_None ? NULL : vcap);
  st_clear_stop_request();
  if (c.et) {
    st_history_destroy(&h);
    PyErr_Restore(c.et, c.ev, c.tb);
    return NULL;
  }
  if (s != ST_OK) {
    st_history_destroy(&h);
    return st_py_raise(s, "fit");
  }
  PyObject *logs = PyList_New(h.epochs);
  for (int i = 0; logs && i < h.epochs; i++) {
    PyObject *t = epoch_logs_tuple(&h.logs[i], offset);
    if (!t) {
      Py_CLEAR(logs);
      break;
    }
    PyList_SetItem(logs, i, t);
  }
  double sps = h.samples_per_sec;
  st_history_destroy(&h);
  return logs ? Py_BuildValue("(Nd)", logs, sps) : NULL;
}

static PyObject *py_model_evaluate(PyObject *self, PyObject *args) {
  PyObject *mcap, *dcap;
  if (!PyArg_ParseTuple(args, "OO", &mcap, &dcap)) return NULL;
  st_model *m = model_of(mcap);
  st_dataset *ds = m ? dataset_of(dcap) : NULL;
  if (!ds) return NULL;
  st_eval_result r;
  st_status s;
  if (claim(mcap, dcap, NULL, "evaluate")) return NULL;
  Py_BEGIN_ALLOW_THREADS
  s = st_model_evaluate(m, ds, &r);
  Py_END_ALLOW_THREADS
  release(mcap, dcap, NULL);
  if (s != ST_OK) return st_py_raise(s, "evaluate");
  return Py_BuildValue("(ddL)", r.loss, r.accuracy, (long long)r.examples);
}

/* predict(model, ds) -> (bytearray of float32, rows, cols) */
static PyObject *py_model_predict(PyObject *self, PyObject *args) {
  PyObject *mcap, *dcap;
  if (!PyArg_ParseTuple(args, "OO", &mcap, &dcap)) return NULL;
  st_model *m = model_of(mcap);
  st_dataset *ds = m ? dataset_of(dcap) : NULL;
  if (!ds) return NULL;
  st_tensor t;
  memset(&t, 0, sizeof t);
  st_status s;
  if (claim(mcap, dcap, NULL, "predict")) return NULL;
  Py_BEGIN_ALLOW_THREADS
  s = st_model_predict(m, ds, &t);
  Py_END_ALLOW_THREADS
  release(mcap, dcap, NULL);
  if (s != ST_OK) return st_py_raise(s, "predict");
  size_t n = st_tensor_count(&t);
  long long rows = t.rank > 0 ? t.dims[0] : 0;
  PyObject *buf = PyByteArray_FromStringAndSize((const char *)t.data, (Py_ssize_t)(n * 4));
  st_tensor_destroy(&t);
  return buf ? Py_BuildValue("(NL)", buf, rows) : NULL;
}

/* ---- weights ------------------------------------------------------------------ */

static PyObject *py_get_weights(PyObject *self, PyObject *cap) {
  st_model *m = model_of(cap);
  if (!m) return NULL;
  size_t n = st_model_weights_size(m);
  PyObject *buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
  if (!buf) return NULL;
  st_status s = st_model_get_weights(m, (float *)PyByteArray_AsString(buf));
  if (s != ST_OK) {
    Py_DECREF(buf);
    return st_py_raise(s, "get_weights");
  }
  return buf;
}

static PyObject *py_set_weights(PyObject *self, PyObject *args) {
  PyObject *cap, *arr;
  if (!PyArg_ParseTuple(args, "OO", &cap, &arr)) return NULL;
  st_model *m = model_of(cap);
  if (!m) return NULL;
  st_tensor t;
  if (tensor_from_array(arr, "weights", &t)) return NULL;
  if (t.dtype != ST_F32 || st_tensor_count(&t) != st_model_weights_size(m)) {
    PyErr_Format(PyExc_ValueError, "set_weights: %zu float32 values given, the model has %zu",
                 st_tensor_count(&t), st_model_weights_size(m));
    return NULL;
  }
  st_status s = st_model_set_weights(m, t.data);
  if (s != ST_OK) return st_py_raise(s, "set_weights");
  Py_RETURN_NONE;
}

static PyObject *py_weights_file(PyObject *self, PyObject *args) {
  PyObject *cap;
  const char *path;
  int save;
  if (!PyArg_ParseTuple(args, "Osp", &cap, &path, &save)) return NULL;
  st_model *m = model_of(cap);
  if (!m) return NULL;
  /* called from callbacks during fit too (ModelCheckpoint): the GIL is kept */
  st_status s = save ? st_model_save_weights(m, path) : st_model_load_weights(m, path);
  if (s != ST_OK) return st_py_raise(s, save ? "save_weights" : "load_weights");
  Py_RETURN_NONE;
}

static PyObject *py_learning_rate(PyObject *self, PyObject *args) {
  PyObject *cap;
  double lr = -1;
  if (!PyArg_ParseTuple(args, "O|d", &cap, &lr)) return NULL;
  st_model *m = model_of(cap);
  if (!m) return NULL;
  if (PyTuple_Size(args) > 1) {
    st_status s = st_model_set_learning_rate(m, lr);
    if (s != ST_OK) return st_py_raise(s, "learning_rate");
  }
  return PyFloat_FromDouble(st_model_learning_rate(m));
}

static PyObject *py_stop_training(PyObject *self, PyObject *cap) {
  st_model *m = model_of(cap);
  if (!m) return NULL;
  st_model_stop_training(m);
  Py_RETURN_NONE;
}

/* ---- custom training loops: strategy.run per replica ------------------------ */

/* st_strategy_run over a Python function: each replica's thread takes the GIL,
 * calls fn(replica_id, context handle) and keeps the result; the replica steps
 * (replica_train, replica_all_reduce) release the GIL while they compute and
 * wait in the replicas' collectives, so the other replicas' Python runs. */
static const char *const CAP_REPLICA = "strata.replica_context";
static const char *const CAP_REPLICA_DONE = "strata.replica_context (its strategy.run returned)";

typedef struct py_run {
  PyObject *fn;           /* fn(replica_id, context) */
  PyObject *results;      /* list: one result per local replica */
  PyObject *et, *ev, *tb; /* the first exception a replica raised */
} py_run;

static st_status run_replica(st_replica_context *ctx, void *arg) {
  py_run *r = arg;
  PyGILState_STATE g = PyGILState_Ensure();
  st_status s = ST_OK;
  int id = st_replica_id(ctx);
  PyObject *cap = PyCapsule_New(ctx, CAP_REPLICA, NULL);
  PyObject *res = cap ? PyObject_CallFunction(r->fn, "iO", id, cap) : NULL;
  if (cap) PyCapsule_SetName(cap, CAP_REPLICA_DONE); /* handles kept past the run refuse */
  Py_XDECREF(cap);
  if (res) PyList_SetItem(r->results, id, res); /* steals res */
  else {
    if (!r->et) PyErr_Fetch(&r->et, &r->ev, &r->tb);
    else PyErr_Clear();
    s = st_error(ST_ERR_STOPPED, "replica %d: the Python function raised an exception", id);
  }
  PyGILState_Release(g);
  return s;
}

/* strategy_run(model, fn, local_replicas) -> [fn's result of each replica] */
static PyObject *py_strategy_run(PyObject *self, PyObject *args) {
  PyObject *mcap, *fn;
  int n;
  if (!PyArg_ParseTuple(args, "OOi", &mcap, &fn, &n)) return NULL;
  py_model *pm = cap_get(mcap, CAP_MODEL);
  if (!pm) return NULL;
  st_strategy *s = pm->strategy ? cap_get(pm->strategy, CAP_STRATEGY) : NULL;
  if (!s) {
    PyErr_SetString(PyExc_ValueError, "strategy.run: the model has no strategy");
    return NULL;
  }
  if (n < 1 || n > ST_MAX_REPLICAS) {
    PyErr_Format(PyExc_ValueError, "strategy.run: %d local replicas", n);
    return NULL;
  }
  py_run r = {fn, PyList_New(n), NULL, NULL, NULL};
  if (!r.results) return NULL;
  for (int i = 0; i < n; i++) {
    Py_INCREF(Py_None);
    PyList_SetItem(r.results, i, Py_None);
  }
  if (claim(mcap, NULL, NULL, "strategy.run")) {
    Py_DECREF(r.results);
    return NULL;
  }
  st_status rc;
  Py_BEGIN_ALLOW_THREADS
  rc = st_strategy_run(s, run_replica, &r);
  Py_END_ALLOW_THREADS
  release(mcap, NULL, NULL);
  if (r.et) {
    Py_DECREF(r.results);
    PyErr_Restore(r.et, r.ev, r.tb);
    return NULL;
  }
  if (rc != ST_OK) {
    Py_DECREF(r.results);
    return st_py_raise(rc, "strategy.run");
  }
  return r.results;
}

static st_replica_context *replica_of(PyObject *cap) {
  if (PyCapsule_IsValid(cap, CAP_REPLICA_DONE)) {
    PyErr_SetString(PyExc_RuntimeError, "this replica context belongs to a strategy.run that has "
                    "returned; train inside the function strategy.run calls");
    return NULL;
  }
  return cap_get(cap, CAP_REPLICA);
}

/* A float32 NumPy array of a replica step (borrowed into *t). */
static int replica_array(PyObject *arr, const char *what, st_tensor *t) {
  if (tensor_from_array(arr, what, t)) return -1;
  if (t->dtype != ST_F32) {
    PyErr_Format(PyExc_ValueError, "%s: float32 expected", what);
    return -1;
  }
  return 0;
}

/* replica_train(ctx, x float32 [n, ...], y float32 [n, ...]) -> (loss_sum,
 * correct, global_batch): the replicas' example counts summed (the global
 * batch), gradients of this replica's examples, the all-reduced update. */
static PyObject *py_replica_train(PyObject *self, PyObject *args) {
  PyObject *ccap, *xa, *ya;
  if (!PyArg_ParseTuple(args, "OOO", &ccap, &xa, &ya)) return NULL;
  st_replica_context *c = replica_of(ccap);
  st_tensor x, y;
  if (!c || replica_array(xa, "x", &x) || replica_array(ya, "y", &y)) return NULL;
  if (y.dims[0] != x.dims[0]) {
    PyErr_Format(PyExc_ValueError, "train_on_batch: x has %lld examples and y has %lld",
                 (long long)x.dims[0], (long long)y.dims[0]);
    return NULL;
  }
  st_batch b = {(int)x.dims[0], x.data, y.data};
  double loss = 0;
  int64_t correct = 0;
  float global = (float)b.size;
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_replica_all_reduce(c, ST_REDUCE_SUM, &global, 1);
  if (s == ST_OK && global < 1)
    s = st_error(ST_ERR_INVALID, "train_on_batch: the replicas' batch slices are all empty");
  if (s == ST_OK) s = st_replica_compute_gradients(c, &b, (int64_t)global, &loss, &correct);
  if (s == ST_OK) s = st_replica_apply_gradients(c);
  Py_END_ALLOW_THREADS
  if (s != ST_OK) return st_py_raise(s, "train_on_batch");
  return Py_BuildValue("(dLL)", loss, (long long)correct, (long long)global);
}

/* replica_all_reduce(ctx, op 0 SUM / 1 MEAN, float32 array) -> bytearray of
 * the reduced values. */
static PyObject *py_replica_all_reduce(PyObject *self, PyObject *args) {
  PyObject *ccap, *arr;
  int op;
  if (!PyArg_ParseTuple(args, "OiO", &ccap, &op, &arr)) return NULL;
  st_replica_context *c = replica_of(ccap);
  st_tensor t;
  if (!c || replica_array(arr, "value", &t)) return NULL;
  size_t n = st_tensor_count(&t);
  PyObject *buf = PyByteArray_FromStringAndSize((const char *)t.data, (Py_ssize_t)(n * 4));
  if (!buf) return NULL;
  float *p = (float *)PyByteArray_AsString(buf);
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_replica_all_reduce(c, op == 1 ? ST_REDUCE_MEAN : ST_REDUCE_SUM, p, n);
  Py_END_ALLOW_THREADS
  if (s != ST_OK) {
    Py_DECREF(buf);
    return st_py_raise(s, "all_reduce");
  }
  return buf;
}

/* strategy_reduce(model, op 0 SUM / 1 MEAN, float32 array [local replicas, n])
 * -> bytearray of the n reduced values: st_strategy_reduce on the model's
 * strategy (across workers under multi_worker_mirrored: every worker calls
 * it, with the same n). */
static PyObject *py_strategy_reduce(PyObject *self, PyObject *args) {
  PyObject *mcap, *arr;
  int op;
  if (!PyArg_ParseTuple(args, "OiO", &mcap, &op, &arr)) return NULL;
  py_model *pm = cap_get(mcap, CAP_MODEL);
  if (!pm) return NULL;
  st_strategy *s = pm->strategy ? cap_get(pm->strategy, CAP_STRATEGY) : NULL;
  st_tensor t;
  if (!s) {
    PyErr_SetString(PyExc_ValueError, "strategy.reduce: the model has no strategy");
    return NULL;
  }
  if (replica_array(arr, "value", &t)) return NULL;
  if (t.rank != 2 || t.dims[0] != st_strategy_num_replicas_in_sync(s) / st_strategy_worker_count(s)) {
    PyErr_SetString(PyExc_ValueError, "strategy.reduce: one row per local replica expected");
    return NULL;
  }
  size_t n = (size_t)t.dims[1];
  PyObject *buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
  if (!buf) return NULL;
  float *p = (float *)PyByteArray_AsString(buf);
  st_status rc;
  if (claim(mcap, NULL, NULL, "strategy.reduce")) {
    Py_DECREF(buf);
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  rc = st_strategy_reduce(s, op == 1 ? ST_REDUCE_MEAN : ST_REDUCE_SUM, t.data, n, p);
  Py_END_ALLOW_THREADS
  release(mcap, NULL, NULL);
  if (rc != ST_OK) {
    Py_DECREF(buf);
    return st_py_raise(rc, "strategy.reduce");
  }
  return buf;
}

/* ---- files ---------------------------------------------------------------------- */

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
  if (s != ST_OK) return st_py_raise(s, "load_data");
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
  if (s != ST_OK) return st_py_raise(s, "TensorBoard");
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
  st_tensorboard *tb = cap_get(cap, CAP_TB);
  if (!tb) return NULL;
  st_status s = st_tensorboard_scalar(tb, val, tag, step, v);
  if (s == ST_OK) s = st_tensorboard_flush(tb);
  if (s != ST_OK) return st_py_raise(s, "TensorBoard");
  Py_RETURN_NONE;
}

static PyObject *py_loss_is_sparse(PyObject *self, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  st_loss_kind k;
  if (st_loss_parse(name, &k) != ST_OK) return st_py_raise(ST_ERR_INVALID, "loss");
  return PyBool_FromLong(st_loss_is_sparse(k));
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
    {"strategy_create", py_strategy_create, METH_VARARGS,
     "strategy_create(kind, devices=None, replicas=0, cross_device_ops=None, device=None, threads=0)"},
    {"strategy_replicas", py_strategy_replicas, METH_O, "num_replicas_in_sync of a strategy"},
    {"strategy_workers", py_strategy_workers, METH_O, "(worker rank, worker count) of a strategy"},
    {"model_create", py_model_create, METH_VARARGS, "model_create(input_shape, seed, strategy, name)"},
    {"add_dense", py_add_dense, METH_VARARGS, "add a Dense layer"},
    {"add_conv2d", py_add_conv2d, METH_VARARGS, "add a Conv2D layer"},
    {"add_pool2d", py_add_pool2d, METH_VARARGS, "add a MaxPooling2D / AveragePooling2D layer"},
    {"add_simple", py_add_simple, METH_VARARGS, "add Flatten/Dropout/Activation/Reshape/BatchNormalization"},
    {"model_layers", py_model_layers, METH_O, "[(name, class, output_shape, params)]"},
    {"model_summary", py_model_summary, METH_O, "Keras-style summary text"},
    {"model_compile", py_model_compile, METH_VARARGS, "compile a model"},
    {"dataset_from_arrays", py_dataset_from_arrays, METH_VARARGS, "dataset over borrowed arrays"},
    {"dataset_transform", py_dataset_transform, METH_VARARGS, "add a pipeline stage in place"},
    {"dataset_cardinality", py_dataset_cardinality, METH_O, "items per pass (-1 infinite)"},
    {"model_fit", py_model_fit, METH_VARARGS, "fit with the GIL released"},
    {"model_evaluate", py_model_evaluate, METH_VARARGS, "(loss, accuracy, examples)"},
    {"model_predict", py_model_predict, METH_VARARGS, "(float32 bytes, rows)"},
    {"get_weights", py_get_weights, METH_O, "every variable as float32 bytes"},
    {"set_weights", py_set_weights, METH_VARARGS, "set every variable from a float32 array"},
    {"weights_file", py_weights_file, METH_VARARGS, "weights_file(model, path, save)"},
    {"learning_rate", py_learning_rate, METH_VARARGS, "learning_rate(model[, new])"},
    {"stop_training", py_stop_training, METH_O, "stop fit after this epoch"},
    {"mnist_load", py_mnist_load, METH_VARARGS, "the four IDX files of a directory"},
    {"tb_create", py_tb_create, METH_VARARGS, "TensorBoard event writer"},
    {"tb_scalar", py_tb_scalar, METH_VARARGS, "write and flush one scalar"},
    {"loss_is_sparse", py_loss_is_sparse, METH_VARARGS, "whether a loss takes class indices"},
    {"strategy_run", py_strategy_run, METH_VARARGS, "fn(replica_id, ctx) on every local replica"},
    {"dataset_map_ops", py_dataset_map_ops, METH_VARARGS, "a traced element-wise map as a C stage"},
    {"list_files", py_list_files, METH_VARARGS, "list_files(pattern, shuffle, seed) -> [names]"},
    {"tfrecord_reader", py_tfrecord_reader, METH_VARARGS, "open a TFRecord file"},
    {"tfrecord_next", py_tfrecord_next, METH_O, "the next record's bytes or None"},
    {"tfrecord_write", py_tfrecord_write, METH_VARARGS, "write a TFRecord file"},
    {"dataset_tfrecord", py_dataset_tfrecord, METH_VARARGS, "the C TFRecord dataset source"},
    {"replica_train", py_replica_train, METH_VARARGS, "one replica's share of a training step"},
    {"replica_all_reduce", py_replica_all_reduce, METH_VARARGS, "all-reduce floats over the replicas"},
    {"strategy_reduce", py_strategy_reduce, METH_VARARGS, "st_strategy_reduce over every worker"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_strata",
                                    "Strata's C engine (libstrata) for the strata package.", -1,
                                    methods, NULL, NULL, NULL, NULL};

int st_py_ps_register(PyObject *module); /* python/src/ps.c */

PyMODINIT_FUNC PyInit__strata(void) {
  PyObject *m = PyModule_Create(&module);
  if (m && st_py_ps_register(m) < 0) Py_CLEAR(m);
  if (m) PyModule_AddStringConstant(m, "version", STRATA_VERSION);
  return m;
}
