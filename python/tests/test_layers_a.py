"""Issue 28's layers-a in the Python package: GlobalAverage/MaxPooling1D/2D,
ZeroPadding2D, ReLU (max_value, negative_slope, threshold), LeakyReLU and the
activations relu6 / leaky_relu / gelu_approximate: shapes, predict against
NumPy, to_json -> model_from_json, and the arguments Strata refuses."""
import numpy as np
import pytest

import strata as tf

L = tf.keras.layers
RNG = np.random.default_rng(3)


def keras_relu(x, max_value=None, slope=0.0, threshold=0.0):
    y = np.where(x > threshold, x if max_value is None else np.minimum(x, max_value),
                 slope * (x - threshold))
    return y.astype(np.float32)


def test_image_layers_predict_and_round_trip():
    m = tf.keras.Sequential([tf.keras.Input(shape=(4, 5, 2)),
                             L.ZeroPadding2D(((1, 0), (2, 1)), name="pad"),
                             L.ReLU(max_value=1.0, negative_slope=0.1, threshold=0.2, name="r"),
                             L.LeakyReLU(alpha=0.2),
                             L.Activation("relu6"),
                             L.GlobalMaxPooling2D()])
    assert [l.output_shape for l in m.layers] == [(None, 5, 8, 2)] * 4 + [(None, 2)]
    assert m.layers[0].name == "pad" and m.layers[1].name == "r"
    x = RNG.uniform(-2, 2, size=(3, 4, 5, 2)).astype(np.float32)
    p = np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 0)))
    y = keras_relu(p, 1.0, 0.1, 0.2)
    y = np.clip(np.where(y < 0, 0.2 * y, y), 0, 6).max(axis=(1, 2))
    np.testing.assert_allclose(m.predict(x, verbose=0), y, rtol=1e-6, atol=1e-6)
    back = tf.keras.models.model_from_json(m.to_json())
    assert [type(l).__name__ for l in back.layers] == [
        "ZeroPadding2D", "ReLU", "LeakyReLU", "Activation", "GlobalMaxPooling2D"]
    assert back.layers[0].padding == ((1, 0), (2, 1))
    r = back.layers[1]
    assert (r.max_value, r.negative_slope, r.threshold) == (1.0, 0.1, 0.2)
    assert back.layers[2].negative_slope == 0.2 and back.layers[3].activation == "relu6"
    np.testing.assert_allclose(back.predict(x, verbose=0), y, rtol=1e-6, atol=1e-6)


def test_sequence_layers_and_gelu_approximate():
    m = tf.keras.Sequential([L.GlobalAveragePooling1D(input_shape=(6, 3)),
                             L.Dense(2, activation="gelu_approximate")])
    m.compile(optimizer="sgd", loss="mse")
    x = RNG.uniform(-1, 1, size=(8, 6, 3)).astype(np.float32)
    h = m.fit(x, np.zeros((8, 2), np.float32), epochs=2, verbose=0)
    assert np.isfinite(h.history["loss"]).all()
    w, b = m.layers[1].get_weights()
    z = x.mean(axis=1) @ w + b
    want = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    np.testing.assert_allclose(m.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)
    m2 = tf.keras.Sequential([L.GlobalMaxPool1D(input_shape=(6, 3)), L.ReLU()])
    np.testing.assert_allclose(m2.predict(x, verbose=0), np.maximum(x.max(axis=1), 0))
    assert type(tf.keras.models.model_from_json(m2.to_json()).layers[1]).__name__ == "Activation"


def test_refused_arguments():
    with pytest.raises(NotImplementedError, match="keepdims"):
        L.GlobalAveragePooling2D(keepdims=True)
    with pytest.raises(NotImplementedError, match="data_format"):
        L.GlobalMaxPooling1D(data_format="channels_first")
    with pytest.raises(ValueError, match="max_value"):
        L.ReLU(max_value=-1)
    with pytest.raises(ValueError, match="negative_slope"):
        L.LeakyReLU(negative_slope=-0.5)
    with pytest.raises(ValueError, match="padding"):
        L.ZeroPadding2D(padding=(1, 2, 3))
    with pytest.raises(ValueError, match="GlobalAveragePooling2D"):
        tf.keras.Sequential([L.GlobalAveragePooling2D(input_shape=(4, 3))])
