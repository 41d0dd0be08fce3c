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
