"""The issue 28 layers from Python: Conv1D (causal), DepthwiseConv2D,
Embedding and LayerNormalization (and Conv2D with strides and no bias) build
with Keras's weight layouts, train a few steps to a finite, lower loss,
and survive to_json -> model_from_json with the same classes, options,
output shapes and weights."""
import json

import numpy as np
import pytest

import strata as tf

L = tf.keras.layers


def text_model():
    return tf.keras.Sequential([tf.keras.Input((8,)), L.Embedding(20, 4),
                                L.Conv1D(3, 3, padding="causal", activation="relu"),
                                L.LayerNormalization(epsilon=1e-2), L.Flatten(), L.Dense(2)])


def image_model():
    return tf.keras.Sequential([tf.keras.Input((6, 6, 2)),
                                L.Conv2D(4, 3, strides=2, padding="same", use_bias=False),
                                L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", activation="relu"),
                                L.LayerNormalization(center=False), L.Flatten(), L.Dense(2)])


def train(m, x, y):
    m.compile(optimizer=tf.keras.optimizers.SGD(0.05),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = m.fit(x, y, batch_size=8, epochs=4, verbose=0)
    return h.history["loss"]


@pytest.mark.parametrize("make,shapes", [
    (text_model, [(20, 4), (3, 4, 3), (3,), (3,), (3,), (24, 2), (2,)]),
    (image_model, [(3, 3, 2, 4), (3, 3, 4, 2), (8,), (8,), (72, 2), (2,)]),
])
def test_build_train_roundtrip(make, shapes):
    rng = np.random.default_rng(1)
    m = make()
    assert [w.shape for w in m.get_weights()] == shapes
    if make is text_model:
        x = rng.integers(0, 20, size=(32, 8)).astype(np.float32)
        y = (x[:, 0] >= 10).astype(np.int64)
    else:
        x = rng.standard_normal((32, 6, 6, 2)).astype(np.float32)
        y = (x[:, 0, 0, 0] > 0).astype(np.int64)
    loss = train(m, x, y)
    assert all(np.isfinite(loss)) and loss[-1] < loss[0]
    doc = json.loads(m.to_json())
    m2 = tf.keras.models.model_from_json(m.to_json())
    assert json.loads(m2.to_json())["config"]["layers"][1:] == doc["config"]["layers"][1:]
    assert [type(a).__name__ for a in m2.layers] == [type(a).__name__ for a in m.layers]
    assert [a.output_shape for a in m2.layers] == [a.output_shape for a in m.layers]
    m2.set_weights(m.get_weights())
    np.testing.assert_array_equal(m2.predict(x, verbose=0), m.predict(x, verbose=0))


def test_configs():
    m = text_model()
    layers = json.loads(m.to_json())["config"]["layers"]
    emb, conv, ln = layers[1]["config"], layers[2]["config"], layers[3]["config"]
    assert emb["embeddings_initializer"]["class_name"] == "RandomUniform"
    assert emb["embeddings_initializer"]["config"]["minval"] == -0.05 and emb["mask_zero"] is False
    assert conv["padding"] == "causal" and conv["kernel_size"] == [3] and conv["strides"] == [1]
    assert ln["epsilon"] == pytest.approx(1e-2) and ln["axis"] == -1


@pytest.mark.parametrize("bad", [
    lambda: L.Conv1D(2, 3, padding="full"),
    lambda: L.Conv1D(2, 3, dilation_rate=2),
    lambda: L.DepthwiseConv2D(3, padding="causal"),
    lambda: L.DepthwiseConv2D(3, depth_multiplier=0),
    lambda: L.Embedding(0, 4),
    lambda: L.Embedding(10, 4, mask_zero=True),
    lambda: L.LayerNormalization(axis=1),
    lambda: L.LayerNormalization(epsilon=0),
])
def test_refused(bad):
    with pytest.raises((ValueError, NotImplementedError)):
        bad()


def test_embedding_bad_id():
    """An id outside [0, input_dim) (or not an integer) stops fit, evaluate and
    predict before any kernel reads it, naming the id, example and position."""
    m = tf.keras.Sequential([tf.keras.Input((4,)), L.Embedding(10, 3), L.Flatten(), L.Dense(2)])
    m.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.zeros((6, 4), np.float32)
    y = np.zeros(6, np.int64)
    for bad in (10.0, -1.0, 2.5):
        x[5, 2] = bad
        for call in (lambda: m.fit(x, y, batch_size=4, epochs=1, verbose=0),
                     lambda: m.evaluate(x, y, batch_size=4, verbose=0),
                     lambda: m.predict(x, batch_size=4, verbose=0)):
            with pytest.raises(ValueError, match=r"id %g of example 5 at position 2" % bad):
                call()
    x[5, 2] = 9.0
    assert np.all(np.isfinite(m.predict(x, verbose=0)))


def test_host_loop_layers_refused_on_device_backend():
    """compile refuses DepthwiseConv2D/Embedding/LayerNormalization (host
    loops, no device kernel yet) on the cuda backend, naming the layer;
    run on the emulated CUDA module of this build (skipped without it)."""
    import os
    import pathlib
    import subprocess
    import sys
    build = pathlib.Path(tf.__file__).resolve().parents[2]
    emu, fake = build / "cuda_emu" / "libstrata_cuda_emu.so", build / "fake_cuda"
    if not emu.exists() or not (fake / "libcuda.so.1").exists():
        pytest.skip("no emulated CUDA module in this build")
    code = ("import strata as tf\nL = tf.keras.layers\n"
            "m = tf.keras.Sequential([tf.keras.Input((4,)), L.Embedding(5, 3), L.Flatten(), L.Dense(2)])\n"
            "m.compile(optimizer='sgd', loss='mse')\n")
    env = dict(os.environ, STRATA_BACKEND="cuda", STRATA_CUDA_MODULE=str(emu),
               LD_LIBRARY_PATH=str(fake), PYTHONPATH=str(build / "python"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "layer 'embedding' (Embedding) runs on host memory only" in r.stderr, r.stderr
