"""Keras model JSON for Sequential models: to_json (Keras 2 layout) and
model_from_json (Keras 2 and 3 layouts, as `strata train --model FILE.json`
reads them). Keys Strata does not implement must hold their Keras default
(None, False, 0, ...) or NotImplementedError names them."""
import inspect
import json

from . import layers as _layers

_INIT_CLASS = {"glorot_uniform": "GlorotUniform", "he_normal": "HeNormal", "zeros": "Zeros", "ones": "Ones"}
_CLASSES = {c.__name__: c for c in (_layers.Dense, _layers.Conv2D, _layers.MaxPooling2D,
                                     _layers.AveragePooling2D, _layers.Flatten, _layers.Dropout,
                                     _layers.Activation, _layers.ReLU, _layers.Softmax, _layers.Reshape,
                                     _layers.BatchNormalization, _layers.Rescaling)}
_CLASSES.update(MaxPool2D=_layers.MaxPooling2D, AvgPool2D=_layers.AveragePooling2D)
_IGNORED = {"trainable", "dtype", "name", "batch_input_shape", "batch_shape", "input_shape", "input_dim"}


def _init(name):
    return {"class_name": _INIT_CLASS[name], "config": {"seed": None} if name in ("glorot_uniform", "he_normal") else {}}


def layer_config(l):
    """(class_name, config) of a layer in Keras 2's layout."""
    c = {"name": l.name, "trainable": True, "dtype": "float32"}
    n = type(l).__name__
    if isinstance(l, _layers.Dense):
        c.update(units=l.units, activation=l.activation, use_bias=l.use_bias,
                 kernel_initializer=_init(l.kernel_initializer), bias_initializer=_init(l.bias_initializer),
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None)
    elif isinstance(l, _layers.Conv2D):
        c.update(filters=l.filters, kernel_size=list(l.kernel_size), strides=list(l.strides), padding=l.padding,
                 data_format="channels_last", dilation_rate=[1, 1], groups=1, activation=l.activation,
                 use_bias=l.use_bias, kernel_initializer=_init(l.kernel_initializer),
                 bias_initializer=_init(l.bias_initializer), kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None)
    elif isinstance(l, _layers._Pooling2D):
        c.update(pool_size=list(l.pool_size), padding=l.padding,
                 strides=list(l.strides) if l.strides != (0, 0) else list(l.pool_size), data_format="channels_last")
    elif isinstance(l, _layers.Flatten):
        c.update(data_format="channels_last")
    elif isinstance(l, _layers.Dropout):
        c.update(rate=l.rate, noise_shape=None, seed=None)
    elif isinstance(l, _layers.ReLU):
        c.update(max_value=None, negative_slope=0.0, threshold=0.0)
    elif isinstance(l, _layers.Softmax):
        c.update(axis=-1)
    elif isinstance(l, _layers.Activation):
        c.update(activation=l.activation)
    elif isinstance(l, _layers.Reshape):
        c.update(target_shape=list(l.target_shape))
    elif isinstance(l, _layers.BatchNormalization):
        c.update(axis=-1, momentum=l.momentum, epsilon=l.epsilon, center=l.center, scale=l.scale,
                 beta_initializer=_init("zeros"), gamma_initializer=_init("ones"),
                 moving_mean_initializer=_init("zeros"), moving_variance_initializer=_init("ones"),
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None)
    elif isinstance(l, _layers.Rescaling):
        c.update(scale=l.scale, offset=0.0)
    else:
        raise NotImplementedError("to_json: layer %s" % n)
    return n, c


def to_json(model, **kwargs):
    shape = model._input_shape
    if shape is None:
        raise ValueError("to_json: the model's input shape is unknown (build it first)")
    layers = [{"class_name": "InputLayer", "config": {"batch_input_shape": [None] + list(shape),
                                                       "dtype": "float32", "sparse": False,
                                                       "ragged": False, "name": "input_1"}}]
    for l in model._layers:
        n, c = layer_config(l)
        layers.append({"class_name": n, "config": c})
    doc = {"class_name": "Sequential", "config": {"name": model.name, "layers": layers},
           "keras_version": "2.13.1", "backend": "tensorflow"}
    return json.dumps(doc, **kwargs)


def _value(v):
    """Initializer / dtype dicts to the names the layer classes take."""
    if isinstance(v, dict) and "class_name" in v:
        cfg = v.get("config") or {}
        if cfg.get("seed") is not None:
            raise NotImplementedError("initializer %s with seed=%r is not supported by Strata"
                                      % (v["class_name"], cfg["seed"]))
        return v["class_name"]
    if isinstance(v, list):
        return tuple(v)
    return v


def _layer_from(entry, index):
    cls_name = entry.get("class_name")
    cfg = dict(entry.get("config") or {})
    if cls_name not in _CLASSES:
        raise NotImplementedError("model_from_json: layer %d (%s) is not supported by Strata" % (index, cls_name))
    cls = _CLASSES[cls_name]
    params = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
    kwargs = {}
    for k, v in cfg.items():
        if k in params:
            kwargs[k] = _value(v)
        elif k in ("kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
                   "bias_constraint", "beta_regularizer", "gamma_regularizer", "beta_constraint",
                   "gamma_constraint"):
            if v is not None:
                raise NotImplementedError("model_from_json: layer %d (%s): %s is not supported by Strata"
                                          % (index, cls_name, k))
        elif k == "name":
            kwargs["name"] = v
        elif k in ("batch_input_shape", "batch_shape") and v is not None:
            kwargs["input_shape"] = tuple(v)[1:]
        elif k in _IGNORED or v in (None, False, 0, [], {}, "channels_last"):
            continue
        else:
            raise NotImplementedError("model_from_json: layer %d (%s): option %s=%r is not supported by Strata"
                                      % (index, cls_name, k, v))
    if kwargs.get("name") and cls in (_layers.Flatten, _layers.Dropout, _layers.Activation, _layers.ReLU,
                                      _layers.Softmax, _layers.Reshape):
        kwargs.pop("name")  # the engine names these layers itself
    return cls(**kwargs)


def _no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError("duplicate key %r" % k)
        seen[k] = v
    return seen


def model_from_json(json_string, custom_objects=None):
    """A Sequential model from Keras's model.to_json() text."""
    from .models import Sequential
    if custom_objects:
        raise NotImplementedError("model_from_json: custom_objects are not supported by Strata")
    try:
        doc = json.loads(json_string, object_pairs_hook=_no_duplicates)
    except (TypeError, ValueError) as e:
        raise ValueError("model_from_json: not JSON: %s" % e) from None
    if not isinstance(doc, dict) or doc.get("class_name") != "Sequential":
        raise NotImplementedError("model_from_json: only Sequential models are supported by Strata (got %r)"
                                  % (doc.get("class_name") if isinstance(doc, dict) else type(doc).__name__))
    cfg = doc.get("config") or {}
    entries = cfg.get("layers") if isinstance(cfg, dict) else None
    if not isinstance(entries, list):
        raise ValueError("model_from_json: config.layers is missing")
    model = Sequential(name=cfg.get("name"))
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError("model_from_json: layer %d is not an object" % i)
        if entry.get("class_name") == "InputLayer":
            c = entry.get("config") or {}
            shape = c.get("batch_input_shape") or c.get("batch_shape")
            if not shape:
                raise ValueError("model_from_json: layer %d (InputLayer) has no batch shape" % i)
            model.add(_layers.InputLayer(shape=tuple(shape[1:])))
            continue
        model.add(_layer_from(entry, i))
    return model
