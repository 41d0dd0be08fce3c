"""tf.keras.layers' merge layers and attention (issue 28): Add, Subtract,
Multiply, Concatenate and MultiHeadAttention, layers of several inputs
called on KerasTensors of a functional model (a Sequential cannot hold
them). layers.py exports them."""
from .._util import unsupported
from .layers import KerasTensor, Layer, _init, _tensors


# ---- merge layers and attention (several inputs, issue 28) ----------------
# They are called on tensors of a functional model (`Add()([a, b])`); a
# Sequential cannot hold them.


class _Merge(Layer):
    """A layer of several inputs (calling it on tensors: the functional API)."""

    def _add(self, m):
        raise NotImplementedError("%s: a layer of several inputs cannot be added to a Sequential; call it "
                                  "on tensors of a functional model" % type(self).__name__)

    def _make(self, h):
        from .. import _strata
        _strata.add_merge(h, type(self).__name__, self._merge_arg(), self._given_name)

    def _merge_arg(self):
        return None

    def __call__(self, inputs, **kwargs):
        where = self._where()
        for k, v in kwargs.items():
            if k not in ("training", "mask") or v not in (None, False, True):
                raise NotImplementedError("%s: call argument %s=%r is not supported by Strata" % (where, k, v))
        from . import _custom, _eager_graph
        if isinstance(inputs, (list, tuple)) and not any(isinstance(t, KerasTensor) for t in inputs):
            return _custom.call_builtin(self, list(inputs), kwargs)  # on tensors: eagerly
        if _eager_graph.any_eager(inputs):
            return _eager_graph.symbolic_call(self, list(inputs), (), kwargs)
        return self._call_engine(_tensors(where, inputs, True), {})


class Add(_Merge):
    """Add(): the element-wise sum of 2 or more inputs of one shape."""


class Subtract(_Merge):
    """Subtract(): inputs[0] - inputs[1] (two inputs of one shape)."""


class Multiply(_Merge):
    """Multiply(): the element-wise product of 2 or more inputs of one shape."""


class Concatenate(_Merge):
    """Concatenate(axis=-1): along a non-batch axis; other axes must match."""

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(axis, int) or isinstance(axis, bool) or axis == 0:
            raise ValueError("Concatenate: axis=%r (expected a non-zero integer: the batch axis 0 "
                             "cannot be concatenated)" % (axis,))
        self.axis = axis

    def _merge_arg(self):
        return self.axis


class MultiHeadAttention(_Merge):
    """MultiHeadAttention(num_heads, key_dim, value_dim=None, dropout=0.0,
    use_bias=True, output_shape=None, attention_axes=None,
    kernel_initializer='glorot_uniform', bias_initializer='zeros'), called as
    layer(query, value, key=None, use_causal_mask=False) on [batch, T, d]
    tensors. use_causal_mask is a call argument in Keras; Strata keeps it on
    the layer (use_causal_mask attribute)."""

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True,
                 output_shape=None, attention_axes=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", seed=None, **kwargs):
        super().__init__(**kwargs)
        where = "MultiHeadAttention"

        def positive(name, v, none_ok=False):
            if v is None and none_ok:
                return None
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError("%s: %s=%r (expected a positive integer)" % (where, name, v))
            return v
        self.num_heads = positive("num_heads", num_heads)
        self.key_dim = positive("key_dim", key_dim)
        self.value_dim = positive("value_dim", value_dim, True)
        if isinstance(output_shape, (tuple, list)) and len(output_shape) == 1:
            output_shape = output_shape[0]
        self.output_shape_arg = positive("output_shape", output_shape, True)
        if attention_axes is not None and tuple(attention_axes if isinstance(attention_axes, (list, tuple))
                                                else (attention_axes,)) not in ((1,), (-2,)):
            raise NotImplementedError("%s: attention_axes=%r is not supported by Strata (None: the time "
                                      "axis of [batch, T, d] inputs)" % (where, attention_axes))
        try:
            dropout = float(dropout)
        except (TypeError, ValueError):
            raise ValueError("%s: dropout=%r (expected a float in [0, 1))" % (where, dropout)) from None
        if not 0 <= dropout < 1:
            raise ValueError("%s: dropout=%r (expected a float in [0, 1))" % (where, dropout))
        self.dropout = dropout
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _init(kernel_initializer, where, "kernel_initializer")
        self.bias_initializer = _init(bias_initializer, where, "bias_initializer")
        for arg in ("kernel_initializer", "bias_initializer"):
            if getattr(getattr(self, arg), "seed", None) is not None:  # 4 kernels, 4 biases
                raise NotImplementedError("%s: %s with a seed is not supported by Strata's attention (the "
                                          "model's seed, tf.random.set_seed, seeds it)" % (where, arg))
        self.use_causal_mask = False

    def __call__(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
                 attention_mask=None, return_attention_scores=False, training=None,
                 use_causal_mask=False):
        """layer(query, value, key=None, use_causal_mask=False): [batch, Tq, dq]
        attending over [batch, Tv, dv] -> [batch, Tq, output dim]."""
        where = self._where()
        unsupported(where, query_mask=(query_mask, None), value_mask=(value_mask, None),
                    key_mask=(key_mask, None), attention_mask=(attention_mask, None),
                    return_attention_scores=(bool(return_attention_scores), False))
        tensors = _tensors(where, query, False) + _tensors(where, value, False)
        if key is not None:
            tensors += _tensors(where, key, False)
        causal = bool(use_causal_mask)
        if getattr(self, "_handle", None) is None:
            self.use_causal_mask = causal
        return self._call_engine(tensors, {"use_causal_mask": causal})

    def _merge_arg(self):
        return (self.num_heads, self.key_dim, self.value_dim or 0, self.dropout, self.use_bias,
                self.output_shape_arg or 0, self.use_causal_mask, self.kernel_initializer,
                self.bias_initializer)

    def _weight_shapes(self, shapes):
        """shapes: the per-example shapes of (query, value[, key])."""
        q, v = shapes[0], shapes[1]
        k = shapes[2] if len(shapes) > 2 else v
        h, kd = self.num_heads, self.key_dim
        vd = self.value_dim or kd
        out = self.output_shape_arg or q[-1]
        w = []
        for d, last in ((q[-1], kd), (k[-1], kd), (v[-1], vd)):
            w.append(((d, h, last), True))
            if self.use_bias:
                w.append(((h, last), True))
        w.append(((h, vd, out), True))
        return w + ([((out,), True)] if self.use_bias else [])
