"""tf.GradientTape for custom training loops inside strategy.run.

A call of a Keras model inside the tape is one node whose forward and
backward run in the C engine (st_replica_forward / st_replica_backward, on
the strategy's replica); the loss computed from its output is recorded by
the ops that know their derivative: the Keras loss objects (any
reduction), tf.nn.compute_average_loss, tf.reduce_sum / reduce_mean, and
+, -, * and / of recorded tensors and constants. tape.gradient(loss,
model.trainable_variables) runs the engine's backward from d loss / d
outputs; the gradients stay in the engine (EngineGradient placeholders),
and optimizer.apply_gradients(zip(grads, model.trainable_variables)) sums
them over the replicas and applies the model's compiled optimizer
(st_replica_apply_gradients): fit's step when the loss is fit's.
What it does not do: gradients with respect to anything but a model's
trainable variables (or reading their values), other ops on recorded
tensors (they raise NotImplementedError naming the op), a model call
outside strategy.run, persistent tapes used twice."""
import threading

import numpy as np

from ._tensor import Tensor

_local = threading.local()


def recording():
    """The innermost recording tape of this thread, or None."""
    tapes = getattr(_local, "tapes", None)
    return tapes[-1] if tapes else None


class _Node:
    """How a recorded tensor was made: parents and the vector-Jacobian
    products vjp(g) -> one gradient per parent (None: no gradient)."""

    def __init__(self, parents, vjp):
        self.parents, self.vjp = parents, vjp


class _ModelOutput:
    """The output of a model call on a replica: the engine's backward (from
    the activations of the replica's last forward: seq checks it is this one)."""

    def __init__(self, model, ctx, shape):
        self.model, self.ctx, self.handle, self.shape = model, ctx, ctx._handle, shape
        self.seq = ctx._fwd_seq
        self.parents = ()


class _Untracked:
    """A result the tape cannot differentiate (an op without a gradient in
    Strata applied to a recorded tensor): harmless unless the loss uses it."""
    parents = ()


def note_untracked():
    _local.untracked = True


def mark_untracked(t):
    if getattr(_local, "untracked", False):
        _local.untracked = False
        if recording() is not None and isinstance(t, Tensor):
            t._tape_node = _Untracked()
    return t


def track(value, parents, vjp):
    """value as a recorded Tensor when a parent is recorded (else plain)."""
    t = np.asarray(value).view(Tensor)
    live = [p for p in parents if getattr(p, "_tape_node", None) is not None]
    if live and recording() is not None:
        t._tape_node = _Node(list(parents), vjp)
    return t


def recorded(*xs):
    return any(getattr(x, "_tape_node", None) is not None for x in xs)


def model_output(model, ctx, out):
    """A model call's output on a replica (ctx: its ReplicaContext)."""
    ctx._fwd_seq = getattr(ctx, "_fwd_seq", 0) + 1
    t = np.asarray(out).view(Tensor)
    if recording() is not None:
        t._tape_node = _ModelOutput(model, ctx, out.shape)
    return t


def ufunc(uf, inputs):
    """A recorded result of + - * / (and negation) on recorded tensors."""
    names = {"add", "subtract", "multiply", "true_divide", "negative"}
    if uf.__name__ not in names:
        raise NotImplementedError("GradientTape: np.%s on a recorded tensor has no gradient in Strata (it "
                                  "records the Keras losses, compute_average_loss, reduce_sum / reduce_mean "
                                  "and + - * /)" % uf.__name__)
    arrs = [np.asarray(x.view(np.ndarray) if isinstance(x, Tensor) else x) for x in inputs]
    out = uf(*arrs)

    def unbroadcast(g, a):
        g = np.asarray(g)
        while g.ndim > np.ndim(a):
            g = g.sum(axis=0)
        for ax, d in enumerate(np.shape(a)):
            if d == 1 and g.shape[ax] != 1:
                g = g.sum(axis=ax, keepdims=True)
        return g

    def vjp(g):
        n = uf.__name__
        if n == "negative":
            return [-g]
        a, b = arrs
        if n == "add":
            return [unbroadcast(g, a), unbroadcast(g, b)]
        if n == "subtract":
            return [unbroadcast(g, a), unbroadcast(-g, b)]
        if n == "multiply":
            return [unbroadcast(g * b, a), unbroadcast(g * a, b)]
        return [unbroadcast(g / b, a), unbroadcast(-g * a / (b * b), b)]
    return track(out, list(inputs), vjp)


class EngineGradient:
    """A gradient kept in the engine's replica: apply it with
    optimizer.apply_gradients(zip(grads, model.trainable_variables))."""

    def __init__(self, model, handle, index):
        self.model, self._handle, self.index = model, handle, index

    def numpy(self):
        raise NotImplementedError("GradientTape: the gradients of a model's variables stay in Strata's engine; "
                                  "apply them with optimizer.apply_gradients (reading or changing them is not "
                                  "supported yet)")

    __array__ = numpy

    def __repr__(self):
        return "<EngineGradient %d of %s>" % (self.index, self.model.name)


