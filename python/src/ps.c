/* strata._strata's parameter-server functions (issue 14): the glue of
 * tf.distribute.Server, ParameterServerStrategy's fit on the chief and
 * ClusterCoordinator (python/strata/distribute/ps.py) over include/strata/ps.h.
 * Every call that waits on the cluster runs with the GIL released; the
 * server's data, message and stop callbacks and the chief's epoch callbacks
 * take it back. Ctrl-C stops a server (it is polled with the stop callback,
 * about every 0.2 s) and then raises KeyboardInterrupt. Registered into the
 * module by st__py_ps_register (called from PyInit__strata, module.c). */
#include <stdlib.h>
#include <string.h>

#include "ext.h"

/* Raise for status s with Strata's last message, prefixed by what; NULL. */
static PyObject *ps_raise(st_status s, const char *what) {
  const char *msg = st_last_error();
  PyObject *type = PyExc_RuntimeError;
  if (s == ST_ERR_INVALID || s == ST_ERR_FORMAT) type = PyExc_ValueError;
  else if (s == ST_ERR_IO) type = PyExc_OSError;
  else if (s == ST_ERR_NOMEM) type = PyExc_MemoryError;
  else if (s == ST_ERR_NOT_BUILT) type = PyExc_NotImplementedError;
  else if (s == ST_ERR_PEER) type = PyExc_ConnectionError;
  if (!msg || !*msg) msg = st_status_string(s);
  PyErr_Format(type, "%s: %s", what, msg);
  return NULL;
}

/* A C-contiguous uint8 or float32 NumPy array as a borrowed tensor (through
 * __array_interface__, as module.c's arrays). */
static int ps_tensor(PyObject *arr, const char *what, st_tensor *t) {
  memset(t, 0, sizeof *t);
  PyObject *ai = PyObject_GetAttrString(arr, "__array_interface__");
  if (!ai) return -1;
  int rc = -1;
  PyObject *data = PyDict_Check(ai) ? PyDict_GetItemString(ai, "data") : NULL;
  PyObject *shape = data ? PyDict_GetItemString(ai, "shape") : NULL;
  PyObject *typestr = data ? PyDict_GetItemString(ai, "typestr") : NULL;
  PyObject *strides = data ? PyDict_GetItemString(ai, "strides") : NULL;
  if (!data || !PyTuple_Check(data) || !shape || !PyTuple_Check(shape) || !typestr ||
      !PyUnicode_Check(typestr) || (strides && strides != Py_None)) {
    PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous NumPy array", what);
    goto done;
  }
  Py_ssize_t rank = PyTuple_Size(shape);
  if (rank < 1 || rank > ST_MAX_RANK) {
    PyErr_Format(PyExc_ValueError, "%s: rank %zd (expected 1..%d)", what, rank, ST_MAX_RANK);
    goto done;
  }
  if (PyUnicode_CompareWithASCIIString(typestr, "|u1") == 0) t->dtype = ST_U8;
  else if (PyUnicode_CompareWithASCIIString(typestr, "<f4") == 0) t->dtype = ST_F32;
  else {
    PyErr_Format(PyExc_ValueError, "%s: dtype %S (expected uint8 or float32)", what, typestr);
    goto done;
  }
  t->rank = (int)rank;
  for (Py_ssize_t i = 0; i < rank; i++) {
    long long d = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
    if (d == -1 && PyErr_Occurred()) goto done;
    t->dims[i] = d;
  }
  t->data = PyLong_AsVoidPtr(PyTuple_GetItem(data, 0));
  if (!t->data && PyErr_Occurred()) goto done;
  rc = 0;
done:
  Py_DECREF(ai);
  return rc;
}

/* ---- servers (worker / ps tasks) --------------------------------------- */

typedef struct py_server {
  PyObject *data_fn, *stop_fn, *message_fn; /* borrowed from the call's arguments */
  PyObject *keep[2];                        /* the arrays the worker's training set borrows */
  st_tensor x, y;
  int interrupted; /* Ctrl-C seen */
  int failed;      /* a Python callback raised: its exception is pending */
  PyObject *exc_type, *exc_value, *exc_tb;
} py_server;

