"""Keras model JSON writer for Sequential models: to_json (Keras 2 layout,
as `strata train --model FILE.json` and model_from_json read it). Reading is
the library's (src/io/keras_json.c, st_model_from_keras_json_text): see
models.model_from_json; there is no reader here."""
import json

from . import layers as _layers

_INIT_CLASS = {"glorot_uniform": "GlorotUniform", "he_normal": "HeNormal", "zeros": "Zeros", "ones": "Ones",
               "random_uniform": "RandomUniform"}


def _init(name):
    seed = getattr(name, "seed", None)  # layers._SeededInit
    if name == "random_uniform":
        return {"class_name": "RandomUniform", "config": {"minval": -0.05, "maxval": 0.05, "seed": seed}}
    return {"class_name": _INIT_CLASS[name], "config": {"seed": seed} if name in ("glorot_uniform", "he_normal") else {}}


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
        c.update(max_value=l.max_value, negative_slope=l.negative_slope, threshold=l.threshold)
    # issue 28, layers-a
    elif isinstance(l, _layers.LeakyReLU):
        c.update(alpha=l.negative_slope)  # Keras 2 name (this file is Keras 2 layout)
    elif isinstance(l, _layers._GlobalPooling):
        c.update(data_format="channels_last", keepdims=False)
    elif isinstance(l, _layers.ZeroPadding2D):
        c.update(padding=[list(l.padding[0]), list(l.padding[1])], data_format="channels_last")
    # end of layers-a
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
    # issue 28, helper B
    elif isinstance(l, _layers.Conv1D):
        c.update(filters=l.filters, kernel_size=[l.kernel_size], strides=[l.strides], padding=l.padding,
                 data_format="channels_last", dilation_rate=[1], groups=1, activation=l.activation,
                 use_bias=l.use_bias, kernel_initializer=_init(l.kernel_initializer),
                 bias_initializer=_init(l.bias_initializer), kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None)
    elif isinstance(l, _layers.DepthwiseConv2D):
        c.update(kernel_size=list(l.kernel_size), strides=list(l.strides), padding=l.padding,
                 depth_multiplier=l.depth_multiplier, data_format="channels_last", dilation_rate=[1, 1],
                 activation=l.activation, use_bias=l.use_bias,
                 depthwise_initializer=_init(l.depthwise_initializer), bias_initializer=_init(l.bias_initializer),
                 depthwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, bias_constraint=None)
    elif isinstance(l, _layers.Embedding):
        c.update(input_dim=l.input_dim, output_dim=l.output_dim,
                 embeddings_initializer=_init(l.embeddings_initializer), embeddings_regularizer=None,
                 activity_regularizer=None, embeddings_constraint=None, mask_zero=False)
    elif isinstance(l, _layers.LayerNormalization):
        c.update(axis=-1, epsilon=l.epsilon, center=l.center, scale=l.scale,
                 beta_initializer=_init("zeros"), gamma_initializer=_init("ones"),
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None, gamma_constraint=None)
    elif isinstance(l, _layers.Rescaling):
        c.update(scale=l.scale, offset=0.0)
    # merge layers and attention (issue 28)
    elif isinstance(l, _layers.Concatenate):
        c.update(axis=l.axis)
    elif isinstance(l, (_layers.Add, _layers.Subtract, _layers.Multiply)):
        pass
    elif isinstance(l, _layers.MultiHeadAttention):
        c.update(num_heads=l.num_heads, key_dim=l.key_dim, value_dim=l.value_dim or l.key_dim,
                 dropout=l.dropout, use_bias=l.use_bias, output_shape=l.output_shape_arg,
                 attention_axes=None, kernel_initializer=_init(l.kernel_initializer),
                 bias_initializer=_init(l.bias_initializer), kernel_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None)
    else:
        raise NotImplementedError("to_json: layer %s" % n)
    return n, c


def to_doc(model, rescaling=True):
    """The Keras JSON document of a model as a dict; rescaling=False leaves
    out a first Rescaling layer (the parameter-server job scales its data
    itself)."""
    shape = model._input_shape
    if shape is None:
        raise ValueError("to_json: the model's input shape is unknown (build it first)")
    layers = [{"class_name": "InputLayer", "config": {"batch_input_shape": [None] + list(shape),
                                                       "dtype": "float32", "sparse": False,
                                                       "ragged": False, "name": "input_1"}}]
    for l in model._layers:
        if not rescaling and isinstance(l, _layers.Rescaling):
            continue
        n, c = layer_config(l)
        layers.append({"class_name": n, "config": c})
    return {"class_name": "Sequential", "config": {"name": model.name, "layers": layers},
            "keras_version": "2.13.1", "backend": "tensorflow"}


def to_json(model, **kwargs):
    return json.dumps(to_doc(model), **kwargs)


def peel_rescaling(text):
    """(text without a first Rescaling layer, its scale), or (text, None).
    The library's reader builds the engine's layers and has no Rescaling:
    Strata folds it into the input pipeline (as Sequential.add does), so a
    model.to_json() of such a model reads back. Its input shape moves to the
    next layer (Keras 2's batch_input_shape); Keras 3's InputLayer keeps it.
    Anything unexpected is left for the reader to report."""
    import json
    try:
        doc = json.loads(text)
        layers = doc["config"]["layers"] if isinstance(doc["config"], dict) else doc["config"]
    except (ValueError, KeyError, TypeError):
        return text, None
    i = 1 if layers and isinstance(layers[0], dict) and layers[0].get("class_name") == "InputLayer" else 0
    if len(layers) <= i + 1 or not isinstance(layers[i], dict) or layers[i].get("class_name") != "Rescaling":
        return text, None
    cfg = layers[i].get("config") or {}
    if float(cfg.get("offset", 0.0)) != 0.0 or not isinstance(cfg.get("scale"), (int, float)):
        return text, None  # the reader names the layer and option
    shape = {k: cfg[k] for k in ("batch_input_shape", "batch_shape") if k in cfg}
    del layers[i]
    if shape and isinstance(layers[i].get("config"), dict):
        layers[i]["config"].update(shape)
    return json.dumps(doc), float(cfg["scale"])
