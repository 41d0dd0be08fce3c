"""Issue 32 items 9-10 that Strata refuses, each naming the feature and the
alternative: the parameter-server tutorial's in-process cluster (Servers
made in the chief's process and never joined), a scheduled step function
that is not a training step, tf.compat.v1's graph API."""
import numpy as np
import pytest

import strata as tf


def create_in_process_cluster(num_workers, num_ps):
    """Creates and starts local servers and returns the cluster_resolver
    (the tutorial's function; fixed ports in place of portpicker)."""
    worker_ports = [52911 + i for i in range(num_workers)]
    ps_ports = [52931 + i for i in range(num_ps)]
    cluster_dict = {}
    cluster_dict["worker"] = ["127.0.0.1:%s" % port for port in worker_ports]
    if num_ps > 0:
        cluster_dict["ps"] = ["127.0.0.1:%s" % port for port in ps_ports]
    cluster_dict["chief"] = ["127.0.0.1:52951"]
    cluster_spec = tf.train.ClusterSpec(cluster_dict)
    for i in range(num_workers):
        tf.distribute.Server(cluster_spec, job_name="worker", task_index=i, protocol="grpc")
    for i in range(num_ps):
        tf.distribute.Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc")
    return tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, task_type="chief", task_id=0,
                                                                rpc_layer="grpc")


def test_in_process_cluster_is_refused_by_name():
    with pytest.warns(RuntimeWarning, match="insecure"):
        cluster_resolver = create_in_process_cluster(2, 1)
        strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)
    with strategy.scope():
        model = tf.keras.models.Sequential([tf.keras.layers.Dense(10, input_shape=(4,))])
    model.compile("sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = np.zeros((8, 4), np.float32), np.zeros(8, np.int32)
    with pytest.raises(NotImplementedError, match=r"\(ps:0, worker:0, worker:1\) are not serving.*server.join"):
        model.fit(x, y, epochs=1, steps_per_epoch=2, verbose=0)

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def step(iterator):
        with tf.GradientTape() as tape:
            pass
    with pytest.raises(ValueError, match="args must be \\(iterator,\\)"):
        coordinator.schedule(step, args=(None,))
    it = iter(coordinator.create_per_worker_dataset((x, y), batch_size=4))
    # a step function is traced once on the chief (distribute/_ps_step.py): one
    # that is not a training step is refused by name before any server is reached
    with pytest.raises(NotImplementedError, match="a step without next\\(iterator\\)"):
        coordinator.schedule(step, args=(it,))


def test_compat_v1_graph_api_is_refused():
    tf.compat.v1.enable_eager_execution()
    with pytest.raises(NotImplementedError, match="tf.compat.v1.Session: TensorFlow 1's graph API"):
        tf.compat.v1.Session()
    with pytest.raises(NotImplementedError, match="placeholder"):
        tf.compat.v1.placeholder(tf.float32, shape=(None, 4))
    assert float(tf.compat.v2.constant(2.0)) == 2.0
