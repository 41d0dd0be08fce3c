"""The eager op namespace (tf.*, tf.math, tf.nn, tf.random, tf.linalg) over
NumPy: each op takes Tensors, Variables, NumPy arrays or Python values and
returns a strata.Tensor, with TensorFlow's argument names and defaults.
The small ops run in NumPy (float32 stays float32); the models' own work
runs in the C engine. Names Strata does not have raise AttributeError
(a _util.Missing) naming them."""
import numpy as np

from . import _util
from . import _tape
from ._tensor import Tensor, TensorShape, Variable, convert
from ._tensor import tensor as _plain_tensor

newaxis = None


def _a(x, what="op"):
    """x as a NumPy array (TF's conversion rules for Python values). A
    tensor a GradientTape records marks the op's result as one the tape
    cannot differentiate (tensor() below)."""
    if getattr(x, "_tape_node", None) is not None or _tape._watched_var(x):
        _tape.note_untracked()
    return _raw(x, what)


def _raw(x, what="op"):
    return x.view(np.ndarray) if isinstance(x, np.ndarray) else convert(x, None, what).view(np.ndarray)


def tensor(a):
    """An op's result as a Tensor (marked when it came from a recorded one)."""
    return _tape.mark_untracked(_plain_tensor(a))


def _axis(axis):
    if axis is None:
        return None
    if isinstance(axis, (list, tuple, np.ndarray)):
        return tuple(int(a) for a in np.asarray(axis).reshape(-1))
    return int(axis)


# ---- creation ----
def constant(value, dtype=None, shape=None, name=None):
    """A Tensor of value (Python floats become float32, ints int32); with
    shape, a scalar is broadcast to it and a list reshaped."""
    t = convert(value, dtype, "constant")
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        t = (np.broadcast_to(t, shape) if t.size == 1 else t.reshape(shape)).copy().view(Tensor)
    return t


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None):
    if dtype is None and dtype_hint is not None and not isinstance(value, (np.ndarray, np.generic, Variable)):
        return convert(value, dtype_hint, "convert_to_tensor")
    return convert(value, dtype, "convert_to_tensor")


def zeros(shape, dtype=np.float32, name=None):
    return tensor(np.zeros(_shape(shape), dtype=dtype))


def ones(shape, dtype=np.float32, name=None):
    return tensor(np.ones(_shape(shape), dtype=dtype))


def fill(dims, value, name=None):
    v = _a(value)
    return tensor(np.full(_shape(dims), v, dtype=v.dtype))


def zeros_like(input, dtype=None, name=None):
    return tensor(np.zeros_like(_a(input), dtype=dtype))


def ones_like(input, dtype=None, name=None):
    return tensor(np.ones_like(_a(input), dtype=dtype))


def eye(num_rows, num_columns=None, batch_shape=None, dtype=np.float32, name=None):
    return tensor(np.eye(int(num_rows), None if num_columns is None else int(num_columns), dtype=dtype))


def range_(start, limit=None, delta=1, dtype=None, name="range"):
    if limit is None:
        start, limit = 0, start
    vals = [_a(v) for v in (start, limit, delta)]
    dt = dtype or (np.float32 if any(v.dtype.kind == "f" for v in vals) else np.int32)
    return tensor(np.arange(vals[0], vals[1], vals[2]).astype(dt))


def linspace(start, stop, num, name=None, axis=0):
    return tensor(np.linspace(_a(start), _a(stop), int(num), axis=axis).astype(np.float32))


def _shape(shape):
    s = np.asarray(shape.numpy() if hasattr(shape, "numpy") else shape).reshape(-1)
    return tuple(int(d) for d in s)


# ---- shape ops ----
def shape(input, out_type=np.int32, name=None):
    return tensor(np.array(np.shape(_a(input)), dtype=out_type))


def size(input, out_type=np.int32, name=None):
    return tensor(np.array(np.size(_a(input)), dtype=out_type))


def rank(input, name=None):
    return tensor(np.array(np.ndim(_a(input)), dtype=np.int32))


def _sym(x):
    from .data._trace import Sym
    return isinstance(x, Sym)


def _recorded(*xs):
    return _tape.recording() is not None and _tape.recorded(*xs)


