"""tf.keras on Strata: Sequential models, layers, optimizers, losses,
metrics, callbacks, datasets and utils with Keras's names and defaults."""

from . import callbacks, datasets, layers, losses, metrics, mixed_precision, optimizers, utils
from . import models
from .layers import Input
from .models import Model, Sequential

from .._util import missing as _missing, namespace as _namespace  # noqa: E402

def _random_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
    from .. import _ops
    return _ops.normal(tuple(int(d) for d in shape), mean, stddev, dtype or "float32", seed)


def _random_uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):
    from .. import _ops
    return _ops.uniform(tuple(int(d) for d in shape), minval, maxval, dtype or "float32", seed)


backend = _namespace("tf.keras.backend", "strata.keras.backend",
                     dict(clear_session=lambda *a, **k: None, floatx=lambda: "float32",
                          random_normal=_random_normal, random_uniform=_random_uniform,
                          epsilon=lambda: 1e-7))


class _Initializer:
    def __init__(self, seed=None):
        self.seed = seed


initializers = _namespace("tf.keras.initializers", "strata.keras.initializers", dict(
    GlorotUniform=type("GlorotUniform", (_Initializer,), {}),
    HeNormal=type("HeNormal", (_Initializer,), {}),
    Zeros=type("Zeros", (_Initializer,), {}),
    Ones=type("Ones", (_Initializer,), {}),
    RandomUniform=type("RandomUniform", (_Initializer,), {
        "__init__": lambda self, minval=-0.05, maxval=0.05, seed=None: (
            setattr(self, "minval", minval), setattr(self, "maxval", maxval), setattr(self, "seed", seed))[-1]})))


def _act(name):
    import numpy as np
    fns = {"relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
           "tanh": np.tanh, "linear": lambda x: x,
           "softmax": lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True),
           "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
           "relu6": lambda x: np.clip(x, 0, 6), "leaky_relu": lambda x: np.where(x < 0, 0.2 * x, x)}
    impl = fns.get(name)

    def f(x):
        if impl is None:
            raise NotImplementedError("tf.keras.activations.%s on arrays is not supported by Strata" % name)
        return impl(np.asarray(x, dtype=np.float32))
    f.__name__ = name
    return f


class _Regularizer:
    """A regularizer object (its factor kept); layers refuse it when given
    (Strata's engine has no weight penalties: AdamW's weight_decay is the
    alternative)."""

    def __init__(self, l1=0.0, l2=0.0):
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x):
        import numpy as np
        x = np.asarray(x, dtype=np.float32)
        return np.float32(self.l1 * np.abs(x).sum() + self.l2 * np.square(x).sum())

    def get_config(self):
        return {"l1": self.l1, "l2": self.l2}


regularizers = _namespace("tf.keras.regularizers", "strata.keras.regularizers", dict(
    Regularizer=_Regularizer, L1L2=_Regularizer, l1_l2=_Regularizer,
    L1=lambda l1=0.01: _Regularizer(l1=l1), l1=lambda l1=0.01: _Regularizer(l1=l1),
    L2=lambda l2=0.01: _Regularizer(l2=l2), l2=lambda l2=0.01: _Regularizer(l2=l2)))

activations = _namespace("tf.keras.activations", "strata.keras.activations",
                         {n: _act(n) for n in ("relu", "sigmoid", "tanh", "linear", "softmax", "elu")})
activations.gelu = _act("gelu")
activations.relu6 = _act("relu6")
activations.leaky_relu = _act("leaky_relu")

__all__ = ["Sequential", "Model", "Input", "layers", "models", "optimizers", "losses", "metrics", "mixed_precision",
           "callbacks", "datasets", "utils", "activations", "initializers", "backend"]


def __getattr__(name):
    raise _missing("tf.keras", name)