static void server_keep_error(py_server *sv) {
  if (!sv->failed) {
    sv->failed = 1;
    PyErr_Fetch(&sv->exc_type, &sv->exc_value, &sv->exc_tb);
  } else {
    PyErr_Clear();
  }
}

/* data_fn(spec, val_split, train_examples, batch, seed, input_shape) -> (x, y, n_train) */
static st_status server_data(void *user, const st_ps_data_request *r, const st_tensor **x,
                             const st_tensor **y, int64_t *n_train) {
  py_server *sv = user;
  PyGILState_STATE g = PyGILState_Ensure();
  st_status s = ST_ERR_INVALID;
  PyObject *shape = PyTuple_New(r->input.rank);
  for (int i = 0; shape && i < r->input.rank; i++) PyTuple_SetItem(shape, i, PyLong_FromLongLong(r->input.dims[i]));
  PyObject *res = shape ? PyObject_CallFunction(sv->data_fn, "sdLLKO", r->spec, r->val_split,
                                                (long long)r->train_examples, (long long)r->batch,
                                                (unsigned long long)r->seed, shape)
                        : NULL;
  Py_XDECREF(shape);
  PyObject *ax, *ay;
  long long n;
  if (!res || !PyArg_ParseTuple(res, "OOL", &ax, &ay, &n) || ps_tensor(ax, "server data: x", &sv->x) ||
      ps_tensor(ay, "server data: y", &sv->y)) {
    server_keep_error(sv);
    Py_XDECREF(res);
    PyGILState_Release(g);
    return st_error(ST_ERR_INVALID, "server: the Python data function failed");
  }
  Py_XDECREF(sv->keep[0]);
  Py_XDECREF(sv->keep[1]);
  Py_INCREF(ax), Py_INCREF(ay);
  sv->keep[0] = ax, sv->keep[1] = ay;
  *x = &sv->x, *y = &sv->y, *n_train = n;
  s = ST_OK;
  Py_DECREF(res);
  PyGILState_Release(g);
  return s;
}

static void server_message(void *user, const char *line) {
  py_server *sv = user;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *r = PyObject_CallFunction(sv->message_fn, "s", line);
  if (!r) server_keep_error(sv);
  Py_XDECREF(r);
  PyGILState_Release(g);
}

static bool server_stop(void *user) {
  py_server *sv = user;
  PyGILState_STATE g = PyGILState_Ensure();
  bool stop = false;
  if (PyErr_CheckSignals() < 0) {
    server_keep_error(sv);
    sv->interrupted = 1;
    stop = true;
  } else if (sv->stop_fn && sv->stop_fn != Py_None) {
    PyObject *r = PyObject_CallObject(sv->stop_fn, NULL);
    int t = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (t < 0) server_keep_error(sv);
    stop = t != 0;
  }
  if (sv->failed) stop = true;
  PyGILState_Release(g);
  return stop;
}

/* ps_server_run(tf_config, keys_dir or None, insecure, job_timeout, data_fn,
 *               stop_fn or None, message_fn or None) */
static PyObject *py_ps_server_run(PyObject *self, PyObject *args) {
  const char *tf_config, *keys = NULL;
  int insecure;
  double job_timeout;
  py_server sv;
  memset(&sv, 0, sizeof sv);
  if (!PyArg_ParseTuple(args, "szpdOOO", &tf_config, &keys, &insecure, &job_timeout, &sv.data_fn, &sv.stop_fn,
                        &sv.message_fn))
    return NULL;
  st_ps_server_options o = st_ps_server_default_options();
  o.tf_config = tf_config, o.keys_dir = keys, o.insecure = insecure;
  if (job_timeout > 0) o.job_timeout = job_timeout;
  o.data = server_data, o.data_user = &sv;
  if (sv.message_fn != Py_None) o.on_message = server_message, o.message_user = &sv;
  o.should_stop = server_stop, o.stop_user = &sv;
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_ps_server_run(&o);
  Py_END_ALLOW_THREADS
  Py_XDECREF(sv.keep[0]);
  Py_XDECREF(sv.keep[1]);
  if (sv.failed) {
    PyErr_Restore(sv.exc_type, sv.exc_value, sv.exc_tb);
    return NULL;
  }
  if (s != ST_OK) return ps_raise(s, "Server");
  Py_RETURN_NONE;
}

/* ---- the chief: st_ps_train and the coordinator ------------------------ */

