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


_SEQ = '{"class_name": "Sequential", "config": {"name": "s", "layers": [%s]}}'
_IN = '{"class_name": "InputLayer", "config": {"batch_shape": [null, 4]}}'


@pytest.mark.parametrize("text,exc,match", [
    ('{"class_name": "Sequential", ', ValueError, r"^model_from_json: invalid JSON at line 1, column"),
    ('{"class_name": "Functional", "config": {}}', ValueError, r"config.layers is missing or not a list"),
    ('{"class_name": "Graph", "config": {}}', ValueError, r"model class_name \"Graph\" is not supported"),
    (_SEQ % (_IN + ', {"class_name": "LSTM", "config": {"name": "lstm"}}'), ValueError,
     r"^model_from_json: layer 1 \('lstm', LSTM\): layer class 'LSTM' is not supported"),
    (_SEQ % (_IN + ', {"class_name": "Dense", "config": {"name": "d", "units": 3, "activation": "swish"}}'),
     ValueError, r"layer 1 \('d', Dense\): activation \"swish\" is not supported"),
    (_SEQ % '{"class_name": "Dense", "config": {"name": "d", "units": 3}}', ValueError, "no input shape"),
    (b"[1]", ValueError, "top level is not a JSON object"),
    (42, TypeError, "expected the JSON text"),
])
def test_model_from_json_errors_name_the_layer_and_option(text, exc, match):
    """model_from_json is the library's reader: its messages name the
    layer's position, name, class and the option, as `strata train --model`
    does for a file."""
    with pytest.raises(exc, match=match):
        tf.keras.models.model_from_json(text)


def test_model_from_json_builds_under_the_scoped_strategy():
    text = _SEQ % (_IN + ', {"class_name": "Dense", "config": {"name": "out", "units": 3, "activation": "softmax"}}')
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
        m = tf.keras.models.model_from_json(text)
    assert m.distribute_strategy.num_replicas_in_sync == 2
    assert (m.name, m.input_shape, m.output_shape, m.count_params()) == ("s", (None, 4), (None, 3), 15)
    assert [(type(l).__name__, l.name, l.units, l.activation) for l in m.layers] == [("Dense", "out", 3, "softmax")]
    m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    m.fit(X, Y, epochs=1, verbose=0)


def test_fit_values_that_hung_or_exhausted_memory():
    """Issue 29 D11: class_weight={10**20: 1} built a list of 10**20 weights
    (no return), epochs=2**40 a list of every epoch (MemoryError after 47 s);
    both now fail at once, and epochs=10**6 with a callback that stops at
    epoch 2 returns at once, validating every epoch."""
    import time
    m = small_model()
    x, y = np.zeros((8, 4), np.float32), np.zeros(8, np.int64)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="class_weight key 100000000000000000000: at most"):
        m.fit(x, y, class_weight={10**20: 1.0}, verbose=0)
    with pytest.raises(ValueError, match="class_weight key 5 is not a class of this model"):
        m.fit(x, y, class_weight={5: 1.0}, verbose=0)
    for e in (2**40, 2**63):
        with pytest.raises(ValueError, match="epochs=%d: at most" % e):
            m.fit(x, y, epochs=e, verbose=0)

    class Stop(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.model.stop_training = True
    h = m.fit(x, y, epochs=10**6, validation_data=(x, y), callbacks=[Stop()], verbose=0)
    assert len(h.history["loss"]) == 2 and len(h.history["val_loss"]) == 2
    assert time.monotonic() - t0 < 30


def test_permissive_values_refused():
    """Issue 29 D18/D20: fit(epochs=1.5) ran 1 epoch, steps_per_epoch=-1 and
    prefetch(-5) were accepted, cache(filename) ignored the file, and
    batch_size=2**31 said 'must be positive'."""
    m = small_model()
    for kw, match in (({"epochs": 1.5}, "epochs=1.5 must be an integer"),
                      ({"steps_per_epoch": -1}, "steps_per_epoch=-1"),
                      ({"steps_per_epoch": 0}, "steps_per_epoch=0"),
                      ({"batch_size": 2**31}, r"batch_size=2147483648 must be an integer in \[1, 2147483647\]"),
                      ({"batch_size": 2**63}, r"batch_size=9223372036854775808 must be an integer")):
        with pytest.raises(ValueError, match=match):
            m.fit(X, Y, verbose=0, **kw)
    ds = tf.data.Dataset.from_tensor_slices((X, Y))
    with pytest.raises(ValueError, match="prefetch: buffer_size=-5"):
        ds.prefetch(-5)
    ds.prefetch(tf.data.AUTOTUNE), ds.prefetch(0), ds.cache()
    with pytest.raises(NotImplementedError, match="cache: filename='/dev/full'"):
        ds.cache("/dev/full")


def test_input_shape_with_none_is_a_value_error():
    """Issue 29 D18: input_shape=(None,) raised a bare TypeError from int()."""
    with pytest.raises(ValueError, match=r"input_shape=\(None,\): every dimension must be a positive integer"):
        m = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(None,))])
        m.compile("sgd", "mse")
