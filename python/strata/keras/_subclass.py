"""Subclassed models (`class M(tf.keras.Model)` with layers made in
__init__ and a `call`): Strata traces call() once, when the input shape is
first known (fit / evaluate / predict / model(x) / build), with a
tf.keras.Input tensor, and builds the engine's graph from the layer calls
it makes: the model then is a functional model (keras/functional.py) of
that graph, every verb included (fit, save, to_json, strategy.run ...).
call() runs with training=True when it takes a `training` argument, so a
layer used only in training (Dropout) is in the graph; the engine applies
it only when training, as Keras does. What a traced call() cannot do: NumPy
or tf.* ops on its tensors, Python branches on their values, several
outputs: those raise NotImplementedError naming the operation. A model
holding custom layers (a tf.keras.layers.Layer subclass with build /
add_weight / call) is not traced: it runs eagerly (keras/_eager_model.py;
Model.__setattr__ switches it when such a layer is assigned)."""
import inspect
import re

_DERIVED = {}


def default_name(cls):
    """Keras's name for an instance: the class name in snake_case."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", cls.__name__)  # Keras's to_snake_case
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def init_state(model, name):
    """The state a subclass has before its graph is traced."""
    from .. import distribute as _distribute
    model.name = name or default_name(type(model))
    model._layers, model._engine_layers = [], []
    model._input_shape, model._out_shape = None, None
    model._scale = 1.0
    model._cap = None
    model._strategy = _distribute._scoped_strategy()
    model._compiled, model._compile_order, model._compile_args = False, 0, None
    model.optimizer = model.loss = model.history = None
    model._stop = False
    model._subclass_pending = True


def _derived(cls):
    from .functional import Functional
    if cls not in _DERIVED:
        _DERIVED[cls] = type(cls.__name__, (cls, Functional), {"__module__": cls.__module__,
                                                               "__qualname__": cls.__qualname__})
    return _DERIVED[cls]


def _call(model, x):
    try:
        sig = inspect.signature(model.call)
        takes_training = "training" in sig.parameters or any(
            p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    except (TypeError, ValueError):
        takes_training = False
    return model.call(x, training=True) if takes_training else model.call(x)


def trace(model, shape):
    """Trace model.call on an Input of shape (no batch axis) and turn the
    model into the functional model of that graph (its compile kept)."""
    from . import layers as _layers
    from .functional import Functional
    if not hasattr(model, "call"):
        raise NotImplementedError("%s: a subclassed tf.keras.Model needs a call(self, inputs) method"
                                  % type(model).__name__)
    inp = _layers.Input(shape=tuple(shape))
    try:
        out = _call(model, inp)
    except NotImplementedError:
        raise
    except (TypeError, AttributeError, ValueError) as e:
        raise NotImplementedError(
            "%s.call: Strata traces call() once with a tf.keras.Input tensor and builds the engine's graph "
            "from its layer calls; this call() did something else with the tensor (%s: %s). Use only "
            "layer calls (and layers.add / concatenate) on tensors in call()"
            % (type(model).__name__, type(e).__name__, e)) from None
    if isinstance(out, (list, tuple)) and len(out) == 1:
        out = out[0]
    if not isinstance(out, _layers.KerasTensor):
        raise NotImplementedError("%s.call returned %r; Strata needs the output of a layer call (one tensor)"
                                  % (type(model).__name__, type(out).__name__))
    saved = {k: model.__dict__.get(k) for k in ("_compile_args", "optimizer", "loss", "_metric_key", "_sparse",
                                               "_compile_metrics", "_strategy")}
    model.__class__ = _derived(type(model))
    strategy = saved["_strategy"]
    if strategy is not None:  # built under the strategy whose scope made the model, as Keras
        with strategy.scope():
            Functional.__init__(model, inp, out, name=model.name)
    else:
        Functional.__init__(model, inp, out, name=model.name)
    model._subclass_pending = False
    if saved["_compile_args"] is not None:
        for k, v in saved.items():
            if k != "_strategy":
                setattr(model, k, v)
        model.optimizer._model = model
        model._engine_compile()
