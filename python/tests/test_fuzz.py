"""Random arguments to the public callables and to the extension's raw
functions: exceptions are fine, a crash or abort is not (this process would
die and the test fail)."""
import random

import numpy as np
import pytest

import strata as tf
from strata import _strata

VALUES = [None, 0, -1, 1, 3, 2 ** 40, -2 ** 63, 0.5, float("nan"), float("inf"), "", "relu", "x" * 300,
          (), (0,), (3, -2), (1, 2, 3, 4, 5, 6), [], [1, "a"], {}, b"\x00", np.zeros(0),
          np.zeros((2, 3), np.float32), np.ones((4, 4), np.uint8), np.zeros((2, 2), np.float64)[:, :1],
          object()]


def calls():
    return [tf.keras.layers.Dense, tf.keras.layers.Conv2D, tf.keras.layers.MaxPooling2D,
            tf.keras.layers.Dropout, tf.keras.layers.Reshape, tf.keras.layers.Activation,
            tf.keras.optimizers.SGD, tf.keras.optimizers.Adam, tf.keras.losses.get,
            tf.keras.utils.to_categorical, tf.data.Dataset.from_tensor_slices,
            tf.distribute.MirroredStrategy, tf.distribute.OneDeviceStrategy, tf.keras.Sequential,
            tf.data.TFRecordDataset, tf.data.Dataset.list_files, tf.io.FixedLenFeature,
            tf.io.parse_single_example, tf.io.parse_example, tf.io.decode_raw, tf.io.serialize_example,
            tf.distribute.PerReplica, tf.one_hot, tf.cast, tf.reshape,
            tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).run,
            tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).reduce,
            tf.distribute.OneDeviceStrategy().experimental_local_results]


def test_public_callables_random_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(14)
    for fn in calls():
        for _ in range(40):
            args = [rng.choice(VALUES) for _ in range(rng.randrange(4))]
            try:
                fn(*args)
            except Exception:
                pass


def test_extension_random_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # tfrecord_write / list_files take random names as paths
    rng = random.Random(7)
    names = [n for n in dir(_strata) if callable(getattr(_strata, n)) and n != "mnist_load"]
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
    extra = [model._cap, _strata.dataset_from_arrays(np.zeros((4, 3), np.float32), None)]
    for name in names:
        for _ in range(60):
            args = [rng.choice(VALUES + extra) for _ in range(rng.randrange(8))]
            try:
                getattr(_strata, name)(*args)
            except Exception:
                pass


def test_model_methods_random_arguments():
    rng = random.Random(3)
    m = tf.keras.Sequential([tf.keras.layers.Dense(2, activation="softmax", input_shape=(3,))])
    m.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
    for meth in (m.fit, m.evaluate, m.predict, m.set_weights, m.train_on_batch):
        for _ in range(30):
            args = [rng.choice(VALUES) for _ in range(rng.randrange(3))]
            try:
                meth(*args, verbose=0) if meth not in (m.set_weights, m.train_on_batch) else meth(*args)
            except Exception:
                pass
