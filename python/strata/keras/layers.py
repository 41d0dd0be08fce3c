"""tf.keras.layers: the layers Strata's engine implements (src/nn/). A layer
object is a description; `Sequential` adds it to the engine's model when the
input shape is known. Arguments Strata does not implement raise
NotImplementedError naming them."""
import numpy as _np

from .._util import unsupported, reject_kwargs
from ._custom import EagerLayer as _EagerLayer

_COMMON = ("name", "dtype", "trainable", "input_shape", "batch_input_shape", "input_dim")
_ACTS = ("linear", "relu", "sigmoid", "tanh", "softmax", "elu", "gelu",
         "relu6", "leaky_relu", "gelu_approximate")  # gelu_approximate: tanh GELU
_INITS = {"glorot_uniform": "glorot_uniform", "GlorotUniform": "glorot_uniform",
          "he_normal": "he_normal", "HeNormal": "he_normal", "zeros": "zeros", "Zeros": "zeros",
          "ones": "ones", "Ones": "ones",
          "random_uniform": "random_uniform", "RandomUniform": "random_uniform",
          "uniform": "random_uniform"}


def _activation(a, where):
    if a is None:
        return "linear"
    if callable(a) and not isinstance(a, str):
        a = getattr(a, "__name__", repr(a))
    if not isinstance(a, str) or a.lower() not in _ACTS:
        raise NotImplementedError("%s: activation %r is not supported by Strata (supported: %s)"
                                  % (where, a, ", ".join(_ACTS)))
    return a.lower()


class _SeededInit(str):
    """An initializer's engine name with the seed it was given (Keras's
    GlorotUniform(seed=S)): the parameter draws from (S, its index), the same
    values in any model (st_layer_set_init_seed)."""
    seed = None


# the parameter index (in the layer's weights) each initializer argument fills
_INIT_PARAM = {"kernel_initializer": 0, "depthwise_initializer": 0, "embeddings_initializer": 0,
               "initializer": 0, "bias_initializer": 1}


def _apply_init_seeds(layer, target):
    """Give the engine the seeds of layer's seeded initializers; target: the
    layer's handle (functional) or the model it was just added to."""
    from .. import _strata
    for arg, p in _INIT_PARAM.items():
        seed = getattr(getattr(layer, arg, None), "seed", None)
        if seed is not None and isinstance(getattr(layer, arg), _SeededInit):
            _strata.layer_init_seed(target, p, seed)


def _init(i, where, arg):
    seed = None
    if not isinstance(i, str):
        seed = getattr(i, "seed", None)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, _np.integer))
                                 or not 0 <= seed < 2 ** 63):
            raise ValueError("%s: %s seed=%r must be an integer in [0, 2**63)" % (where, arg, seed))
        if seed is not None and arg not in _INIT_PARAM:
            raise NotImplementedError("%s: %s with seed=%r is not supported by Strata (the model's "
                                      "seed, tf.random.set_seed, seeds every initializer)" % (where, arg, seed))
        if type(i).__name__ == "RandomUniform" and (getattr(i, "minval", -0.05), getattr(i, "maxval", 0.05)) != (-0.05, 0.05):
            raise NotImplementedError("%s: %s RandomUniform(minval=%r, maxval=%r) is not supported by Strata "
                                      "(only -0.05, 0.05)" % (where, arg, i.minval, i.maxval))
        i = type(i).__name__
    if i not in _INITS:
        raise NotImplementedError("%s: %s=%r is not supported by Strata (supported: %s)"
                                  % (where, arg, i, ", ".join(sorted(set(_INITS.values())))))
    if seed is None:
        return _INITS[i]
    out = _SeededInit(_INITS[i])
    out.seed = int(seed)
    return out


def _pair(v, where, arg):
    if isinstance(v, int):
        return (v, v)
    try:
        a, b = v
        return (int(a), int(b))
    except (TypeError, ValueError):
        raise ValueError("%s: %s=%r (expected an int or a pair of ints)" % (where, arg, v)) from None


def _regularizers(where, kwargs):
    for k in ("kernel_regularizer", "bias_regularizer", "activity_regularizer",
              "kernel_constraint", "bias_constraint", "beta_regularizer", "gamma_regularizer",
              "beta_constraint", "gamma_constraint", "lora_rank"):
        if kwargs.pop(k, None) is not None:
            raise NotImplementedError("%s: argument %s is not supported by Strata (no weight penalties in "
                                      "its engine; AdamW's weight_decay decays the weights instead)" % (where, k))


