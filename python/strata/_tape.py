"""tf.GradientTape: reverse-mode differentiation of custom training loops.

A call of a Keras model inside the tape is one node whose forward and
backward run in the C engine: inside strategy.run on the strategy's replica
(st_replica_forward / st_replica_backward; the gradients stay in the engine
as EngineGradient placeholders), outside it in the model's open engine run
(_eager.py; the gradients are read back as Tensors, marked as the engine's
own). The loss computed from the output is recorded by the ops that know
their derivative: the Keras loss objects (any reduction),
tf.nn.compute_average_loss, tf.reduce_sum / reduce_mean, tf.matmul,
tf.reshape, tf.nn.relu / sigmoid / tanh / softmax / softplus, tf.exp / log /
sqrt / square, and NumPy's ufuncs on recorded tensors (+ - * / ** @,
maximum, minimum, exp, log, tanh, ...). Sources: a model's
trainable_variables, tf.Variables read inside the tape (trainable ones, or
those given to watch) and tensors given to watch.
optimizer.apply_gradients(zip(grads, model.trainable_variables)) applies a
model's gradients with its compiled optimizer in the engine (summed over the
replicas: fit's step when the loss is fit's; gradients the loop changed,
e.g. clipped, are written back first); tf.Variables' with the optimizer's
NumPy update (keras/_pyopt.py).
What it does not do: other ops on recorded tensors (NotImplementedError
naming the op when the loss depends on them), several calls of a model with
BatchNormalization in one tape in training (the engine keeps the last call's
activations: an earlier call is run again for its backward, which would
move the statistics twice; without it that is what happens), a subset
of a model's variables in apply_gradients."""
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

    def __init__(self, op=None):
        self.op = op


class _Leaf:
    """A source the tape differentiates with respect to: a tf.Variable read
    inside the tape, or a tensor given to tape.watch."""
    parents = ()

    def __init__(self, source):
        self.source = source


class _EagerOutput:
    """A model call outside strategy.run (_eager.py): its backward runs in
    the engine's open session; x: the call's input when it is recorded (the
    engine then gives its gradient, dx_cols values per example)."""

    def __init__(self, model, session, x, dx_cols, scale, x32, training):
        self.model, self.session, self.seq = model, session, session.seq
        self.parents = (x,) if x is not None else ()
        self.dx_cols, self.scale = dx_cols, scale
        self.x32, self.training = x32, training  # to run the call again (another call came after it)


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
    return any(getattr(x, "_tape_node", None) is not None or _watched_var(x) for x in xs)


def _watched_var(x):
    from ._tensor import Variable
    tape = recording()
    return tape is not None and isinstance(x, Variable) and tape._records(x)


def live(x):
    """x for a recorded op: a Variable the tape watches as a recorded read
    of its value; anything else as it is."""
    if _watched_var(x):
        return x.value()
    return x


def variable_read(var, value):
    """A Variable's value read inside a tape that watches it."""
    tape = recording()
    if tape is not None and tape._records(var):
        value._tape_node = _Leaf(var)
    return value


def model_output(model, ctx, out):
    """A model call's output on a replica (ctx: its ReplicaContext)."""
    ctx._fwd_seq = getattr(ctx, "_fwd_seq", 0) + 1
    t = np.asarray(out).view(Tensor)
    if recording() is not None:
        t._tape_node = _ModelOutput(model, ctx, out.shape)
    return t


def eager_output(model, session, out, x, dx_cols, scale, x32, training):
    """A model call's output outside strategy.run (x: its input when
    recorded; x32, training: what the engine's forward took)."""
    t = np.asarray(out).view(Tensor)
    if recording() is not None:
        t._tape_node = _EagerOutput(model, session, x, dx_cols, scale, x32, training)
    return t


def _unbroadcast(g, a):
    g = np.asarray(g)
    while g.ndim > np.ndim(a):
        g = g.sum(axis=0)
    for ax, d in enumerate(np.shape(a)):
        if d == 1 and g.shape[ax] != 1:
            g = g.sum(axis=ax, keepdims=True)
    return g


