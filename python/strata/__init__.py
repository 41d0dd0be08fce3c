"""strata: TensorFlow-shaped Python API over Strata's C engine.

    import strata as tf
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([...])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=10, batch_size=256)

Training runs in C (libstrata) with the GIL released; see README.md
("Python") for what is supported and how it differs from TensorFlow."""
import os as _os
import sys as _sys
import types as _types

from . import _strata

# NumPy and libstrata share one libopenblas, which reads OPENBLAS_CORETYPE when
# it loads: set the core libstrata would force before NumPy loads it, so that
# sgemm runs the kernels the CLI runs (fit then gives the CLI's weights bits).
# When NumPy was imported first, libstrata warns if the core it got is slow.
if "numpy" not in _sys.modules and "OPENBLAS_CORETYPE" not in _os.environ:
    _core = _strata.blas_coretype()
    if _core:
        _os.environ["OPENBLAS_CORETYPE"] = _core

import numpy as _np  # noqa: E402
from . import data, distribute, keras
from . import io
from . import models
from .data._trace import Sym as _Sym

__version__ = _strata.version

from . import _ops  # noqa: E402
from ._tensor import Tensor, TensorShape, Variable  # noqa: E402
from ._util import missing as _missing, namespace as _namespace  # noqa: E402

float32, float64, float16 = _np.float32, _np.float64, _np.float16
int32, int64, int16, int8 = _np.int32, _np.int64, _np.int16, _np.int8
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
bool_, complex64, complex128 = _np.bool_, _np.complex64, _np.complex128
globals()["bool"] = _np.bool_  # tf.bool (not the builtin inside this module's code)
string = _np.str_
newaxis = None
DType = _np.dtype
as_dtype = _np.dtype

# tf.* ops (NumPy-backed, returning strata.Tensor: _ops.py)
_TOP = ("constant", "convert_to_tensor", "zeros", "ones", "fill", "zeros_like", "ones_like", "eye", "linspace",
        "shape", "size", "rank", "reshape", "expand_dims", "squeeze", "transpose", "concat", "stack", "unstack",
        "split", "tile", "broadcast_to", "gather", "boolean_mask", "where", "reverse", "identity", "cast", "one_hot", "argmax",
        "argmin", "matmul", "tensordot", "einsum", "norm", "clip_by_value", "add_n", "sort", "argsort",
        "cumsum", "TensorSpec", "is_tensor", "clip_by_global_norm", "clip_by_norm")
globals().update({n: getattr(_ops, n) for n in _TOP})
globals().update(_ops.REDUCE)
globals().update({n: _ops.UNARY[n] for n in ("exp", "sqrt", "square", "abs", "sign", "round", "sigmoid", "tanh",
                                             "negative", "sin", "cos", "floor", "ceil", "logical_not")})
globals().update({n: _ops.BINARY[n] for n in ("add", "subtract", "multiply", "divide", "truediv", "floordiv",
                                              "pow", "maximum", "minimum", "equal", "not_equal", "greater",
                                              "greater_equal", "less", "less_equal", "logical_and",
                                              "logical_or")})
range = _ops.range_  # noqa: A001 (tf.range)
print = _ops.print_  # noqa: A001 (tf.print)

math = _namespace("tf.math", "strata.math", dict(
    _ops.UNARY, **_ops.BINARY, **_ops.REDUCE, argmax=_ops.argmax, argmin=_ops.argmin,
    count_nonzero=_ops.count_nonzero, cumsum=_ops.cumsum, l2_normalize=_ops.l2_normalize,
    top_k=_ops.top_k, add_n=_ops.add_n, log=_ops.UNARY["log"], softmax=_ops.softmax,
    log_softmax=_ops.log_softmax, scalar_mul=lambda scalar, x, name=None: _ops.BINARY["multiply"](scalar, x)))
log = _ops.UNARY["log"]
linalg = _namespace("tf.linalg", "strata.linalg", dict(
    matmul=_ops.matmul, norm=_ops.norm, global_norm=_ops.global_norm, transpose=_ops.transpose, eye=_ops.eye, einsum=_ops.einsum,
    tensordot=_ops.tensordot, l2_normalize=_ops.l2_normalize,
    inv=lambda input, adjoint=False, name=None: _ops.tensor(_np.linalg.inv(_np.asarray(input))),
    det=lambda input, name=None: _ops.tensor(_np.linalg.det(_np.asarray(input)))))
random = _namespace("tf.random", "strata.random", dict(
    set_seed=_ops.set_seed, uniform=_ops.uniform, normal=_ops.normal, truncated_normal=_ops.truncated_normal,
    shuffle=_ops.shuffle, categorical=_ops.categorical))
