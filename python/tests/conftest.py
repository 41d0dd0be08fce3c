"""Shared fixtures: a Fashion-MNIST slice (skips when the Debian dataset is
absent), the CLI path from CTest, and run_tf_config_workers (processes
launched the TensorFlow way, each with its own TF_CONFIG)."""
import json
import os
import socket
import subprocess
import sys

import strata as tf  # first: it picks the OpenBLAS core before NumPy loads it

import numpy as np
import pytest

FASHION = os.environ.get("STRATA_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="session")
def fashion():
    if not os.path.isdir(FASHION):
        pytest.skip("Fashion-MNIST not installed at %s (apt-get install dataset-fashion-mnist)" % FASHION)
    return tf.keras.datasets.fashion_mnist.load_data()


@pytest.fixture(autouse=True)
def _fresh_seed_sequence():
    """Each test starts as a fresh program does: no global seed, the first
    model built gets seed 0 (TF's global generator gives every new model the
    next seeds: _util.next_init_seed)."""
    from strata import _util
    tf.random.set_seed(None)
    yield
    _util._state["models"] = 0


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_tf_config_workers(script, outdir, n=2, timeout=120, env=None):
    """Run n processes of script, worker i with a TF_CONFIG naming n loopback
    workers (task i) and STRATA_MW_OUT=outdir (plus env); skips when the
    build has no Gloo transport, asserts every worker exits 0, and kills any
    left when something fails."""
    cluster = {"worker": ["127.0.0.1:%d" % _free_port() for _ in range(n)]}
    procs = []
    try:
        for i in range(n):
            e = dict(os.environ, STRATA_MW_OUT=outdir, **(env or {}),
                     TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}))
            procs.append(subprocess.Popen([sys.executable, script], env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        results = [p.communicate(timeout=timeout) for p in procs]
        if any(p.returncode for p in procs) and any("not built" in err for _, err in results):
            pytest.skip("this build has no Gloo transport")
        for p, (_, err) in zip(procs, results):
            assert p.returncode == 0, err[-4000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