def _live(x):
    """x for a recorded op: a Tensor (a watched Variable's recorded read)."""
    x = _tape.live(x)
    return x if isinstance(x, Tensor) else convert(x)


def reshape(tensor_, shape, name=None):
    if _sym(tensor_):
        return tensor_._reshape(shape)
    if _recorded(tensor_):
        x = _live(tensor_)
        a = x.view(np.ndarray)
        return _tape.track(np.reshape(a, _shape(shape)), [x], lambda g: [np.reshape(g, a.shape)])
    return tensor(np.reshape(_a(tensor_), _shape(shape)))


def expand_dims(input, axis, name=None):
    if _sym(input):
        return input._expand_dims(axis)
    return tensor(np.expand_dims(_a(input), int(axis)))


def squeeze(input, axis=None, name=None):
    return tensor(np.squeeze(_a(input), _axis(axis)))


def transpose(a, perm=None, conjugate=False, name="transpose"):
    return tensor(np.transpose(_a(a), None if perm is None else _shape(perm)))


def concat(values, axis, name="concat"):
    values = list(values)
    if _recorded(*values):
        lives = [_live(v) for v in values]
        arrs = [v.view(np.ndarray) for v in lives]
        ax = int(axis)
        cuts = np.cumsum([a.shape[ax] for a in arrs])[:-1]
        return _tape.track(np.concatenate(arrs, axis=ax), lives, lambda g: np.split(g, cuts, axis=ax))
    return tensor(np.concatenate([_a(v) for v in values], axis=int(axis)))


def stack(values, axis=0, name="stack"):
    return tensor(np.stack([_a(v) for v in values], axis=int(axis)))


def unstack(value, num=None, axis=0, name="unstack"):
    a = np.moveaxis(_a(value), int(axis), 0)
    return [tensor(r) for r in a]


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    a = _a(value)
    if isinstance(num_or_size_splits, (int, np.integer)):
        return [tensor(p) for p in np.split(a, int(num_or_size_splits), axis=int(axis))]
    cuts = np.cumsum([int(s) for s in num_or_size_splits])[:-1]
    return [tensor(p) for p in np.split(a, cuts, axis=int(axis))]


def broadcast_to(input, shape, name=None):
    return tensor(np.broadcast_to(_a(input), _shape(shape)).copy())


def tile(input, multiples, name=None):
    return tensor(np.tile(_a(input), _shape(multiples)))


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    if batch_dims:
        raise NotImplementedError("tf.gather: batch_dims=%r is not supported by Strata" % (batch_dims,))
    return tensor(np.take(_a(params), _a(indices), axis=0 if axis is None else int(axis)))


def boolean_mask(tensor_, mask, axis=None, name="boolean_mask"):
    return tensor(_a(tensor_)[_a(mask).astype(bool)])


def where(condition, x=None, y=None, name=None):
    c = _a(condition).astype(bool)
    if x is None and y is None:
        return tensor(np.argwhere(c).astype(np.int64))
    return tensor(np.where(c, _a(x), _a(y)))


def reverse(tensor_, axis, name=None):
    return tensor(np.flip(_a(tensor_), _axis(axis)))


def identity(input, name=None):
    return tensor(np.array(_a(input)))


def cast(x, dtype, name=None):
    """x as dtype (a float cast to an int truncates toward zero, as TF)."""
    if _sym(x):
        return x._cast(dtype)
    return tensor(_a(x).astype(np.dtype(dtype)))


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=np.float32, name=None):
    if _sym(indices):
        if on_value is not None or off_value is not None or axis not in (None, -1):
            raise NotImplementedError("tf.one_hot: on_value / off_value / axis in a traced map")
        if np.dtype(dtype) != np.float32:
            raise NotImplementedError("tf.one_hot: dtype %s (float32 only)" % np.dtype(dtype))
        return indices._one_hot(depth)
    idx = _a(indices).astype(np.int64)
    on = 1 if on_value is None else _a(on_value)
    off = 0 if off_value is None else _a(off_value)
    hot = idx[..., None] == np.arange(int(depth))  # TF: out-of-range indices give all off_value
    out = np.where(hot, on, off).astype(dtype)
    if axis not in (None, -1):
        out = np.moveaxis(out, -1, int(axis))
    return tensor(out)