def _float32_dtype(dt):
    """Whether a layer's dtype= is float32 (tf.float32, 'float32', a NumPy
    dtype) or a mixed precision policy (computed in float32: mixed_precision.py)."""
    from . import mixed_precision
    if mixed_precision.is_mixed(dt):
        return True
    try:
        return _np.dtype(getattr(dt, "name", dt)) == _np.float32
    except TypeError:
        return False


_CUSTOM = ("custom layer %s: a tf.keras.layers.Layer subclass with its own build / add_weight / call runs "
           "eagerly in Strata (keras/_custom.py), not in the engine's graph")


class Layer(_EagerLayer):
    """Base of the layers: name, input_shape= (the Keras shortcut for a first
    layer), and after the model is built output_shape and count_params()."""

    def __init__(self, **kwargs):
        where = type(self).__name__
        _regularizers(where, kwargs)
        reject_kwargs(where, kwargs, _COMMON)
        self.name = kwargs.get("name")
        self._given_name = self.name
        if self.name is None and hasattr(type(self), "call"):  # a custom layer: Keras's default name
            from ._subclass import default_name
            self.name = default_name(type(self))
        shape = kwargs.get("input_shape")
        if shape is None and kwargs.get("batch_input_shape") is not None:
            shape = tuple(kwargs["batch_input_shape"])[1:]
        if shape is None and kwargs.get("input_dim") is not None:
            shape = (int(kwargs["input_dim"]),)
        self._input_shape = tuple(shape) if shape is not None else None
        if kwargs.get("trainable", True) is not True:
            raise NotImplementedError("%s: trainable=False is not supported by Strata" % where)
        dt = kwargs.get("dtype")
        if dt is not None and not _float32_dtype(dt):
            raise NotImplementedError("%s: dtype=%r is not supported by Strata (float32 only)" % (where, dt))
        self.output_shape = None
        self._params = 0
        self._model = None

    def count_params(self):
        return self._params

    def _add(self, model_cap):  # each of Strata's layers defines it; a user's Layer subclass does not
        raise NotImplementedError(_CUSTOM % type(self).__name__)

    def _weight_shapes(self, in_shape):
        """[(shape, trainable)] in Keras's get_weights order."""
        return []

    def get_weights(self):
        if self._model is None:
            return [v.numpy() for v in self.weights]
        return self._model._layer_weights(self)

    def set_weights(self, weights):
        if self._model is None:
            ws = self.weights
            if not ws:
                raise ValueError("%s: the layer is not built yet" % self.name)
            if len(weights) != len(ws):
                raise ValueError("set_weights: %d arrays given, layer %s has %d" % (len(weights), self.name, len(ws)))
            for v, w in zip(ws, weights):
                v.assign(w)
            return
        self._model._set_layer_weights(self, weights)

    def __repr__(self):
        return "<%s name=%s>" % (type(self).__name__, self.name)

    # ---- the functional API: calling the layer on KerasTensors ----
    def add_weight(self, *args, **kwargs):
        """A tf.Variable of the layer (Keras 3's positional order: shape,
        initializer, dtype, trainable; Keras 2's: name first)."""
        from . import _custom
        keys = ("name", "shape", "dtype", "initializer") if args and isinstance(args[0], str) else \
            ("shape", "initializer", "dtype", "trainable")
        kwargs.update(zip(keys, args))
        return _custom.add_weight(self, **kwargs)

    def __call__(self, inputs, *args, **kwargs):
        """Record a call on KerasTensor(s): the engine builds the layer on
        its first call (st_layer_call) and shares its weights on later ones;
        returns the output KerasTensor. On tensors (a custom layer, or one
        of Strata's inside one): runs eagerly (keras/_custom.py)."""
        where = self._where()
        symbolic = any(isinstance(t, KerasTensor) for t in (inputs if isinstance(inputs, (list, tuple)) else [inputs]))
        from . import _custom
        if hasattr(type(self), "call"):  # Strata's layers have none: a user's Layer subclass
            if symbolic:
                from . import _eager_graph  # recorded: the model runs eagerly
                return _eager_graph.symbolic_call(self, inputs, args, kwargs)
            return _custom.call_custom(self, inputs, args, kwargs)
        if not symbolic:
            return _custom.call_builtin(self, inputs, kwargs)
        from . import _eager_graph
        if _eager_graph.any_eager(inputs):
            return _eager_graph.symbolic_call(self, inputs, args, kwargs)
        if args:
            raise NotImplementedError("%s: positional call arguments %r are not supported by Strata" % (where, args))
        for k, v in kwargs.items():
            if k not in ("training", "mask") or v not in (None, False, True):
                raise NotImplementedError("%s: call argument %s=%r is not supported by Strata" % (where, k, v))
        return self._call_engine(_tensors(where, inputs, False), {})

    def _make(self, h):
        """Make the engine layer into the empty handle h (the add_* calls)."""
        self._add(h)

    def _where(self):
        return "%s%s" % (type(self).__name__, " '%s'" % self._given_name if self._given_name else "")

    def _call_engine(self, tensors, opts):
        from .. import _strata
        where = self._where()
        if self._model is not None and getattr(self, "_handle", None) is None:
            raise ValueError("%s: the layer belongs to a Sequential model; a layer of a functional model "
                             "is called on tensors" % where)
        if getattr(self, "_handle", None) is None:
            shapes = [tuple(t.shape[1:]) for t in tensors]
            if isinstance(self, Reshape):
                self._resolve(shapes[0])
            self._call_opts = opts
            h = _strata.layer_new()
            self._make(h)
            _apply_init_seeds(self, h)
            self._handle, self._fn_in_shapes = h, shapes
        elif opts != getattr(self, "_call_opts", {}):
            raise NotImplementedError("%s: calling a layer again with other options (%r, first %r) is "
                                      "not supported by Strata" % (where, opts, self._call_opts))
        node, shape = _strata.layer_call(self._handle, [t._node for t in tensors], where)
        return KerasTensor(shape, None, node, self, tensors)


