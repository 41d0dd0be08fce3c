"""tf.train.Example / Features / Feature / BytesList / FloatList /
Int64List: the protobuf messages of TFRecord files, in pure Python
(data/_example.py's wire format). SerializeToString writes what TensorFlow's
protobuf writes (packed float and int64 lists; feature map entries in the
order given) and what Strata's C serializer, st_example_serialize, writes
for the same features (python/tests/test_tfrecord_guide.py checks the
bytes); ParseFromString / FromString read them back; str() is the text
format print(example) shows."""
import numpy as np

from .data import _example

_KINDS = ("bytes_list", "float_list", "int64_list")


def _items(value, what):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError("%s: value must be a list (got %r)" % (what, value))
    return list(np.asarray(value).reshape(-1)) if isinstance(value, np.ndarray) else list(value)


class BytesList:
    def __init__(self, value=()):
        out = []
        for v in _items(value, "BytesList"):
            if hasattr(v, "numpy") and not isinstance(v, bytes):
                v = v.numpy()
            if isinstance(v, np.ndarray) and v.ndim == 0:
                v = v[()]
            if not isinstance(v, (bytes, np.bytes_)):
                raise TypeError("BytesList: %r has type %s, but expected one of: bytes"
                                % (v, type(v).__name__))
            out.append(bytes(v))
        self.value = out

    def _payload(self):
        return b"".join(_example._len_field(1, v) for v in self.value)


class FloatList:
    def __init__(self, value=()):
        self.value = [float(np.float32(v)) for v in _items(value, "FloatList")]

    def _payload(self):
        return _example._len_field(1, np.asarray(self.value, dtype="<f4").tobytes()) if self.value else b""


class Int64List:
    def __init__(self, value=()):
        vals = []
        for v in _items(value, "Int64List"):
            if isinstance(v, (float, np.floating)) or (isinstance(v, np.ndarray) and v.dtype.kind == "f"):
                raise TypeError("Int64List: %r has type %s, but expected one of: int" % (v, type(v).__name__))
            i = int(v)
            if not -2 ** 63 <= i < 2 ** 63:
                raise ValueError("Int64List: value out of range: %d" % i)
            vals.append(i)
        self.value = vals

    def _payload(self):
        return _example._len_field(1, b"".join(_example._enc_varint(v) for v in self.value)) if self.value else b""


class Feature:
    """One of bytes_list, float_list, int64_list (the oneof 'kind')."""

    def __init__(self, bytes_list=None, float_list=None, int64_list=None):
        given = [(k, v) for k, v in zip(_KINDS, (bytes_list, float_list, int64_list)) if v is not None]
        if len(given) > 1:
            raise ValueError("Feature: only one of bytes_list, float_list, int64_list may be set")
        self._kind = given[0][0] if given else None
        self.bytes_list = bytes_list if bytes_list is not None else BytesList()
        self.float_list = float_list if float_list is not None else FloatList()
        self.int64_list = int64_list if int64_list is not None else Int64List()

    def WhichOneof(self, name):
        if name != "kind":
            raise ValueError("Feature has no oneof %r" % name)
        return self._kind

    def HasField(self, name):
        return self._kind == name

    def SerializeToString(self, deterministic=None):
        if self._kind is None:
            return b""
        num = _KINDS.index(self._kind) + 1
        return _example._len_field(num, getattr(self, self._kind)._payload())

    def _text(self, indent):
        if self._kind is None:
            return ""
        pad = " " * indent
        vals = getattr(self, self._kind).value
        body = "".join("%s  value: %s\n" % (pad, _text_value(v)) for v in vals)
        return "%s%s {\n%s%s}\n" % (pad, self._kind, body, pad)

    def __eq__(self, other):
        return isinstance(other, Feature) and self.SerializeToString() == other.SerializeToString()

    def __str__(self):
        return self._text(0)


def _text_value(v):
    if isinstance(v, bytes):
        return '"%s"' % "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else "\\%03o" % b for b in v)
    if isinstance(v, float):
        return repr(float(np.float32(v)))
    return str(v)


class Features:
    """feature: a dict name -> Feature (entries serialized in its order)."""

    def __init__(self, feature=None):
        self.feature = dict(feature or {})
        for k, v in self.feature.items():
            if not isinstance(v, Feature):
                raise TypeError("Features: feature[%r] is a %s, not a tf.train.Feature" % (k, type(v).__name__))

    def SerializeToString(self, deterministic=None):
        names = sorted(self.feature) if deterministic else list(self.feature)
        return b"".join(_example._len_field(1, _example._len_field(1, k.encode("utf-8")) +
                                            _example._len_field(2, self.feature[k].SerializeToString()))
                        for k in names)


class Example:
    """tf.train.Example(features=tf.train.Features(feature={...}))."""

    def __init__(self, features=None):
        self.features = features if features is not None else Features()
        self._set = features is not None

    def SerializeToString(self, deterministic=None):
        if not self._set and not self.features.feature:
            return b""
        return _example._len_field(1, self.features.SerializeToString(deterministic))

    def ParseFromString(self, data):
        """Read a serialized Example into this one; returns its length."""
        if hasattr(data, "numpy"):
            data = data.numpy()
        data = bytes(data)
        parsed = _example.parse(data)
        feats = {}
        for name, (kind, vals) in parsed.items():
            if kind == "bytes":
                feats[name] = Feature(bytes_list=BytesList(vals))
            elif kind == "float":
                feats[name] = Feature(float_list=FloatList(vals))
            elif kind == "int64":
                feats[name] = Feature(int64_list=Int64List(vals))
            else:
                feats[name] = Feature()
        self.features, self._set = Features(feats), bool(data)
        return len(data)

    @classmethod
    def FromString(cls, data):
        e = cls()
        e.ParseFromString(data)
        return e

    def __eq__(self, other):
        return isinstance(other, Example) and self.SerializeToString(True) == other.SerializeToString(True)

    def __str__(self):
        if not self._set:
            return ""
        out = ["features {\n"]
        for k, f in self.features.feature.items():
            out.append('  feature {\n    key: "%s"\n    value {\n%s    }\n  }\n' % (k, f._text(6)))
        out.append("}\n")
        return "".join(out)

    __repr__ = __str__