/* What the chief's options point to: copies of the strings (the coordinator
 * keeps them until destroy) and the epoch callback. */
typedef struct py_chief {
  st_ps_train_options o;
  char *strs[5];
  PyObject *epoch_fn; /* borrowed: fn("begin", epoch) / fn("end", logs tuple) -> stop? */
  int failed;
  PyObject *exc_type, *exc_value, *exc_tb;
} py_chief;

static void chief_free_strings(py_chief *c) {
  for (int i = 0; i < 5; i++) free(c->strs[i]), c->strs[i] = NULL;
}

static const char *chief_str(py_chief *c, int i, const char *v) {
  if (!v) return NULL;
  c->strs[i] = strdup(v);
  return c->strs[i];
}

static PyObject *epoch_tuple(const st_epoch_logs *l) {
  return Py_BuildValue("(iddiddddLL)", l->epoch, l->loss, l->accuracy, (int)l->has_validation, l->val_loss,
                       l->val_accuracy, l->lr, l->seconds, (long long)l->steps, (long long)l->examples);
}

static st_status chief_call(py_chief *c, st_model *m, PyObject *arg, const char *what) {
  PyGILState_STATE g = PyGILState_Ensure();
  st_status s = ST_OK;
  PyObject *r = arg ? PyObject_CallFunction(c->epoch_fn, "sO", what, arg) : NULL;
  Py_XDECREF(arg);
  int stop = r ? PyObject_IsTrue(r) : -1;
  Py_XDECREF(r);
  if (stop < 0) {
    c->failed = 1;
    PyErr_Fetch(&c->exc_type, &c->exc_value, &c->exc_tb);
    s = st_error(ST_ERR_STOPPED, "a Python callback raised");
  } else if (stop) {
    st_model_stop_training(m);
  }
  PyGILState_Release(g);
  return s;
}

static st_status chief_epoch_begin(void *user, st_model *m, int epoch) {
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *e = PyLong_FromLong(epoch);
  PyGILState_Release(g);
  return chief_call(user, m, e, "begin");
}

static st_status chief_epoch_end(void *user, st_model *m, const st_epoch_logs *l) {
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *t = epoch_tuple(l);
  PyGILState_Release(g);
  return chief_call(user, m, t, "end");
}

static bool chief_stop(void *user) {
  py_chief *c = user;
  PyGILState_STATE g = PyGILState_Ensure();
  if (!c->failed && PyErr_CheckSignals() < 0) {
    c->failed = 1;
    PyErr_Fetch(&c->exc_type, &c->exc_value, &c->exc_tb);
  }
  bool stop = c->failed;
  PyGILState_Release(g);
  return stop;
}

/* The options from the call's keywords: tf_config, keys, insecure, model
 * (a Keras JSON path), data (the spec the workers get), n_train, epochs,
 * batch, seed, optimizer (the tuple of optimizers.py's _args()),
 * steps_per_execution, heartbeat_interval, coordinator_timeout, epoch_fn,
 * and optionally ps_shards, ps_min_shard_bytes (the variable partitioner). */
