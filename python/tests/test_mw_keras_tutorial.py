"""TF's "Multi-worker training with Keras" tutorial (issue 32's tutorial
suite): its mnist_setup.py and main.py (mw_keras_tutorial.py), launched as
the tutorial launches them, one process per worker, each with its own
TF_CONFIG (no mpirun); Fashion-MNIST stands in for MNIST when MNIST is
absent. Both workers see 2 replicas in sync, train 12 steps of the global
batch 128 and end with the same weights bytes."""
import json
import os
import shutil
import tempfile

import numpy as np
import pytest

from conftest import FASHION, run_tf_config_workers


def test_multi_worker_keras_tutorial_with_tf_config():
    mnist = os.environ.get("STRATA_MNIST_DIR", "/usr/share/datasets/mnist")
    if not os.path.isdir(mnist):
        mnist = FASHION
    if not os.path.isdir(mnist):
        pytest.skip("neither MNIST nor Fashion-MNIST is installed")
    outdir = tempfile.mkdtemp()
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mw_keras_tutorial.py")
    try:
        run_tf_config_workers(worker, outdir, timeout=300, env={"STRATA_MNIST_DIR": mnist})
        w = [np.load(os.path.join(outdir, "worker%d.npy" % i)) for i in range(2)]
        info = [json.load(open(os.path.join(outdir, "worker%d.json" % i))) for i in range(2)]
    finally:
        shutil.rmtree(outdir)
    assert [i["replicas"] for i in info] == [2, 2]
    assert info[0]["history"] == info[1]["history"]
    assert sorted(info[0]["history"]) == ["accuracy", "loss"] and len(info[0]["history"]["loss"]) == 1
    assert np.isfinite(info[0]["history"]["loss"][0]) and w[0].size == 32 * 9 + 32 + 21632 * 128 + 128 + 1290
    assert w[0].tobytes() == w[1].tobytes()
