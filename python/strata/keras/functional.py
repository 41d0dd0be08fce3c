"""Keras's functional API on Strata's engine: tf.keras.Model(inputs,
outputs) over the KerasTensors that tf.keras.Input and layer calls made
(layers.py). The engine's graph (st_input, st_layer_call nodes) is made as
the layers are called; the model is st_functional_create's, bound to the
strategy in scope, and trains with the verbs models.Model shares with
Sequential. With several inputs an example's row is input 0's values, then
input 1's, ...: fit/evaluate/predict take x as a list/tuple of arrays (one
per input, in the model's input order) or a dict by input name. One output
(the C API's st_functional_create takes one)."""
import json

import numpy as np

from .. import _strata
from .. import distribute as _distribute
from .._util import global_seed, next_init_seed
from . import layers as _layers
from .models import Model


def _as_list(where, what, v):
    if isinstance(v, dict):
        v = list(v.values())
    items = list(v) if isinstance(v, (list, tuple)) else [v]
    if not items:
        raise ValueError("%s: no %s given" % (where, what))
    for t in items:
        if not isinstance(t, _layers.KerasTensor):
            raise TypeError("%s: %s must be KerasTensors (tf.keras.Input or a layer's output), got %r"
                            % (where, what, t))
    return items


def _graph_layers(outputs):
    """The layer objects behind the outputs (each once, in call order)."""
    seen, order, stack = set(), [], list(outputs)
    while stack:
        t = stack.pop()
        if t._is_input or id(t) in seen:
            continue
        seen.add(id(t))
        if all(l is not t._layer for l in order):
            order.append(t._layer)
        stack.extend(t._inbound)
    return order


