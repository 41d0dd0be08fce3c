/* strata._strata's datasets (tf.data): a dataset over NumPy arrays, the
 * pipeline stages (shuffle, batch, repeat, take, skip, shard, prefetch), a
 * traced element-wise map as a C stage, list_files, and TFRecord files
 * (reader, writer, the C dataset source). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"

/* from_arrays(x, y or None, scale) -> dataset handle borrowing x and y. */
static PyObject *py_dataset_from_arrays(PyObject *self, PyObject *args) {
  PyObject *xa, *ya;
  double scale = 1.0;
  if (!PyArg_ParseTuple(args, "OO|d", &xa, &ya, &scale)) return NULL;
  st_tensor x, y;
  if (st__py_tensor_from_array(xa, "x", &x)) return NULL;
  if (ya != Py_None && st__py_tensor_from_array(ya, "y", &y)) return NULL;
  py_dataset *d = calloc(1, sizeof *d);
  if (!d) return PyErr_NoMemory();
  st_status s = st_dataset_from_tensor_slices(&x, ya == Py_None ? NULL : &y, (float)scale, false,
                                              &d->ds);
  if (s != ST_OK) {
    free(d);
    return st__py_raise(s, "dataset");
  }
  Py_INCREF(xa);
  d->keep[0] = xa;
  if (ya != Py_None) {
    Py_INCREF(ya);
    d->keep[1] = ya;
  }
  return st__py_dataset_capsule(d);
}

/* transform(ds, op, a, b, c): replaces the handle's pipeline by the next stage
 * ("shuffle" buffer seed reshuffle, "batch" size drop, "repeat" count,
 * "take"/"skip" count, "shard" n index, "prefetch" size). */
static PyObject *py_dataset_transform(PyObject *self, PyObject *args) {
  PyObject *cap;
  const char *op;
  long long a = 0, b = 0, c = 0;
  if (!PyArg_ParseTuple(args, "Os|LLL", &cap, &op, &a, &b, &c)) return NULL;
  py_dataset *d = st__py_cap_get(cap, ST__PY_CAP_DATASET);
  if (!d || !st__py_dataset_of(cap)) return NULL;
  st_status s;
  if (!strcmp(op, "shuffle")) s = st_dataset_shuffle(d->ds, a, (uint64_t)b, c != 0, &d->ds);
  else if (!strcmp(op, "batch")) {
    if (a <= 0 || a > 0x7fffffffLL) {
      PyErr_Format(PyExc_ValueError, "batch_size %lld out of range [1, 2147483647]", a);
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
  if (s != ST_OK) return st__py_raise(s, op);
  Py_RETURN_NONE;
}

static PyObject *py_dataset_cardinality(PyObject *self, PyObject *cap) {
  st_dataset *ds = st__py_dataset_of(cap);
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
  py_dataset *d = st__py_cap_get(cap, ST__PY_CAP_DATASET);
  if (!d || !st__py_dataset_of(cap)) return NULL;
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
    return st__py_raise(s, "map");
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
  if (s != ST_OK) return st__py_raise(s, "list_files");
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
    st__py_raise(ST_ERR_INVALID, "compression_type");
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
  if (s != ST_OK) return st__py_raise(s, "TFRecordDataset");
  PyObject *cap = PyCapsule_New(r, CAP_READER, reader_capsule_free);
  if (!cap) st_tfrecord_reader_destroy(r);
  return cap;
}

/* tfrecord_next(reader) -> the next record's bytes, or None at the end */
static PyObject *py_tfrecord_next(PyObject *self, PyObject *cap) {
  st_tfrecord_reader *r = st__py_cap_get(cap, CAP_READER);
  if (!r) return NULL;
  const void *data;
  size_t size;
  bool end;
  st_status s = st_tfrecord_reader_next(r, &data, &size, &end);
  if (s != ST_OK) return st__py_raise(s, "TFRecordDataset");
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
    return st__py_raise(s, "TFRecordWriter");
  }
  if ((s = st_tfrecord_writer_close(w)) != ST_OK) return st__py_raise(s, "TFRecordWriter");
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
  return PyTuple_Size(shape) == 0 ? 0 : st__py_parse_shape(shape, "feature shape", &f->shape);
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
    return st__py_raise(s, "TFRecordDataset");
  }
  return st__py_dataset_capsule(d);
}

static PyMethodDef methods[] = {
    {"dataset_from_arrays", py_dataset_from_arrays, METH_VARARGS, "dataset over borrowed arrays"},
    {"dataset_transform", py_dataset_transform, METH_VARARGS, "add a pipeline stage in place"},
    {"dataset_cardinality", py_dataset_cardinality, METH_O, "items per pass (-1 infinite)"},
    {"dataset_map_ops", py_dataset_map_ops, METH_VARARGS, "a traced element-wise map as a C stage"},
    {"list_files", py_list_files, METH_VARARGS, "list_files(pattern, shuffle, seed) -> [names]"},
    {"tfrecord_reader", py_tfrecord_reader, METH_VARARGS, "open a TFRecord file"},
    {"tfrecord_next", py_tfrecord_next, METH_O, "the next record's bytes or None"},
    {"tfrecord_write", py_tfrecord_write, METH_VARARGS, "write a TFRecord file"},
    {"dataset_tfrecord", py_dataset_tfrecord, METH_VARARGS, "the C TFRecord dataset source"},
    {NULL, NULL, 0, NULL}};

int st__py_data_register(PyObject *module) { return PyModule_AddFunctions(module, methods); }
