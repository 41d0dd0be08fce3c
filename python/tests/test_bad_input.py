"""Bad input raises a Python exception with a message, never a crash."""
import numpy as np
import pytest

import strata as tf


def small_model(loss="sparse_categorical_crossentropy", out=3, act="softmax"):
    m = tf.keras.Sequential([tf.keras.layers.Dense(out, activation=act, input_shape=(4,))])
    m.compile(optimizer="sgd", loss=loss, metrics=["accuracy"])
    return m


X = np.random.default_rng(0).random((16, 4), dtype=np.float32)
Y = np.arange(16) % 3


@pytest.mark.parametrize("x,y,exc,match", [
    (X, np.full(16, np.nan), ValueError, "finite"),                      # NaN labels
    (X, Y[:10], ValueError, "16 examples and y has 10"),                  # length mismatch
    (X[:, :3], Y, ValueError, "shape|input"),                           # wrong feature shape
    ([[1, 2, 3, 4], [1, 2]], [0, 1], ValueError, "ragged|inhomogeneous|array"),  # ragged lists
    (np.array(["a"] * 16), Y, ValueError, "numeric"),                    # wrong dtype
    (X, Y + 7, ValueError, "label"),                                      # class out of range
    (X, Y + 0.5, ValueError, "class index"),                             # fractional class
])
def test_fit_rejects(x, y, exc, match):
    with pytest.raises(exc, match=match):
        small_model().fit(x, y, epochs=1, verbose=0)


def test_loss_the_model_cannot_take():
    m = small_model(loss="categorical_crossentropy")
    with pytest.raises(ValueError):
        m.fit(X, Y, verbose=0)  # class indices where one-hot rows are expected
    with pytest.raises(ValueError, match="Unknown loss"):
        small_model(loss="hinge_of_doom")


def test_unsupported_arguments_name_themselves():
    with pytest.raises(NotImplementedError, match="kernel_regularizer"):
        tf.keras.layers.Dense(3, kernel_regularizer="l2")
    with pytest.raises(NotImplementedError, match="dilation_rate"):
        tf.keras.layers.Conv2D(3, 3, dilation_rate=2)
    with pytest.raises(NotImplementedError, match="LSTM"):
        tf.keras.layers.LSTM(3)
    with pytest.raises(NotImplementedError, match="sample_weight"):  # evaluate has no weights
        small_model().evaluate(X, Y, sample_weight=np.ones(len(X)), verbose=0)
    with pytest.raises(NotImplementedError, match="clipnorm"):
        tf.keras.optimizers.Adam(clipnorm=1.0)


def test_files_raise_oserror(tmp_path):
    m = small_model()
    with pytest.raises(OSError):
        m.load_weights(str(tmp_path / "missing.safetensors"))
    with pytest.raises(OSError, match="never downloads"):
        tf.keras.datasets.mnist.load_data(path=str(tmp_path / "nowhere"))
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 40)
    with pytest.raises(ValueError):
        m.load_weights(str(tmp_path / "bad.safetensors"))


def test_callback_exception_propagates():
    class Boom(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise KeyError("boom at %d" % epoch)
    with pytest.raises(KeyError, match="boom at 0"):
        small_model().fit(X, Y, epochs=3, callbacks=[Boom()], verbose=0)


def test_reentrant_use_during_fit_is_refused():
    m = small_model()

    class Nested(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.evaluate(X, Y, verbose=0)
    with pytest.raises(RuntimeError, match="in use by a running fit"):
        m.fit(X, Y, epochs=1, callbacks=[Nested()], verbose=0)
    assert m.evaluate(X, Y, verbose=0)[0] > 0  # usable again afterwards


def test_raw_extension_takes_only_ndarrays():
    from strata import _strata

    class Fake:
        __array_interface__ = {"data": (1, False), "shape": (1000,), "typestr": "<f4", "strides": None}
    with pytest.raises(TypeError, match="numpy.ndarray"):
        _strata.dataset_from_arrays(Fake(), None)
