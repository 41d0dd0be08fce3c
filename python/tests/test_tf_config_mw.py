"""MultiWorkerMirroredStrategy launched the TensorFlow way (issue 30): two
Python processes, each with only its TF_CONFIG (no mpirun), train one model
together through the Gloo transport; both see 2 replicas in sync and end
with the same weights bytes, which are those of one process training the
same model under MirroredStrategy with 2 replicas (the same global batch)."""
import os
import shutil
import tempfile

import numpy as np

import strata as tf
from conftest import run_tf_config_workers


def test_two_tf_config_workers_give_mirrored_bytes():
    outdir = tempfile.mkdtemp()
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfc_worker.py")
    try:
        run_tf_config_workers(worker, outdir)
        w = [np.load(os.path.join(outdir, "worker%d.npy" % i)) for i in range(2)]
        for i in range(2):
            with open(os.path.join(outdir, "worker%d.txt" % i)) as f:
                assert f.read() == "replicas 2\n"
    finally:
        shutil.rmtree(outdir)
    assert w[0].tobytes() == w[1].tobytes()
    s = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    x = np.random.default_rng(0).random((256, 8), dtype=np.float32)
    y = np.arange(256) % 3
    with s.scope():
        m = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(3)])
    m.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.fit(x, y, batch_size=64, epochs=2, verbose=0)
    one = np.concatenate([v.ravel() for v in m.get_weights()])
    assert one.tobytes() == w[0].tobytes()
