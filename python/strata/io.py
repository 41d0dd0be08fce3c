"""tf.io for tf.data pipelines over TFRecord files: FixedLenFeature,
parse_single_example / parse_example (the feature specs Strata's C parser
takes: fixed-length float32, int64 and string features), decode_raw, and
TFRecordWriter. In a Python pipeline they parse with NumPy; when fit reads a
TFRecordDataset whose map they describe, the engine parses the records in C
(src/data/example.c) instead."""
import os

import numpy as np

from . import _checkpoint, _strata
from ._util import missing, namespace as _namespace
from .data import _example
from .data._trace import Sym, Untraceable


class FixedLenFeature:
    """A feature of fixed shape and dtype (tf.float32, tf.int64 or
    tf.string). default_value: what a record without the feature gives (a
    scalar, broadcast, or the full shape); without it a missing feature is
    an error. A map with default values parses in Python (the C parser
    runs maps without them)."""

    def __init__(self, shape, dtype, default_value=None):
        self.shape = tuple(int(d) for d in (shape if isinstance(shape, (list, tuple)) else [shape]))
        if any(d <= 0 for d in self.shape):
            raise ValueError("FixedLenFeature: shape %r must have positive dimensions" % (shape,))
        self.dtype = _kind(dtype)
        self.default_value = None if default_value is None else self._default(default_value)

    def _default(self, value):
        if self.dtype == "string":
            vals = np.array(value, dtype=object).reshape(-1)
            vals = [v.encode() if isinstance(v, str) else bytes(v) for v in vals]
            want = int(np.prod(self.shape)) if self.shape else 1
            if len(vals) == 1:
                vals = vals * want
            if len(vals) != want:
                raise ValueError("FixedLenFeature: default_value has %d values, the shape %s takes %d"
                                 % (len(vals), list(self.shape), want))
            return ("bytes", vals)
        dt = np.float32 if self.dtype == "float32" else np.int64
        try:
            a = np.broadcast_to(np.asarray(value, dtype=dt), self.shape)
        except ValueError:
            raise ValueError("FixedLenFeature: default_value %r does not fit the shape %s"
                             % (value, list(self.shape))) from None
        return ("float" if self.dtype == "float32" else "int64", a.reshape(-1).copy())

    def __repr__(self):
        return "FixedLenFeature(shape=%r, dtype=%s, default_value=%r)" % (
            list(self.shape), self.dtype, None if self.default_value is None else self.default_value[1])


def _kind(dtype):
    if dtype in (np.str_, np.bytes_, str, bytes, "string"):
        return "string"
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError("FixedLenFeature: dtype %r (expected tf.float32, tf.int64 or tf.string)" % (dtype,)) from None
    if dt == np.float32:
        return "float32"
    if dt == np.int64:
        return "int64"
    if dt.kind in "SU":
        return "string"
    raise ValueError("FixedLenFeature: dtype %s (expected tf.float32, tf.int64 or tf.string)" % dt)


def VarLenFeature(dtype):
    raise NotImplementedError("tf.io.VarLenFeature is not supported by Strata (fixed-length features only)")


def _check_spec(features, where):
    if not isinstance(features, dict) or not features:
        raise ValueError("%s: features must be a non-empty dict of name -> FixedLenFeature" % where)
    for name, f in features.items():
        if not isinstance(f, FixedLenFeature):
            raise NotImplementedError("%s: feature %r: only tf.io.FixedLenFeature is supported by Strata"
                                      % (where, name))


def _value(parsed, name, f, where):
    if name not in parsed and f.default_value is not None:
        parsed = {name: f.default_value}
    if name not in parsed:
        raise ValueError("%s: feature '%s' is missing from the record" % (where, name))
    kind, vals = parsed[name]
    want = {"float32": "float", "int64": "int64", "string": "bytes"}[f.dtype]
    if kind != want:
        raise ValueError("%s: feature '%s' holds a %s_list, the spec says %s" % (where, name, kind, f.dtype))
    count = int(np.prod(f.shape)) if f.shape else 1
    if len(vals) != count:
        raise ValueError("%s: feature '%s' has %d values, its shape %s takes %d"
                         % (where, name, len(vals), list(f.shape), count))
    if f.dtype == "string":
        return vals[0] if not f.shape else np.array(vals, dtype=object).reshape(f.shape)
    return vals.reshape(f.shape) if f.shape else vals[0]