# ---- math ----
_RECORDED_UNARY = {"exp", "log", "sqrt", "square", "tanh", "sigmoid", "abs", "negative", "softplus", "log1p",
                   "rsqrt", "reciprocal"}


def _unary(fn, name):
    def op(x, name=None):
        if name_ in _RECORDED_UNARY and _recorded(x):
            return fn(_live(x))  # NumPy's ufuncs on a recorded Tensor: the tape records them
        a = _a(x)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            r = fn(a)
        if a.dtype.kind == "f" and r.dtype != a.dtype and np.asarray(r).dtype.kind == "f":
            r = np.asarray(r).astype(a.dtype)
        return tensor(r)
    name_ = name
    op.__name__ = name
    return op


def _python(x):
    return not isinstance(x, (np.ndarray, np.generic, Variable))


_RECORDED_BINARY = {"add", "subtract", "multiply", "divide", "truediv", "pow", "maximum", "minimum",
                    "squared_difference"}


def _binary(fn, name):
    def op(x, y, name=None):
        if name_ in _RECORDED_BINARY and _recorded(x, y):
            lx, ly = _tape.live(x), _tape.live(y)
            if not isinstance(lx, Tensor) and not isinstance(ly, Tensor):
                lx = convert(lx)
            return fn(lx, ly)
        a, b = _a(x), _a(y)
        if a.dtype != b.dtype:  # a Python value takes the tensor's dtype; two tensors must agree
            if _python(x) and not _python(y):
                a = a.astype(b.dtype)
            elif _python(y) and not _python(x):
                b = b.astype(a.dtype)
            elif not (_python(x) and _python(y)):
                raise TypeError("tf.%s: x has dtype %s and y has dtype %s; cast one with tf.cast "
                                "(TensorFlow does not convert between dtypes)" % (name, a.dtype.name, b.dtype.name))
        with np.errstate(divide="ignore", invalid="ignore"):
            return tensor(fn(a, b))
    name_ = name
    op.__name__ = name
    return op


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def _softplus(a):
    return np.logaddexp(0, a)


_UNARY = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "square": np.square, "abs": np.abs, "negative": np.negative,
          "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sigmoid": _sigmoid, "floor": np.floor,
          "ceil": np.ceil, "round": np.rint, "sign": np.sign, "log1p": np.log1p, "expm1": np.expm1,
          "rsqrt": lambda a: 1 / np.sqrt(a), "reciprocal": np.reciprocal, "softplus": _softplus,
          "is_nan": np.isnan, "is_finite": np.isfinite, "is_inf": np.isinf, "logical_not": np.logical_not,
          "erf": None}
_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.true_divide,
           "truediv": np.true_divide, "floordiv": np.floor_divide, "mod": np.mod, "floormod": np.mod,
           "pow": np.power, "maximum": np.maximum, "minimum": np.minimum, "equal": np.equal,
           "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
           "less": np.less, "less_equal": np.less_equal, "logical_and": np.logical_and,
           "logical_or": np.logical_or, "squared_difference": lambda a, b: np.square(a - b),
           "divide_no_nan": lambda a, b: np.where(b == 0, 0, a / np.where(b == 0, 1, b)).astype(a.dtype)}
UNARY = {k: _unary(f, k) for k, f in _UNARY.items() if f is not None}
BINARY = {k: _binary(f, k) for k, f in _BINARY.items()}


def _reduce(fn, name):
    def op(input_tensor, axis=None, keepdims=False, name=None):
        if fn in (np.sum, np.mean) and _recorded(input_tensor):
            return _recorded_reduce(fn, _live(input_tensor), axis, keepdims)
        a = _a(input_tensor)
        if fn in (np.sum, np.prod) and a.dtype.kind in "iub":
            r = fn(a, axis=_axis(axis), keepdims=keepdims, dtype=a.dtype if a.dtype.kind != "b" else np.int32)
        elif fn in (np.mean, np.std, np.var) and a.dtype.kind in "iu":
            r = np.trunc(fn(a, axis=_axis(axis), keepdims=keepdims)).astype(a.dtype)
        else:
            r = fn(a, axis=_axis(axis), keepdims=keepdims)
            if a.dtype.kind == "f":
                r = np.asarray(r, dtype=a.dtype)
        return tensor(r)
    op.__name__ = name
    return op