def _matmul_vjp(g, a, b):
    if np.ndim(a) < 2 or np.ndim(b) < 2:
        raise NotImplementedError("GradientTape: matmul of a vector is not differentiated by Strata "
                                  "(use 2-D operands)")
    da = np.matmul(g, np.swapaxes(b, -1, -2))
    db = np.matmul(np.swapaxes(a, -1, -2), g)
    return [_unbroadcast(da, a), _unbroadcast(db, b)]


def _pow_vjp(g, a, b):
    da = g * b * np.power(a, b - 1)
    db = None
    if np.ndim(b) or not isinstance(b, (int, float)):
        with np.errstate(divide="ignore", invalid="ignore"):
            db = np.where(a > 0, g * np.power(a, b) * np.log(np.where(a > 0, a, 1)), 0.0)
        db = _unbroadcast(db, b)
    return [_unbroadcast(da, a), db]


# d out / d inputs of NumPy's ufuncs on recorded tensors: f(g, inputs, out)
_UFUNC_VJP = {
    "add": lambda g, x, o: [_unbroadcast(g, x[0]), _unbroadcast(g, x[1])],
    "subtract": lambda g, x, o: [_unbroadcast(g, x[0]), _unbroadcast(-g, x[1])],
    "multiply": lambda g, x, o: [_unbroadcast(g * x[1], x[0]), _unbroadcast(g * x[0], x[1])],
    "true_divide": lambda g, x, o: [_unbroadcast(g / x[1], x[0]),
                                    _unbroadcast(-g * x[0] / (x[1] * x[1]), x[1])],
    "divide": lambda g, x, o: [_unbroadcast(g / x[1], x[0]), _unbroadcast(-g * x[0] / (x[1] * x[1]), x[1])],
    "negative": lambda g, x, o: [-g],
    "positive": lambda g, x, o: [g],
    "matmul": lambda g, x, o: _matmul_vjp(g, x[0], x[1]),
    "power": lambda g, x, o: _pow_vjp(g, x[0], x[1]),
    "square": lambda g, x, o: [2.0 * g * x[0]],
    "sqrt": lambda g, x, o: [g * 0.5 / o],
    "exp": lambda g, x, o: [g * o],
    "log": lambda g, x, o: [g / x[0]],
    "log1p": lambda g, x, o: [g / (1.0 + x[0])],
    "tanh": lambda g, x, o: [g * (1.0 - o * o)],
    "abs": lambda g, x, o: [g * np.sign(x[0])],
    "reciprocal": lambda g, x, o: [-g * o * o],
    "logaddexp": lambda g, x, o: [_unbroadcast(g * np.exp(x[0] - o), x[0]),
                                  _unbroadcast(g * np.exp(x[1] - o), x[1])],
    "maximum": lambda g, x, o: [_unbroadcast(g * (x[0] >= x[1]), x[0]),
                                _unbroadcast(g * (x[0] < x[1]), x[1])],
    "minimum": lambda g, x, o: [_unbroadcast(g * (x[0] <= x[1]), x[0]),
                                _unbroadcast(g * (x[0] > x[1]), x[1])],
}


