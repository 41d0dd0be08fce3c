"""strata.Tensor and strata.Variable: TensorFlow's eager values over NumPy.

A Tensor is a NumPy array (a subclass of ndarray: arithmetic, indexing,
broadcasting and every NumPy function work on it) that also answers what
TensorFlow's eager tensors answer: .numpy(), .shape as a TensorShape (a tuple
with as_list() and rank), .dtype (a NumPy dtype: `t.dtype == tf.float32`),
and TF's repr. A Variable holds a Tensor that assign / assign_add /
assign_sub replace in place (the shape may not change) and takes part in
arithmetic as its value. Ops in strata (tf.reduce_sum, tf.matmul, ...) take
Tensors, Variables, NumPy arrays and Python lists and return Tensors."""
import numpy as np


class TensorShape(tuple):
    """A tensor's shape: a tuple of ints (None for an unknown dimension)."""

    def __new__(cls, dims=()):
        if dims is None:
            dims = ()
        if isinstance(dims, (int, np.integer)):
            dims = (dims,)
        return super().__new__(cls, tuple(None if d is None else int(d) for d in dims))

    def as_list(self):
        return list(self)

    @property
    def rank(self):
        return len(self)

    @property
    def ndims(self):
        return len(self)

    def num_elements(self):
        return None if None in self else int(np.prod(self, dtype=np.int64))

    def is_compatible_with(self, other):
        other = TensorShape(other)
        return len(self) == len(other) and all(a is None or b is None or a == b for a, b in zip(self, other))

    def __getitem__(self, i):
        r = super().__getitem__(i)
        return TensorShape(r) if isinstance(i, slice) else r

    def __repr__(self):
        return "TensorShape(%s)" % list(self)

    def __str__(self):
        return "(" + ", ".join("None" if d is None else str(d) for d in self) + ("," if len(self) == 1 else "") + ")"