static int chief_options(PyObject *args, PyObject *kw, py_chief *c) {
  static char *names[] = {"tf_config", "keys", "insecure", "model", "data", "n_train", "epochs", "batch",
                          "seed", "optimizer", "steps_per_execution", "heartbeat_interval",
                          "coordinator_timeout", "epoch_fn", "ps_shards", "ps_min_shard_bytes", NULL};
  const char *tf_config, *keys, *model, *data, *opt, *sched;
  int insecure, staircase, nesterov;
  long long n_train, epochs, batch, seed, spe, decay_steps, shards = 0, min_bytes = 0;
  double hb, ct, lr, rate, alpha, mom, b1, b2, eps, rho, wd;
  PyObject *optt, *epoch_fn;
  memset(c, 0, sizeof *c);
  if (!PyArg_ParseTupleAndKeywords(args, kw, "szpssLLLLOLddO|LL", names, &tf_config, &keys, &insecure, &model,
                                   &data, &n_train, &epochs, &batch, &seed, &optt, &spe, &hb, &ct, &epoch_fn,
                                   &shards, &min_bytes))
    return -1;
  if (!PyArg_ParseTuple(optt, "s(sdLdpd)dpddddd", &opt, &sched, &lr, &decay_steps, &rate, &staircase, &alpha,
                        &mom, &nesterov, &b1, &b2, &eps, &rho, &wd))
    return -1;
  st_ps_train_options *o = &c->o;
  *o = st_ps_train_default_options();
  st_optimizer_kind ok;
  if (st_optimizer_parse(opt, &ok) != ST_OK) {
    ps_raise(ST_ERR_INVALID, "optimizer");
    return -1;
  }
  o->optimizer = st_optimizer_default_options(ok);
  st_schedule *s = &o->optimizer.lr;
  *s = st_schedule_constant((float)lr);
  if (!strcmp(sched, "exponential")) s->kind = ST_SCHEDULE_EXPONENTIAL;
  else if (!strcmp(sched, "cosine")) s->kind = ST_SCHEDULE_COSINE;
  s->decay_steps = decay_steps, s->decay_rate = (float)rate, s->staircase = staircase;
  s->alpha = (float)alpha;
  o->optimizer.momentum = (float)mom, o->optimizer.nesterov = nesterov;
  o->optimizer.beta1 = (float)b1, o->optimizer.beta2 = (float)b2, o->optimizer.epsilon = (float)eps;
  o->optimizer.rho = (float)rho, o->optimizer.weight_decay = (float)wd;
  o->tf_config = chief_str(c, 0, tf_config), o->keys_dir = chief_str(c, 1, keys);
  o->model = chief_str(c, 2, model), o->data = chief_str(c, 3, data);
  o->insecure = insecure;
  o->n_train = n_train, o->epochs = epochs, o->batch = batch, o->seed = seed;
  o->steps_per_execution = spe;
  o->ps_shards = shards, o->ps_min_shard_bytes = min_bytes; /* variable_partitioner */
  if (hb > 0) o->heartbeat_interval = hb;
  if (ct > 0) o->coordinator_timeout = ct;
  o->quiet = true;
  o->should_stop = chief_stop, o->stop_user = c;
  c->epoch_fn = epoch_fn;
  return 0;
}

/* (weights bytearray, exactly_once, [per-ps dicts], workers, nps) of a result */
static PyObject *result_tuple(st_ps_train_result *r) {
  size_t n = st_model_weights_size(r->model);
  PyObject *buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
  if (!buf) return NULL;
  st_status s = st_model_get_weights(r->model, (float *)PyByteArray_AsString(buf));
  if (s != ST_OK) {
    Py_DECREF(buf);
    return ps_raise(s, "ParameterServerStrategy: weights");
  }
  PyObject *per = PyList_New(r->nps);
  for (int i = 0; per && i < r->nps; i++) {
    const st_ps_stats *p = &r->per_ps[i];
    PyList_SetItem(per, i, Py_BuildValue("{sLsLsLsd}", "updates_applied", (long long)p->updates_applied,
                                         "duplicates_skipped", (long long)p->duplicates_skipped,
                                         "pushes_refused", (long long)p->pushes_refused, "staleness_mean",
                                         p->staleness_mean));
  }
  return Py_BuildValue("(NNNii)", buf, PyBool_FromLong(r->exactly_once), per, r->workers, r->nps);
}

/* ps_train(**options) -> (weights, exactly_once, per_ps, workers, nps,
 *                         [epoch tuples], report_json) */
static PyObject *py_ps_train(PyObject *self, PyObject *args, PyObject *kw) {
  py_chief c;
  if (chief_options(args, kw, &c)) {
    chief_free_strings(&c);
    return NULL;
  }
  st_callback cb = {&c, NULL, NULL, NULL, NULL};
  if (c.epoch_fn != Py_None) {
    cb.on_epoch_begin = chief_epoch_begin, cb.on_epoch_end = chief_epoch_end;
    c.o.callbacks = &cb, c.o.ncallbacks = 1;
  }
  st_ps_train_result r;
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_ps_train(&c.o, &r);
  Py_END_ALLOW_THREADS
  chief_free_strings(&c);
  if (c.failed) {
    if (s == ST_OK) st_ps_train_result_free(&r);
    PyErr_Restore(c.exc_type, c.exc_value, c.exc_tb);
    return NULL;
  }
  if (s != ST_OK) return ps_raise(s, "ParameterServerStrategy");
  PyObject *head = result_tuple(&r);
  PyObject *hist = head ? PyList_New(r.history.epochs) : NULL;
  for (int i = 0; hist && i < r.history.epochs; i++) PyList_SetItem(hist, i, epoch_tuple(&r.history.logs[i]));
  PyObject *out = hist ? Py_BuildValue("(OOOOONs)", PyTuple_GetItem(head, 0), PyTuple_GetItem(head, 1),
                                       PyTuple_GetItem(head, 2), PyTuple_GetItem(head, 3),
                                       PyTuple_GetItem(head, 4), hist, r.report_json ? r.report_json : "{}")
                       : NULL;
  if (!out) Py_XDECREF(hist);
  Py_XDECREF(head);
  st_ps_train_result_free(&r);
  return out;
}

