"""tf.keras.metrics: metric objects. In compile, the accuracy metrics the
engine counts in C (one per model); standalone (custom loops), every metric
here keeps Keras's running state: update_state(y_true, y_pred,
sample_weight=None) (Mean: update_state(values)), result() as a float32
tensor, reset_state() / reset_states(), and calling the metric updates it
and returns the result. The state is float32 totals, as Keras keeps it."""
import threading

import numpy as np

from .._tensor import tensor
from .._util import missing


def _arr(x):
    return np.asarray(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x)


class Metric:
    """Base of the metric objects. `_code` is the engine's metric kind for
    compile (None: standalone only); subclasses define _values(y_true,
    y_pred) -> per-example values whose (weighted) mean is the result."""
    _code = None
    _default = "metric"

    def __init__(self, name=None, dtype=None):
        self.name = name or self._default
        self.dtype = np.dtype(dtype or np.float32)
        self.reset_state()

    # ---- running state ----
    def reset_state(self):
        self._lock = threading.Lock()  # strategy.run's replicas may update it from their threads
        self._total = np.float32(0)
        self._count = np.float32(0)

    reset_states = reset_state

    def _accumulate(self, values, sample_weight):
        from ..distribute import _ps_step
        if _ps_step.active() is not None:
            _ps_step.refuse("%s.update_state (a metric)" % type(self).__name__)
        with self._lock:
            self._add(values, sample_weight)

    def _add(self, values, sample_weight):
        v = _arr(values).astype(np.float32)
        if sample_weight is None:
            self._total = np.float32(self._total + v.sum(dtype=np.float32))
            self._count = np.float32(self._count + np.float32(v.size))
            return
        w = _arr(sample_weight).astype(np.float32)
        if w.ndim > v.ndim and w.size == v.size:  # [n, 1] weights of [n] values
            w = w.reshape(v.shape)
        w = np.broadcast_to(w.reshape(w.shape + (1,) * (v.ndim - w.ndim)), v.shape)
        self._total = np.float32(self._total + (v * w).sum(dtype=np.float32))
        self._count = np.float32(self._count + w.sum(dtype=np.float32))

    def update_state(self, y_true, y_pred, sample_weight=None):
        self._accumulate(self._values(_arr(y_true), _arr(y_pred)), sample_weight)

    def result(self):
        """The mean so far (0 before any update, as Keras's divide_no_nan)."""
        return tensor(np.float32(0) if self._count == 0 else np.float32(self._total / self._count))

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()

    @property
    def variables(self):
        return [tensor(self._total), tensor(self._count)]

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype.name}

    def __repr__(self):
        return "<%s name=%s>" % (type(self).__name__, self.name)


class Mean(Metric):
    """The (weighted) mean of the values given to update_state(values)."""
    _default = "mean"

    def update_state(self, values, sample_weight=None):
        self._accumulate(values, sample_weight)


class Sum(Metric):
    """The (weighted) sum of the values given to update_state(values)."""
    _default = "sum"

    def update_state(self, values, sample_weight=None):
        self._accumulate(values, sample_weight)

    def result(self):
        return tensor(np.float32(self._total))


def _squeeze_labels(y, p):
    """Sparse labels of shape [n, 1] against predictions [n, k]: [n]."""
    if y.ndim == p.ndim and y.shape[-1] == 1:
        y = y.reshape(y.shape[:-1])
    return y


class Accuracy(Metric):
    """How often y_pred equals y_true, element by element (standalone:
    in compile use metrics=['accuracy'], which follows the loss)."""
    _default = "accuracy"

    def _values(self, y, p):
        return (y == p).astype(np.float32)


class SparseCategoricalAccuracy(Metric):
    """argmax of the prediction equals the class index label."""
    _code, _default = 1, "sparse_categorical_accuracy"

    def _values(self, y, p):
        return (_squeeze_labels(y, p).astype(np.int64) == np.argmax(p, axis=-1)).astype(np.float32)


class CategoricalAccuracy(Metric):
    """argmax of the prediction equals argmax of the one-hot label."""
    _code, _default = 2, "categorical_accuracy"

    def _values(self, y, p):
        return (np.argmax(y, axis=-1) == np.argmax(p, axis=-1)).astype(np.float32)