class GradientTape:
    """tf.GradientTape over a model call inside strategy.run (see the
    module's comment for what it records)."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent, self._used = bool(persistent), False

    def __enter__(self):
        if not hasattr(_local, "tapes"):
            _local.tapes = []
        _local.tapes.append(self)
        return self

    def __exit__(self, *exc):
        _local.tapes.remove(self)
        return False

    def watch(self, tensor):
        raise NotImplementedError("GradientTape.watch: Strata's tape differentiates with respect to a model's "
                                  "trainable variables only")

    def stop_recording(self):
        """A context in which this tape records nothing."""
        import contextlib

        @contextlib.contextmanager
        def paused():
            i = _local.tapes.index(self)
            _local.tapes.pop(i)
            try:
                yield
            finally:
                _local.tapes.insert(i, self)
        return paused()

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients=None):
        if self._used and not self._persistent:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of gradients")
        self._used = True
        model_out = _backprop(target, output_gradients)
        if model_out is None:
            raise ValueError("GradientTape.gradient: the target was not computed from a model call inside "
                             "this tape (Strata differentiates through a Keras model's call)")
        node, dy = model_out
        if node.ctx._fwd_seq != node.seq:
            raise NotImplementedError("GradientTape.gradient: the model was called again on this replica after "
                                      "the call the loss comes from; Strata's engine keeps the activations of "
                                      "the last call only: take the gradient before calling the model again")
        from . import _strata
        _strata.replica_backward(node.handle, np.ascontiguousarray(dy.reshape(len(dy), -1), dtype=np.float32))
        flat = list(sources) if isinstance(sources, (list, tuple)) else [sources]
        grads = []
        for i, v in enumerate(flat):
            if getattr(v, "_model", None) is not node.model:
                raise NotImplementedError("GradientTape.gradient: sources must be the trainable_variables of "
                                          "the model called in the tape (got %r)" % (v,))
            grads.append(EngineGradient(node.model, node.handle, i))
        return grads if isinstance(sources, (list, tuple)) else grads[0]


def _backprop(target, seed):
    """Reverse pass from target to the (one) model output: (node, d target /
    d output) or None."""
    if getattr(target, "_tape_node", None) is None:
        return None
    order, seen = [], set()

    def visit(t):
        if id(t) in seen:
            return
        seen.add(id(t))
        node = t._tape_node
        for p in getattr(node, "parents", ()):
            if getattr(p, "_tape_node", None) is not None:
                visit(p)
        order.append(t)
    visit(target)
    grads = {id(target): np.ones(np.shape(target)) if seed is None else np.asarray(seed, dtype=np.float64)}
    found = None
    for t in reversed(order):
        g = grads.pop(id(t), None)
        if g is None:
            continue
        node = t._tape_node
        if isinstance(node, _Untracked):
            raise NotImplementedError("GradientTape: the loss depends on an op Strata's tape does not "
                                      "differentiate (it records the Keras losses, tf.nn.compute_average_loss, "
                                      "tf.reduce_sum / reduce_mean and + - * / of tensors)")
        if isinstance(node, _ModelOutput):
            if found is not None and found[0] is not node:
                raise NotImplementedError("GradientTape: the loss depends on several model calls; Strata's "
                                          "tape takes one model call per gradient")
            found = (node, g if found is None else found[1] + g)
            continue
        for p, gp in zip(node.parents, node.vjp(g)):
            if gp is not None and getattr(p, "_tape_node", None) is not None:
                grads[id(p)] = grads.get(id(p), 0) + gp
    return found


class ModelVariable:
    """One of model.trainable_variables: the name and shape of an engine
    variable (its value: .numpy(), read from the engine outside a run)."""

    def __init__(self, model, index, name, shape):
        self._model, self._index, self.name, self.shape = model, index, name, tuple(shape)
        self.trainable = True
        self.dtype = np.dtype(np.float32)

    def numpy(self):
        return self._model.get_weights()[self._index]

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        return "<tf.Variable '%s' shape=%s dtype=float32>" % (self.name, self.shape)


def apply_gradients(optimizer, grads_and_vars):
    """optimizer.apply_gradients over EngineGradients of one model: the
    replicas' sum applied with the model's compiled optimizer."""
    pairs = list(grads_and_vars)
    if not pairs:
        raise ValueError("apply_gradients: no gradients given")
    g0 = pairs[0][0]
    if not all(isinstance(g, EngineGradient) and g.model is g0.model for g, _ in pairs):
        raise NotImplementedError("apply_gradients: Strata applies the gradients a GradientTape left in its "
                                  "engine for one model (tape.gradient(loss, model.trainable_variables))")
    model = g0.model
    if model.optimizer is not optimizer:
        raise NotImplementedError("apply_gradients: the optimizer must be the one the model was compiled with "
                                  "(model.optimizer); Strata's engine applies the compiled optimizer")
    if len(pairs) != len(model.trainable_variables):
        raise NotImplementedError("apply_gradients: Strata applies all of the model's trainable variables' "
                                  "gradients at once (%d given, %d variables)"
                                  % (len(pairs), len(model.trainable_variables)))
    from . import _strata
    _strata.replica_apply(g0._handle)
