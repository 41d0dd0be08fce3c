"""Tracing a tf.data map function once with symbolic stand-ins (Sym), so
that the common Keras preprocessing lambdas run in C: element-wise float32
arithmetic with constants (`tf.cast(x, tf.float32) / 255.`, scale / shift),
tf.cast, tf.reshape / expand_dims, tf.one_hot of labels, and
tf.io.parse_single_example / parse_example / decode_raw over TFRecord
records. Anything else a function does (indexing, NumPy calls, branches on
values, ...) raises Untraceable and the map stays a Python map."""
import numpy as np


class Untraceable(Exception):
    """The function did something a Sym cannot stand for."""


_OPS = {"mul": 0, "div": 1, "add": 2, "sub": 3, "rsub": 4, "rdiv": 5, "round255": 6}
_INTS = (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64)


def _const(c):
    """A constant NumPy combines with a float32 array without widening it
    (Python int / float, np.float32), as float32."""
    if isinstance(c, bool) or not isinstance(c, (int, float, np.float32)):
        raise Untraceable("constant %r" % (c,))
    if isinstance(c, int) and abs(c) >= 2 ** 24:
        raise Untraceable("integer constant %r" % c)
    with np.errstate(over="ignore"):
        f = np.float32(c)
    if not np.isfinite(f):
        raise Untraceable("constant %r" % (c,))
    return float(f)


class Sym:
    """A symbolic value flowing through a traced map function: where it
    comes from (origin), its dtype and per-element shape, the float32 ops
    applied so far, a one_hot depth, whether it is batched."""
    __array_ufunc__ = None  # NumPy scalars defer to our reflected operators
    __array_priority__ = 1000

    def __init__(self, origin, dtype, shape, ops=(), one_hot=0, batched=False):
        self.origin, self.dtype, self.shape = origin, np.dtype(dtype), shape
        self.ops, self.one_hot, self.batched = tuple(ops), one_hot, batched

    def _with(self, **kw):
        d = dict(origin=self.origin, dtype=self.dtype, shape=self.shape, ops=self.ops,
                 one_hot=self.one_hot, batched=self.batched)
        d.update(kw)
        return Sym(**d)

    def _arith(self, kind, c):
        if self.dtype != np.float32:
            raise Untraceable("arithmetic on %s (cast to float32 first)" % self.dtype)
        return self._with(ops=self.ops + ((kind, _const(c)),))

    def __mul__(self, c):
        return self._arith("mul", c)

    __rmul__ = __mul__

    def __truediv__(self, c):
        return self._arith("div", c)

    def __rtruediv__(self, c):
        return self._arith("rdiv", c)

    def __add__(self, c):
        return self._arith("add", c)

    __radd__ = __add__

    def __sub__(self, c):
        return self._arith("sub", c)

    def __rsub__(self, c):
        return self._arith("rsub", c)

    def _untraceable(self, *a, **k):
        raise Untraceable("an operation Strata does not trace")

    __neg__ = __pos__ = __abs__ = __pow__ = __rpow__ = __floordiv__ = __rfloordiv__ = _untraceable
    __mod__ = __getitem__ = __len__ = __iter__ = __bool__ = __array__ = _untraceable
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _untraceable
    __hash__ = object.__hash__

    def __getattr__(self, name):
        raise Untraceable("attribute %s" % name)

    # ---- the tf functions on a Sym ----
    def _cast(self, dtype):
        dt = np.dtype(dtype)
        if dt == self.dtype:
            return self
        if self.one_hot or self.ops:
            raise Untraceable("cast after arithmetic")
        if dt == np.float32 and self.dtype.kind in "iu":
            return self._with(dtype=np.float32)
        if dt.type in _INTS and self.dtype.kind in "iu":
            return self._with(dtype=dt)  # labels: the engine reads them as floats anyway
        raise Untraceable("cast %s -> %s" % (self.dtype, dt))

    def _reshape(self, shape):
        if self.batched:
            raise Untraceable("reshape of a batch")
        shape = tuple(int(d) for d in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
        known = self.shape is not None and None not in self.shape
        if shape.count(-1) > 1 or any(d < -1 or d == 0 for d in shape):
            raise Untraceable("reshape %s" % (shape,))
        if -1 in shape:
            if not known:
                raise Untraceable("reshape with -1 of an unknown size")
            rest = int(np.prod([d for d in shape if d != -1]))
            shape = tuple(int(np.prod(self.shape)) // rest if d == -1 else d for d in shape)
        if known and int(np.prod(shape)) != int(np.prod(self.shape)):
            raise ValueError("reshape: cannot reshape %s values into %s" % (int(np.prod(self.shape)), shape))
        return self._with(shape=shape)

    def _expand_dims(self, axis):
        if self.batched or self.shape is None or None in self.shape:
            raise Untraceable("expand_dims")
        s = list(self.shape)
        axis = int(axis)
        s.insert(axis if axis >= 0 else len(s) + axis + 1, 1)
        return self._with(shape=tuple(s))

    def _one_hot(self, depth):
        if self.dtype.kind not in "iu" or self.ops or self.one_hot:
            raise Untraceable("one_hot of %s" % self.dtype)
        depth = int(depth)
        if depth < 1:
            raise ValueError("one_hot: depth %d must be positive" % depth)
        return self._with(dtype=np.float32, one_hot=depth, shape=(depth,))


def is_sym(x):
    return isinstance(x, Sym)


def c_ops(ops):
    """Sym ops -> [(code, constant)] for _strata.dataset_map_ops."""
    return [(_OPS[k], c) for k, c in ops]
