"""Custom layers (a tf.keras.layers.Layer subclass with build / add_weight /
call) and Strata's own layers called on tensors: they run eagerly, layer by
layer, in NumPy, with the tf ops of call() recorded by a GradientTape
(_tape.py); their weights are tf.Variables (add_weight), trained by a tape
and optimizer.apply_gradients (keras/_pyopt.py), or by fit of a subclassed
tf.keras.Model that contains them (keras/_eager_model.py). The engine's
graph runs only Strata's layers: a custom layer called on tf.keras.Input
tensors (the functional API, Sequential) is refused.
Eager forms of Strata's layers (for use inside custom layers and eager
models): Dense, Flatten, Dropout, Activation, ReLU, Reshape-free; others
raise NotImplementedError naming the layer."""
import inspect
import math

import numpy as np


# ---- add_weight and its initializers ----
def _fans(shape):
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    rf = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * rf, shape[-1] * rf


def _initial(init, shape, dtype):
    from .. import _ops
    if callable(init) and not isinstance(init, str) and not hasattr(init, "seed"):
        return np.asarray(init(shape, dtype=dtype), dtype=dtype)
    name = init if isinstance(init, str) else type(init).__name__
    key = name.replace("_", "").lower()
    g = _ops._gen(getattr(init, "seed", None))
    fan_in, fan_out = _fans(shape)
    if key in ("zeros", "zero"):
        return np.zeros(shape, dtype)
    if key in ("ones", "one"):
        return np.ones(shape, dtype)
    if key == "constant":
        return np.full(shape, getattr(init, "value", 0.0), dtype)
    if key in ("randomnormal", "normal"):
        return g.normal(getattr(init, "mean", 0.0), getattr(init, "stddev", 0.05), shape).astype(dtype)
    if key in ("randomuniform", "uniform"):
        return g.uniform(getattr(init, "minval", -0.05), getattr(init, "maxval", 0.05), shape).astype(dtype)
    if key == "glorotuniform":
        lim = math.sqrt(6.0 / (fan_in + fan_out))
        return g.uniform(-lim, lim, shape).astype(dtype)
    if key == "glorotnormal":
        return _truncated(g, math.sqrt(2.0 / (fan_in + fan_out)), shape, dtype)
    if key == "henormal":
        return _truncated(g, math.sqrt(2.0 / fan_in), shape, dtype)
    if key == "heuniform":
        lim = math.sqrt(6.0 / fan_in)
        return g.uniform(-lim, lim, shape).astype(dtype)
    raise NotImplementedError("add_weight: initializer %r is not supported by Strata (zeros, ones, random_normal, "
                              "random_uniform, glorot_uniform, glorot_normal, he_normal, he_uniform, or a "
                              "function of (shape, dtype))" % (init,))


def _truncated(g, stddev, shape, dtype):
    s = stddev / 0.87962566103423978  # Keras: the truncated normal's stddev correction
    v = g.normal(0.0, s, shape)
    bad = np.abs(v) > 2 * s
    while bad.any():
        v[bad] = g.normal(0.0, s, int(bad.sum()))
        bad = np.abs(v) > 2 * s
    return v.astype(dtype)


def add_weight(layer, name=None, shape=None, dtype=None, initializer=None, regularizer=None, trainable=True,
               constraint=None, **kwargs):
    """Layer.add_weight: a tf.Variable of shape made by initializer
    (Keras's default: glorot_uniform for floats), kept by the layer."""
    from .._tensor import Variable
    if regularizer is not None or constraint is not None:
        raise NotImplementedError("add_weight: regularizer / constraint are not supported by Strata (add the "
                                  "penalty with self.add_loss in call())")
    shape = tuple(int(d) for d in (shape or ()))
    dt = np.dtype(getattr(dtype, "name", dtype) or np.float32)
    init = initializer if initializer is not None else ("glorot_uniform" if dt.kind == "f" else "zeros")
    v = Variable(_initial(init, shape, dt), trainable=bool(trainable), name=name or "Variable")
    layer.__dict__.setdefault("_own_weights", []).append(v)
    return v


# ---- calling ----
def _accepts(fn, arg):
    try:
        ps = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return arg in ps or any(p.kind == p.VAR_KEYWORD for p in ps.values())


def call_custom(layer, inputs, args, kwargs):
    """A custom layer's call on tensors: build on the first call (with the
    input's shape, batch axis included), then call()."""
    from .._tensor import TensorShape
    layer.__dict__["_added_losses"] = []
    if not layer.__dict__.get("built", False):
        first = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        shape = TensorShape(np.shape(first))
        build = getattr(layer, "build", None)
        if build is not None:
            build([TensorShape(np.shape(i)) for i in inputs] if isinstance(inputs, (list, tuple)) else shape)
        layer.built = True
    training = kwargs.pop("training", None)
    if training is not None and _accepts(layer.call, "training"):
        kwargs["training"] = training
    from .._tensor import Variable
    if isinstance(inputs, Variable):
        inputs = inputs.value()
    elif not isinstance(inputs, (list, tuple, dict)) and not isinstance(inputs, np.ndarray):
        from .. import _ops
        inputs = _ops.convert_to_tensor(inputs)
    return layer.call(inputs, *args, **kwargs)


