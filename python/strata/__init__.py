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
from ._util import set_global_seed as _set_seed

__version__ = _strata.version

float32, float64, float16 = _np.float32, _np.float64, _np.float16
int32, int64, int8, uint8, bool_ = _np.int32, _np.int64, _np.int8, _np.uint8, _np.bool_
string = _np.str_


def cast(x, dtype):
    """x as a NumPy array of dtype (tf.cast)."""
    if isinstance(x, _Sym):
        return x._cast(dtype)
    return _np.asarray(x).astype(dtype)


def constant(value, dtype=None, shape=None, name=None):
    a = _np.array(value, dtype=dtype)
    return a.reshape(shape) if shape is not None else a


convert_to_tensor = constant


def reshape(x, shape):
    if isinstance(x, _Sym):
        return x._reshape(shape)
    return _np.reshape(x, shape)


def expand_dims(x, axis):
    if isinstance(x, _Sym):
        return x._expand_dims(axis)
    return _np.expand_dims(x, axis)


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=_np.float32, name=None):
    if on_value is not None or off_value is not None or axis not in (None, -1):
        raise NotImplementedError("tf.one_hot: on_value / off_value / axis are not supported by Strata")
    if isinstance(indices, _Sym):
        if _np.dtype(dtype) != _np.float32:
            raise NotImplementedError("tf.one_hot: dtype %s (float32 only)" % _np.dtype(dtype))
        return indices._one_hot(depth)
    return keras.utils.to_categorical(indices, depth, dtype)


random = _types.SimpleNamespace(set_seed=_set_seed)
train = _types.SimpleNamespace(ClusterSpec=distribute.cluster_resolver.ClusterSpec)
nn = _types.SimpleNamespace(**{n: getattr(keras.activations, n) for n in ("relu", "sigmoid", "tanh", "softmax", "elu", "gelu")})
config = _types.SimpleNamespace(
    list_physical_devices=lambda kind=None: [] if kind and kind.upper() == "GPU" else
    [_types.SimpleNamespace(name="/physical_device:CPU:0", device_type="CPU")],
    experimental=_types.SimpleNamespace(set_memory_growth=lambda *a: None))


class GradientTape:
    """Not available: Strata computes gradients inside its engine."""

    def __init__(self, *a, **k):
        raise NotImplementedError("tf.GradientTape is not supported by Strata: use model.fit, or a "
                                  "custom loop with strategy.run(model.train_on_batch ...)")


def function(fn=None, **kwargs):
    """tf.function: returns the Python function unchanged."""
    return fn if fn is not None else (lambda f: f)


__all__ = ["keras", "distribute", "data", "io", "reshape", "one_hot", "expand_dims", "random", "nn", "cast", "constant", "float32", "int32",
           "int64", "uint8", "function", "config", "train"]
