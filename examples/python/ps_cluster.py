"""ParameterServerStrategy from Python on one machine: 2 workers and 1 ps as
`tf.distribute.Server(...).join()` subprocesses on 127.0.0.1, the chief's
model.fit here (README.md, "Python"). Run:
    PYTHONPATH=build/python /usr/bin/python3 examples/python/ps_cluster.py [EXAMPLES EPOCHS]"""
import json
import os
import socket
import subprocess
import sys

import strata as tf


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


n, epochs = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (8192, 2)
addr = ["127.0.0.1:%d" % p for p in free_ports(4)]
cluster = {"chief": addr[:1], "worker": addr[1:3], "ps": addr[3:]}
server = ("import json, os, strata as tf; tf.distribute.Server(tf.train.ClusterSpec(json.loads(os.environ['C'])), "
          "job_name=os.environ['J'], task_index=int(os.environ['I'])).join()")
procs = [subprocess.Popen([sys.executable, "-c", server], env=dict(os.environ, C=json.dumps(cluster), J=j, I=str(i)))
         for j, i in (("worker", 0), ("worker", 1), ("ps", 0))]
try:
    (x, y), _ = tf.keras.datasets.fashion_mnist.load_data()
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster),
                                                                    task_type="chief", task_id=0)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Rescaling(1 / 255, input_shape=(28, 28, 1)),
                                     tf.keras.layers.Flatten(), tf.keras.layers.Dense(128, activation="relu"),
                                     tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x[:n], y[:n], epochs=epochs, batch_size=128)
    print(history.history)
    print("exactly once:", strategy.last_job["exactly_once"],
          "updates per ps:", [p["updates_applied"] for p in strategy.last_job["per_ps"]])
finally:
    for p in procs:  # the chief's fit sent STOP: every server returns
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
