#!/usr/bin/env python3
"""Python `model.fit` (import strata as tf) vs `strata train`: samples/s of
one epoch of Fashion-MNIST, batch 128, default strategy, for the mlp and the
cnn, alternating runs, beside the PyTorch peer (the same models, Adam,
batch 128, 1 epoch: /work/shared/peers/torch_train.py run with /usr/bin/python3
and as many threads as cores, as Strata's default strategy uses, with
OMP_WAIT_POLICY=passive). Reports the
engine's samples/s (training only, first 20 steps excluded: the figure the
CLI prints; torch_train.py times the same way) for all three, the Python
wall clock of the whole fit call, the ratios of medians and the load average.
    PYTHONPATH=build/python python3 bench/python_bench.py [--reps N] [--cli build/strata]
        [--torch /work/shared/peers/torch_train.py]  (--torch '' leaves PyTorch out)
        [--models mlp,cnn] [--tape]
--tape adds a GradientTape loop around the same model (the "writing a
training loop from scratch" step: model(x, training=True), the loss object,
tape.gradient, optimizer.apply_gradients over batches of 128 NumPy slices),
timed as the engine times fit (steps after the first 20) and over the whole
loop, in the same alternation."""
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


def torch_run(script, model):
    """samples/s of the PyTorch peer (None when torch is not installed)."""
    # OMP_WAIT_POLICY=passive: PyTorch's OpenMP threads otherwise spin and,
    # on a shared machine, run 2-3x slower with 2 threads than with 1
    # (/work/shared/peers/RESULTS.md)
    r = subprocess.run(["/usr/bin/python3", script, "--model", model, "--batch", "128", "--epochs", "1",
                        "--threads", str(os.cpu_count() or 1), "--seed", "0", "--no-eval-each-epoch"],
                       capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["samples_per_s"]
    if "No module named 'torch'" in r.stderr:
        return None
    raise RuntimeError("%s failed: %s" % (script, r.stderr[-2000:]))


def py_run(model, x, y):
    m = tf.keras.Sequential([L.Rescaling(1 / 255., input_shape=(28, 28, 1))] + MODELS[model]())
    m.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"])
    t0 = time.perf_counter()
    h = m.fit(x, y, batch_size=128, epochs=1, verbose=0)
    return h.samples_per_sec, len(x) / (time.perf_counter() - t0)


def tape_run(model, x, y, skip=20):
    """(samples/s after the first `skip` steps, samples/s of the whole loop)."""
    m = tf.keras.Sequential([L.Rescaling(1 / 255., input_shape=(28, 28, 1))] + MODELS[model]())
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam()

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, m(xb, training=True))
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))
        return loss

    x4 = x.reshape(-1, 28, 28, 1)
    t0 = time.perf_counter()
    t_skip = None
    for k, i in enumerate(range(0, len(x4), 128)):
        if k == skip:
            t_skip = time.perf_counter()
        train_step(x4[i:i + 128], y[i:i + 128])
    t1 = time.perf_counter()
    return (len(x4) - skip * 128) / (t1 - t_skip), len(x4) / (t1 - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "build", "strata"))
    ap.add_argument("--torch", default="/work/shared/peers/torch_train.py")
    ap.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp, cnn")
    ap.add_argument("--tape", action="store_true", help="also a GradientTape loop (see the docstring)")
    a = ap.parse_args()
    use_torch = bool(a.torch) and os.path.exists(a.torch)
    (x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    print("| model | strata train | Python fit (engine) | Python fit (wall, whole call) | PyTorch | "
          "fit / train | fit / PyTorch |")
    print("|---|---|---|---|---|---|---|")
    for model in a.models.split(","):
        c, p, w, t, te, tw = [], [], [], [], [], []
        for _ in range(a.reps):
            c.append(cli_run(a.cli, model))
            e, wall = py_run(model, x, y)
            p.append(e)
            w.append(wall)
            if a.tape:
                e2, wall2 = tape_run(model, x, y)
                te.append(e2)
                tw.append(wall2)
            if use_torch:
                v = torch_run(a.torch, model)
                if v is not None:
                    t.append(v)
        mc, mp = statistics.median(c), statistics.median(p)
        mt = statistics.median(t) if t else None
        print("| %s | %s | %s | %s | %s | %.3f | %s |" % (
            model, " / ".join("%.0f" % v for v in c), " / ".join("%.0f" % v for v in p),
            " / ".join("%.0f" % v for v in w), " / ".join("%.0f" % v for v in t) if t else "n/a",
            mp / mc, "%.2f" % (mp / mt) if mt else "n/a"))
        if te:
            print("|   %s GradientTape loop | (after 20 steps) %s | (whole loop) %s | tape / fit: %.3f "
                  "(engine figures), %.3f (whole calls) |" % (
                      model, " / ".join("%.0f" % v for v in te), " / ".join("%.0f" % v for v in tw),
                      statistics.median(te) / mp, statistics.median(tw) / statistics.median(w)))
        sys.stdout.flush()
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
