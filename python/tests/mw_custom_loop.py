"""Run by test_mw_custom_loop.py under mpirun -np 2: one worker of a
MultiWorkerMirroredStrategy that trains either with fit ("fit") or with a
custom loop of strategy.run / strategy.reduce ("loop") over the same global
batches, then writes its weights (hex) and, for "loop", the reduce checks to
STRATA_MW_OUT/<mode>-rank<r> (one file per rank: mpirun interleaves the
ranks' stdout)."""
import os
import sys

import numpy as np

import strata as tf

mode = sys.argv[1]
L = tf.keras.layers
R = tf.distribute.ReduceOp
s = tf.distribute.MultiWorkerMirroredStrategy()
rank = s.cluster_resolver.task_id
out = open(os.path.join(os.environ["STRATA_MW_OUT"], "%s-rank%d" % (mode, rank)), "w")
rng = np.random.default_rng(0)
x = rng.random((301, 12), dtype=np.float32)  # the last global batch (45) splits 22 / 23
y = (x[:, :4].argmax(axis=1) + (x[:, 4] > 0.5)) % 4
tf.random.set_seed(0)
with s.scope():
    m = tf.keras.Sequential([L.Dense(16, activation="relu", input_shape=(12,)), L.Dropout(0.2),
                             L.BatchNormalization(), L.Dense(4)])
m.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
if mode == "fit":
    m.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
elif mode == "tape":  # the tutorial's GradientTape step (issue 32), fit's loss for every global batch
    dist = s.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(64))
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def step(images, labels):
        n = tf.distribute.get_replica_context().all_reduce(R.SUM, np.float32(len(images)))
        with tf.GradientTape() as tape:
            predictions = m(images, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, predictions), global_batch_size=int(n))
        gradients = tape.gradient(loss, m.trainable_variables)
        m.optimizer.apply_gradients(zip(gradients, m.trainable_variables))
        return loss
    for epoch in range(2):
        for images, labels in dist:
            s.run(step, args=(images, labels))
    try:  # a tape loop outside strategy.run across workers: refused by name (each worker's share differs)
        with tf.GradientTape():
            m(x[:4], training=True)
        out.write("eager accepted\n")
    except NotImplementedError as e:
        out.write("eager refused %s\n" % ("strategy.run" in str(e) and "2 workers" in str(e)))
else:
    dist = s.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(64))
    sizes = []
    for epoch in range(2):
        for images, labels in dist:
            sizes.append(len(images))
            loss, acc = s.run(lambda a, b: m.train_on_batch(a, b), args=(images, labels))
            total = s.reduce(R.SUM, loss)  # the global batch's mean loss
            assert 0 < total < 10, total
    out.write("sizes %s\n" % sizes)
    # reduce across the workers against NumPy on every worker's values
    # (each worker can make every worker's: they depend on the rank only)
    def values(r):
        return np.random.default_rng(10 + r).random((6, 3), dtype=np.float32) * (r + 1)
    mine = values(rank)
    every = [values(r) for r in range(2)]  # worker-major (one replica each)
    checks = {
        "sum": (s.reduce(R.SUM, mine), np.add.reduce(np.stack(every), axis=0)),
        "mean": (s.reduce(R.MEAN, mine), np.add.reduce(np.stack(every), axis=0) / np.float32(2)),
        "sum0": (s.reduce(R.SUM, mine, axis=0),
                 np.add.reduce(np.stack([v.sum(axis=0) for v in every]), axis=0)),
        "mean0": (s.reduce(R.MEAN, mine, axis=0),
                  np.add.reduce(np.stack([v.sum(axis=0) for v in every]), axis=0) / np.float32(12)),
        "int": (s.reduce(R.SUM, np.arange(5) * (rank + 1)), np.arange(5) * 3),
    }
    for name, (got, want) in checks.items():
        got = np.asarray(got)
        same = got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
        out.write("%s %s %s %s\n" % (name, "same" if same else "DIFFERENT", got.tolist(), want.tolist()))
out.write("weights %s\n" % b"".join(w.tobytes() for w in m.get_weights()).hex())
out.close()
