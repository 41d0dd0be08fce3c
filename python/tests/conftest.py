"""Shared fixtures: a Fashion-MNIST slice (skips when the Debian dataset is
absent) and the CLI path from CTest."""
import os

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