def sublayers(obj, seen=None):
    """The layers an object holds in its attributes (lists, tuples and dicts
    of layers too), depth first, each once."""
    from .layers import Layer
    seen = set() if seen is None else seen
    out = []
    for v in list(vars(obj).values()):
        items = v.values() if isinstance(v, dict) else (v if isinstance(v, (list, tuple)) else [v])
        for it in items:
            if isinstance(it, Layer) and id(it) not in seen:
                seen.add(id(it))
                out.append(it)
                out.extend(sublayers(it, seen))
    return out


def weights_of(obj):
    """Every tf.Variable of obj and its layers (its own first), each once."""
    out, seen = [], set()
    for l in [obj] + sublayers(obj):
        for v in l.__dict__.get("_own_weights", []):
            if id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


def losses_of(obj):
    out = []
    for l in [obj] + sublayers(obj):
        out.extend(l.__dict__.get("_added_losses", []))
    return out


def is_custom(layer):
    return hasattr(type(layer), "call")


def contains_custom(obj):
    return any(is_custom(l) for l in sublayers(obj))


# ---- Strata's layers on tensors ----
def _act(name, x):
    from .. import _ops
    if name in (None, "linear"):
        return x
    fns = {"relu": _ops.relu, "sigmoid": _ops.UNARY["sigmoid"], "tanh": _ops.UNARY["tanh"],
           "softmax": _ops.softmax}
    if name not in fns:
        raise NotImplementedError("activation %r in a layer called on tensors is not supported by Strata "
                                  "(relu, sigmoid, tanh, softmax, linear)" % name)
    return fns[name](x)


def call_builtin(layer, inputs, kwargs):
    """One of Strata's layers called on tensors (inside a custom layer or an
    eager model): Dense, Flatten, Dropout, Activation / ReLU."""
    from .. import _ops
    kind = type(layer).__name__
    training = bool(kwargs.get("training"))
    if kind == "Dense":
        if not layer.__dict__.get("built", False):
            d = int(np.shape(inputs)[-1])
            layer.kernel = add_weight(layer, "kernel", (d, layer.units), initializer=layer.kernel_initializer)
            layer.bias = add_weight(layer, "bias", (layer.units,), initializer=layer.bias_initializer) \
                if layer.use_bias else None
            layer.built = True
        y = _ops.matmul(inputs, layer.kernel)
        if layer.bias is not None:
            y = y + layer.bias
        return _act(layer.activation, y)
    if kind == "Flatten":
        return _ops.reshape(inputs, (int(np.shape(inputs)[0]), -1))
    if kind == "Dropout":
        if not training or layer.rate == 0:
            return inputs
        keep = (_ops._gen(None).random(np.shape(inputs)) >= layer.rate).astype(np.float32)
        return inputs * (keep / np.float32(1.0 - layer.rate))
    if kind in ("Add", "Subtract", "Multiply", "Concatenate"):
        xs = list(inputs)
        if kind == "Concatenate":
            return _ops.concat(xs, axis=layer.axis)
        out = xs[0]
        for x in xs[1:]:
            out = out - x if kind == "Subtract" else (out * x if kind == "Multiply" else out + x)
        return out
    if kind == "Rescaling":
        return inputs * np.float32(layer.scale) + np.float32(getattr(layer, "offset", 0.0))
    if kind in ("Activation", "ReLU") and (kind == "Activation" or layer._plain()):
        return _act(getattr(layer, "activation", "relu"), inputs)
    raise NotImplementedError("%s called on tensors (inside a custom layer or a model with custom layers, run "
                              "eagerly) is not supported by Strata (Dense, Flatten, Dropout, Activation, ReLU, "
                              "Rescaling, Add, Subtract, Multiply, Concatenate are); "
                              "use it in a model of Strata's layers only" % kind)


class EagerLayer:
    """What every tf.keras.layers.Layer has for eager use: its tf.Variables
    (weights, trainable_weights, ...), losses and add_loss."""
    # ---- custom layers and layers called on tensors (eager: keras/_custom.py) ----
    built = False

    @property
    def weights(self):
        return weights_of(self)

    variables = weights

    @property
    def trainable_weights(self):
        return [v for v in self.weights if v.trainable]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self):
        return [v for v in self.weights if not v.trainable]

    non_trainable_variables = non_trainable_weights

    @property
    def losses(self):
        return losses_of(self)

    def add_loss(self, loss):
        self.__dict__.setdefault("_added_losses", []).append(loss)