class Tensor(np.ndarray):
    """An eager tensor: a NumPy array with TensorFlow's .numpy(), .shape and
    repr. Indexing that selects one element gives a 0-d Tensor, as TF does."""

    @property
    def shape(self):
        return TensorShape(np.ndarray.shape.__get__(self))

    @shape.setter
    def shape(self, value):
        np.ndarray.shape.__set__(self, value)

    def numpy(self):
        """The value as a NumPy array (a NumPy scalar for a 0-d tensor)."""
        a = np.array(self.view(np.ndarray))
        return a[()] if a.ndim == 0 else a

    def get_shape(self):
        return self.shape

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy's ufuncs on the arrays, with TensorFlow's rule for Python
        numbers (they take the tensor's dtype: a float32 0-d tensor times 2
        stays float32, where NumPy 1.x would widen it); results are Tensors."""
        if method == "__call__" and any(getattr(x, "_tape_node", None) is not None for x in inputs):
            from . import _tape  # a GradientTape records this op
            if _tape.recording() is not None:
                return _tape.ufunc(ufunc, inputs)
        dt = next((x.dtype for x in inputs if isinstance(x, Tensor)), None)  # None: a Tensor only in out=
        args = []
        for x in inputs:
            if isinstance(x, Tensor):
                x = x.view(np.ndarray)
            elif dt is not None and not isinstance(x, bool) and (
                    isinstance(x, (int, float)) and dt.kind in "fc" or isinstance(x, int) and dt.kind in "iu"):
                x = np.asarray(x, dtype=dt)
            args.append(x)
        if "out" in kwargs:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, Tensor) else o for o in kwargs["out"])
        r = getattr(ufunc, method)(*args, **kwargs)
        if isinstance(r, tuple):
            return tuple(np.asarray(v).view(Tensor) for v in r)
        return r if r is None else np.asarray(r).view(Tensor)

    def __getitem__(self, index):
        r = super().__getitem__(index)
        if isinstance(r, np.generic):
            return np.asarray(r).view(Tensor)
        return r

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self)))

    def __format__(self, spec):
        if self.ndim == 0:
            return format(self.view(np.ndarray)[()], spec)
        return super().__format__(spec)

    def __repr__(self):
        a = self.view(np.ndarray)
        return "<tf.Tensor: shape=%s, dtype=%s, numpy=%s>" % (self.shape, self.dtype.name, repr(a[()] if a.ndim == 0 else a))

    def __str__(self):
        a = self.view(np.ndarray)
        return "tf.Tensor(%s, shape=%s, dtype=%s)" % (str(a), self.shape, self.dtype.name)

    def __hash__(self):
        raise TypeError("Tensor is unhashable. Instead, use tensor.ref() as the key.")

    def ref(self):
        return _Ref(self)


class _Ref:
    def __init__(self, t):
        self._t = t

    def deref(self):
        return self._t

    def __hash__(self):
        return id(self._t)

    def __eq__(self, other):
        return isinstance(other, _Ref) and other._t is self._t


_PY_FLOAT, _PY_INT = np.float32, np.int32


def convert(value, dtype=None, what="convert_to_tensor"):
    """value as a Tensor with TensorFlow's dtype rules: Python floats (and
    lists of them) become float32, Python ints int32 (int64 when they do not
    fit); NumPy arrays keep their dtype; dtype casts (a float to an int
    dtype is refused, as TF refuses it)."""
    if isinstance(value, Variable):
        value = value._value
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
    else:
        try:
            a = np.array(value)
        except ValueError as e:
            raise ValueError("%s: cannot be made a tensor (ragged nested lists?): %s" % (what, e)) from None
        if a.dtype == np.float64:
            a = a.astype(_PY_FLOAT)
        elif a.dtype == np.int64 and (a.size == 0 or (a.min() >= -2 ** 31 and a.max() < 2 ** 31)):
            a = a.astype(_PY_INT)
        elif a.dtype.kind in "SU":  # strings: bytes objects, exact (NumPy's S drops trailing NULs)
            a = np.array(value, dtype=object)
            flat = a.reshape(-1)
            for i, v in enumerate(flat):
                flat[i] = v.encode() if isinstance(v, str) else v
    if a.dtype == object and not all(isinstance(v, (str, bytes)) for v in a.reshape(-1)):
        raise ValueError("%s: %r cannot be made a tensor (ragged or non-numeric)" % (what, value))
    if dtype is not None:
        dt = np.dtype(dtype)
        if a.dtype.kind == "f" and dt.kind in "iu" and not isinstance(value, (np.ndarray, np.generic)):
            raise TypeError("%s: cannot convert %r to EagerTensor of dtype %s" % (what, value, dt.name))
        a = a.astype(dt)
    return a.view(Tensor)


def tensor(a):
    """a (an array or scalar result) as a Tensor, without converting dtypes."""
    if isinstance(a, Variable):
        a = a._value
    return np.asarray(a).view(Tensor)


class Variable:
    """tf.Variable: a mutable tensor. assign / assign_add / assign_sub
    change it in place (same shape) and return the variable; in arithmetic
    and NumPy functions it is its current value."""
    __array_priority__ = 100
    _count = 0

    def __init__(self, initial_value=None, trainable=True, validate_shape=True, name=None, dtype=None,
                 shape=None, **kwargs):
        if initial_value is None:
            raise ValueError("Variable: initial_value must be specified")
        if callable(initial_value):
            initial_value = initial_value()
        self._value = np.array(convert(initial_value, dtype, "Variable").view(np.ndarray))
        Variable._count += 1
        self._name = (name or "Variable") + ":0"
        self.trainable = bool(trainable)

    # ---- value ----
    def numpy(self):
        return self._value[()] if self._value.ndim == 0 else self._value.copy()

    def value(self):
        from . import _tape  # inside a GradientTape that watches it: a recorded read
        return _tape.variable_read(self, tensor(self._value.copy()))

    read_value = value

    def _write(self, v, where):
        v = np.asarray(convert(v, self._value.dtype if not isinstance(v, (np.ndarray, np.generic)) else None, where))
        if v.shape != self._value.shape and not (v.size == self._value.size == 1):
            raise ValueError("%s: cannot assign a value of shape %s to a variable of shape %s"
                             % (where, v.shape, self._value.shape))
        self._value[...] = v.reshape(self._value.shape).astype(self._value.dtype)
        self._assigned()
        return self

    def _assigned(self):
        """Called after every assignment (subclasses write the value on)."""

    def assign(self, value, use_locking=False, name=None, read_value=True):
        return self._write(value, "Variable.assign")

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        return self._write(self._value + np.asarray(delta), "Variable.assign_add")

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        return self._write(self._value - np.asarray(delta), "Variable.assign_sub")

    # ---- attributes ----
    @property
    def shape(self):
        return TensorShape(self._value.shape)

    @property
    def dtype(self):
        return self._value.dtype

    @property
    def name(self):
        return self._name

    @property
    def ndim(self):
        return self._value.ndim

    def get_shape(self):
        return self.shape

    def __array__(self, dtype=None, copy=None):
        return self._value if dtype is None else self._value.astype(dtype)

    def __len__(self):
        return len(self._value)

    def __getitem__(self, i):
        return self.value()[i]

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __index__(self):
        return int(self._value)

    def __bool__(self):
        return bool(self._value)

    def __format__(self, spec):
        return format(self.numpy(), spec)

    def __repr__(self):
        return "<tf.Variable '%s' shape=%s dtype=%s, numpy=%r>" % (self._name, self.shape, self.dtype.name, self.numpy())

    __hash__ = object.__hash__

    def ref(self):
        return _Ref(self)


def _delegate(op):
    def f(self, *args):
        return getattr(self.value(), op)(*args)
    f.__name__ = op
    return f


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv",
            "mod", "rmod", "pow", "rpow", "matmul", "rmatmul", "neg", "pos", "abs", "lt", "le", "gt", "ge",
            "eq", "ne", "and", "rand", "or", "ror", "xor", "invert"):
    setattr(Variable, "__%s__" % _op, _delegate("__%s__" % _op))
Variable.__hash__ = object.__hash__
