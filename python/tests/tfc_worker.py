"""Run by test_tf_config_mw.py, one process per worker with its TF_CONFIG
(no mpirun): a MultiWorkerMirroredStrategy fit; writes the weights (.npy)
and what the strategy saw to STRATA_MW_OUT/worker<task index>."""
import json
import os
import sys

import numpy as np
import strata as tf

s = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
out = os.path.join(os.environ["STRATA_MW_OUT"], "%s%d" % (task["type"], task["index"]))
x = np.random.default_rng(0).random((256, 8), dtype=np.float32)
y = np.arange(256) % 3
with s.scope():
    m = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                             tf.keras.layers.Dense(3)])
m.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
m.fit(x, y, batch_size=64, epochs=2, verbose=0)
np.save(out + ".npy", np.concatenate([w.ravel() for w in m.get_weights()]))
with open(out + ".txt", "w") as f:
    f.write("replicas %d\n" % s.num_replicas_in_sync)
sys.exit(0)