def ufunc(uf, inputs):
    """A recorded result of a NumPy ufunc (+ - * / ** @, exp, log, tanh,
    maximum, ...) on recorded tensors."""
    inputs = [live(x) for x in inputs]
    if uf.__name__ not in _UFUNC_VJP:  # no gradient in Strata: harmless unless the loss uses it
        arrs = [x.view(np.ndarray) if isinstance(x, Tensor) else x for x in inputs]
        t = np.asarray(uf(*arrs)).view(Tensor)
        t._tape_node = _Untracked("np.%s" % uf.__name__)
        return t
    dt = next((x.dtype for x in inputs if isinstance(x, Tensor)), None)
    arrs = [x.view(np.ndarray) if isinstance(x, Tensor) else
            np.asarray(x, dtype=dt) if dt is not None and dt.kind == "f" and isinstance(x, (int, float))
            and not isinstance(x, bool) else np.asarray(x) for x in inputs]
    out = uf(*arrs)
    vjp_of = _UFUNC_VJP[uf.__name__]

    def vjp(g):
        return vjp_of(np.asarray(g, dtype=np.float64), arrs, out)
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
    """tf.GradientTape (see the module's comment for what it records)."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent, self._used = bool(persistent), False
        self._auto, self._watched = bool(watch_accessed_variables), set()

    def __enter__(self):
        if not hasattr(_local, "tapes"):
            _local.tapes = []
        _local.tapes.append(self)
        return self

    def __exit__(self, *exc):
        _local.tapes.remove(self)
        return False

    def _records(self, var):
        return (self._auto and var.trainable) or id(var) in self._watched

    def watch(self, tensor):
        """Record tensor (or a tf.Variable) as a source of gradients."""
        from ._tensor import Variable
        for t in (tensor if isinstance(tensor, (list, tuple)) else [tensor]):
            if isinstance(t, Variable):
                self._watched.add(id(t))
            elif isinstance(t, Tensor):
                if getattr(t, "_tape_node", None) is None:
                    t._tape_node = _Leaf(t)
            elif getattr(t, "_model", None) is not None:
                continue  # a model's variable: its call is recorded
            else:
                raise ValueError("GradientTape.watch: %r is not a tensor or variable (make it one with "
                                 "tf.constant / tf.Variable first)" % (tensor,))

    def watched_variables(self):
        return ()

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

    def reset(self):
        self._used = False

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients=None):
        if self._used and not self._persistent:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of gradients")
        self._used = True
        if isinstance(target, (list, tuple)):
            if len(target) != 1:
                raise NotImplementedError("GradientTape.gradient: a list of targets is not supported by Strata "
                                          "(add them: tf.add_n(targets))")
            target = target[0]
        flat = list(sources.values()) if isinstance(sources, dict) else (
            list(sources) if isinstance(sources, (list, tuple)) else [sources])
        leaves, engine = _backprop(target, output_gradients)
        zero = str(getattr(unconnected_gradients, "value", unconnected_gradients)).lower() == "zero"
        grads = []
        for v in flat:
            model = getattr(v, "_model", None)
            if model is not None and isinstance(v, ModelVariable):
                got = engine.get(id(model))
                g = None if got is None else got(v)
            else:
                g = leaves.get(id(v))
                if g is not None:
                    g = np.asarray(g).astype(np.result_type(getattr(v, "dtype", np.float32), np.float32)).view(Tensor)
            if g is None and zero:
                g = np.zeros(tuple(v.shape), np.float32).view(Tensor)
            grads.append(g)
        if not leaves and not engine:
            raise ValueError("GradientTape.gradient: the target was not computed inside this tape from a model "
                             "call, a watched tensor or a trainable tf.Variable")
        if isinstance(sources, dict):
            return dict(zip(sources.keys(), grads))
        return grads if isinstance(sources, (list, tuple)) else grads[0]


def _topo(target):
    order, seen, stack = [], set(), [(target, False)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        for p in getattr(t._tape_node, "parents", ()):
            if getattr(p, "_tape_node", None) is not None and id(p) not in seen:
                stack.append((p, False))
    return order


def _backprop(target, seed):
    """Reverse pass from target: ({id(source): gradient} of the leaves,
    {id(model): function ModelVariable -> its gradient} of the models whose
    calls the target depends on; their backward ran in the engine)."""
    if getattr(target, "_tape_node", None) is None:
        return {}, {}
    grads = {id(target): np.ones(np.shape(target)) if seed is None else np.asarray(seed, dtype=np.float64)}
    leaves, engine = {}, {}
    for t in reversed(_topo(target)):
        g = grads.pop(id(t), None)
        if g is None:
            continue
        node = t._tape_node
        if isinstance(node, _Untracked):
            raise NotImplementedError("GradientTape: the loss depends on an op Strata's tape does not "
                                      "differentiate%s (it records the Keras losses, tf.nn.compute_average_loss, "
                                      "tf.reduce_sum / reduce_mean, tf.matmul, tf.nn.relu / sigmoid / tanh / "
                                      "softmax, tf.reshape and + - * / ** @ exp log of tensors)"
                                      % (" (%s)" % node.op if node.op else ""))
        if isinstance(node, _Leaf):
            k = id(node.source)
            leaves[k] = leaves.get(k, 0) + g
            continue
        if isinstance(node, _ModelOutput):
            if id(node.model) in engine:
                raise NotImplementedError("GradientTape: the loss depends on several calls of model %s; "
                                          "Strata's engine keeps the activations of one call"
                                          % node.model.name)
            engine[id(node.model)] = _replica_backward(node, g)
            continue
        if isinstance(node, _EagerOutput):
            acc = engine.setdefault(id(node.model), _EagerGrads(node.model))
            dx = acc.add(node, g)
            if dx is not None:
                p = node.parents[0]
                grads[id(p)] = grads.get(id(p), 0) + dx.reshape(np.shape(p))
            continue
        for p, gp in zip(node.parents, node.vjp(g)):
            if gp is not None and getattr(p, "_tape_node", None) is not None:
                grads[id(p)] = grads.get(id(p), 0) + gp
    return leaves, engine


def _replica_backward(node, dy):
    """A model call inside strategy.run: the engine's backward; its
    variables' gradients stay in the replica (EngineGradient)."""
    if node.ctx._fwd_seq != node.seq:
        raise NotImplementedError("GradientTape.gradient: the model was called again on this replica after "
                                  "the call the loss comes from; Strata's engine keeps the activations of "
                                  "the last call only: take the gradient before calling the model again")
    from . import _strata
    dy = np.asarray(dy)
    _strata.replica_backward(node.handle, np.ascontiguousarray(dy.reshape(len(dy), -1), dtype=np.float32))
    return lambda v: EngineGradient(node.model, node.handle, v._index_t)


