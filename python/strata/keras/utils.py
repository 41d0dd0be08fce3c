"""tf.keras.utils: to_categorical, set_random_seed."""
import numpy as np

from .._util import as_array, set_global_seed


def to_categorical(y, num_classes=None, dtype="float32"):
    """One-hot rows of class indices y (Keras's to_categorical)."""
    y = as_array(y, "to_categorical")
    if y.dtype.kind == "f":
        if y.size and (not np.isfinite(y).all() or (y != np.round(y)).any()):
            raise ValueError("to_categorical: labels must be whole numbers")
    y = y.astype(np.int64)
    shape = y.shape
    if len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    y = y.reshape(-1)
    if y.size and y.min() < 0:
        raise ValueError("to_categorical: negative label %d" % y.min())
    if num_classes is None:
        num_classes = int(y.max()) + 1 if y.size else 0
    num_classes = int(num_classes)
    if y.size and y.max() >= num_classes:
        raise ValueError("to_categorical: label %d is out of range for num_classes=%d" % (y.max(), num_classes))
    out = np.zeros((len(y), num_classes), dtype=dtype)
    out[np.arange(len(y)), y] = 1
    return out.reshape(shape + (num_classes,))


def set_random_seed(seed):
    """Seed Strata's weight initialisation, dropout and shuffling (the
    sequence of _util.next_init_seed starts again), and, as Keras does,
    Python's `random` and NumPy's global generator."""
    import random
    set_global_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)


def __getattr__(name):
    from .._util import missing
    raise missing("tf.keras.utils", name)
