/* strata._strata's strategies (tf.distribute): create one, its replica and
 * worker counts, and custom training loops: strategy.run calls a Python
 * function on every local replica's thread (st_strategy_run), whose
 * train_on_batch and all_reduce run one replica's share of a step, and
 * strategy.reduce across workers. */
#include <stdlib.h>
#include <string.h>

#include "ext.h"

static void strategy_capsule_free(PyObject *cap) {
  st_strategy_destroy(PyCapsule_GetPointer(cap, ST__PY_CAP_STRATEGY));
}

static PyObject *py_strategy_create(PyObject *self, PyObject *args) {
  const char *kind, *devices = NULL, *device = NULL, *ops = NULL;
  int replicas = 0, threads = 0;
  if (!PyArg_ParseTuple(args, "s|zizzi", &kind, &devices, &replicas, &ops, &device, &threads))
    return NULL;
  st_strategy_kind k;
  if (st_strategy_kind_parse(kind, &k) != ST_OK) return st__py_raise(ST_ERR_INVALID, "strategy");
  st_strategy_options o = st_strategy_default_options(k);
  o.devices = devices;
  o.replicas = replicas;
  if (ops) o.cross_device_ops = ops;
  if (device) o.device = device;
  o.threads = threads;
  st_strategy *s = NULL;
  st_status rc = st_strategy_create(&o, &s);
  if (rc != ST_OK) return st__py_raise(rc, "strategy");
  PyObject *cap = PyCapsule_New(s, ST__PY_CAP_STRATEGY, strategy_capsule_free);
  if (!cap) st_strategy_destroy(s);
  return cap;
}

static PyObject *py_strategy_replicas(PyObject *self, PyObject *cap) {
  st_strategy *s = st__py_cap_get(cap, ST__PY_CAP_STRATEGY);
  if (!s) return NULL;
  return PyLong_FromLong(st_strategy_num_replicas_in_sync(s));
}

static PyObject *py_strategy_workers(PyObject *self, PyObject *cap) {
  st_strategy *s = st__py_cap_get(cap, ST__PY_CAP_STRATEGY);
  if (!s) return NULL;
  return Py_BuildValue("(ii)", st_strategy_worker_rank(s), st_strategy_worker_count(s));
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
  py_model *pm = st__py_cap_get(mcap, ST__PY_CAP_MODEL);
  if (!pm) return NULL;
  st_strategy *s = pm->strategy ? st__py_cap_get(pm->strategy, ST__PY_CAP_STRATEGY) : NULL;
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
  if (st__py_claim(mcap, NULL, NULL, "strategy.run")) {
    Py_DECREF(r.results);
    return NULL;
  }
  st_status rc;
  Py_BEGIN_ALLOW_THREADS
  rc = st_strategy_run(s, run_replica, &r);
  Py_END_ALLOW_THREADS
  st__py_release(mcap, NULL, NULL);
  if (r.et) {
    Py_DECREF(r.results);
    PyErr_Restore(r.et, r.ev, r.tb);
    return NULL;
  }
  if (rc != ST_OK) {
    Py_DECREF(r.results);
    return st__py_raise(rc, "strategy.run");
  }
  return r.results;
}

static st_replica_context *replica_of(PyObject *cap) {
  if (PyCapsule_IsValid(cap, CAP_REPLICA_DONE)) {
    PyErr_SetString(PyExc_RuntimeError, "this replica context belongs to a strategy.run that has "
                    "returned; train inside the function strategy.run calls");
    return NULL;
  }
  return st__py_cap_get(cap, CAP_REPLICA);
}

