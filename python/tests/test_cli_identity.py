"""Python fit and `strata train` run the same engine: the mlp trained for one
epoch on the same data, seed and batch gives the same weights bytes."""
import os
import subprocess

import numpy as np
import pytest

import strata as tf


@pytest.mark.xfail(strict=True, reason="known open: Python fit and the CLI are each deterministic but "
                   "their 1-epoch mlp weights differ (max |diff| 0.016); cause not found yet")
def test_fit_matches_cli_weights(fashion, tmp_path):
    cli = os.environ.get("STRATA_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("STRATA_CLI not set (run through CTest)")
    out = tmp_path / "cli.safetensors"
    subprocess.run([cli, "train", "--model", "mlp", "--epochs", "1", "--batch-size", "128",
                    "--train-examples", "2048", "--seed", "0", "--strategy", "one_device",
                    "--save", str(out)], check=True, capture_output=True)
    (x, y), _ = fashion
    tf.random.set_seed(0)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Rescaling(1.0 / 255, input_shape=(28, 28, 1)),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(256, activation="relu"),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
    model.compile(optimizer="adam",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:2048], y[:2048], batch_size=128, epochs=1, verbose=0)
    mine = tmp_path / "py.safetensors"
    model.save_weights(str(mine))
    assert mine.read_bytes() == out.read_bytes()
    # and the same arrays through load_weights / get_weights
    w = model.get_weights()
    model.load_weights(str(out))
    for a, b in zip(w, model.get_weights()):
        np.testing.assert_array_equal(a, b)
