"""Functional models with custom layers (the functional API guide's
"Extend the API using custom layers"): a custom layer called on
tf.keras.Input tensors cannot join the engine's graph, so the call is
recorded (an eager KerasTensor whose shape comes from calling the layer
once on zeros: that builds its weights, as Keras builds at the call) and so
is every later call on such tensors. tf.keras.Model(inputs, outputs) over a
graph holding one is an EagerFunctional: call() runs the recorded graph
eagerly, layer by layer (keras/_custom.py: Strata's Dense, Flatten,
Dropout, Activation, ReLU, Rescaling and Add / Subtract / Multiply /
Concatenate get eager weights of their own), and the verbs are
EagerModel's (keras/_eager_model.py). One output."""
import numpy as np

from . import _custom


class _Call:
    """One recorded layer call: layer, its inputs (a KerasTensor or a
    list / tuple of them) and the call's other arguments."""

    def __init__(self, layer, inputs, args, kwargs):
        self.layer, self.inputs, self.args, self.kwargs = layer, inputs, args, dict(kwargs)


def _flat(inputs):
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


def is_eager(t):
    return getattr(t, "_call", None) is not None


def any_eager(inputs):
    return any(is_eager(t) for t in _flat(inputs))


def _zeros(inputs):
    z = [np.zeros((1,) + tuple(t.shape[1:]), np.float32) for t in _flat(inputs)]
    return type(inputs)(z) if isinstance(inputs, (list, tuple)) else z[0]


def _run_layer(layer, inputs, args, kwargs, training=None):
    kw = dict(kwargs)
    if training is not None:
        kw["training"] = training
    if _custom.is_custom(layer):
        return _custom.call_custom(layer, inputs, args, kw)
    return _custom.call_builtin(layer, inputs, kw)


def symbolic_call(layer, inputs, args, kwargs):
    """A layer called on KerasTensors that cannot go to the engine (a custom
    layer, or any layer on an eager tensor): its recorded output tensor(s)."""
    from .layers import KerasTensor
    out = _run_layer(layer, _zeros(inputs), args, {k: v for k, v in kwargs.items() if k != "training"})
    call = _Call(layer, inputs, args, {k: v for k, v in kwargs.items() if k != "training"})
    if layer.name is None:
        layer.name = _custom_default(layer)

    def tensor(o, index):
        t = KerasTensor(np.shape(o)[1:], None, None, layer, _flat(inputs))
        t._call, t._index = call, index
        return t
    if isinstance(out, (list, tuple)):
        return type(out)(tensor(o, i) for i, o in enumerate(out))
    return tensor(out, None)


def _custom_default(layer):
    from ._subclass import default_name
    return default_name(type(layer))


def _call_of(t):
    """The recorded call of t (engine tensors: their layer on their inbound)."""
    call = getattr(t, "_call", None)
    if call is not None:
        return call
    inbound = list(t._inbound)
    merge = type(t._layer).__name__ in ("Add", "Subtract", "Multiply", "Concatenate")
    return _Call(t._layer, inbound if merge or len(inbound) > 1 else inbound[0], (), {})


def graph_is_eager(outputs):
    seen, stack = set(), list(outputs)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if is_eager(t):
            return True
        stack.extend(t._inbound)
    return False


def make(model, inputs, outputs, name):
    """Turn model (a Functional being made) into an EagerFunctional."""
    from . import _eager_model
    if len(outputs) != 1:
        raise NotImplementedError("Model: several outputs with custom layers (run eagerly) are not supported by "
                                  "Strata")
    model.__class__ = _eager_model.derived(EagerFunctional)
    model.inputs, model.outputs = list(inputs), list(outputs)
    order, seen = [], set()

    def visit(t):
        if id(t) in seen or t._is_input:
            return
        seen.add(id(t))
        for p in t._inbound:
            visit(p)
        order.append(t)
    visit(outputs[0])
    model._order = order
    model.graph_layers = []
    for t in order:
        if all(l is not t._layer for l in model.graph_layers):
            model.graph_layers.append(t._layer)
    model._subclass_pending = False
    model._input_shape = tuple(inputs[0].shape[1:]) if len(inputs) == 1 else None
    zeros = [np.zeros((1,) + tuple(t.shape[1:]), np.float32) for t in inputs]
    model(zeros[0] if len(zeros) == 1 else zeros)  # every layer built now, as Keras builds at the calls


class EagerFunctional:
    """call() of a functional model with custom layers: the recorded graph
    run eagerly."""

    def call(self, x, training=None):
        ins = self.inputs
        if isinstance(x, dict):
            x = [x[t._layer.name] for t in ins]
        xs = list(x) if len(ins) > 1 else [x]
        if len(xs) != len(ins):
            raise ValueError("model call: %d inputs given, the model has %d" % (len(xs), len(ins)))
        vals = {id(t): v for t, v in zip(ins, xs)}
        done = {}
        for t in self._order:
            call = _call_of(t)
            key = id(call)
            if key not in done:
                args = call.inputs
                inp = type(args)(vals[id(a)] for a in args) if isinstance(args, (list, tuple)) else vals[id(args)]
                done[key] = _run_layer(call.layer, inp, call.args, call.kwargs, training)
            out = done[key]
            vals[id(t)] = out[t._index] if getattr(t, "_index", None) is not None else out
        return vals[id(self.outputs[0])]