class Functional(Model):
    """tf.keras.Model(inputs, outputs, name=None): the graph of layer calls
    between the inputs (tf.keras.Input tensors) and the one output."""

    def __init__(self, inputs=None, outputs=None, name=None, trainable=True, **kwargs):
        if inputs is None and outputs is None and kwargs.get("_engine") is not None:
            self._init_state(name)
            return
        if inputs is None or outputs is None:
            Model.__init__(self)  # a subclass-style call: refused there
        if trainable is not True:
            raise NotImplementedError("Model: trainable=False is not supported by Strata")
        if kwargs:
            raise NotImplementedError("Model: arguments %s are not supported by Strata" % ", ".join(sorted(kwargs)))
        ins = _as_list("Model", "inputs", inputs)
        outs = _as_list("Model", "outputs", outputs)
        if len({id(t) for t in outs}) != len(outs):
            raise ValueError("Model: an output tensor is given twice")
        for t in ins:
            if not t._is_input:
                raise ValueError("Model: the inputs must be tf.keras.Input tensors, got the output of %s"
                                 % t._layer._where())
        self._init_state(name)
        from . import _eager_graph
        if _eager_graph.graph_is_eager(outs):  # custom layers: the graph runs eagerly
            return _eager_graph.make(self, ins, outs, name)
        strategy = self._strategy or _distribute.get_strategy()
        layers = _graph_layers(outs)
        cap, idx = _strata.functional_create([t._node for t in ins], [t._node for t in outs],
                                             [l._handle for l in layers], global_seed(),
                                             strategy._create(), name, False)
        self._init_seed = next_init_seed()
        _strata.model_init_seed(cap, self._init_seed)
        self._strategy, self._cap = strategy, cap
        strategy._register(self)
        order = sorted((i, k) for k, i in enumerate(idx) if i >= 0)
        total = sum(int(np.prod(t.shape[1:])) for t in outs)  # several outputs: one row (keras/_multi.py)
        self._attach([layers[k] for _, k in order], [(t._layer, tuple(t.shape[1:])) for t in ins],
                     tuple(outs[0].shape) if len(outs) == 1 else (None, total))
        self._out_shapes = [tuple(t.shape) for t in outs]
        self._output_names = [t._layer.name for t in outs]
        self.inputs, self.outputs = ins, outs

    def _init_state(self, name):
        self.name = name or "functional"
        self._layers, self._engine_layers = [], []
        self._input_shape, self._out_shape = None, None
        self._scale = 1.0
        self._cap = None
        self._strategy = _distribute._scoped_strategy()
        self._compiled, self._compile_order, self._compile_args = False, 0, None
        self.optimizer = self.loss = self.history = None
        self._stop = False

    def _attach(self, engine_layers, inputs, out_shape):
        """Bind the layer objects (in the engine's order) and the inputs
        [(InputLayer, shape)] to the built model."""
        infos = _strata.model_layers(self._cap)
        for layer, info in zip(engine_layers, infos):
            layer.name, layer.output_shape, layer._params = info[0], (None,) + info[2], info[3]
            layer._model = self
        self._engine_layers = list(engine_layers)
        self._input_layers = [l for l, _ in inputs]
        self._input_shapes = [s for _, s in inputs]
        for l, _ in inputs:
            if l.name is None:
                l.name = "input_layer"
        sizes = [int(np.prod(s)) for s in self._input_shapes]
        self._input_shape = self._input_shapes[0] if len(sizes) == 1 else (sum(sizes),)
        self._out_shape = out_shape
        self._layers = self._input_layers + self._engine_layers

    @property
    def layers(self):
        return list(self._layers)

    @property
    def built(self):
        return True

    def build(self, input_shape=None):
        """A functional model is built when it is made."""

    @property
    def input_shape(self):
        shapes = [(None,) + tuple(s) for s in self._input_shapes]
        return shapes[0] if len(shapes) == 1 else shapes

    def get_layer(self, name=None, index=None):
        """The layer named name, or the index-th of .layers."""
        if index is not None:
            return self._layers[index]
        for l in self._layers:
            if l.name == name:
                return l
        raise ValueError("get_layer: no layer named %r (layers: %s)" % (name, ", ".join(str(l.name) for l in self._layers)))

    def _in_shape(self, layer):
        shapes = layer._fn_in_shapes
        return shapes if isinstance(layer, _layers.MultiHeadAttention) else shapes[0]

    def _flatten_inputs(self, x, where):
        """A list/tuple (one array per input) or a dict by input name as the
        engine's rows: each example's inputs flattened and concatenated."""
        n = len(self._input_shapes)
        if isinstance(x, dict):
            names = [l.name for l in self._input_layers]
            missing = [k for k in names if k not in x]
            extra = [k for k in x if k not in names]
            if missing or extra:
                raise ValueError("%s: the dict of inputs has keys %s; the model's inputs are %s"
                                 % (where, sorted(x), names))
            x = [x[k] for k in names]
        elif n == 1 or not isinstance(x, (list, tuple)):
            return x
        if len(x) != n:
            raise ValueError("%s: %d input arrays given, the model has %d inputs" % (where, len(x), n))
        arrays = [np.asarray(a, dtype=np.float32) for a in x]
        rows = len(arrays[0])
        for j, (a, s) in enumerate(zip(arrays, self._input_shapes)):
            if a.shape[1:] != tuple(s) or len(a) != rows:
                raise ValueError("%s: input %d (%s) has shape %s, expected (%d,) + %s" % (
                    where, j, self._input_layers[j].name, a.shape, rows, tuple(s)))
        if n == 1:
            return arrays[0]
        return np.ascontiguousarray(np.concatenate([a.reshape(rows, -1) for a in arrays], axis=1))

    def to_json(self, **kwargs):
        """The model's Keras 3 JSON (st_model_to_keras_json): Keras and
        tf.keras.models.model_from_json read it back."""
        text = _strata.model_to_keras_json(self._cap)
        return json.dumps(json.loads(text), **kwargs) if kwargs else text

    def get_config(self):
        return json.loads(self.to_json())["config"]

    @classmethod
    def _from_json(cls, text):
        """A Model of a Keras "Functional"/"Model" JSON document (the
        engine's importer builds it)."""
        model = cls(_engine=True)
        strategy = model._strategy or _distribute.get_strategy()
        cap, _shape, name = _strata.model_from_keras_json(text, global_seed(), strategy._create())
        model._init_seed = next_init_seed()
        _strata.model_init_seed(cap, model._init_seed)
        return model._from_engine(strategy, cap, name, text)

    def _from_engine(self, strategy, cap, name, text):
        """Bind the engine's functional model cap (its Keras 3 JSON: text)
        and make the Python layer objects from its layers' options."""
        model = self
        model._strategy, model._cap = strategy, cap
        model.name = name or json.loads(text)["config"].get("name") or "functional"
        strategy._register(model)
        inputs, in_shapes = _json_graph(text)
        out_by_name = {info[0]: tuple(info[2]) for info in _strata.model_layers(cap)}
        out_by_name.update({n: s for n, s in inputs})
        engine_layers = []
        for cls_name, lname, opts in _strata.model_layer_options(cap):
            opts = {k: float(str(np.float32(v))) if isinstance(v, float) else v for k, v in opts.items()}
            causal = opts.pop("_use_causal_mask", False)
            layer = getattr(_layers, cls_name)(**opts)
            if causal:
                layer.use_causal_mask = True
            layer._fn_in_shapes = [s if isinstance(s, tuple) else out_by_name.get(s) for s in in_shapes.get(lname, [])]
            engine_layers.append(layer)
        ins = []
        for n, s in inputs:
            il = _layers.InputLayer(shape=s, name=n)
            ins.append((il, s))
        infos = _strata.model_layers(cap)
        last = infos[-1]  # the output's shape: the engine's predict gives it too
        model._attach(engine_layers, ins, None)
        model._out_shape = (None,) + tuple(_output_shape(text, out_by_name, last))
        return model