static const char *const CAP_COORD = "strata.ps_coordinator";

typedef struct py_coord {
  py_chief c;
  st_ps_coordinator *k;
  int busy; /* a call is waiting on the cluster (GIL released) */
} py_coord;

static void coord_capsule_free(PyObject *cap) {
  py_coord *pc = PyCapsule_GetPointer(cap, CAP_COORD);
  if (!pc) return;
  st_ps_coordinator_destroy(pc->k);
  chief_free_strings(&pc->c);
  free(pc);
}

static py_coord *coord_of(PyObject *cap) {
  py_coord *pc = PyCapsule_GetPointer(cap, CAP_COORD);
  if (pc && pc->busy) {
    PyErr_SetString(PyExc_RuntimeError, "ClusterCoordinator: one call at a time");
    return NULL;
  }
  if (pc && !pc->k) {
    PyErr_SetString(PyExc_RuntimeError, "ClusterCoordinator: the job is finished");
    return NULL;
  }
  return pc;
}

/* A failure of a coordinator call: the callback's exception if one is
 * pending, else Strata's. */
static PyObject *coord_raise(py_coord *pc, st_status s, const char *what) {
  if (pc->c.failed) {
    pc->c.failed = 0;
    PyErr_Restore(pc->c.exc_type, pc->c.exc_value, pc->c.exc_tb);
    return NULL;
  }
  return ps_raise(s, what);
}

static PyObject *py_ps_coordinator_create(PyObject *self, PyObject *args, PyObject *kw) {
  py_coord *pc = calloc(1, sizeof *pc);
  if (!pc) return PyErr_NoMemory();
  if (chief_options(args, kw, &pc->c)) {
    chief_free_strings(&pc->c);
    free(pc);
    return NULL;
  }
  pc->c.epoch_fn = NULL; /* the coordinator has no epochs */
  st_status s;
  Py_BEGIN_ALLOW_THREADS
  s = st_ps_coordinator_create(&pc->c.o, &pc->k);
  Py_END_ALLOW_THREADS
  if (s != ST_OK) {
    PyObject *r = coord_raise(pc, s, "ClusterCoordinator");
    chief_free_strings(&pc->c);
    free(pc);
    return r;
  }
  PyObject *cap = PyCapsule_New(pc, CAP_COORD, coord_capsule_free);
  if (!cap) {
    st_ps_coordinator_destroy(pc->k);
    chief_free_strings(&pc->c);
    free(pc);
  }
  return cap;
}

/* schedule(cap, indices: a uint32 NumPy array) -> handle */
static PyObject *py_ps_coordinator_schedule(PyObject *self, PyObject *args) {
  PyObject *cap, *arr;
  if (!PyArg_ParseTuple(args, "OO", &cap, &arr)) return NULL;
  py_coord *pc = coord_of(cap);
  if (!pc) return NULL;
  PyObject *ai = PyObject_GetAttrString(arr, "__array_interface__");
  PyObject *data = ai && PyDict_Check(ai) ? PyDict_GetItemString(ai, "data") : NULL;
  PyObject *shape = data ? PyDict_GetItemString(ai, "shape") : NULL;
  PyObject *typestr = data ? PyDict_GetItemString(ai, "typestr") : NULL;
  if (!shape || !PyTuple_Check(shape) || PyTuple_Size(shape) != 1 || !typestr ||
      PyUnicode_CompareWithASCIIString(typestr, "<u4") != 0) {
    Py_XDECREF(ai);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "schedule: indices must be a 1-D uint32 array");
    return NULL;
  }
  long long n = PyLong_AsLongLong(PyTuple_GetItem(shape, 0));
  const uint32_t *idx = PyLong_AsVoidPtr(PyTuple_GetItem(data, 0));
  Py_DECREF(ai);
  if (PyErr_Occurred()) return NULL;
  int64_t h = -1;
  st_status s;
  pc->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  s = st_ps_coordinator_schedule(pc->k, idx, n, &h);
  Py_END_ALLOW_THREADS
  pc->busy = 0;
  if (s != ST_OK) return coord_raise(pc, s, "schedule");
  return PyLong_FromLongLong(h);
}

