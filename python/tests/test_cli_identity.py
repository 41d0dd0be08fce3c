"""Python fit and `strata train` run the same engine: a built-in model
trained for one epoch on the same data, seed, batch and strategy gives the
same weights bytes (safetensors file and get_weights)."""
import os
import subprocess

import numpy as np
import pytest

import strata as tf

L = tf.keras.layers
MODELS = {
    "mlp": lambda: [L.Flatten(), L.Dense(256, activation="relu"), L.Dense(128, activation="relu"), L.Dense(10)],
    "cnn": lambda: [L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(2), L.Conv2D(64, 3, activation="relu"),
                    L.MaxPooling2D(2), L.Flatten(), L.Dense(128, activation="relu"), L.Dense(10)],
}
STRATEGIES = {"one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
              "mirrored": lambda: tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])}


@pytest.mark.parametrize("name,strategy,n", [("mlp", "one_device", 2048), ("cnn", "mirrored", 512)])
def test_fit_matches_cli_weights(fashion, tmp_path, name, strategy, n):
    cli = os.environ.get("STRATA_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("STRATA_CLI not set (run through CTest)")
    out = tmp_path / "cli.safetensors"
    cmd = [cli, "train", "--model", name, "--epochs", "1", "--batch-size", "128", "--train-examples",
           str(n), "--seed", "0", "--strategy", strategy, "--save", str(out)]
    if strategy == "mirrored":
        cmd += ["--devices", "cpu:0,cpu:1"]
    subprocess.run(cmd, check=True, capture_output=True)
    (x, y), _ = fashion
    tf.random.set_seed(0)
    with STRATEGIES[strategy]().scope():
        model = tf.keras.Sequential([L.Rescaling(1.0 / 255, input_shape=(28, 28, 1))] + MODELS[name]())
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:n], y[:n], batch_size=128, epochs=1, verbose=0)
    mine = tmp_path / "py.safetensors"
    model.save_weights(str(mine))
    assert mine.read_bytes() == out.read_bytes()
    w = model.get_weights()
    model.load_weights(str(out))
    for a, b in zip(w, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_model_from_json_matches_cli_on_the_same_file(fashion, tmp_path):
    """`strata train --model FILE.json` and model_from_json(FILE) build the
    same model: one epoch gives the same weights bytes."""
    cli = os.environ.get("STRATA_CLI")
    src = os.environ.get("STRATA_SOURCE_DIR")
    if not cli or not src:
        pytest.skip("STRATA_CLI / STRATA_SOURCE_DIR not set (run through CTest)")
    path = os.path.join(src, "tests", "keras", "mlp_keras2.json")
    out = tmp_path / "cli.safetensors"
    subprocess.run([cli, "train", "--model", path, "--epochs", "1", "--batch-size", "128",
                    "--train-examples", "1024", "--strategy", "one_device", "--save", str(out)],
                   check=True, capture_output=True)
    (x, y), _ = fashion
    tf.random.set_seed(0)
    with tf.distribute.OneDeviceStrategy().scope():
        model = tf.keras.models.model_from_json(open(path).read())
    last = model.layers[-1]
    logits = getattr(last, "activation", "linear") != "softmax"
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=logits))
    shape = model.input_shape[1:]
    pixels = x[:1024].astype(np.float32) * np.float32(1.0 / 255)  # what the CLI computes from uint8
    model.fit(pixels.reshape((-1,) + shape), y[:1024], batch_size=128, verbose=0)
    mine = tmp_path / "py.safetensors"
    model.save_weights(str(mine))
    assert mine.read_bytes() == out.read_bytes()


def test_to_json_roundtrip():
    m = tf.keras.Sequential([tf.keras.Input(shape=(8, 8, 1)), L.Conv2D(4, 3, padding="same", activation="relu"),
                             L.BatchNormalization(), L.AveragePooling2D(), L.Reshape((-1,)), L.Dropout(0.5),
                             L.Dense(3, activation="softmax")])
    text = m.to_json()
    tf.random.set_seed(None)  # the seed sequence again (a second model draws the next seed, as TF's)
    m2 = tf.keras.models.model_from_json(text)
    assert [type(a).__name__ for a in m.layers] == [type(b).__name__ for b in m2.layers]
    assert m2.count_params() == m.count_params() and m2.output_shape == m.output_shape
    for a, b in zip(m.get_weights(), m2.get_weights()):
        np.testing.assert_array_equal(a, b)  # same seed, same structure: same initial weights


def test_to_json_roundtrip_keeps_a_first_rescaling():
    """Rescaling is folded into the input pipeline, not an engine layer: the
    Python side peels it off the JSON before the library's reader and puts
    it back, so the model reads back whole and predicts the same values."""
    m = tf.keras.Sequential([L.Rescaling(1.0 / 255, input_shape=(28, 28, 1)), L.Flatten(), L.Dense(10)])
    m2 = tf.keras.models.model_from_json(m.to_json())
    assert [type(a).__name__ for a in m2.layers] == ["Rescaling", "Flatten", "Dense"]
    assert m2.input_shape == (None, 28, 28, 1)
    m2.set_weights(m.get_weights())
    x = np.random.default_rng(0).integers(0, 256, (8, 28, 28, 1)).astype(np.uint8)
    np.testing.assert_array_equal(m.predict(x, verbose=0), m2.predict(x, verbose=0))