def is_functional_json(text):
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("class_name") in ("Functional", "Model")


def _history_name(v):
    """The layer name a Keras 2 inbound entry or a Keras 3 tensor refers to."""
    if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
        cfg = v.get("config") or {}
        shape = cfg.get("shape")
        if isinstance(shape, list) and len(shape) > 1:
            return tuple(int(d) for d in shape[1:])
        return cfg.get("keras_history", [None])[0]
    if isinstance(v, list) and v and isinstance(v[0], str):
        return v[0]
    return None


def _json_graph(text):
    """([(input name, shape)], {layer name: [input shape or source layer
    name, ...] of its first call}) from a Keras 2 or 3 functional JSON."""
    cfg = json.loads(text)["config"]
    inputs, calls = [], {}
    for e in cfg.get("layers", []):
        lname = (e.get("config") or {}).get("name") or e.get("name")
        if e.get("class_name") == "InputLayer":
            c = e.get("config") or {}
            shape = c.get("batch_shape") or c.get("batch_input_shape")
            inputs.append((lname, tuple(int(d) for d in shape[1:])))
            continue
        nodes = e.get("inbound_nodes") or []
        if not nodes:
            continue
        node = nodes[0]
        if isinstance(node, dict):  # Keras 3: args, kwargs
            args = node.get("args") or []
            if len(args) == 1 and isinstance(args[0], list):
                args = args[0]  # the merge layers' [[a, b]]
            key = (node.get("kwargs") or {}).get("key")
            srcs = [_history_name(a) for a in args] + ([_history_name(key)] if key is not None else [])
        else:  # Keras 2: [[name, node, tensor, kwargs], ...]
            srcs = [_history_name(a) for a in node]
        calls[lname] = [s for s in srcs if s is not None]
    order = [l[0] for l in (cfg.get("input_layers") or [])] if cfg.get("input_layers") and \
        isinstance(cfg["input_layers"][0], list) else None
    if order:
        by = dict(inputs)
        inputs = [(n, by[n]) for n in order if n in by]
    return inputs, calls


def _output_shape(text, out_by_name, last):
    cfg = json.loads(text)["config"]
    outs = cfg.get("output_layers")
    if outs:
        name = outs[0][0] if isinstance(outs[0], list) else outs[0]
        if name in out_by_name:
            return out_by_name[name]
    return last[2]
