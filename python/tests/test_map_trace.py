"""Dataset.map (issue 14): the common Keras preprocessing lambdas are traced
once and run in C (a map stage of the engine's pipeline); the result is the
same bytes as running the map in Python. Untraceable maps stay Python maps."""
import numpy as np
import pytest

import strata as tf
from strata import data

L = tf.keras.layers


def _fit(ds, loss="sparse_categorical_crossentropy", rescale=False, epochs=1):
    tf.random.set_seed(0)
    layers = [L.Rescaling(0.5, input_shape=(28, 28, 1))] if rescale else [L.InputLayer(input_shape=(28, 28, 1))]
    m = tf.keras.Sequential(layers + [L.Flatten(), L.Dense(32, activation="relu"), L.Dense(10)])
    m.compile(optimizer="adam", loss=loss)
    m.fit(ds, epochs=epochs, verbose=0)
    return b"".join(w.tobytes() for w in m.get_weights())


def _python(fn):
    """fn with its results pushed through NumPy: the tracer cannot follow
    np.asarray, so the map runs in Python (the reference)."""
    def wrapped(*args):
        out = fn(*args)
        return tuple(np.asarray(o) for o in out)
    return wrapped


LAMBDAS = {
    "cast_div_255": lambda x, y: (tf.cast(x, tf.float32) / 255., y),
    "scale_shift": lambda x, y: ((tf.cast(x, tf.float32) - 127.5) / 127.5, y),
    "mul_add": lambda x, y: (2.0 * tf.cast(x, tf.float32) * (1 / 255) + 0.25, y),
    "reshape": lambda x, y: (tf.reshape(tf.cast(x, tf.float32) / 255., [28, 28, 1]), y),
}


@pytest.mark.parametrize("name", sorted(LAMBDAS))
def test_traced_map_gives_the_python_maps_bytes(fashion, name):
    (x, y), _ = fashion
    x, y = x[:600], y[:600]
    if name != "reshape":
        x = x[..., None]
    fn = LAMBDAS[name]
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(600, seed=1).map(fn).batch(64)
    ref = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(600, seed=1).map(_python(fn)).batch(64)
    assert data.trace(ds) is not None and data.trace(ref) is None
    # the traced map in C and the same map in Python: one epoch, no reshuffle
    # difference (the Python map's data is materialized in the engine's order)
    a = _fit(tf.data.Dataset.from_tensor_slices((x, y)).map(fn).batch(64))
    b = _fit(tf.data.Dataset.from_tensor_slices((x, y)).map(_python(fn)).batch(64))
    assert a == b
    first = next(iter(ds))[0]  # iteration still runs the lambda in Python
    assert first.dtype == np.float32 and first.shape == (64, 28, 28, 1)


def test_one_hot_and_rescaling_layer(fashion):
    (x, y), _ = fashion
    x, y = x[:500, ..., None], y[:500]
    fn = lambda a, b: (tf.cast(a, tf.float32) / 255., tf.one_hot(b, 10))  # noqa: E731
    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(fn).batch(50)
    assert data.trace(ds)[1].one_hot == 10
    loss = tf.keras.losses.CategoricalCrossentropy(from_logits=True)
    assert _fit(ds, loss) == _fit(tf.data.Dataset.from_tensor_slices((x, y)).map(_python(fn)).batch(50), loss)
    # a Rescaling first layer applies after the map, as in Keras
    assert _fit(ds, loss, rescale=True) == _fit(
        tf.data.Dataset.from_tensor_slices((x, y)).map(_python(fn)).batch(50), loss, rescale=True)


def test_untraceable_maps_stay_python():
    x = np.arange(24, dtype=np.uint8).reshape(6, 4)
    for fn in (lambda a, b: (a[::-1], b),                    # indexing
               lambda a, b: (np.sqrt(a), b),                 # a NumPy function
               lambda a, b: (a / 255., b),                   # uint8 arithmetic widens to float64
               lambda a, b: (tf.cast(a, tf.float32) ** 2, b)):
        ds = tf.data.Dataset.from_tensor_slices((x, np.zeros(6))).map(fn).batch(2)
        assert data.trace(ds) is None
        assert len(list(ds)) == 3


def test_python_map_reruns_each_epoch_when_shuffled():
    """An untraceable map over a reshuffled dataset runs again every epoch,
    in that epoch's order (the engine trains each epoch on it)."""
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    seen = []

    def fn(a, b):
        a = np.asarray(a)  # untraceable: a Python map
        seen.append(int(b))
        return a * 0.5, b

    ds = tf.data.Dataset.from_tensor_slices((x, np.arange(20) % 3)).shuffle(20, seed=4).map(fn).batch(5)
    tf.random.set_seed(0)
    m = tf.keras.Sequential([L.Dense(3, input_shape=(2,))])
    m.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = m.fit(ds, epochs=3, verbose=0)
    assert len(h.history["loss"]) == 3
    assert len(seen) == 60  # 20 elements, every epoch
    assert seen[:20] != seen[20:40] != seen[40:] and sorted(seen[:20]) == sorted(seen[20:40])
    # without reshuffling the map runs once
    seen.clear()
    ds = tf.data.Dataset.from_tensor_slices((x, np.arange(20) % 3)).shuffle(
        20, seed=4, reshuffle_each_iteration=False).map(fn).batch(5)
    m.fit(ds, epochs=3, verbose=0)
    assert len(seen) == 20
