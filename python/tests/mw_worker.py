"""Run by test_runtime.py under mpirun -np 2: one worker of a MultiWorkerMirroredStrategy fit."""
import os
import strata as tf, numpy as np
s = tf.distribute.MultiWorkerMirroredStrategy()
# One file per rank (mpirun's forwarded stdout interleaves the ranks' lines).
out = open(os.path.join(os.environ["STRATA_MW_OUT"], "rank%d" % s.cluster_resolver.task_id), "w")
out.write("rank %d replicas %d\n" % (s.cluster_resolver.task_id, s.num_replicas_in_sync))
x = np.random.default_rng(0).random((256, 8), dtype=np.float32); y = np.arange(256) % 3
with s.scope():
    m = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(8,))])
m.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
m.fit(x, y, batch_size=64, epochs=1, verbose=0)
out.write("rank %d w0sum %.6f\n" % (s.cluster_resolver.task_id, m.get_weights()[0].sum()))
out.close()