class BinaryAccuracy(Metric):
    """Elements whose prediction is on the label's side of threshold (in
    compile: 0.5 only)."""
    _code, _default = 3, "binary_accuracy"

    def __init__(self, name=None, dtype=None, threshold=0.5):
        self.threshold = float(threshold)
        super().__init__(name, dtype)

    def _values(self, y, p):
        return (y == (p > self.threshold)).astype(np.float32).mean(axis=-1)


class SparseTopKCategoricalAccuracy(Metric):
    """The class index label is among the k largest predictions."""
    _default = "sparse_top_k_categorical_accuracy"

    def __init__(self, k=5, name=None, dtype=None):
        self.k = int(k)
        super().__init__(name, dtype)

    def _values(self, y, p):
        top = np.argsort(-p, axis=-1, kind="stable")[..., :self.k]
        return (top == _squeeze_labels(y, p).astype(np.int64)[..., None]).any(-1).astype(np.float32)


class TopKCategoricalAccuracy(SparseTopKCategoricalAccuracy):
    """argmax of the one-hot label is among the k largest predictions."""
    _default = "top_k_categorical_accuracy"

    def _values(self, y, p):
        return super()._values(np.argmax(y, axis=-1), p)


class _LossMetric(Metric):
    """The mean of a loss's per-example values (Keras's loss metrics)."""
    _loss = None

    def __init__(self, name=None, dtype=None, from_logits=False, **kwargs):
        self.from_logits = bool(from_logits)
        super().__init__(name, dtype)

    def _values(self, y, p):
        from . import losses
        return getattr(losses, self._loss)(from_logits=self.from_logits, reduction="none")(y, p).numpy()


class SparseCategoricalCrossentropy(_LossMetric):
    _default, _loss = "sparse_categorical_crossentropy", "SparseCategoricalCrossentropy"


class CategoricalCrossentropy(_LossMetric):
    _default, _loss = "categorical_crossentropy", "CategoricalCrossentropy"


class BinaryCrossentropy(_LossMetric):
    _default, _loss = "binary_crossentropy", "BinaryCrossentropy"


class MeanSquaredError(Metric):
    _default = "mean_squared_error"

    def _values(self, y, p):
        return ((y.astype(np.float32) - p.astype(np.float32)) ** 2).mean(axis=-1)


class MeanAbsoluteError(Metric):
    _default = "mean_absolute_error"

    def _values(self, y, p):
        return np.abs(y.astype(np.float32) - p.astype(np.float32)).mean(axis=-1)


class RootMeanSquaredError(MeanSquaredError):
    """sqrt of the mean squared error over everything seen."""
    _default = "root_mean_squared_error"

    def result(self):
        return tensor(np.sqrt(np.float32(super().result())))


_BY_NAME = {"accuracy": 0, "acc": 0, "sparse_categorical_accuracy": 1, "categorical_accuracy": 2,
            "binary_accuracy": 3}


def resolve(m):
    """(engine code, logs key) of a metric name or object for compile."""
    if isinstance(m, str):
        if m not in _BY_NAME:
            raise NotImplementedError("metric %r is not supported by Strata's compile (supported: %s)"
                                      % (m, ", ".join(sorted(_BY_NAME))))
        return _BY_NAME[m], "accuracy" if m == "acc" else m
    if isinstance(m, Metric) and m._code is not None:
        if isinstance(m, BinaryAccuracy) and m.threshold != 0.5:
            raise NotImplementedError("BinaryAccuracy: threshold=%r is not supported by Strata's compile "
                                      "(0.5 only; standalone update_state takes any)" % (m.threshold,))
        return m._code, m.name
    raise NotImplementedError("metric %r is not supported by Strata's compile (supported: %s and the "
                              "SparseCategoricalAccuracy, CategoricalAccuracy, BinaryAccuracy objects); "
                              "other metric objects work standalone (update_state / result)"
                              % (m, ", ".join(sorted(_BY_NAME))))


def __getattr__(name):
    raise missing("tf.keras.metrics", name)