static PyObject *py_ps_coordinator_join(PyObject *self, PyObject *cap) {
  py_coord *pc = coord_of(cap);
  if (!pc) return NULL;
  st_status s;
  pc->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  s = st_ps_coordinator_join(pc->k);
  Py_END_ALLOW_THREADS
  pc->busy = 0;
  if (s != ST_OK) return coord_raise(pc, s, "join");
  Py_RETURN_NONE;
}

/* fetch(cap, handle) -> (loss, accuracy, examples, correct) */
static PyObject *py_ps_coordinator_fetch(PyObject *self, PyObject *args) {
  PyObject *cap;
  long long h;
  if (!PyArg_ParseTuple(args, "OL", &cap, &h)) return NULL;
  py_coord *pc = coord_of(cap);
  if (!pc) return NULL;
  st_ps_closure_result r;
  st_status s;
  pc->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  s = st_ps_coordinator_fetch(pc->k, h, &r);
  Py_END_ALLOW_THREADS
  pc->busy = 0;
  if (s != ST_OK) return coord_raise(pc, s, "fetch");
  return Py_BuildValue("(ddLL)", r.loss, r.accuracy, (long long)r.examples, (long long)r.correct);
}

/* finish(cap) -> (weights, exactly_once, per_ps, workers, nps, closures_retried) */
static PyObject *py_ps_coordinator_finish(PyObject *self, PyObject *cap) {
  py_coord *pc = coord_of(cap);
  if (!pc) return NULL;
  st_ps_train_result r;
  st_status s;
  pc->busy = 1;
  Py_BEGIN_ALLOW_THREADS
  s = st_ps_coordinator_finish(pc->k, &r);
  Py_END_ALLOW_THREADS
  pc->busy = 0;
  if (s != ST_OK) return coord_raise(pc, s, "finish");
  long long retried = (long long)st_ps_coordinator_closures_retried(pc->k);
  PyObject *head = result_tuple(&r);
  st_ps_train_result_free(&r);
  st_ps_coordinator_destroy(pc->k);
  pc->k = NULL;
  if (!head) return NULL;
  PyObject *out = Py_BuildValue("(OOOOOL)", PyTuple_GetItem(head, 0), PyTuple_GetItem(head, 1),
                                PyTuple_GetItem(head, 2), PyTuple_GetItem(head, 3), PyTuple_GetItem(head, 4),
                                retried);
  Py_DECREF(head);
  return out;
}

static PyMethodDef ps_methods[] = {
    {"ps_server_run", py_ps_server_run, METH_VARARGS, "run a worker or ps task (GIL released)"},
    {"ps_train", (PyCFunction)(void (*)(void))py_ps_train, METH_VARARGS | METH_KEYWORDS,
     "the chief of a parameter-server job: st_ps_train"},
    {"ps_coordinator_create", (PyCFunction)(void (*)(void))py_ps_coordinator_create,
     METH_VARARGS | METH_KEYWORDS, "a custom-loop chief (st_ps_coordinator_create)"},
    {"ps_coordinator_schedule", py_ps_coordinator_schedule, METH_VARARGS, "one step over the given examples"},
    {"ps_coordinator_join", py_ps_coordinator_join, METH_O, "wait for every scheduled step"},
    {"ps_coordinator_fetch", py_ps_coordinator_fetch, METH_VARARGS, "one step's (loss, accuracy, n, correct)"},
    {"ps_coordinator_finish", py_ps_coordinator_finish, METH_O, "the trained weights; STOP to the servers"},
    {NULL, NULL, 0, NULL}};

int st__py_ps_register(PyObject *module) { return PyModule_AddFunctions(module, ps_methods); }