class InputLayer(Layer):
    """The input of a Sequential model: shape per example (no batch axis)."""

    def __init__(self, input_shape=None, batch_size=None, dtype=None, name=None, shape=None, **kwargs):
        reject_kwargs("InputLayer", kwargs, ("batch_input_shape", "batch_shape", "sparse", "ragged"))
        for k in ("sparse", "ragged"):
            if kwargs.get(k):
                raise NotImplementedError("InputLayer: %s=True is not supported by Strata" % k)
        shape = shape if shape is not None else input_shape
        for k in ("batch_input_shape", "batch_shape"):
            if shape is None and kwargs.get(k) is not None:
                shape = tuple(kwargs[k])[1:]
        super().__init__(name=name, input_shape=shape, dtype=dtype)
        if self._input_shape is None:
            raise ValueError("InputLayer: a shape is required")

    def __call__(self, *args, **kwargs):
        raise TypeError("InputLayer is not callable: use tf.keras.Input(shape) for a model input")


class KerasTensor:
    """A symbolic tensor of the functional API: what tf.keras.Input returns
    (a model input) or what calling a layer on KerasTensors returns. .shape
    has the batch dimension None; the engine's node (st_input /
    st_layer_call) is made at once, so a wrong shape fails at the call."""

    def __init__(self, shape, name=None, node=None, layer=None, inbound=()):
        self.shape = (None,) + tuple(int(d) for d in shape)
        self.name = name
        self.dtype = "float32"
        self._inbound = tuple(inbound)
        if layer is None:  # a model input: its InputLayer and st_input node
            from .. import _strata
            self._layer = InputLayer(shape=tuple(shape), name=name)
            self._node = _strata.input(tuple(int(d) for d in shape), name)
            self._is_input = True
        else:
            self._layer, self._node, self._is_input = layer, node, False

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return "<KerasTensor shape=%s, dtype=float32, name=%s>" % (self.shape, self.name)


def _tensors(where, inputs, several):
    """The KerasTensors of a layer call: one (several=False) or a list of 2
    or more (the merge layers); calling a layer on arrays (eagerly) is
    refused."""
    items = list(inputs) if several and isinstance(inputs, (list, tuple)) else [inputs]
    for t in items:
        if not isinstance(t, KerasTensor):
            raise NotImplementedError("%s: calling a layer on %s is not supported by Strata: call it on "
                                      "tf.keras.Input tensors (the functional API) and train the Model"
                                      % (where, type(t).__name__))
    if several and (not isinstance(inputs, (list, tuple)) or len(items) < 2):
        raise ValueError("%s: expected a list of at least 2 input tensors, got %r" % (where, inputs))
    return items