def _recorded_reduce(fn, x, axis, keepdims):
    """reduce_sum / reduce_mean of a tensor a GradientTape records."""
    a = _raw(x)
    ax = _axis(axis)
    r = fn(a, axis=ax, keepdims=keepdims)
    count = a.size / max(np.size(r), 1) if fn is np.mean else 1.0

    def vjp(g):
        g = np.asarray(g, dtype=np.float64)
        if ax is not None and not keepdims:
            g = np.expand_dims(g, ax)
        return [np.broadcast_to(g / count, a.shape)]
    return _tape.track(np.asarray(r, dtype=a.dtype), [x], vjp)


def _logsumexp(a, axis=None, keepdims=False):
    m = np.max(a, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


REDUCE = {k: _reduce(f, k) for k, f in (
    ("reduce_sum", np.sum), ("reduce_mean", np.mean), ("reduce_max", np.max), ("reduce_min", np.min),
    ("reduce_prod", np.prod), ("reduce_any", np.any), ("reduce_all", np.all), ("reduce_std", np.std),
    ("reduce_variance", np.var), ("reduce_logsumexp", _logsumexp))}


def argmax(input, axis=None, output_type=np.int64, name=None):
    """Index of the largest value along axis (default 0, as TF)."""
    return tensor(np.argmax(_a(input), axis=0 if axis is None else int(axis)).astype(output_type))


def argmin(input, axis=None, output_type=np.int64, name=None):
    return tensor(np.argmin(_a(input), axis=0 if axis is None else int(axis)).astype(output_type))


def count_nonzero(input, axis=None, keepdims=False, dtype=np.int64, name=None):
    return tensor(np.asarray(np.count_nonzero(_a(input), axis=_axis(axis), keepdims=keepdims)).astype(dtype))


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    a = _a(x)
    if reverse:
        a = np.flip(a, int(axis))
    r = np.cumsum(a, axis=int(axis), dtype=a.dtype)
    if exclusive:
        r = np.concatenate([np.zeros_like(np.take(r, [0], axis=int(axis))), np.delete(r, -1, axis=int(axis))],
                           axis=int(axis))
    return tensor(np.flip(r, int(axis)) if reverse else r)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    a = _a(t)
    return tensor(np.clip(a, _a(clip_value_min), _a(clip_value_max)).astype(a.dtype))


def add_n(inputs, name=None):
    inputs = list(inputs)
    if _recorded(*inputs):
        total = _live(inputs[0])
        for i in inputs[1:]:
            total = total + _tape.live(i)
        return total
    return tensor(sum(_a(i) for i in inputs))


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False, a_is_sparse=False,
           b_is_sparse=False, output_type=None, name=None):
    if _recorded(a, b):
        return _recorded_matmul(_live(a), _live(b), transpose_a or adjoint_a, transpose_b or adjoint_b)
    x, y = _a(a), _a(b)
    if x.ndim < 2 or y.ndim < 2:
        raise ValueError("tf.matmul: both arguments must have rank >= 2 (got shapes %s and %s)"
                         % (x.shape, y.shape))
    if transpose_a or adjoint_a:
        x = np.swapaxes(x, -1, -2)
    if transpose_b or adjoint_b:
        y = np.swapaxes(y, -1, -2)
    if x.dtype != y.dtype:
        raise TypeError("tf.matmul: a has dtype %s and b has dtype %s" % (x.dtype.name, y.dtype.name))
    return tensor(np.matmul(x, y))


def _recorded_matmul(la, lb, ta, tb):
    x, y = la.view(np.ndarray), lb.view(np.ndarray)
    if x.ndim < 2 or y.ndim < 2:
        raise ValueError("tf.matmul: both arguments must have rank >= 2 (got shapes %s and %s)"
                         % (x.shape, y.shape))
    xt = np.swapaxes(x, -1, -2) if ta else x
    yt = np.swapaxes(y, -1, -2) if tb else y

    def vjp(g):
        da, db = _tape._matmul_vjp(g, xt, yt)
        return [np.swapaxes(da, -1, -2) if ta else da, np.swapaxes(db, -1, -2) if tb else db]
    return _tape.track(np.matmul(xt, yt), [la, lb], vjp)


