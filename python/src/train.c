/* strata._strata's training verbs: fit (with the GIL released; one C
 * callback calls the Python callback list and checks for Ctrl-C at every
 * step), evaluate and predict. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"

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

/* A list of the first n values of v (several outputs' figures). */
static PyObject *doubles(const double *v, int n) {
  PyObject *out = PyList_New(n);
  for (int i = 0; out && i < n; i++) PyList_SetItem(out, i, PyFloat_FromDouble(v[i]));
  return out;
}

/* (epoch, loss, accuracy, has_val, val_loss, val_accuracy, lr, seconds,
 * steps, examples, (each output's loss, accuracy, val loss, val accuracy)) */
static PyObject *epoch_logs_tuple(const st_epoch_logs *l, int offset) {
  int n = l->noutputs > 1 ? l->noutputs : 0;
  return Py_BuildValue("(iddidddd LL(NNNN))", l->epoch + offset, l->loss, l->accuracy,
                       (int)l->has_validation, l->val_loss, l->val_accuracy, l->lr, l->seconds,
                       (long long)l->steps, (long long)l->examples, doubles(l->output_loss, n),
                       doubles(l->output_accuracy, n), doubles(l->val_output_loss, n),
                       doubles(l->val_output_accuracy, n));
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
  long long steps_per_epoch = 0; /* an endless train: one stream across the epochs (as Keras) */
  if (!PyArg_ParseTuple(args, "OOiOOii|zLOOpL", &mcap, &tcap, &epochs, &vcap, &obj, &batch_every,
                        &offset, &backup, &backup_every, &vepochs, &cweights, &sw_column,
                        &steps_per_epoch))
    return NULL;
  st_model *m = st__py_model_of(mcap);
  st_dataset *train = m ? st__py_dataset_of(tcap) : NULL;
  if (!train) return NULL;
  st_fit_options o = st_fit_default_options();
  o.epochs = epochs;
  fit_lists fl = {0};
  if (fit_lists_parse(vepochs, cweights, &fl, &o)) return NULL;
  o.sample_weight_column = sw_column != 0;
  o.steps_per_epoch = steps_per_epoch;
  if (vcap != Py_None && !(o.validation = st__py_dataset_of(vcap))) return NULL;
  py_fit_cb c = {obj, batch_every, offset, NULL, NULL, NULL};
  st_callback cb = {&c, cb_epoch_begin, cb_batch_end, cb_epoch_end, NULL};
  o.callbacks = &cb;
  o.ncallbacks = 1;
  o.backup_dir = backup;
  o.backup_every_steps = backup_every;
  st_clear_stop_request();
  st_history h;
  st_status s;
  if (st__py_claim(mcap, tcap, vcap == Py_None ? NULL : vcap, "fit")) {
    fit_lists_free(&fl);
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  s = st_model_fit(m, train, &o, &h);
  Py_END_ALLOW_THREADS
  fit_lists_free(&fl);
  st__py_release(mcap, tcap, vcap == Py_None ? NULL : vcap);
  st_clear_stop_request();
  if (c.et) {
    st_history_destroy(&h);
    PyErr_Restore(c.et, c.ev, c.tb);
    return NULL;
  }
  if (s != ST_OK) {
    st_history_destroy(&h);
    return st__py_raise(s, "fit");
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
  st_model *m = st__py_model_of(mcap);
  st_dataset *ds = m ? st__py_dataset_of(dcap) : NULL;
  if (!ds) return NULL;
  st_eval_result r;
  st_status s;
  if (st__py_claim(mcap, dcap, NULL, "evaluate")) return NULL;
  Py_BEGIN_ALLOW_THREADS
  s = st_model_evaluate(m, ds, &r);
  Py_END_ALLOW_THREADS
  st__py_release(mcap, dcap, NULL);
  if (s != ST_OK) return st__py_raise(s, "evaluate");
  int n = r.noutputs > 1 ? r.noutputs : 0;
  return Py_BuildValue("(ddLNN)", r.loss, r.accuracy, (long long)r.examples, doubles(r.output_loss, n),
                       doubles(r.output_accuracy, n));
}

/* predict(model, ds) -> (bytearray of float32, rows, cols) */
static PyObject *py_model_predict(PyObject *self, PyObject *args) {
  PyObject *mcap, *dcap;
  if (!PyArg_ParseTuple(args, "OO", &mcap, &dcap)) return NULL;
  st_model *m = st__py_model_of(mcap);
  st_dataset *ds = m ? st__py_dataset_of(dcap) : NULL;
  if (!ds) return NULL;
  st_tensor t;
  memset(&t, 0, sizeof t);
  st_status s;
  if (st__py_claim(mcap, dcap, NULL, "predict")) return NULL;
  Py_BEGIN_ALLOW_THREADS
  s = st_model_predict(m, ds, &t);
  Py_END_ALLOW_THREADS
  st__py_release(mcap, dcap, NULL);
  if (s != ST_OK) return st__py_raise(s, "predict");
  size_t n = st_tensor_count(&t);
  long long rows = t.rank > 0 ? t.dims[0] : 0;
  PyObject *buf = PyByteArray_FromStringAndSize((const char *)t.data, (Py_ssize_t)(n * 4));
  st_tensor_destroy(&t);
  return buf ? Py_BuildValue("(NL)", buf, rows) : NULL;
}

static PyMethodDef methods[] = {
    {"model_fit", py_model_fit, METH_VARARGS, "fit with the GIL released"},
    {"model_evaluate", py_model_evaluate, METH_VARARGS, "(loss, accuracy, examples)"},
    {"model_predict", py_model_predict, METH_VARARGS, "(float32 bytes, rows)"},
    {NULL, NULL, 0, NULL}};

int st__py_train_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
