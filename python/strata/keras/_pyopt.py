"""optimizer.apply_gradients on tf.Variables (a custom layer's add_weight
variables, or variables of a custom loop): the optimizer's update in NumPy
with Keras 3's formulas (SGD with momentum / Nesterov, Adam, AdamW, RMSprop),
float32 like the engine's. The optimizer keeps one slot set per variable and
its own step count for these variables (a model's engine variables keep
theirs in the engine)."""
import math

import numpy as np


def _lr(opt, step):
    kind, lr, steps, rate, stair, alpha = opt._schedule
    if kind == "exponential":
        p = step / steps
        return lr * rate ** (math.floor(p) if stair else p)
    if kind == "cosine":
        p = min(step, steps) / steps
        return lr * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * p)) + alpha)
    return lr


def _slots(opt, var, n):
    table = opt.__dict__.setdefault("_py_slots", {})
    entry = table.get(id(var))
    if entry is None or entry[0] is not var:
        entry = table[id(var)] = (var, [np.zeros(var.shape, np.float32) for _ in range(n)])
    return entry[1]


def _update(opt, var, g, lr, t):
    """The new value of var (float32) after gradient g at step t (1-based)."""
    w = np.asarray(var._value, dtype=np.float32)
    g = np.asarray(g, dtype=np.float32).reshape(w.shape)
    lr = np.float32(lr)
    kind = opt._kind
    if kind == "sgd":
        if not opt.momentum:
            return w - lr * g
        (m,) = _slots(opt, var, 1)
        mom = np.float32(opt.momentum)
        m[...] = mom * m - lr * g
        return w + (mom * m - lr * g if opt.nesterov else m)
    if kind in ("adam", "adamw"):
        m, v = _slots(opt, var, 2)
        b1, b2 = np.float32(opt.beta_1), np.float32(opt.beta_2)
        if kind == "adamw" and opt.weight_decay:
            w = w - w * np.float32(opt.weight_decay) * lr
        lr_t = lr * np.float32(math.sqrt(1 - opt.beta_2 ** t) / (1 - opt.beta_1 ** t))
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        return w - lr_t * m / (np.sqrt(v) + np.float32(opt.epsilon))
    if kind == "rmsprop":
        if opt.momentum:
            raise NotImplementedError("RMSprop(momentum=%r) on tf.Variables is not supported by Strata "
                                      "(momentum 0 is)" % opt.momentum)
        (v,) = _slots(opt, var, 1)
        rho = np.float32(opt.rho)
        v[...] = rho * v + (1 - rho) * g * g
        return w - lr * g / (np.sqrt(v) + np.float32(opt.epsilon))
    raise NotImplementedError("optimizer %s on tf.Variables is not supported by Strata" % kind)


def apply(opt, pairs):
    """One step of opt over [(gradient, tf.Variable)] (None gradients are
    skipped, as Keras does)."""
    from .._tensor import Variable
    opt._py_iterations = getattr(opt, "_py_iterations", 0) + 1
    t = opt._py_iterations
    lr = _lr(opt, t - 1)
    for g, var in pairs:
        if not isinstance(var, Variable):
            raise TypeError("apply_gradients: %r is not a tf.Variable or a model's variable" % (var,))
        if g is None:
            continue
        new = _update(opt, var, g, lr, t)
        var._value[...] = new.astype(var._value.dtype)
        var._assigned()