def tensordot(a, b, axes, name=None):
    return tensor(np.tensordot(_a(a), _a(b), axes))


def einsum(equation, *inputs, **kwargs):
    return tensor(np.einsum(equation, *[_a(i) for i in inputs]))


def norm(tensor_, ord="euclidean", axis=None, keepdims=None, name=None):
    a = _a(tensor_)
    o = None if ord in ("euclidean", "fro", 2) and (axis is None or np.ndim(axis) == 0) else ord
    if axis is None:
        return tensor(np.asarray(np.linalg.norm(a.reshape(-1), o), dtype=a.dtype))
    return tensor(np.asarray(np.linalg.norm(a, o, axis=_axis(axis), keepdims=bool(keepdims)), dtype=a.dtype))


def global_norm(t_list, name=None):
    """sqrt of the sum of the squares of every tensor in t_list (None skipped)."""
    total = sum(float(np.sum(np.square(_raw(t).astype(np.float64)))) for t in t_list if t is not None)
    return tensor(np.float32(np.sqrt(total)))


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """(t_list scaled by clip_norm / max(global_norm, clip_norm), global_norm), as TensorFlow."""
    t_list = list(t_list)
    gn = np.float32(global_norm(t_list) if use_norm is None else _raw(use_norm))
    c = np.float32(_raw(clip_norm))
    scale = c * min(np.float32(1.0) / gn, np.float32(1.0) / c) if gn > 0 else np.float32(1.0)
    out = [None if t is None else tensor((_raw(t) * scale).astype(_raw(t).dtype)) for t in t_list]
    return out, tensor(gn)


def clip_by_norm(t, clip_norm, axes=None, name=None):
    a = _raw(t)
    n = np.sqrt(np.sum(np.square(a), axis=_axis(axes), keepdims=True))
    c = np.float32(_raw(clip_norm))
    return tensor((a * c / np.maximum(n, c)).astype(a.dtype))


def l2_normalize(x, axis=None, epsilon=1e-12, name=None):
    a = _a(x)
    s = np.sum(a * a, axis=_axis(axis), keepdims=True)
    return tensor(a / np.sqrt(np.maximum(s, epsilon)))


def top_k(input, k=1, sorted=True, name=None):
    a = _a(input)
    idx = np.argsort(-a, axis=-1, kind="stable")[..., :int(k)].astype(np.int32)
    from types import SimpleNamespace
    return SimpleNamespace(values=tensor(np.take_along_axis(a, idx, -1)), indices=tensor(idx))


def sort(values, axis=-1, direction="ASCENDING", name=None):
    a = np.sort(_a(values), axis=int(axis), kind="stable")
    return tensor(np.flip(a, int(axis)) if direction == "DESCENDING" else a)


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    a = _a(values)
    idx = np.argsort(-a if direction == "DESCENDING" else a, axis=int(axis), kind="stable")
    return tensor(idx.astype(np.int32))


# ---- nn ----
def softmax(logits, axis=None, name=None):
    rec = _recorded(logits)
    lx = _live(logits) if rec else None
    a = lx.view(np.ndarray) if rec else _a(logits)
    ax = -1 if axis is None else int(axis)
    e = np.exp(a - a.max(axis=ax, keepdims=True))
    out = (e / e.sum(axis=ax, keepdims=True)).astype(a.dtype)
    if rec:
        return _tape.track(out, [lx], lambda g: [out * (g - (g * out).sum(axis=ax, keepdims=True))])
    return tensor(out)


def log_softmax(logits, axis=None, name=None):
    a = _a(logits)
    ax = -1 if axis is None else int(axis)
    z = a - a.max(axis=ax, keepdims=True)
    return tensor((z - np.log(np.exp(z).sum(axis=ax, keepdims=True))).astype(a.dtype))