class _EagerGrads:
    """A model's variables' gradients over its calls in the tape (outside
    strategy.run): each call's engine backward in the model's open session,
    read back and summed. One call: the Tensors are marked as the engine's
    own, so apply_gradients applies them in the engine (fit's bytes)."""

    def __init__(self, model):
        self.model, self.flat, self.calls, self.mark = model, None, 0, None

    def add(self, node, dy):
        from . import _eager
        s, model = node.session, node.model
        if _eager.current(model) is not s:
            raise NotImplementedError("GradientTape.gradient: model %s was used by another verb (fit, predict, "
                                      "get_weights, apply_gradients ...) after the call the loss comes from; "
                                      "take the gradient before using the model again" % model.name)
        if s.seq != node.seq:  # another call came after this one: run this one again (same step, same masks)
            if node.training and any(type(l).__name__ == "BatchNormalization" for l in model._engine_layers):
                raise NotImplementedError(
                    "GradientTape.gradient: model %s was called again after the call the loss comes from, and "
                    "running that call again in training would update its BatchNormalization statistics twice; "
                    "take the gradient before calling the model again, or call it once on the concatenated "
                    "batch" % model.name)
            s.forward(node.x32, node.training)
        dx, flat = s.backward(np.asarray(dy), node.dx_cols if node.parents else 0)
        if dx is not None and node.scale != 1.0:
            dx = dx * np.float32(node.scale)
        self.flat = flat if self.flat is None else self.flat + flat
        self.calls += 1
        self.mark = (s, s.grad_gen)
        return dx

    def __call__(self, v):
        o, shape = self.model._trainable_offsets()[v._index_t]
        t = self.flat[o:o + int(np.prod(shape))].reshape(shape).copy().view(Tensor)
        if self.calls == 1:
            t._engine = self.mark + (v._index_t,)
        return t


