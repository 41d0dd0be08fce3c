#!/usr/bin/env python3
"""Python `model.fit` (import strata as tf) vs `strata train`: samples/s of
one epoch of Fashion-MNIST, batch 128, default strategy, for the mlp and the
cnn, alternating runs. Reports the engine's samples/s (training only, first
20 steps excluded: the figure the CLI prints) for both, and the Python wall
clock of the whole fit call.
    PYTHONPATH=build/python python3 bench/python_bench.py [--reps N] [--cli build/strata]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import strata as tf  # before NumPy: the OpenBLAS core

L = tf.keras.layers
MODELS = {
    "mlp": lambda: [L.Flatten(), L.Dense(256, activation="relu"), L.Dense(128, activation="relu"), L.Dense(10)],
    "cnn": lambda: [L.Conv2D(32, 3, activation="relu"), L.MaxPooling2D(2), L.Conv2D(64, 3, activation="relu"),
                    L.MaxPooling2D(2), L.Flatten(), L.Dense(128, activation="relu"), L.Dense(10)],
}


def cli_run(cli, model):
    with tempfile.TemporaryDirectory() as d:
        rep = os.path.join(d, "r.json")
        subprocess.run([cli, "train", "--model", model, "--epochs", "1", "--batch-size", "128",
                        "--report", rep], check=True, capture_output=True)
        return json.load(open(rep))["samples_per_sec"]


def py_run(model, x, y):
    m = tf.keras.Sequential([L.Rescaling(1 / 255., input_shape=(28, 28, 1))] + MODELS[model]())
    m.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"])
    t0 = time.perf_counter()
    h = m.fit(x, y, batch_size=128, epochs=1, verbose=0)
    return h.samples_per_sec, len(x) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "build", "strata"))
    a = ap.parse_args()
    (x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
    print("| model | strata train | Python fit (engine) | Python fit (wall, whole call) | fit / train |")
    print("|---|---|---|---|---|")
    for model in ("mlp", "cnn"):
        c, p, w = [], [], []
        for _ in range(a.reps):
            c.append(cli_run(a.cli, model))
            e, wall = py_run(model, x, y)
            p.append(e)
            w.append(wall)
        mc, mp, mw = statistics.median(c), statistics.median(p), statistics.median(w)
        print("| %s | %s | %s | %s | %.3f |" % (model, " / ".join("%.0f" % v for v in c),
              " / ".join("%.0f" % v for v in p), " / ".join("%.0f" % v for v in w), mp / mc))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