def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """Zero each element with probability rate, scale the rest by 1 / (1 - rate)
    (recorded by a GradientTape: the mask is a constant)."""
    rate = float(rate)
    if not 0 <= rate < 1:
        raise ValueError("tf.nn.dropout: rate=%r must be in [0, 1)" % (rate,))
    lx = _live(x) if _recorded(x) else convert(x) if not isinstance(x, np.ndarray) else x
    shape = np.shape(lx) if noise_shape is None else tuple(int(d) for d in _raw(noise_shape))
    keep = (_gen(seed).random(shape) >= rate).astype(np.float32) / np.float32(1.0 - rate)
    return lx * keep.astype(np.asarray(lx).dtype)


def relu(features, name=None):
    if _recorded(features):
        lx = _live(features)
        a = lx.view(np.ndarray)
        return _tape.track(np.maximum(a, 0).astype(a.dtype), [lx], lambda g: [g * (a > 0)])
    a = _a(features)
    return tensor(np.maximum(a, 0).astype(a.dtype))


def relu6(features, name=None):
    a = _a(features)
    return tensor(np.clip(a, 0, 6).astype(a.dtype))


def leaky_relu(features, alpha=0.2, name=None):
    a = _a(features)
    return tensor(np.where(a < 0, alpha * a, a).astype(a.dtype))


def elu(features, name=None):
    a = _a(features)
    return tensor(np.where(a > 0, a, np.expm1(np.minimum(a, 0))).astype(a.dtype))


def gelu(features, approximate=False, name=None):
    a = _a(features).astype(np.float64)
    if approximate:
        r = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))
    else:
        from math import erf
        r = 0.5 * a * (1 + np.vectorize(erf)(a / np.sqrt(2)))
    return tensor(r.astype(_a(features).dtype))


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    lp = np.asarray(log_softmax(logits))
    y = _a(labels).astype(np.int64)
    return tensor(-np.take_along_axis(lp, y[..., None], -1)[..., 0])


def softmax_cross_entropy_with_logits(labels=None, logits=None, axis=-1, name=None):
    lp = np.asarray(log_softmax(logits, axis))
    return tensor(-(_a(labels).astype(lp.dtype) * lp).sum(axis=int(axis)))


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    x, z = _a(logits), _a(labels).astype(_a(logits).dtype)
    return tensor(np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x))))


def l2_loss(t, name=None):
    a = _a(t)
    return tensor(np.asarray((a * a).sum() / 2, dtype=a.dtype))


def moments(x, axes, shift=None, keepdims=False, name=None):
    a = _a(x)
    return (tensor(np.asarray(a.mean(axis=_axis(axes), keepdims=keepdims), dtype=a.dtype)),
            tensor(np.asarray(a.var(axis=_axis(axes), keepdims=keepdims), dtype=a.dtype)))


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None, regularization_loss=None):
    """sum(per_example_loss * sample_weight) / global_batch_size; without
    global_batch_size, the batch size times the strategy's replica count
    (inside strategy.run the batch is one replica's slice, as in TF)."""
    loss = _raw(per_example_loss).astype(np.float32)
    if sample_weight is not None:
        loss = loss * _a(sample_weight).astype(np.float32)
    if global_batch_size is None:
        from . import distribute
        ctx = distribute._current_replica()  # inside strategy.run: this replica's share of the batch
        replicas = ctx.num_replicas_in_sync if ctx is not None else 1
        global_batch_size = (loss.shape[0] if loss.ndim else 1) * replicas
    if int(global_batch_size) <= 0:
        raise ValueError("compute_average_loss: global_batch_size=%r must be positive" % (global_batch_size,))
    r = np.float32(loss.sum(dtype=np.float32) / np.float32(global_batch_size))
    if regularization_loss is not None:
        r = r + np.float32(_a(regularization_loss))
    if not _tape.recorded(per_example_loss):
        return tensor(np.float32(r))
    w = None if sample_weight is None else _a(sample_weight).astype(np.float64)
    n = float(global_batch_size)
    return _tape.track(np.float32(r), [per_example_loss], lambda g: [
        np.broadcast_to(np.asarray(g, np.float64) / n * (1.0 if w is None else w), loss.shape)])


