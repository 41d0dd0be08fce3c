"""Helpers shared by the strata package: argument checks, array conversion,
the global seed and the NotImplementedError for unsupported TensorFlow
arguments."""
import numpy as np

from . import _strata

_state = {"seed": None, "models": 0}


def global_seed():
    """The seed set by tf.random.set_seed / tf.keras.utils.set_random_seed
    (0 when none was set: Strata's runs are deterministic by default)."""
    s = _state["seed"]
    return 0 if s is None else int(s)


def set_global_seed(seed):
    if seed is not None:
        seed = int(seed)
        if seed < 0 or seed >= 2 ** 63:
            raise ValueError("seed %d is out of range [0, 2**63)" % seed)
    _state["seed"] = seed
    _state["models"] = 0


def next_init_seed():
    """The seed of the initial weights of the next model built (TF's global
    generator hands each new model the next op seeds: two models built in one
    program differ, the same program run again gets the same weights, and
    tf.random.set_seed starts the sequence again). The first model after a
    seed S is set (or of a program that sets none: S = 0) gets S itself, the
    weights `strata train --seed S` gives; model k > 0 a seed mixed from
    (S, k). Dropout masks and fit's shuffling stay keyed by S, the step and
    the layer (the model's seed), so a model rebuilt to restore a checkpoint
    or a backup continues with the masks of the run that wrote it."""
    k = _state["models"]
    _state["models"] = k + 1
    s = global_seed()
    if k == 0:
        return s
    return int(np.random.SeedSequence([s, k]).generate_state(1, np.uint64)[0]) & (2 ** 63 - 1)


def unsupported(where, **kwargs):
    """Raise NotImplementedError naming the first argument whose value is not
    the one Strata implements (kwargs: name -> (value, allowed values...))."""
    for name, spec in kwargs.items():
        value, allowed = spec[0], spec[1:]
        if not any(value is a or (type(value) == type(a) and value == a) for a in allowed):
            raise NotImplementedError(
                "%s: argument %s=%r is not supported by Strata (supported: %s)"
                % (where, name, value, ", ".join(repr(a) for a in allowed)))


def reject_kwargs(where, kwargs, allowed=()):
    """NotImplementedError for any keyword argument Strata does not take."""
    for k, v in kwargs.items():
        if k not in allowed:
            raise NotImplementedError(
                "%s: argument %s=%r is not supported by Strata" % (where, k, v))


def as_array(a, what):
    """a as a NumPy array; ragged nested lists and non-numeric data raise
    ValueError naming what."""
    if hasattr(a, "numpy") and not isinstance(a, np.ndarray):
        a = a.numpy()
    try:
        arr = np.asarray(a)
    except (ValueError, TypeError) as e:
        raise ValueError("%s: cannot be made an array (ragged or mixed data?): %s" % (what, e)) from None
    if arr.dtype == object:
        raise ValueError("%s: ragged or non-numeric data (NumPy dtype object); "
                         "every example must have the same shape" % what)
    if arr.dtype.kind not in "biuf":
        raise ValueError("%s: dtype %s is not numeric" % (what, arr.dtype))
    return arr


def features(x, what="x"):
    """x as a C-contiguous array Strata reads without a copy: uint8, float32
    and int32 stay as they are (zero-copy when contiguous); float64, int64,
    bool ... are converted to float32, as Keras casts its inputs."""
    x = as_array(x, what)
    if x.ndim == 0:
        raise ValueError("%s: a scalar; expected an array with a batch dimension" % what)
    if x.ndim > 5:
        raise ValueError("%s: rank %d (at most 5 with the batch dimension)" % (what, x.ndim))
    if x.dtype not in (np.uint8, np.float32, np.int32):
        x = x.astype(np.float32)
    x = np.ascontiguousarray(x)
    if x.dtype == np.float32 and x.size and not np.isfinite(x).all():
        bad = np.argwhere(~np.isfinite(x))[0]
        raise ValueError("%s: non-finite value %r at index %s" % (what, x[tuple(bad)], tuple(int(i) for i in bad)))
    return x


def labels(y, sparse, what="y", positions=1):
    """y as float32 / int32 labels; NaN labels and (sparse losses) labels that
    are not whole numbers raise ValueError naming the row. positions > 1: a
    sparse loss over a model output (T, classes) takes (n, T) labels, one
    class index per position (a language model's next tokens)."""
    y = as_array(y, what)
    if y.ndim == 0:
        raise ValueError("%s: a scalar; expected one label per example" % what)
    if y.dtype.kind == "f":
        y = y.astype(np.float32)
        if y.size and not np.isfinite(y).all():
            row = int(np.argwhere(~np.isfinite(y))[0][0])
            raise ValueError("%s: label of example %d is %r (labels must be finite)"
                             % (what, row, y.reshape(len(y), -1)[row].tolist()))
    elif y.dtype != np.uint8 and y.dtype != np.int32:
        if y.size and (y.min() < -2 ** 31 or y.max() >= 2 ** 31):
            raise ValueError("%s: labels out of the int32 range" % what)
        y = y.astype(np.int32)
    if sparse:
        if y.ndim == 2 and y.shape[1] == 1:
            y = y.reshape(len(y))
        if positions > 1 and y.ndim >= 2 and int(np.prod(y.shape[1:])) == positions:
            y = y.reshape(len(y), positions)
        elif y.ndim != 1:
            raise ValueError("%s: shape %s; a sparse loss takes one class index per example "
                             "(shape (n,)); for one-hot labels use categorical_crossentropy"
                             % (what, y.shape))
        if y.dtype == np.float32 and y.size and (y != np.round(y)).any():
            row = int(np.argwhere(y != np.round(y))[0][0])
            raise ValueError("%s: label %r of example %d is not a class index" % (what, float(y[row]), row))
    return np.ascontiguousarray(y)


class Missing(AttributeError, NotImplementedError):
    """A TensorFlow name Strata does not provide (yet): an AttributeError
    (hasattr() answers False) that is also a NotImplementedError."""


def missing(where, name):
    """The error for tf-name `where.name` that Strata does not have."""
    if name.startswith("__") and name.endswith("__"):
        return AttributeError("module %r has no attribute %r" % (where, name))
    return Missing("%s.%s: Strata does not provide %s.%s yet (see README.md, \"Python\", for what "
                   "exists)" % (where, name, where, name))


def namespace(where, module_name, members):
    """A module (registered as module_name in sys.modules) holding members,
    whose unknown attributes raise missing(where, name)."""
    import sys
    import types

    class _NS(types.ModuleType):
        def __getattr__(self, name):
            raise missing(where, name)

        def __dir__(self):
            return sorted(members)

    ns = _NS(module_name)
    ns.__dict__.update(members)
    sys.modules.setdefault(module_name, ns)
    return ns