nn = _namespace("tf.nn", "strata.nn", dict(
    relu=_ops.relu, relu6=_ops.relu6, dropout=_ops.dropout, leaky_relu=_ops.leaky_relu, elu=_ops.elu, gelu=_ops.gelu,
    softmax=_ops.softmax, log_softmax=_ops.log_softmax, sigmoid=_ops.UNARY["sigmoid"], tanh=_ops.UNARY["tanh"],
    softplus=_ops.UNARY["softplus"], sparse_softmax_cross_entropy_with_logits=_ops.sparse_softmax_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits=_ops.softmax_cross_entropy_with_logits,
    sigmoid_cross_entropy_with_logits=_ops.sigmoid_cross_entropy_with_logits, l2_loss=_ops.l2_loss,
    moments=_ops.moments, compute_average_loss=_ops.compute_average_loss, l2_normalize=_ops.l2_normalize,
    scale_regularization_loss=_ops.scale_regularization_loss))
dtypes = _namespace("tf.dtypes", "strata.dtypes", dict(
    float16=float16, float32=float32, float64=float64, int8=int8, int16=int16, int32=int32, int64=int64,
    uint8=uint8, uint16=uint16, bool=_np.bool_, string=string, complex64=complex64, as_dtype=as_dtype,
    DType=DType, cast=_ops.cast))
from . import _checkpoint, _train_example  # noqa: E402
train = _namespace("tf.train", "strata.train", dict(
    {n: getattr(_train_example, n) for n in ("Example", "Features", "Feature", "BytesList", "FloatList", "Int64List")},
    ClusterSpec=distribute.cluster_resolver.ClusterSpec, latest_checkpoint=_checkpoint.latest_checkpoint,
    Checkpoint=_checkpoint.Checkpoint, CheckpointManager=_checkpoint.CheckpointManager))
def _devices(prefix, kind):
    return [] if kind and kind.upper() != "CPU" else [_types.SimpleNamespace(name="/%s:CPU:0" % prefix, device_type="CPU")]


def _set_logical_devices(device, logical_devices):
    raise NotImplementedError(
        "tf.config.set_logical_device_configuration is not supported by Strata: MirroredStrategy() on the "
        "CPU already makes one replica per core; name them with MirroredStrategy(['/cpu:0', '/cpu:1'])")


config = _namespace("tf.config", "strata.config", dict(
    list_physical_devices=lambda device_type=None: _devices("physical_device", device_type),
    list_logical_devices=lambda device_type=None: _devices("device", device_type),
    set_logical_device_configuration=_set_logical_devices,
    LogicalDeviceConfiguration=lambda memory_limit=None, **k: _types.SimpleNamespace(memory_limit=memory_limit),
    set_visible_devices=lambda devices, device_type=None: None,
    experimental=_namespace("tf.config.experimental", "strata.config.experimental", dict(
        set_memory_growth=lambda *a: None, list_physical_devices=lambda t=None: _devices("physical_device", t)))))


def py_function(func, inp, Tout, name=None):
    """tf.py_function: func called on the inputs as Tensors (Strata runs
    eagerly); the result converted to Tout (a list of dtypes: a list)."""
    out = func(*[_ops.tensor(i) if not isinstance(i, (bytes, str)) else i for i in inp])

    def conv(v, t):
        if isinstance(v, (bytes, str)) or t in (string, str, bytes):
            return v if isinstance(v, bytes) else (v.encode() if isinstance(v, str) else v)
        return _ops.convert_to_tensor(v, dtype=t)
    if isinstance(Tout, (list, tuple)):
        return [conv(v, t) for v, t in zip(out, Tout)]
    return conv(out, Tout)


numpy_function = py_function


def executing_eagerly():
    """Strata runs ops eagerly (tf.function runs the Python function)."""
    return True


from ._tape import GradientTape  # noqa: E402  (inside strategy.run: _tape.py)


from ._function import function  # noqa: E402  (runs the function eagerly: _function.py)


class _CompatV1:
    """tf.compat.v1: TensorFlow 1's graph API (sessions, placeholders,
    variable scopes) is not Strata's; the few switches TF2 programs call are
    accepted (eager execution is always on)."""

    def enable_eager_execution(self, *args, **kwargs):
        pass

    def enable_v2_behavior(self):
        pass

    def __getattr__(self, name):
        raise NotImplementedError("tf.compat.v1.%s: TensorFlow 1's graph API (Session, placeholder, "
                                  "variable_scope, ...) is not provided by Strata, which runs TF2's eager API: "
                                  "write the TF2 form (tf.function, tf.keras, tf.GradientTape)" % name)


compat = _types.SimpleNamespace(v1=_CompatV1(), v2=_sys.modules[__name__],
                                forward_compatible=lambda year, month, day: True)


def __getattr__(name):
    raise _missing("tf", name)


__all__ = ["keras", "distribute", "data", "io", "math", "nn", "random", "linalg", "train", "config", "dtypes",
           "Tensor", "TensorShape", "TensorSpec", "Variable", "function", "GradientTape", "newaxis"] + list(_TOP)