def Input(shape=None, batch_size=None, name=None, dtype=None, sparse=None, tensor=None,
          ragged=None, batch_shape=None, **kwargs):
    """tf.keras.Input(shape=..., name=None): a model input (a KerasTensor)
    to call layers on (the functional API), or the first entry of a
    Sequential."""
    if tensor is not None or sparse or ragged:
        raise NotImplementedError("Input: tensor=, sparse= and ragged= are not supported by Strata")
    if shape is None and batch_shape is not None:
        shape = tuple(batch_shape)[1:]
    if shape is None:
        raise ValueError("Input: shape is required")
    if any(d is None for d in shape):
        raise NotImplementedError("Input: shape %r with a None dimension is not supported by Strata "
                                  "(every per-example dimension must be known)" % (tuple(shape),))
    return KerasTensor(shape, name)


class Dense(Layer):
    """Dense(units, activation=None, use_bias=True, kernel_initializer=
    'glorot_uniform', bias_initializer='zeros')."""

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(units, int) or isinstance(units, bool) or not 0 < units < 2 ** 31:
            raise ValueError("Dense: units=%r (expected a positive integer)" % (units,))
        self.units = units
        self.activation = _activation(activation, "Dense")
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _init(kernel_initializer, "Dense", "kernel_initializer")
        self.bias_initializer = _init(bias_initializer, "Dense", "bias_initializer")

    def _add(self, m):
        from .. import _strata
        _strata.add_dense(m, self.units, self.activation, self.use_bias, self.kernel_initializer,
                          self.bias_initializer, self._given_name)

    def _weight_shapes(self, s):
        w = [((s[-1], self.units), True)]
        return w + ([((self.units,), True)] if self.use_bias else [])


class Conv2D(Layer):
    """Conv2D(filters, kernel_size, strides=(1, 1), padding='valid',
    activation=None, use_bias=True, ...) on channels_last images."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        unsupported("Conv2D", data_format=(data_format, None, "channels_last"), groups=(groups, 1))
        if _pair(dilation_rate, "Conv2D", "dilation_rate") != (1, 1):
            raise NotImplementedError("Conv2D: argument dilation_rate=%r is not supported by Strata" % (dilation_rate,))
        if not isinstance(filters, int) or isinstance(filters, bool) or not 0 < filters < 2 ** 31:
            raise ValueError("Conv2D: filters=%r (expected a positive integer)" % (filters,))
        self.filters = filters
        self.kernel_size = _pair(kernel_size, "Conv2D", "kernel_size")
        self.strides = _pair(strides, "Conv2D", "strides")
        if str(padding).lower() not in ("valid", "same"):
            raise ValueError("Conv2D: padding=%r (expected 'valid' or 'same')" % (padding,))
        self.padding = str(padding).lower()
        self.activation = _activation(activation, "Conv2D")
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _init(kernel_initializer, "Conv2D", "kernel_initializer")
        self.bias_initializer = _init(bias_initializer, "Conv2D", "bias_initializer")

    def _add(self, m):
        from .. import _strata
        _strata.add_conv2d(m, self.filters, self.kernel_size[0], self.kernel_size[1], self.strides[0],
                           self.strides[1], self.padding == "same", self.activation, self.use_bias,
                           self.kernel_initializer, self.bias_initializer, self._given_name)

    def _weight_shapes(self, s):
        w = [((self.kernel_size[0], self.kernel_size[1], s[-1], self.filters), True)]
        return w + ([((self.filters,), True)] if self.use_bias else [])


class _Pooling2D(Layer):
    _max = True

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, **kwargs):
        where = type(self).__name__
        super().__init__(**kwargs)
        unsupported(where, data_format=(data_format, None, "channels_last"))
        self.pool_size = _pair(pool_size, where, "pool_size")
        self.strides = _pair(strides, where, "strides") if strides is not None else (0, 0)
        if str(padding).lower() not in ("valid", "same"):
            raise ValueError("%s: padding=%r (expected 'valid' or 'same')" % (where, padding))
        self.padding = str(padding).lower()

    def _add(self, m):
        from .. import _strata
        _strata.add_pool2d(m, self._max, self.pool_size[0], self.pool_size[1], self.strides[0],
                           self.strides[1], self.padding == "same", self._given_name)


class MaxPooling2D(_Pooling2D):
    """MaxPooling2D(pool_size=(2, 2), strides=None, padding='valid')."""
    _max = True


class AveragePooling2D(_Pooling2D):
    """AveragePooling2D(pool_size=(2, 2), strides=None, padding='valid')."""
    _max = False


MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D


class Flatten(Layer):
    """Flatten() (channels_last)."""

    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        unsupported("Flatten", data_format=(data_format, None, "channels_last"))

    def _add(self, m):
        from .. import _strata
        _strata.add_simple(m, "Flatten")


class Dropout(Layer):
    """Dropout(rate): active in fit only, seeded by the model's seed."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        if noise_shape is not None:
            raise NotImplementedError("Dropout: argument noise_shape is not supported by Strata")
        try:
            rate = float(rate)
        except (TypeError, ValueError):
            raise ValueError("Dropout: rate=%r (expected a float in [0, 1))" % (rate,)) from None
        if not 0 <= rate < 1:
            raise ValueError("Dropout: rate=%r (expected a float in [0, 1))" % (rate,))
        self.rate = rate

    def _add(self, m):
        from .. import _strata
        _strata.add_simple(m, "Dropout", self.rate)