class ModelVariable:
    """One of model.trainable_variables: the name and shape of an engine
    variable (its value: .numpy(), read from the engine outside a run)."""

    def __init__(self, model, index, name, shape, index_t=None):
        self._model, self._index, self.name, self.shape = model, index, name, tuple(shape)
        self._index_t = index if index_t is None else index_t  # among the trainable variables
        self.trainable = True
        self.dtype = np.dtype(np.float32)

    def numpy(self):
        return self._model.get_weights()[self._index]

    def value(self):
        return self.numpy().view(Tensor)

    read_value = value

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        return "<tf.Variable '%s' shape=%s dtype=float32>" % (self.name, self.shape)


def apply_gradients(optimizer, grads_and_vars):
    """optimizer.apply_gradients: a model's variables' gradients applied in
    the engine with the model's compiled optimizer (summed over the replicas:
    fit's update); tf.Variables' with the optimizer's own update
    (keras/_pyopt.py)."""
    pairs = list(grads_and_vars)
    if not pairs:
        raise ValueError("apply_gradients: no gradients given")
    from .distribute import _ps_step
    if _ps_step.active() is not None:  # a parameter-server step's trace: recorded, not applied
        return _ps_step.active().on_apply(optimizer, pairs)
    by_model, plain = {}, []
    for g, v in pairs:
        if isinstance(v, ModelVariable):
            by_model.setdefault(id(v._model), []).append((g, v))
        else:
            plain.append((g, v))
    for group in by_model.values():
        _apply_model(optimizer, group)
    if plain:
        from .keras import _pyopt
        _pyopt.apply(optimizer, plain)


def _apply_model(optimizer, pairs):
    model = pairs[0][1]._model
    if all(isinstance(g, EngineGradient) for g, _ in pairs):
        return _apply_replica(optimizer, pairs)
    if any(isinstance(g, EngineGradient) for g, _ in pairs):
        raise NotImplementedError("apply_gradients: gradients from inside and outside strategy.run mixed")
    tv = model.trainable_variables
    if len(pairs) != len(tv) or any(v is not w for (_, v), w in zip(pairs, tv)):
        raise NotImplementedError("apply_gradients: Strata applies all of a model's trainable variables' "
                                  "gradients at once, in model.trainable_variables' order (%d given, %d "
                                  "variables)" % (len(pairs), len(tv)))
    if any(g is None for g, _ in pairs):
        raise NotImplementedError("apply_gradients: a gradient is None (a variable the loss does not use); "
                                  "Strata's engine updates every variable of model %s" % model.name)
    from . import _eager
    recompiled = _bind_optimizer(model, optimizer)
    s = _eager.current(model)
    engine = [getattr(g, "_engine", None) for g, _ in pairs]
    if (not recompiled and s is not None and all(e is not None and e[0] is s and e[1] == s.grad_gen
                                                 and e[2] == i for i, e in enumerate(engine))):
        s.apply()  # the engine's own gradients, unchanged: fit's update bytes
        return
    flat = np.concatenate([np.asarray(g, dtype=np.float32).reshape(-1) for g, _ in pairs])
    s = _eager.session(model)
    s.set_gradients(flat)
    s.apply()


def _bind_optimizer(model, optimizer):
    """The model's engine applies `optimizer`: a model compiled for a custom
    loop only (a placeholder loss) is compiled again with it (the weights
    stay); True when that happened."""
    if model.optimizer is optimizer:
        return False
    if model._compile_args is not None and not getattr(model, "_placeholder_loss", False):
        raise NotImplementedError("apply_gradients: the optimizer must be the one the model was compiled with "
                                  "(model.optimizer); Strata's engine applies the compiled optimizer")
    from . import _eager
    _eager.close(model)
    model.compile(optimizer=optimizer, loss="mean_squared_error")
    model._placeholder_loss = True  # fit / evaluate still ask for compile
    model._ensure_compiled("apply_gradients")
    return True


def _apply_replica(optimizer, pairs):
    """Inside strategy.run: the replicas' sum applied with the model's
    compiled optimizer."""
    g0 = pairs[0][0]
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
