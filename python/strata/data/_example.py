"""tf.train.Example records in pure Python: the protobuf wire format of
Example / Features / Feature (bytes_list, float_list, int64_list), read for
tf.io.parse_single_example when a pipeline runs in Python, and written by
serialize_example (tests, small files). The engine parses records in C
(src/data/example.c) when fit reads a TFRecordDataset."""
import struct

import numpy as np


def _varint(buf, i):
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ValueError("tf.train.Example: truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("tf.train.Example: varint longer than 10 bytes")


def _fields(buf):
    """(field number, wire type, value) of one message: ints for varints,
    bytes for the rest."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            ln, i = _varint(buf, i)
            v, i = buf[i:i + ln], i + ln
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("tf.train.Example: wire type %d" % wt)
        if i > n:
            raise ValueError("tf.train.Example: a field runs past the record's end")
        yield num, wt, v


def _feature(buf):
    """One Feature -> ('bytes', [bytes...]) | ('float', array) | ('int64', array)."""
    for num, wt, v in _fields(buf):
        if num == 1 and wt == 2:
            return "bytes", [bytes(b) for n2, w2, b in _fields(v) if n2 == 1 and w2 == 2]
        if num == 2 and wt == 2:
            vals = []
            for n2, w2, b in _fields(v):
                if n2 == 1 and w2 == 2:
                    vals.extend(struct.unpack("<%df" % (len(b) // 4), b))
                elif n2 == 1 and w2 == 5:
                    vals.append(struct.unpack("<f", b)[0])
            return "float", np.array(vals, dtype=np.float32)
        if num == 3 and wt == 2:
            vals = []
            for n2, w2, b in _fields(v):
                if n2 == 1 and w2 == 2:
                    j = 0
                    while j < len(b):
                        x, j = _varint(b, j)
                        vals.append(x)
                elif n2 == 1 and w2 == 0:
                    vals.append(b)
            vals = [x - (1 << 64) if x >= 1 << 63 else x for x in vals]
            return "int64", np.array(vals, dtype=np.int64)
    return "empty", []


def parse(record):
    """A serialized tf.train.Example -> {name: (kind, values)}."""
    buf = memoryview(bytes(record))
    out = {}
    for num, wt, feats in _fields(buf):
        if num != 1 or wt != 2:
            continue
        for n2, w2, entry in _fields(feats):
            if n2 != 1 or w2 != 2:
                continue
            key, val = None, b""
            for n3, w3, v in _fields(entry):
                if n3 == 1 and w3 == 2:
                    key = bytes(v).decode("utf-8")
                elif n3 == 2 and w3 == 2:
                    val = v
            if key is not None:
                out[key] = _feature(val)
    return out


def _key(num, wt):
    return _enc_varint(num << 3 | wt)


def _enc_varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(num, payload):
    return _key(num, 2) + _enc_varint(len(payload)) + payload


def serialize_example(features):
    """{name: bytes | list of bytes | float32 array | int64 array} -> the
    serialized tf.train.Example (packed lists, as TensorFlow writes them)."""
    entries = b""
    for name, value in features.items():
        if isinstance(value, (bytes, bytearray)):
            value = [bytes(value)]
        if isinstance(value, list) and all(isinstance(v, (bytes, bytearray)) for v in value):
            feat = _len_field(1, b"".join(_len_field(1, bytes(v)) for v in value))
        else:
            a = np.asarray(value).reshape(-1)
            if a.dtype.kind == "f":
                feat = _len_field(2, _len_field(1, a.astype("<f4").tobytes()))
            elif a.dtype.kind in "iub":
                feat = _len_field(3, _len_field(1, b"".join(_enc_varint(int(x)) for x in a)))
            else:
                raise ValueError("serialize_example: feature %r of dtype %s" % (name, a.dtype))
        entries += _len_field(1, _len_field(1, name.encode("utf-8")) + _len_field(2, feat))
    return _len_field(1, entries)