/* A float32 NumPy array of a replica step (borrowed into *t). */
static int replica_array(PyObject *arr, const char *what, st_tensor *t) {
  if (st__py_tensor_from_array(arr, what, t)) return -1;
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
  if (s != ST_OK) return st__py_raise(s, "train_on_batch");
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
    return st__py_raise(s, "all_reduce");
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
  py_model *pm = st__py_cap_get(mcap, ST__PY_CAP_MODEL);
  if (!pm) return NULL;
  st_strategy *s = pm->strategy ? st__py_cap_get(pm->strategy, ST__PY_CAP_STRATEGY) : NULL;
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
  if (st__py_claim(mcap, NULL, NULL, "strategy.reduce")) {
    Py_DECREF(buf);
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  rc = st_strategy_reduce(s, op == 1 ? ST_REDUCE_MEAN : ST_REDUCE_SUM, t.data, n, p);
  Py_END_ALLOW_THREADS
  st__py_release(mcap, NULL, NULL);
  if (rc != ST_OK) {
    Py_DECREF(buf);
    return st__py_raise(rc, "strategy.reduce");
  }
  return buf;
}

/* replica_forward(ctx, x float32 [n, ...], training, cols) -> bytearray of
 * the model's outputs [n, cols] (st_replica_forward: what a GradientTape's
 * model call, or a model call inside strategy.run, computes). */
static PyObject *py_replica_forward(PyObject *self, PyObject *args) {
  PyObject *ccap, *xa;
  int training;
  Py_ssize_t cols;
  if (!PyArg_ParseTuple(args, "OOpn", &ccap, &xa, &training, &cols)) return NULL;
  st_replica_context *c = replica_of(ccap);
  st_tensor x;
  if (!c || replica_array(xa, "x", &x)) return NULL;
  st_batch b = {(int)x.dims[0], x.data, NULL};
  const float *out = NULL;
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_replica_forward(c, &b, training != 0, &out);
  Py_END_ALLOW_THREADS
  if (s != ST_OK) return st__py_raise(s, "model call");
  return PyByteArray_FromStringAndSize((const char *)out, (Py_ssize_t)((size_t)b.size * (size_t)cols * 4));
}

/* replica_backward(ctx, dy float32 [n, cols], dx_cols=0): st_replica_backward,
 * the variables' gradients kept in the replica (GradientTape.gradient); with
 * dx_cols > 0, returns a bytearray of the input's gradient [n, dx_cols]
 * (None otherwise). */
static PyObject *py_replica_backward(PyObject *self, PyObject *args) {
  PyObject *ccap, *dya;
  Py_ssize_t dx_cols = 0;
  if (!PyArg_ParseTuple(args, "OO|n", &ccap, &dya, &dx_cols)) return NULL;
  st_replica_context *c = replica_of(ccap);
  st_tensor dy;
  if (!c || replica_array(dya, "dy", &dy)) return NULL;
  PyObject *dxb = NULL;
  if (dx_cols > 0 && !(dxb = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)dy.dims[0] * dx_cols * 4)))
    return NULL;
  float *dx = dxb ? (float *)PyByteArray_AsString(dxb) : NULL;
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_replica_backward(c, dy.data, dx);
  Py_END_ALLOW_THREADS
  if (s != ST_OK) {
    Py_XDECREF(dxb);
    return st__py_raise(s, "GradientTape.gradient");
  }
  if (dxb) return dxb;
  Py_RETURN_NONE;
}

/* replica_apply(ctx): st_replica_apply_gradients (optimizer.apply_gradients). */
static PyObject *py_replica_apply(PyObject *self, PyObject *ccap) {
  st_replica_context *c = replica_of(ccap);
  if (!c) return NULL;
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_replica_apply_gradients(c);
  Py_END_ALLOW_THREADS
  if (s != ST_OK) return st__py_raise(s, "apply_gradients");
  Py_RETURN_NONE;
}

/* replica_grads(ctx, n) -> bytearray of this replica's n gradient floats
 * (st_replica_gradients: what a GradientTape's gradient reads). */
static PyObject *py_replica_grads(PyObject *self, PyObject *args) {
  PyObject *ccap;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "On", &ccap, &n)) return NULL;
  st_replica_context *c = replica_of(ccap);
  if (!c) return NULL;
  PyObject *buf = PyByteArray_FromStringAndSize(NULL, n * 4);
  if (!buf) return NULL;
  st_status s = st_replica_gradients(c, (float *)PyByteArray_AsString(buf), (size_t)n);
  if (s != ST_OK) {
    Py_DECREF(buf);
    return st__py_raise(s, "GradientTape.gradient");
  }
  return buf;
}

/* replica_set_grads(ctx, g float32 [n]): st_replica_set_gradients
 * (apply_gradients of gradients the loop changed). */
static PyObject *py_replica_set_grads(PyObject *self, PyObject *args) {
  PyObject *ccap, *ga;
  if (!PyArg_ParseTuple(args, "OO", &ccap, &ga)) return NULL;
  st_replica_context *c = replica_of(ccap);
  st_tensor g;
  if (!c || replica_array(ga, "gradients", &g)) return NULL;
  st_status s = st_replica_set_gradients(c, g.data, st_tensor_count(&g));
  if (s != ST_OK) return st__py_raise(s, "apply_gradients");
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"replica_forward", py_replica_forward, METH_VARARGS, "the model's outputs on this replica's x"},
    {"replica_backward", py_replica_backward, METH_VARARGS, "gradients from dy of the outputs"},
    {"replica_grads", py_replica_grads, METH_VARARGS, "this replica's gradients"},
    {"replica_set_grads", py_replica_set_grads, METH_VARARGS, "replace this replica's gradients"},
    {"replica_apply", py_replica_apply, METH_O, "sum the replicas' gradients and apply them"},
    {"strategy_create", py_strategy_create, METH_VARARGS,
     "strategy_create(kind, devices=None, replicas=0, cross_device_ops=None, device=None, threads=0)"},
    {"strategy_replicas", py_strategy_replicas, METH_O, "num_replicas_in_sync of a strategy"},
    {"strategy_workers", py_strategy_workers, METH_O, "(worker rank, worker count) of a strategy"},
    {"strategy_run", py_strategy_run, METH_VARARGS, "fn(replica_id, ctx) on every local replica"},
    {"replica_train", py_replica_train, METH_VARARGS, "one replica's share of a training step"},
    {"replica_all_reduce", py_replica_all_reduce, METH_VARARGS, "all-reduce floats over the replicas"},
    {"strategy_reduce", py_strategy_reduce, METH_VARARGS, "st_strategy_reduce over every worker"},
    {NULL, NULL, 0, NULL}};

int st__py_strategy_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
