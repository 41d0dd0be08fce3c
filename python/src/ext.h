/* Private header of strata._strata, the CPython extension under the `strata`
 * package: what its files share. The extension is a thin layer over
 * libstrata's public C API (the headers in include/strata/, nothing else),
 * written against the limited API of CPython 3.8 (abi3: one build serves
 * every CPython 3.8+). Its files, by concern:
 *   module.c    the module, its init, and the helpers below (errors,
 *               capsules, NumPy arrays, shapes)
 *   model.c     Sequential: create, add layers, summary, compile, weights
 *   train.c     fit (and its Python callbacks), evaluate, predict
 *   data.c      datasets: arrays, transforms, traced maps, TFRecord, files
 *   strategy.c  strategies and custom loops (strategy.run per replica)
 *   io.c        files: Keras model JSON, MNIST IDX, TensorBoard
 *   ps.c        the parameter server (tf.distribute.Server, the chief)
 *   layers_a.c  issue 28's global pooling, ZeroPadding2D, ReLU, LeakyReLU
 *   layers_b.c  Conv1D, DepthwiseConv2D, Embedding, LayerNormalization
 *   functional.c  the functional API: tensors, Model(inputs, outputs), merge
 *               layers and attention, Keras 3 JSON, built-in graph models
 * Each file's functions join the module through its st__py_*_register.
 * Handles (strategy, model, dataset, TensorBoard writer) are capsules that the
 * pure-Python layer (python/strata/) wraps in Keras-shaped classes. Strata
 * errors become ValueError (bad arguments, shapes, data), OSError (files),
 * MemoryError or RuntimeError with Strata's message; nothing here aborts the
 * interpreter. All of it runs with the GIL held unless a comment says it
 * releases it. */
#ifndef STRATA_PYTHON_EXT_H
#define STRATA_PYTHON_EXT_H

#define Py_LIMITED_API 0x03080000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "strata/strata.h"

/* ---- errors ---- */
/* Raise the Python exception for status s with Strata's last message
 * (prefixed by "what: " unless the message starts with it); NULL. */
PyObject *st__py_raise(st_status s, const char *what);

/* ---- capsules ---- */
extern const char *const ST__PY_CAP_STRATEGY; /* "strata.strategy" */
extern const char *const ST__PY_CAP_MODEL;    /* "strata.model" */
extern const char *const ST__PY_CAP_DATASET;  /* "strata.dataset" */

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

/* The pointer in a capsule of that kind, or NULL with TypeError. */
void *st__py_cap_get(PyObject *cap, const char *kind);
st_model *st__py_model_of(PyObject *cap);
/* NULL with ValueError for a handle a failed transform consumed. */
st_dataset *st__py_dataset_of(PyObject *cap);
/* A model capsule owning m (destroyed here when the capsule cannot be made)
 * and holding a reference to the strategy capsule (Py_None: none); NULL
 * with the Python error on failure. */
PyObject *st__py_model_capsule(st_model *m, PyObject *strategy);
/* A dataset capsule owning d (its dataset and kept arrays; freed here when
 * the capsule cannot be made). */
PyObject *st__py_dataset_capsule(py_dataset *d);
/* A verb that releases the GIL claims the model and its datasets first (a
 * model or an iterator is used by one thread at a time): -1 with
 * RuntimeError when another thread, or a callback of a running fit, is
 * already using them. d1, d2 may be NULL. */
int st__py_claim(PyObject *mcap, PyObject *d1, PyObject *d2, const char *what);
void st__py_release(PyObject *mcap, PyObject *d1, PyObject *d2);

/* ---- arrays and shapes ---- */
/* t <- a C-contiguous NumPy array's memory (borrowed) and shape; dtype from
 * its typestr (|u1, <f4, <i4). What an array must be is said in the error. */
int st__py_tensor_from_array(PyObject *arr, const char *what, st_tensor *t);
/* A shape tuple of 1..4 positive ints into *out; -1 with the error. */
int st__py_parse_shape(PyObject *tup, const char *what, st_shape *out);
PyObject *st__py_shape_tuple(st_shape s);

/* ---- each file's functions into the module (0, or -1 with the error) ---- */
int st__py_model_register(PyObject *module);
int st__py_train_register(PyObject *module);
int st__py_data_register(PyObject *module);
int st__py_strategy_register(PyObject *module);
int st__py_io_register(PyObject *module);
int st__py_ps_register(PyObject *module);
int st__py_layers_a_register(PyObject *module); /* issue 28, layers-a */
/* issue 28 layers (layers_b.c): their add_* functions, and their options
 * as a dict (NULL without an exception for any other class). */
int st__py_layers_b_register(PyObject *module);
PyObject *st__py_layer_options_b(const st_layer *l, const st_layer_options *o);
/* functional.c: its functions; the merge layers' and attention's options
 * (NULL without an exception for another class); the layer constructors'
 * target, a model capsule (st_model_add) or an empty layer capsule (the
 * functional API): check it first (0, or -1 with TypeError), then give it
 * the layer a constructor made with status s (None, or NULL with the error;
 * l is destroyed on failure). */
int st__py_functional_register(PyObject *module);
PyObject *st__py_layer_options_merge(const st_layer *l, const st_layer_options *o);
int st__py_target_check(PyObject *cap);
/* The layer a layer handle holds (NULL with a Python exception otherwise). */
st_layer *st__py_layer_of(PyObject *cap);
PyObject *st__py_target_add(PyObject *cap, st_status s, st_layer *l, const char *what);

#endif