class Activation(Layer):
    """Activation('relu' | 'softmax' | ...)."""

    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = _activation(activation, "Activation")

    def _add(self, m):
        from .. import _strata
        _strata.add_simple(m, "Activation", self.activation)


def _nonneg(where, arg, v, none_ok=False):
    """v as a float >= 0 (None kept when none_ok), else ValueError as Keras."""
    if v is None and none_ok:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = float("nan")
    if not f >= 0 or f == float("inf"):
        raise ValueError("%s: %s=%r (expected a number >= 0%s)"
                         % (where, arg, v, " or None" if none_ok else ""))
    return f


class ReLU(Activation):
    """ReLU(max_value=None, negative_slope=0.0, threshold=0.0) as Keras's:
    x above the threshold (clipped at max_value), negative_slope * (x -
    threshold) below it. With its defaults the engine's Activation('relu')."""

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, **kwargs):
        self.max_value = _nonneg("ReLU", "max_value", max_value, none_ok=True)
        self.negative_slope = _nonneg("ReLU", "negative_slope", negative_slope)
        self.threshold = _nonneg("ReLU", "threshold", threshold)
        super().__init__("relu", **kwargs)

    def _plain(self):
        return self.max_value is None and self.negative_slope == 0.0 and self.threshold == 0.0

    def _add(self, m):
        if self._plain():
            return super()._add(m)
        from .. import _strata
        mv = float("inf") if self.max_value is None else self.max_value
        _strata.add_layer_a(m, "ReLU", (mv, self.negative_slope, self.threshold), self._given_name)


class Softmax(Activation):
    """Softmax(axis=-1)."""

    def __init__(self, axis=-1, **kwargs):
        unsupported("Softmax", axis=(axis, -1))
        super().__init__("softmax", **kwargs)


# ---- issue 28, layers-a: LeakyReLU, global pooling, ZeroPadding2D ----
class LeakyReLU(Layer):
    """LeakyReLU(negative_slope=0.3) (Keras 2's alpha= also accepted)."""

    def __init__(self, negative_slope=0.3, **kwargs):
        if "alpha" in kwargs:
            negative_slope = kwargs.pop("alpha")
        super().__init__(**kwargs)
        self.negative_slope = _nonneg("LeakyReLU", "negative_slope", negative_slope)

    def _add(self, m):
        from .. import _strata
        _strata.add_layer_a(m, "LeakyReLU", self.negative_slope, self._given_name)


class _GlobalPooling(Layer):
    def __init__(self, data_format=None, keepdims=False, **kwargs):
        where = type(self).__name__
        super().__init__(**kwargs)
        unsupported(where, data_format=(data_format, None, "channels_last"), keepdims=(keepdims, False))

    def _add(self, m):
        from .. import _strata
        _strata.add_layer_a(m, type(self).__name__, None, self._given_name)


class GlobalAveragePooling2D(_GlobalPooling):
    """GlobalAveragePooling2D(): (h, w, c) -> (c,) (keepdims=False)."""


class GlobalMaxPooling2D(_GlobalPooling):
    """GlobalMaxPooling2D(): (h, w, c) -> (c,) (keepdims=False)."""


class GlobalAveragePooling1D(_GlobalPooling):
    """GlobalAveragePooling1D(): (steps, c) -> (c,) (keepdims=False)."""