def scale_regularization_loss(regularization_loss):
    """The loss divided by the replica count inside strategy.run (TF's rule)."""
    from . import distribute
    ctx = distribute._current_replica()
    return tensor(np.float32(_a(regularization_loss)) / np.float32(ctx.num_replicas_in_sync if ctx else 1))


# ---- random ----
_rng = {"seed": None, "gen": None, "ops": 0}


def _gen(seed):
    """The generator of the next random op: keyed by (global seed, op seed
    or the op counter), so a program gives the same numbers each run after
    tf.random.set_seed (Strata's default global seed is 0)."""
    g = _util.global_seed()
    if _rng["seed"] != g:
        _rng["seed"], _rng["ops"] = g, 0
    _rng["ops"] += 1
    return np.random.default_rng([g, _rng["ops"] if seed is None else int(seed) + (1 << 40), _rng["ops"]])


def set_seed(seed):
    """tf.random.set_seed: the seed of the random ops and of Strata's weight
    initialisation, dropout and shuffling; the ops' sequence starts again."""
    _util.set_global_seed(seed)
    _rng["seed"], _rng["ops"] = _util.global_seed(), 0


def uniform(shape, minval=0, maxval=None, dtype=np.float32, seed=None, name=None):
    dt = np.dtype(dtype)
    g = _gen(seed)
    if dt.kind in "iu":
        if maxval is None:
            raise ValueError("tf.random.uniform: maxval must be specified for integer dtype %s" % dt.name)
        return tensor(g.integers(int(minval), int(maxval), _shape(shape)).astype(dt))
    hi = 1.0 if maxval is None else float(_a(maxval))
    return tensor(g.uniform(float(_a(minval)), hi, _shape(shape)).astype(dt))


def normal(shape, mean=0.0, stddev=1.0, dtype=np.float32, seed=None, name=None):
    return tensor(_gen(seed).normal(float(_a(mean)), float(_a(stddev)), _shape(shape)).astype(dtype))


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=np.float32, seed=None, name=None):
    g = _gen(seed)
    n = int(np.prod(_shape(shape)))
    out = np.empty(0)
    while out.size < n:
        z = g.normal(size=max(2 * n, 16))
        out = np.concatenate([out, z[np.abs(z) <= 2]])
    return tensor((out[:n].reshape(_shape(shape)) * float(stddev) + float(mean)).astype(dtype))


def shuffle(value, seed=None, name=None):
    a = np.array(_a(value))
    _gen(seed).shuffle(a, axis=0)
    return tensor(a)


def categorical(logits, num_samples, dtype=np.int64, seed=None, name=None):
    p = np.asarray(softmax(logits), dtype=np.float64)
    g = _gen(seed)
    return tensor(np.array([g.choice(p.shape[-1], int(num_samples), p=row / row.sum()) for row in p]).astype(dtype))


class TensorSpec:
    """tf.TensorSpec(shape, dtype=tf.float32, name=None): the shape and dtype
    of a tensor (Dataset.from_generator's output_signature)."""

    def __init__(self, shape, dtype=np.float32, name=None):
        self._rank_known = shape is not None  # shape=None: any rank
        self.shape = TensorShape(shape)
        self.dtype = np.dtype(dtype) if dtype not in (np.str_, str, "string", object) else np.dtype(object)
        self.name = name

    def is_compatible_with(self, value):
        a = np.asarray(value)
        return (not self._rank_known or self.shape.is_compatible_with(a.shape)) and (self.dtype == a.dtype or self.dtype == object)

    def __eq__(self, other):
        return isinstance(other, TensorSpec) and (self.shape, self.dtype) == (other.shape, other.dtype)

    __hash__ = object.__hash__

    def __repr__(self):
        return "TensorSpec(shape=%s, dtype=tf.%s, name=%r)" % (self.shape, self.dtype.name, self.name)


def is_tensor(x):
    return isinstance(x, (Tensor, Variable))


def print_(*inputs, **kwargs):
    """tf.print: the values as NumPy prints them."""
    kwargs.pop("output_stream", None)
    kwargs.pop("summarize", None)
    print(*[np.asarray(i) if isinstance(i, (Tensor, Variable)) else i for i in inputs], **kwargs)
