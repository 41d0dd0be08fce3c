/* strata._strata's models (tf.keras.Sequential): create one bound to a
 * strategy, add layers, read them back (names, shapes, options), summary,
 * compile, and the weights (get/set, safetensors files, learning rate,
 * stop_training). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"

static PyObject *py_model_create(PyObject *self, PyObject *args) {
  PyObject *shape, *strategy;
  unsigned long long seed;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "OKO|z", &shape, &seed, &strategy, &name)) return NULL;
  st_model_options o;
  st_shape in;
  if (st__py_parse_shape(shape, "input_shape", &in)) return NULL;
  o = st_model_default_options(in);
  o.seed = seed;
  if (name) o.name = name;
  if (strategy != Py_None && !(o.strategy = st__py_cap_get(strategy, ST__PY_CAP_STRATEGY))) return NULL;
  st_model *m = NULL;
  st_status s = st_sequential_create(&o, &m);
  if (s != ST_OK) return st__py_raise(s, "Sequential");
  return st__py_model_capsule(m, strategy);
}

/* model_init_seed(model, seed): st_model_set_init_seed (before compile). */
static PyObject *py_model_init_seed(PyObject *self, PyObject *args) {
  PyObject *cap;
  unsigned long long seed;
  if (!PyArg_ParseTuple(args, "OK", &cap, &seed)) return NULL;
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  st_status s = st_model_set_init_seed(m, seed);
  if (s != ST_OK) return st__py_raise(s, "set_init_seed");
  Py_RETURN_NONE;
}

/* layer_init_seed(target, param, seed): st_layer_set_init_seed on a layer
 * handle's layer, or (a model) on the model's last layer, the one
 * Sequential.add has just added (the binding owns no layer pointer: the
 * model does, and it is not compiled yet). */
static PyObject *py_layer_init_seed(PyObject *self, PyObject *args) {
  PyObject *cap;
  int param;
  unsigned long long seed;
  if (!PyArg_ParseTuple(args, "OiK", &cap, &param, &seed)) return NULL;
  st_layer *l = NULL;
  if (PyCapsule_IsValid(cap, ST__PY_CAP_MODEL)) {
    st_model *m = st__py_model_of(cap);
    if (!m) return NULL;
    int n = st_model_layer_count(m);
    if (n < 1) return st__py_raise(st_error(ST_ERR_INVALID, "the model has no layers"), "set_init_seed");
    l = (st_layer *)st_model_layer(m, n - 1); /* the model's own, not yet initialised */
  } else if (!(l = st__py_layer_of(cap))) {
    return NULL;
  }
  st_status s = st_layer_set_init_seed(l, param, seed);
  if (s != ST_OK) return st__py_raise(s, "set_init_seed");
  Py_RETURN_NONE;
}

/* The layer a constructor made (status s) to the model (st_model_add) or to
 * a layer handle (functional.c); None or raises. */
static PyObject *add_layer(PyObject *m, st_status s, st_layer **lp, const char *what) {
  return st__py_target_add(m, s, *lp, what);
}

static int parse_act(const char *name, st_activation *a) {
  if (st_activation_parse(name, a) != ST_OK) {
    st__py_raise(ST_ERR_INVALID, "activation");
    return -1;
  }
  return 0;
}