class GlobalMaxPooling1D(_GlobalPooling):
    """GlobalMaxPooling1D(): (steps, c) -> (c,) (keepdims=False)."""


GlobalAvgPool2D = GlobalAveragePooling2D
GlobalMaxPool2D = GlobalMaxPooling2D
GlobalAvgPool1D = GlobalAveragePooling1D
GlobalMaxPool1D = GlobalMaxPooling1D


def _padding2d(p):
    """((top, bottom), (left, right)) of n, (h, w) or ((t, b), (l, r))."""
    try:
        if isinstance(p, int) and not isinstance(p, bool):
            out = ((p, p), (p, p))
        else:
            a, b = p
            out = tuple((int(v), int(v)) if isinstance(v, int) else tuple(int(e) for e in v)
                        for v in (a, b))
        ok = all(len(v) == 2 and v[0] >= 0 and v[1] >= 0 for v in out)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError("ZeroPadding2D: padding=%r (expected n, (h, w) or ((top, bottom), "
                         "(left, right)) of integers >= 0)" % (p,))
    return out


class ZeroPadding2D(Layer):
    """ZeroPadding2D(padding=(1, 1)) on channels_last images."""

    def __init__(self, padding=(1, 1), data_format=None, **kwargs):
        super().__init__(**kwargs)
        unsupported("ZeroPadding2D", data_format=(data_format, None, "channels_last"))
        self.padding = _padding2d(padding)

    def _add(self, m):
        from .. import _strata
        (t, b), (l, r) = self.padding
        _strata.add_layer_a(m, "ZeroPadding2D", (t, b, l, r), self._given_name)
# ---- end of layers-a ----


