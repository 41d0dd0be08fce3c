"""tf.keras.losses: the losses the engine computes in C, by name or object
(from_logits as Keras: False by default)."""
import numpy as np

from .._tensor import tensor
from .._util import missing


class Reduction:
    """tf.keras.losses.Reduction (Keras 2's names; Keras 3 takes the strings)."""
    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls):
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)


class Loss:
    """Base of the loss objects; `_engine_name` is Strata's loss name."""
    _base = None

    def __init__(self, from_logits=False, reduction="sum_over_batch_size", name=None, **kwargs):
        for k, default in (("label_smoothing", 0.0), ("axis", -1), ("ignore_class", None)):
            if k in kwargs and kwargs[k] != default:
                raise NotImplementedError("%s: argument %s=%r is not supported by Strata"
                                          % (type(self).__name__, k, kwargs[k]))
            kwargs.pop(k, None)
        if kwargs:
            k = sorted(kwargs)[0]
            raise NotImplementedError("%s: argument %s is not supported by Strata" % (type(self).__name__, k))
        if reduction not in Reduction.all() + (None,):
            raise ValueError("%s: reduction=%r (expected one of %s)" % (type(self).__name__, reduction,
                                                                         ", ".join(Reduction.all())))
        self.reduction = reduction or "none"
        self.from_logits = bool(from_logits)
        self.name = name or self._base

    @property
    def _engine_name(self):
        return self._base + ("_from_logits" if self.from_logits else "")

    def __call__(self, y_true, y_pred, sample_weight=None):
        """The loss of a batch as a float32 tensor, computed with NumPy (for
        custom loops): per example for reduction 'none', else their
        (weighted) sum, divided by the batch size for 'sum_over_batch_size'
        (the default)."""
        from .. import _tape
        from ..distribute import _ps_step
        if _ps_step.active() is not None:  # a parameter-server step's trace
            _ps_step.active().on_loss(self)
        pred_in = y_pred
        y_pred = np.asarray(y_pred, dtype=np.float64)
        y_true = np.asarray(y_true, dtype=np.float64)
        per = np.asarray(self._per_example(y_true, y_pred), dtype=np.float64)
        w = None
        if sample_weight is not None:
            w = np.asarray(sample_weight, dtype=np.float64)
            w = w.reshape(w.shape[:per.ndim] if w.ndim > per.ndim else w.shape + (1,) * (per.ndim - w.ndim))
            per = per * w
        scale = 1.0 if self.reduction in ("none", "sum") else 1.0 / max(per.size, 1)
        out = per.astype(np.float32) if self.reduction == "none" else np.float32(per.sum() * scale)
        if not _tape.recorded(pred_in):
            return tensor(out)

        def vjp(g):  # d loss / d y_pred (a GradientTape step)
            gper = np.broadcast_to(np.asarray(g, dtype=np.float64) * scale, per.shape)
            if w is not None:
                gper = gper * w
            return [gper[..., None] * self._grad(y_true, y_pred)]
        return _tape.track(out, [pred_in], vjp)

    def get_config(self):
        return {"name": self.name, "reduction": self.reduction, "from_logits": self.from_logits}


def _grad_ce(y, p, from_logits):
    """d(-sum(y log softmax(p))) / dp (logits), or d(-sum(y log p)) / dp
    (probabilities, zero where the clip to [1e-7, 1 - 1e-7] holds)."""
    if from_logits:
        e = np.exp(p - p.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True) * y.sum(axis=-1, keepdims=True) - y
    inside = (p > 1e-7) & (p < 1 - 1e-7)
    return np.where(inside, -y / np.clip(p, 1e-7, 1 - 1e-7), 0.0)


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


class SparseCategoricalCrossentropy(Loss):
    """Class-index labels; from_logits=False expects probabilities."""
    _base = "sparse_categorical_crossentropy"

    def _per_example(self, y, p):
        lp = _log_softmax(p) if self.from_logits else np.log(np.clip(p, 1e-7, 1 - 1e-7))
        y = y.astype(int)
        if y.ndim == lp.ndim:
            y = y[..., 0]
        return -np.take_along_axis(lp, y[..., None], -1)[..., 0]

    def _grad(self, y, p):
        y = y.astype(int)
        if y.ndim == p.ndim:
            y = y[..., 0]
        hot = np.zeros_like(p)
        np.put_along_axis(hot, y[..., None], 1.0, -1)
        return _grad_ce(hot, p, self.from_logits)


class CategoricalCrossentropy(Loss):
    """One-hot labels; from_logits=False expects probabilities."""
    _base = "categorical_crossentropy"

    def _per_example(self, y, p):
        lp = _log_softmax(p) if self.from_logits else np.log(np.clip(p, 1e-7, 1 - 1e-7))
        return -(y * lp).sum(axis=-1)

    def _grad(self, y, p):
        return _grad_ce(y, p, self.from_logits)


class BinaryCrossentropy(Loss):
    """0/1 labels; from_logits=False expects probabilities."""
    _base = "binary_crossentropy"

    def _per_example(self, y, p):
        if self.from_logits:
            p = 1 / (1 + np.exp(-p))
        p = np.clip(p, 1e-7, 1 - 1e-7)
        return -(y * np.log(p) + (1 - y) * np.log(1 - p)).mean(axis=-1)

    def _grad(self, y, p):
        k = p.shape[-1]
        if self.from_logits:
            return (1 / (1 + np.exp(-p)) - y) / k
        inside = (p > 1e-7) & (p < 1 - 1e-7)
        q = np.clip(p, 1e-7, 1 - 1e-7)
        return np.where(inside, (-y / q + (1 - y) / (1 - q)) / k, 0.0)


class MeanSquaredError(Loss):
    """Mean of the squared differences (no from_logits)."""
    _base = "mean_squared_error"

    def __init__(self, reduction="sum_over_batch_size", name=None):
        super().__init__(False, reduction, name)

    def _per_example(self, y, p):
        return ((y - p) ** 2).mean(axis=-1)

    def _grad(self, y, p):
        return 2 * (p - y.reshape(p.shape)) / p.shape[-1]


_BY_NAME = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "mean_squared_error": MeanSquaredError, "mse": MeanSquaredError,
}


def get(identifier):
    """A loss object from a Keras name or a loss object."""
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier)
        if cls is None:
            raise ValueError("Unknown loss function: %r (Strata has: %s)" % (identifier, ", ".join(sorted(_BY_NAME))))
        return cls()
    if callable(identifier):
        name = getattr(identifier, "__name__", "")
        if name in _BY_NAME:
            return _BY_NAME[name]()
        raise NotImplementedError("loss %r: custom loss functions are not supported by Strata" % (identifier,))
    raise ValueError("Could not interpret loss identifier: %r" % (identifier,))


# The functions give the per-example losses, as Keras's do.
def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, axis=-1, ignore_class=None):
    return SparseCategoricalCrossentropy(from_logits, reduction="none")(y_true, y_pred)


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    return CategoricalCrossentropy(from_logits, reduction="none", label_smoothing=label_smoothing)(y_true, y_pred)


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    return BinaryCrossentropy(from_logits, reduction="none", label_smoothing=label_smoothing)(y_true, y_pred)


def mean_squared_error(y_true, y_pred):
    return MeanSquaredError(reduction="none")(y_true, y_pred)


def __getattr__(name):
    raise missing("tf.keras.losses", name)


mse = mean_squared_error