static int parse_init(const char *name, st_init *i) {
  if (st_init_parse(name, i) != ST_OK) {
    st__py_raise(ST_ERR_INVALID, "initializer");
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
  PyObject *m = cap;
  if (st__py_target_check(cap)) return NULL;
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
  PyObject *m = cap;
  if (st__py_target_check(cap)) return NULL;
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
  PyObject *m = cap;
  if (st__py_target_check(cap)) return NULL;
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
  PyObject *m = cap;
  if (st__py_target_check(cap)) return NULL;
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
    if (st__py_parse_shape(arg, "Reshape target_shape", &target)) return NULL;
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
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  int n = st_model_layer_count(m);
  PyObject *list = PyList_New(n);
  for (int i = 0; list && i < n; i++) {
    const st_layer *l = st_model_layer(m, i);
    PyObject *shape = st__py_shape_tuple(st_layer_output_shape(l));
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

/* The options of one layer as a dict in the Python layer classes' terms
 * (st_layer_get_options). */
static PyObject *layer_options_dict(const st_layer *l) {
  st_layer_options o;
  if (st_layer_get_options(l, &o) != ST_OK) return st__py_raise(ST_ERR_INVALID, "layers");
  const char *c = st_layer_class(l);
  if (!strcmp(c, "Dense"))
    return Py_BuildValue("{sisssNssss}", "units", o.dense.units, "activation",
                         st_activation_name(o.dense.activation), "use_bias",
                         PyBool_FromLong(o.dense.use_bias), "kernel_initializer",
                         st_init_name(o.dense.kernel_init), "bias_initializer",
                         st_init_name(o.dense.bias_init));
  if (!strcmp(c, "Conv2D"))
    return Py_BuildValue("{si s(ii) s(ii) ss ss sN ss ss}", "filters", o.conv2d.filters,
                         "kernel_size", o.conv2d.kh, o.conv2d.kw, "strides", o.conv2d.sh,
                         o.conv2d.sw, "padding", o.conv2d.padding == ST_PAD_SAME ? "same" : "valid",
                         "activation", st_activation_name(o.conv2d.activation), "use_bias",
                         PyBool_FromLong(o.conv2d.use_bias), "kernel_initializer",
                         st_init_name(o.conv2d.kernel_init), "bias_initializer",
                         st_init_name(o.conv2d.bias_init));
  if (!strcmp(c, "MaxPooling2D") || !strcmp(c, "AveragePooling2D"))
    return Py_BuildValue("{s(ii) s(ii) ss}", "pool_size", o.pool2d.ph, o.pool2d.pw, "strides",
                         o.pool2d.sh ? o.pool2d.sh : o.pool2d.ph,
                         o.pool2d.sw ? o.pool2d.sw : o.pool2d.pw, "padding",
                         o.pool2d.padding == ST_PAD_SAME ? "same" : "valid");
  if (!strcmp(c, "BatchNormalization"))
    return Py_BuildValue("{sdsdsNsN}", "momentum", (double)o.batchnorm.momentum, "epsilon",
                         (double)o.batchnorm.epsilon, "center", PyBool_FromLong(o.batchnorm.center),
                         "scale", PyBool_FromLong(o.batchnorm.scale));
  if (!strcmp(c, "Dropout")) return Py_BuildValue("{sd}", "rate", (double)o.dropout_rate);
  if (!strcmp(c, "Activation"))
    return Py_BuildValue("{ss}", "activation", st_activation_name(o.activation));
  if (!strcmp(c, "Reshape")) return Py_BuildValue("{sN}", "target_shape", st__py_shape_tuple(o.target_shape));
  PyObject *b = st__py_layer_options_b(l, &o); /* issue 28 layers (layers_b.c) */
  if (b || PyErr_Occurred()) return b;
  if ((b = st__py_layer_options_merge(l, &o)) || PyErr_Occurred()) return b; /* functional.c */
  /* issue 28, layers-a (the global poolings have no options) */
  if (!strcmp(c, "ZeroPadding2D"))
    return Py_BuildValue("{s((ii)(ii))}", "padding", o.zeropad2d.top, o.zeropad2d.bottom,
                         o.zeropad2d.left, o.zeropad2d.right);
  if (!strcmp(c, "ReLU")) {
    PyObject *mv = isinf(o.relu.max_value) ? (Py_INCREF(Py_None), Py_None)
                                           : PyFloat_FromDouble(o.relu.max_value);
    return mv ? Py_BuildValue("{sNsdsd}", "max_value", mv, "negative_slope",
                              (double)o.relu.negative_slope, "threshold", (double)o.relu.threshold)
              : NULL;
  }
  if (!strcmp(c, "LeakyReLU"))
    return Py_BuildValue("{sd}", "negative_slope", (double)o.relu.negative_slope);
  return PyDict_New(); /* Flatten, the global poolings */
}

/* [(class, name, options dict), ...]: enough to make the Python layer
 * objects of a model the library built (model_from_keras_json). */
static PyObject *py_model_layer_options(PyObject *self, PyObject *cap) {
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  int n = st_model_layer_count(m);
  PyObject *list = PyList_New(n);
  for (int i = 0; list && i < n; i++) {
    const st_layer *l = st_model_layer(m, i);
    PyObject *d = layer_options_dict(l);
    PyObject *item = d ? Py_BuildValue("(ssN)", st_layer_class(l), st_layer_name(l), d) : NULL;
    if (!item) {
      Py_CLEAR(list);
      break;
    }
    PyList_SetItem(list, i, item);
  }
  return list;
}

static PyObject *py_model_summary(PyObject *self, PyObject *cap) {
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  char *text = NULL;
  st_status s = st_model_summary(m, &text);
  if (s != ST_OK) return st__py_raise(s, "summary");
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

/* compile(model, optimizer, schedule(kind, initial, decay_steps, decay_rate,
 * staircase, alpha), momentum, nesterov, beta1, beta2, epsilon, rho,
 * weight_decay, loss, metrics list) */
/* Several outputs: o->losses from a list of loss names, o->loss_weights from
 * a list of floats (None: not given); -1 with the Python error. */
static int compile_outputs(st_compile_options *o, PyObject *losses, PyObject *weights) {
  if (losses != Py_None) {
    if (!PyList_Check(losses) || PyList_Size(losses) > ST_MAX_OUTPUTS) {
      PyErr_SetString(PyExc_ValueError, "compile: losses must be a list of at most 8 names");
      return -1;
    }
    o->nlosses = (int)PyList_Size(losses);
    for (int i = 0; i < o->nlosses; i++) {
      const char *name = NULL;
      if (!PyArg_Parse(PyList_GetItem(losses, i), "s", &name)) return -1;
      if (st_loss_parse(name, &o->losses[i]) != ST_OK) {
        st__py_raise(ST_ERR_INVALID, "loss");
        return -1;
      }
    }
  }
  if (weights != Py_None) {
    if (!PyList_Check(weights) || PyList_Size(weights) > ST_MAX_OUTPUTS) {
      PyErr_SetString(PyExc_ValueError, "compile: loss_weights must be a list of at most 8 numbers");
      return -1;
    }
    o->nloss_weights = (int)PyList_Size(weights);
    for (int i = 0; i < o->nloss_weights; i++) {
      double w = PyFloat_AsDouble(PyList_GetItem(weights, i));
      if (w == -1.0 && PyErr_Occurred()) return -1;
      o->loss_weights[i] = (float)w;
    }
  }
  return 0;
}

static PyObject *py_model_compile(PyObject *self, PyObject *args) {
  PyObject *cap, *metrics, *losses = Py_None, *weights = Py_None;
  const char *opt, *loss, *sched;
  double lr, rate, alpha, mom, b1, b2, eps, rho, wd;
  long long decay_steps;
  int staircase, nesterov;
  if (!PyArg_ParseTuple(args, "Os(sdLdpd)dpdddddsO|OO", &cap, &opt, &sched, &lr, &decay_steps, &rate,
                        &staircase, &alpha, &mom, &nesterov, &b1, &b2, &eps, &rho, &wd, &loss,
                        &metrics, &losses, &weights))
    return NULL;
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  st_compile_options o = st_compile_default_options();
  st_optimizer_kind ok;
  if (st_optimizer_parse(opt, &ok) != ST_OK) return st__py_raise(ST_ERR_INVALID, "optimizer");
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
  if (st_loss_parse(loss, &o.loss) != ST_OK) return st__py_raise(ST_ERR_INVALID, "loss");
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
  if (compile_outputs(&o, losses, weights)) return NULL;
  st_status rc = st_model_compile(m, &o);
  if (rc != ST_OK) return st__py_raise(rc, "compile");
  Py_RETURN_NONE;
}

static PyObject *py_get_weights(PyObject *self, PyObject *cap) {
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  size_t n = st_model_weights_size(m);
  PyObject *buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
  if (!buf) return NULL;
  st_status s = st_model_get_weights(m, (float *)PyByteArray_AsString(buf));
  if (s != ST_OK) {
    Py_DECREF(buf);
    return st__py_raise(s, "get_weights");
  }
  return buf;
}

static PyObject *py_set_weights(PyObject *self, PyObject *args) {
  PyObject *cap, *arr;
  if (!PyArg_ParseTuple(args, "OO", &cap, &arr)) return NULL;
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  st_tensor t;
  if (st__py_tensor_from_array(arr, "weights", &t)) return NULL;
  if (t.dtype != ST_F32 || st_tensor_count(&t) != st_model_weights_size(m)) {
    PyErr_Format(PyExc_ValueError, "set_weights: %zu float32 values given, the model has %zu",
                 st_tensor_count(&t), st_model_weights_size(m));
    return NULL;
  }
  st_status s = st_model_set_weights(m, t.data);
  if (s != ST_OK) return st__py_raise(s, "set_weights");
  Py_RETURN_NONE;
}

static PyObject *py_weights_file(PyObject *self, PyObject *args) {
  PyObject *cap;
  const char *path;
  int save;
  if (!PyArg_ParseTuple(args, "Osp", &cap, &path, &save)) return NULL;
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  /* called from callbacks during fit too (ModelCheckpoint): the GIL is kept */
  st_status s = save ? st_model_save_weights(m, path) : st_model_load_weights(m, path);
  if (s != ST_OK) return st__py_raise(s, save ? "save_weights" : "load_weights");
  Py_RETURN_NONE;
}

/* checkpoint_dir(model, dir, save): st_checkpoint_save (keep 1) or
 * st_checkpoint_restore: variables, optimizer slots and step, for
 * model.save / load_model's .keras archive. */
static PyObject *py_checkpoint_dir(PyObject *self, PyObject *args) {
  PyObject *cap;
  const char *dir;
  int save;
  if (!PyArg_ParseTuple(args, "Osp", &cap, &dir, &save)) return NULL;
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  st_checkpoint_options o = st_checkpoint_default_options();
  o.keep = 1;
  st_status s = save ? st_checkpoint_save(m, dir, &o) : st_checkpoint_restore(m, dir);
  if (s != ST_OK) return st__py_raise(s, save ? "save" : "load_model");
  Py_RETURN_NONE;
}

static PyObject *py_learning_rate(PyObject *self, PyObject *args) {
  PyObject *cap;
  double lr = -1;
  if (!PyArg_ParseTuple(args, "O|d", &cap, &lr)) return NULL;
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  if (PyTuple_Size(args) > 1) {
    st_status s = st_model_set_learning_rate(m, lr);
    if (s != ST_OK) return st__py_raise(s, "learning_rate");
  }
  return PyFloat_FromDouble(st_model_learning_rate(m));
}

static PyObject *py_stop_training(PyObject *self, PyObject *cap) {
  st_model *m = st__py_model_of(cap);
  if (!m) return NULL;
  st_model_stop_training(m);
  Py_RETURN_NONE;
}

static PyObject *py_loss_is_sparse(PyObject *self, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  st_loss_kind k;
  if (st_loss_parse(name, &k) != ST_OK) return st__py_raise(ST_ERR_INVALID, "loss");
  return PyBool_FromLong(st_loss_is_sparse(k));
}

static PyMethodDef methods[] = {
    {"model_create", py_model_create, METH_VARARGS, "model_create(input_shape, seed, strategy, name)"},
    {"model_init_seed", py_model_init_seed, METH_VARARGS, "model_init_seed(model, seed): the initial weights' seed"},
    {"layer_init_seed", py_layer_init_seed, METH_VARARGS,
     "layer_init_seed(layer handle or model (its last layer), param, seed)"},
    {"add_dense", py_add_dense, METH_VARARGS, "add a Dense layer"},
    {"add_conv2d", py_add_conv2d, METH_VARARGS, "add a Conv2D layer"},
    {"add_pool2d", py_add_pool2d, METH_VARARGS, "add a MaxPooling2D / AveragePooling2D layer"},
    {"add_simple", py_add_simple, METH_VARARGS, "add Flatten/Dropout/Activation/Reshape/BatchNormalization"},
    {"model_layers", py_model_layers, METH_O, "[(name, class, output_shape, params)]"},
    {"model_layer_options", py_model_layer_options, METH_O, "[(class, name, options dict)]"},
    {"model_summary", py_model_summary, METH_O, "Keras-style summary text"},
    {"model_compile", py_model_compile, METH_VARARGS, "compile a model"},
    {"get_weights", py_get_weights, METH_O, "every variable as float32 bytes"},
    {"set_weights", py_set_weights, METH_VARARGS, "set every variable from a float32 array"},
    {"weights_file", py_weights_file, METH_VARARGS, "weights_file(model, path, save)"},
    {"learning_rate", py_learning_rate, METH_VARARGS, "learning_rate(model[, new])"},
    {"checkpoint_dir", py_checkpoint_dir, METH_VARARGS, "checkpoint_dir(model, dir, save)"},
    {"stop_training", py_stop_training, METH_O, "stop fit after this epoch"},
    {"loss_is_sparse", py_loss_is_sparse, METH_VARARGS, "whether a loss takes class indices"},
    {NULL, NULL, 0, NULL}};

int st__py_model_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