class Reshape(Layer):
    """Reshape(target_shape) (no -1 entries)."""

    def __init__(self, target_shape, **kwargs):
        super().__init__(**kwargs)
        self.target_shape = tuple(int(d) for d in target_shape)
        if any(d == 0 or d < -1 for d in self.target_shape) or self.target_shape.count(-1) > 1:
            raise ValueError("Reshape: target_shape %r (positive sizes and at most one -1)" % (self.target_shape,))

    def _resolve(self, in_shape):
        """target_shape with its -1 worked out from the input's size."""
        size = 1
        for d in in_shape:
            size *= d
        known = 1
        for d in self.target_shape:
            known *= d if d > 0 else 1
        if -1 in self.target_shape:
            if size % known:
                raise ValueError("Reshape: cannot reshape %s into %s" % (tuple(in_shape), self.target_shape))
            self.target_shape = tuple(size // known if d == -1 else d for d in self.target_shape)

    def _add(self, m):
        from .. import _strata
        _strata.add_simple(m, "Reshape", self.target_shape)


class BatchNormalization(Layer):
    """BatchNormalization(axis=-1, momentum=0.99, epsilon=0.001, center=True,
    scale=True, synchronized=False)."""

    def __init__(self, axis=-1, momentum=0.99, epsilon=0.001, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones", moving_mean_initializer="zeros",
                 moving_variance_initializer="ones", synchronized=False, **kwargs):
        super().__init__(**kwargs)
        unsupported("BatchNormalization", axis=(axis, -1), synchronized=(synchronized, False))
        for arg, v, want in (("beta_initializer", beta_initializer, "zeros"),
                             ("gamma_initializer", gamma_initializer, "ones"),
                             ("moving_mean_initializer", moving_mean_initializer, "zeros"),
                             ("moving_variance_initializer", moving_variance_initializer, "ones")):
            if _init(v, "BatchNormalization", arg) != want:
                raise NotImplementedError("BatchNormalization: %s=%r is not supported by Strata" % (arg, v))
        self.momentum, self.epsilon = float(momentum), float(epsilon)
        self.center, self.scale = bool(center), bool(scale)

    def _add(self, m):
        from .. import _strata
        _strata.add_simple(m, "BatchNormalization", (self.momentum, self.epsilon, self.center, self.scale,
                                                     self._given_name))

    def _weight_shapes(self, s):
        c = (s[-1],)
        w = [(c, True)] if self.scale else []
        w += [(c, True)] if self.center else []
        return w + [(c, False), (c, False)]


class Rescaling(Layer):
    """Rescaling(scale, offset=0.0) as the first layer only: folded into the
    input pipeline (Strata multiplies the features as it reads them)."""

    def __init__(self, scale, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        if float(offset) != 0.0:
            raise NotImplementedError("Rescaling: offset=%r is not supported by Strata" % (offset,))
        self.scale = float(scale)

    def _add(self, m):
        raise NotImplementedError("Rescaling: only as the model's first layer is it supported by Strata")


# ---- Conv1D, DepthwiseConv2D, Embedding, LayerNormalization (issue 28) ----

def _positive(v, where, arg):
    if not isinstance(v, int) or isinstance(v, bool) or not 0 < v < 2 ** 31:
        raise ValueError("%s: %s=%r (expected a positive integer)" % (where, arg, v))
    return v


def _one(v, where, arg):
    """An int or a one-element tuple/list (Conv1D kernel_size, strides)."""
    if isinstance(v, (tuple, list)) and len(v) == 1:
        v = v[0]
    return _positive(v, where, arg)


class Conv1D(Layer):
    """Conv1D(filters, kernel_size, strides=1, padding='valid' | 'same' |
    'causal', activation=None, use_bias=True, ...) on channels_last
    sequences (steps, channels)."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        unsupported("Conv1D", data_format=(data_format, None, "channels_last"), groups=(groups, 1))
        if _one(dilation_rate, "Conv1D", "dilation_rate") != 1:
            raise NotImplementedError("Conv1D: argument dilation_rate=%r is not supported by Strata" % (dilation_rate,))
        self.filters = _positive(filters, "Conv1D", "filters")
        self.kernel_size = _one(kernel_size, "Conv1D", "kernel_size")
        self.strides = _one(strides, "Conv1D", "strides")
        if str(padding).lower() not in ("valid", "same", "causal"):
            raise ValueError("Conv1D: padding=%r (expected 'valid', 'same' or 'causal')" % (padding,))
        self.padding = str(padding).lower()
        self.activation = _activation(activation, "Conv1D")
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _init(kernel_initializer, "Conv1D", "kernel_initializer")
        self.bias_initializer = _init(bias_initializer, "Conv1D", "bias_initializer")

    def _add(self, m):
        from .. import _strata
        _strata.add_conv1d(m, self.filters, self.kernel_size, self.strides, self.padding, self.activation,
                           self.use_bias, self.kernel_initializer, self.bias_initializer, self._given_name)

    def _weight_shapes(self, s):
        w = [((self.kernel_size, s[-1], self.filters), True)]
        return w + ([((self.filters,), True)] if self.use_bias else [])


class DepthwiseConv2D(Layer):
    """DepthwiseConv2D(kernel_size, strides=(1, 1), padding='valid',
    depth_multiplier=1, activation=None, use_bias=True, ...) on channels_last
    images; depthwise_kernel (kh, kw, channels, depth_multiplier)."""

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None, depthwise_constraint=None, **kwargs):
        super().__init__(**kwargs)
        if depthwise_regularizer is not None or depthwise_constraint is not None:
            raise NotImplementedError("DepthwiseConv2D: depthwise_regularizer/depthwise_constraint are not "
                                      "supported by Strata")
        unsupported("DepthwiseConv2D", data_format=(data_format, None, "channels_last"))
        if _pair(dilation_rate, "DepthwiseConv2D", "dilation_rate") != (1, 1):
            raise NotImplementedError("DepthwiseConv2D: argument dilation_rate=%r is not supported by Strata"
                                      % (dilation_rate,))
        self.kernel_size = _pair(kernel_size, "DepthwiseConv2D", "kernel_size")
        self.strides = _pair(strides, "DepthwiseConv2D", "strides")
        self.depth_multiplier = _positive(depth_multiplier, "DepthwiseConv2D", "depth_multiplier")
        if str(padding).lower() not in ("valid", "same"):
            raise ValueError("DepthwiseConv2D: padding=%r (expected 'valid' or 'same')" % (padding,))
        self.padding = str(padding).lower()
        self.activation = _activation(activation, "DepthwiseConv2D")
        self.use_bias = bool(use_bias)
        self.depthwise_initializer = _init(depthwise_initializer, "DepthwiseConv2D", "depthwise_initializer")
        self.bias_initializer = _init(bias_initializer, "DepthwiseConv2D", "bias_initializer")

    def _add(self, m):
        from .. import _strata
        _strata.add_depthwise_conv2d(m, self.kernel_size[0], self.kernel_size[1], self.strides[0],
                                     self.strides[1], self.depth_multiplier, self.padding == "same",
                                     self.activation, self.use_bias, self.depthwise_initializer,
                                     self.bias_initializer, self._given_name)

    def _weight_shapes(self, s):
        w = [((self.kernel_size[0], self.kernel_size[1], s[-1], self.depth_multiplier), True)]
        return w + ([((s[-1] * self.depth_multiplier,), True)] if self.use_bias else [])


class Embedding(Layer):
    """Embedding(input_dim, output_dim, embeddings_initializer='uniform'):
    integer ids (given as numbers; an id outside [0, input_dim) is an error)
    to rows of an (input_dim, output_dim) table. mask_zero is not supported;
    input_length (Keras 2) sets the input shape."""

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", embeddings_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, input_length=None, **kwargs):
        if input_length is not None and kwargs.get("input_shape") is None:
            kwargs["input_shape"] = (int(input_length),)
        super().__init__(**kwargs)
        if embeddings_regularizer is not None or embeddings_constraint is not None:
            raise NotImplementedError("Embedding: embeddings_regularizer/embeddings_constraint are not "
                                      "supported by Strata")
        unsupported("Embedding", mask_zero=(bool(mask_zero), False))
        self.input_dim = _positive(input_dim, "Embedding", "input_dim")
        self.output_dim = _positive(output_dim, "Embedding", "output_dim")
        self.embeddings_initializer = _init(embeddings_initializer, "Embedding", "embeddings_initializer")

    def _add(self, m):
        from .. import _strata
        _strata.add_embedding(m, self.input_dim, self.output_dim, self.embeddings_initializer,
                              self._given_name)

    def _weight_shapes(self, s):
        return [((self.input_dim, self.output_dim), True)]


class LayerNormalization(Layer):
    """LayerNormalization(axis=-1, epsilon=0.001, center=True, scale=True)
    over the last axis; gamma then beta, each (last dim,)."""

    def __init__(self, axis=-1, epsilon=0.001, center=True, scale=True, rms_scaling=False,
                 beta_initializer="zeros", gamma_initializer="ones", **kwargs):
        super().__init__(**kwargs)
        if isinstance(axis, (list, tuple)) and len(axis) == 1:
            axis = axis[0]
        unsupported("LayerNormalization", axis=(axis, -1), rms_scaling=(bool(rms_scaling), False))
        for arg, v, want in (("beta_initializer", beta_initializer, "zeros"),
                             ("gamma_initializer", gamma_initializer, "ones")):
            if _init(v, "LayerNormalization", arg) != want:
                raise NotImplementedError("LayerNormalization: %s=%r is not supported by Strata" % (arg, v))
        self.epsilon = float(epsilon)
        if not self.epsilon > 0:
            raise ValueError("LayerNormalization: epsilon=%r (expected a positive number)" % (epsilon,))
        self.center, self.scale = bool(center), bool(scale)

    def _add(self, m):
        from .. import _strata
        _strata.add_layernorm(m, self.epsilon, self.center, self.scale, self._given_name)

    def _weight_shapes(self, s):
        c = (s[-1],)
        return ([(c, True)] if self.scale else []) + ([(c, True)] if self.center else [])

# ---- end of the issue 28 (helper B) block ----


# The merge layers and attention (several inputs; called on tensors of a
# functional model): _merge.py.
from ._merge import Add, Concatenate, MultiHeadAttention, Multiply, Subtract, _Merge  # noqa: E402,F401
from ._gpt import PositionEmbedding, ReversibleEmbedding  # noqa: E402,F401


def add(inputs, **kwargs):
    """layers.add([a, b]): Add()([a, b])."""
    return Add(**kwargs)(inputs)


def subtract(inputs, **kwargs):
    return Subtract(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    return Multiply(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    """layers.concatenate([a, b], axis=-1): Concatenate(axis)([a, b])."""
    return Concatenate(axis=axis, **kwargs)(inputs)


_NOT_YET = ("Conv3D", "LSTM", "GRU", "SimpleRNN", "Lambda",
            "SeparableConv2D", "Conv2DTranspose", "UpSampling2D",
            "PReLU", "GaussianNoise", "SpatialDropout2D", "RandomFlip", "RandomRotation",
            "Normalization", "TextVectorization", "Bidirectional", "TimeDistributed")


def __getattr__(name):
    from .._util import missing
    raise missing("tf.keras.layers", name)  # (_NOT_YET: the common ones users ask for)
