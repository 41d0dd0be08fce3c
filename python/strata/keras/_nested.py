"""Nested models: a built tf.keras.Sequential added to another Sequential
(`tf.keras.Sequential([model, tf.keras.layers.Softmax()])`, the
quickstart's probability model). The engine runs one flat chain of layers:
the outer model gets copies of the inner model's layers (made from the
engine's own layer options, as model_from_json makes them), and the two
share their weights as Keras's nested models do, by copying: the outer
model reads the inner model's current weights before it computes
(_ensure_compiled) and writes its copy back after anything that changes
its weights (fit, train_on_batch, set_weights, load_weights). model.layers
lists the copies (Keras lists the inner model as one layer)."""
import numpy as np

from .. import _strata


def add(outer, inner):
    """Append inner (a built Sequential) to outer's layers."""
    from .models import Sequential
    if not isinstance(inner, Sequential) or type(inner)._build is not Sequential._build:
        raise NotImplementedError("Sequential: only a Sequential model can be nested in a Sequential by "
                                  "Strata (a functional model: call its layers on tensors instead)")
    if inner._cap is None:
        raise ValueError("Sequential: the nested model %r must be built (give it an input_shape)" % inner.name)
    if outer._cap is not None or outer._layers or outer._input_shape is not None:
        raise NotImplementedError("Sequential: a nested model is supported by Strata as the first entry only")
    from . import layers as _layers
    inner._ensure_compiled("Sequential")
    outer._input_shape = tuple(inner._input_shape)
    outer._scale *= inner._scale
    if inner._scale != 1.0:
        outer._layers.append(_layers.Rescaling(inner._scale))
    clones = []
    for cls_name, _lname, opts in _strata.model_layer_options(inner._cap):
        opts = {k: float(str(np.float32(v))) if isinstance(v, float) else v for k, v in opts.items()}
        clones.append(getattr(_layers, cls_name)(**opts))
    outer._nested = [(inner, len(inner.get_weights()))]
    for c in clones:
        outer._layers.append(c)
    outer._build(outer._input_shape)


def _pairs(outer, inner, count):
    """(outer flat offset, inner flat offset, size) of the shared weights."""
    lin = [w for _, ws in inner._weight_layout() for w in ws]
    lout = [w for _, ws in outer._weight_layout() for w in ws][:count]
    return [(o2, o1, int(np.prod(s))) for (s, _t, o1), (_s2, _t2, o2) in zip(lin, lout)]


def pull(outer):
    """Copy the inner models' weights into outer."""
    if getattr(outer, "_syncing", False) or not getattr(outer, "_nested", None):
        return
    outer._syncing = True
    try:
        flat = np.frombuffer(_strata.get_weights(outer._cap), dtype=np.float32).copy()
        for inner, count in outer._nested:
            inner._ensure_compiled("nested model")
            src = np.frombuffer(_strata.get_weights(inner._cap), dtype=np.float32)
            for o, i, n in _pairs(outer, inner, count):
                flat[o:o + n] = src[i:i + n]
        _strata.set_weights(outer._cap, flat)
    finally:
        outer._syncing = False


def push(outer):
    """Copy outer's copies of the shared weights back into the inner models."""
    if not getattr(outer, "_nested", None):
        return
    flat = np.frombuffer(_strata.get_weights(outer._cap), dtype=np.float32)
    for inner, count in outer._nested:
        inner._ensure_compiled("nested model")
        dst = np.frombuffer(_strata.get_weights(inner._cap), dtype=np.float32).copy()
        for o, i, n in _pairs(outer, inner, count):
            dst[i:i + n] = flat[o:o + n]
        _strata.set_weights(inner._cap, dst)