def parse_single_example(serialized, features, name=None, example_names=None):
    """{name: value} of one serialized tf.train.Example: NumPy arrays of the
    features' shapes (float32, int64), bytes for a scalar string."""
    _check_spec(features, "parse_single_example")
    if isinstance(serialized, Sym):
        if serialized.origin != ("record",) or serialized.batched:
            raise Untraceable("parse_single_example of a non-record")
        if any(f.default_value is not None for f in features.values()):
            raise Untraceable("default values (the C parser has none)")
        return {k: _feature_sym(k, f, False) for k, f in features.items()}
    if isinstance(serialized, np.ndarray):
        serialized = serialized.item()
    parsed = _example.parse(serialized)
    return {k: _value(parsed, k, f, "parse_single_example") for k, f in features.items()}


def parse_example(serialized, features, name=None, example_names=None):
    """parse_single_example over a batch (a list / array of records): each
    feature stacked along a new first dimension."""
    _check_spec(features, "parse_example")
    if isinstance(serialized, Sym):
        if serialized.origin != ("record",) or not serialized.batched:
            raise Untraceable("parse_example of a non-batch")
        if any(f.default_value is not None for f in features.values()):
            raise Untraceable("default values (the C parser has none)")
        return {k: _feature_sym(k, f, True) for k, f in features.items()}
    rows = [parse_single_example(r, features) for r in list(np.asarray(serialized, dtype=object).reshape(-1))]
    return {k: (np.array([r[k] for r in rows], dtype=object) if features[k].dtype == "string"
                else np.stack([np.asarray(r[k]) for r in rows])) for k in features}


def _feature_sym(name, f, batched):
    dtype = {"float32": np.float32, "int64": np.int64, "string": np.object_}[f.dtype]
    return Sym(("feature", name, f.dtype, f.shape), dtype, f.shape, batched=batched)


def decode_raw(input_bytes, out_type, little_endian=True, fixed_length=None, name=None):
    """Bytes as a 1-D array of out_type (tf.uint8 for raw pixels)."""
    if isinstance(input_bytes, Sym):
        o = input_bytes.origin
        if o[0] != "feature" or o[2] != "string" or o[3] or np.dtype(out_type) != np.uint8:
            raise Untraceable("decode_raw")
        return Sym(("raw", o[1]), np.uint8, None, batched=input_bytes.batched)
    dt = np.dtype(out_type).newbyteorder("<" if little_endian else ">")
    if isinstance(input_bytes, np.ndarray) and input_bytes.dtype == object:
        return np.stack([np.frombuffer(b, dtype=dt) for b in input_bytes.reshape(-1)]).reshape(
            input_bytes.shape + (-1,))
    return np.frombuffer(bytes(input_bytes), dtype=dt).astype(np.dtype(out_type))


class TFRecordWriter:
    """Writes records to a TFRecord file (options: None, '' or 'GZIP'),
    through a temporary file renamed into place on close."""

    def __init__(self, path, options=None):
        comp = options if isinstance(options, str) or options is None else getattr(options, "compression_type", "")
        self._path, self._comp, self._records = os.fspath(path), comp or "", []

    def write(self, record):
        self._records.append(bytes(record))

    def close(self):
        if self._records is not None:
            _strata.tfrecord_write(self._path, self._comp, self._records)
            self._records = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        return False


def serialize_example(features):
    """Strata's helper (TensorFlow builds tf.train.Example protos): a
    serialized tf.train.Example from {name: bytes | float array | int array}."""
    return _example.serialize_example(features)


class TFRecordOptions:
    """tf.io.TFRecordOptions: compression_type only (None, '' or 'GZIP')."""

    def __init__(self, compression_type=None, **kwargs):
        self.compression_type = compression_type or ""


gfile = _namespace("tf.io.gfile", "strata.io.gfile", _checkpoint.GFILE)


def __getattr__(name):
    raise missing("tf.io", name)


__all__ = ["gfile", "FixedLenFeature", "VarLenFeature", "parse_single_example", "parse_example", "decode_raw",
           "TFRecordWriter", "TFRecordOptions", "serialize_example"]
