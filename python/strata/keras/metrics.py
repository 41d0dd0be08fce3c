"""tf.keras.metrics: the accuracy metrics the engine counts in C."""


class Metric:
    """Base of the metric objects; `_code` is the engine's metric kind."""
    _code = 0
    _default = "accuracy"

    def __init__(self, name=None, dtype=None):
        self.name = name or self._default


class SparseCategoricalAccuracy(Metric):
    """argmax of the prediction equals the class index label."""
    _code, _default = 1, "sparse_categorical_accuracy"


class CategoricalAccuracy(Metric):
    """argmax of the prediction equals argmax of the one-hot label."""
    _code, _default = 2, "categorical_accuracy"


class BinaryAccuracy(Metric):
    """Elements whose prediction is on the label's side of 0.5."""
    _code, _default = 3, "binary_accuracy"

    def __init__(self, name=None, dtype=None, threshold=0.5):
        if threshold != 0.5:
            raise NotImplementedError("BinaryAccuracy: threshold=%r is not supported by Strata" % (threshold,))
        super().__init__(name, dtype)


_BY_NAME = {"accuracy": 0, "acc": 0, "sparse_categorical_accuracy": 1, "categorical_accuracy": 2,
            "binary_accuracy": 3}


def resolve(m):
    """(engine code, logs key) of a metric name or object."""
    if isinstance(m, str):
        if m not in _BY_NAME:
            raise NotImplementedError("metric %r is not supported by Strata (supported: %s)"
                                      % (m, ", ".join(sorted(_BY_NAME))))
        return _BY_NAME[m], "accuracy" if m == "acc" else m
    if isinstance(m, Metric):
        return m._code, m.name
    raise NotImplementedError("metric %r is not supported by Strata (supported: %s and the "
                              "SparseCategoricalAccuracy, CategoricalAccuracy, BinaryAccuracy objects)"
                              % (m, ", ".join(sorted(_BY_NAME))))


def __getattr__(name):
    if name[:1].isupper():
        raise NotImplementedError("tf.keras.metrics.%s is not supported by Strata" % name)
    raise AttributeError("module 'strata.keras.metrics' has no attribute %r" % name)
