"""tf.keras.datasets.mnist / fashion_mnist from local IDX files (never a
download). Fashion-MNIST: Debian's dataset-fashion-mnist package
(/usr/share/datasets/fashion-mnist); MNIST: /usr/share/datasets/mnist. The
environment variables STRATA_FASHION_MNIST_DIR / STRATA_MNIST_DIR, or path=,
name another directory of the four IDX files (or a Keras .npz file)."""
import os

import numpy as np

from .. import _strata

_DTYPES = {"u8": np.uint8, "f32": np.float32, "i32": np.int32, "uint8": np.uint8,
           "float32": np.float32, "int32": np.int32}


def _load(path, default_dir, env, package):
    d = path or os.environ.get(env) or default_dir
    if str(d).endswith(".npz") and os.path.isfile(d):
        with np.load(d) as f:
            return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])
    if not os.path.isdir(d):
        raise FileNotFoundError(
            "load_data: no dataset at %s (expected train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
            "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]); Strata never downloads: %s"
            % (d, package))
    parts = _strata.mnist_load(str(d))
    arrs = [np.frombuffer(buf, dtype=_DTYPES[dt]).reshape(shape) for buf, shape, dt in parts]
    return (arrs[0], arrs[1]), (arrs[2], arrs[3])


class _Fashion:
    """fashion_mnist.load_data(path=None) -> ((x_train, y_train), (x_test, y_test))."""

    @staticmethod
    def load_data(path=None):
        return _load(path, "/usr/share/datasets/fashion-mnist", "STRATA_FASHION_MNIST_DIR",
                     "install it with: apt-get install dataset-fashion-mnist")


class _Mnist:
    """mnist.load_data(path=None) -> ((x_train, y_train), (x_test, y_test))."""

    @staticmethod
    def load_data(path=None):
        return _load(path, "/usr/share/datasets/mnist", "STRATA_MNIST_DIR",
                     "put the four MNIST IDX files there, or pass path= / set STRATA_MNIST_DIR")


fashion_mnist = _Fashion()
mnist = _Mnist()


def __getattr__(name):
    from .._util import missing
    raise missing("tf.keras.datasets", name)
