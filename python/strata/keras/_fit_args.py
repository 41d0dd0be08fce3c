"""fit's argument checks (validation_freq, class_weight), shared by the
models."""
import math

import numpy as np


def _validation_epochs(freq):
    """Keras's _should_eval as a function of the 1-based epoch: every
    `freq`th epoch for an int, the listed epochs for a list/tuple/set."""
    if isinstance(freq, (int, np.integer)) and not isinstance(freq, bool):
        if freq < 1:
            raise ValueError("fit: validation_freq=%r must be at least 1" % (freq,))
        return lambda e: e % int(freq) == 0
    if isinstance(freq, (list, tuple, set, frozenset, range)):
        epochs = set()
        for e in freq:
            if not isinstance(e, (int, np.integer)) or isinstance(e, bool) or e < 1:
                raise ValueError("fit: validation_freq=%r: epochs are integers from 1" % (freq,))
            epochs.add(int(e))
        return lambda e: e in epochs
    raise ValueError("fit: validation_freq=%r: expected an int or a list of epochs" % (freq,))


def _class_weights(where, class_weight):
    """Keras 3's class_weight dict as the engine's weight per class 0..max
    key (a class between the keys weighs 1.0); None for None."""
    if class_weight is None:
        return None
    if not isinstance(class_weight, dict):
        raise ValueError("%s: class_weight=%r must be a dict {class: weight}" % (where, class_weight))
    if not class_weight:
        return None
    for k, v in class_weight.items():
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0:
            raise ValueError("%s: class_weight key %r is not a class index (an integer >= 0)" % (where, k))
        if not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(float(v)):
            raise ValueError("%s: class_weight[%r] = %r is not a finite number" % (where, k, v))
    top = max(int(k) for k in class_weight)
    if top >= _MAX_CLASSES:  # issue 29 D11: a list of top + 1 weights, before anything else ran
        raise ValueError("%s: class_weight key %d: at most %d classes (keys 0 .. %d)"
                         % (where, top, _MAX_CLASSES, _MAX_CLASSES - 1))
    return [float(class_weight.get(c, 1.0)) for c in range(top + 1)]


_MAX_CLASSES = 1 << 20
_MAX_EPOCHS = (1 << 31) - 1  # the engine counts epochs in an int


def _check_class_keys(where, cweights, output_shape):
    """class_weight keys against the model's outputs (N outputs: classes
    0..N-1; one output, binary: 0 and 1)."""
    if cweights is None or not output_shape or output_shape[-1] is None:
        return
    classes = max(int(output_shape[-1]), 2)
    if len(cweights) > classes:
        raise ValueError("%s: class_weight key %d is not a class of this model (its %d output%s "
                         "give classes 0 .. %d)" % (where, len(cweights) - 1, int(output_shape[-1]),
                                                    "s" if output_shape[-1] != 1 else "", classes - 1))
