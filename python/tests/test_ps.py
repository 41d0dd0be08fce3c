"""ParameterServerStrategy in Python (issue 14): a cluster of Python
tf.distribute.Server subprocesses on 127.0.0.1 and the chief's model.fit /
ClusterCoordinator in this process; bad clusters and TF_CONFIG named."""
import json
import os
import random
import socket
import subprocess
import sys

import numpy as np
import pytest

import strata as tf

L = tf.keras.layers
HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = ("import json, os, strata as tf; c = json.loads(os.environ['CLUSTER']); "
          "tf.distribute.Server(tf.train.ClusterSpec(c), job_name=os.environ['JOB'], "
          "task_index=int(os.environ['INDEX']), protocol='grpc', job_timeout=30).join()")


def _ports(n):
    """Free loopback ports below the ephemeral range (as tests/ps_common.bash)."""
    out = []
    while len(out) < n:
        p = random.randint(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            out.append(p)
        except OSError:
            pass
        finally:
            s.close()
    return out


def _cluster(workers, ps):
    p = _ports(1 + workers + ps)
    a = ["127.0.0.1:%d" % q for q in p]
    return {"chief": a[:1], "worker": a[1:1 + workers], "ps": a[1 + workers:]}


class Servers:
    """The worker and ps tasks as subprocesses, each reaped with a bound."""

    def __init__(self, cluster):
        env = dict(os.environ, CLUSTER=json.dumps(cluster))
        self.procs = []
        for job in ("worker", "ps"):
            for i in range(len(cluster[job])):
                e = dict(env, JOB=job, INDEX=str(i))
                self.procs.append(subprocess.Popen([sys.executable, "-c", SERVER], env=e,
                                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT))

    def reap(self, timeout=20, failed=False):
        """Exit codes; a task still running after timeout s (at once after
        a failure of the chief) is killed (-9)."""
        codes = []
        if failed:
            for p in self.procs:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
            codes.append(p.returncode)
            p.stdout.close()
        return codes

    def output(self):
        return [p.stdout.read().decode(errors="replace") if not p.stdout.closed else "" for p in self.procs]


def _model():
    return tf.keras.Sequential([L.Rescaling(1.0 / 255, input_shape=(28, 28, 1)), L.Flatten(),
                                L.Dense(256, activation="relu"), L.Dense(128, activation="relu"), L.Dense(10)])


def _zmq_or_skip():
    if os.environ.get("STRATA_CLI") is None:
        pytest.skip("STRATA_CLI not set (run through CTest)")
    r = subprocess.run([os.environ["STRATA_CLI"], "keygen", "/nonexistent/x", "--cluster", "/nonexistent"],
                       capture_output=True, text=True)
    if "no ZeroMQ" in r.stdout + r.stderr:
        pytest.skip("this build of Strata has no ZeroMQ")


def test_fit_matches_strata_launch(fashion, tmp_path):
    """One worker (a fixed update order) and 2 ps: the Python chief's fit
    gives `strata launch --workers 1 --ps 2 -- train`'s weights bytes."""
    _zmq_or_skip()
    cli = os.environ["STRATA_CLI"]
    n, batch, seed = 1024, 64, 3
    out = tmp_path / "cli.safetensors"
    subprocess.run([cli, "launch", "--workers", "1", "--ps", "2", "--", "train", "--model", "mlp",
                    "--train-examples", str(n), "--batch-size", str(batch), "--seed", str(seed), "--epochs", "1",
                    "--save", str(out)], check=True, capture_output=True, timeout=120)
    cluster = _cluster(1, 2)
    servers = Servers(cluster)
    try:
        (x, y), _ = fashion
        tf.random.set_seed(seed)
        strategy = tf.distribute.experimental.ParameterServerStrategy(
            tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster), task_type="chief",
                                                                 task_id=0))
        with strategy.scope():
            model = _model()
        model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        h = model.fit(x[:n], y[:n], epochs=1, batch_size=batch, verbose=0)
    except BaseException:
        servers.reap(failed=True)
        raise
    codes = servers.reap()
    assert codes == [0, 0, 0], servers.output()
    assert sorted(h.history) == ["accuracy", "loss"] and len(h.history["loss"]) == 1
    assert strategy.last_job["exactly_once"] and [p["updates_applied"] for p in strategy.last_job["per_ps"]] == [16, 16]
    mine = tmp_path / "py.safetensors"
    model.save_weights(str(mine))
    assert mine.read_bytes() == out.read_bytes()


def test_two_workers_fit_and_coordinator(fashion):
    """2 workers + 1 ps under TF_CONFIG: fit trains every step exactly once,
    then a ClusterCoordinator custom loop on a second cluster. fit's
    callbacks run at each epoch's begin and end; stop_training ends the job
    after epoch 2 of 4 (16 steps scheduled, each applied once)."""
    _zmq_or_skip()
    (x, y), _ = fashion
    for form in ("fit", "coordinator"):
        cluster = _cluster(2, 1)
        servers = Servers(cluster)
        old = os.environ.get("TF_CONFIG")
        os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
        try:
            strategy = tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
            with strategy.scope():
                model = _model()
            model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          metrics=["accuracy"])
            before = model.get_weights()[0].copy()
            if form == "fit":
                seen = []

                class StopAfter2(tf.keras.callbacks.Callback):  # as EarlyStopping stops fit
                    def on_epoch_begin(self, epoch, logs=None):
                        seen.append(("begin", epoch))

                    def on_epoch_end(self, epoch, logs=None):
                        seen.append(("end", epoch, sorted(logs)))
                        self.model.stop_training = epoch == 1

                h = model.fit(x[:512], y[:512], epochs=4, batch_size=64, verbose=0, callbacks=[StopAfter2()])
                assert len(h.history["loss"]) == 2 and np.isfinite(h.history["loss"]).all()
                assert seen == [("begin", 0), ("end", 0, ["accuracy", "loss"]), ("begin", 1),
                                ("end", 1, ["accuracy", "loss"])]
                job = strategy.last_job
                steps = 16
            else:
                coord = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
                it = iter(coord.create_per_worker_dataset((x[:512], y[:512]), batch_size=64, epochs=1))
                vals = [coord.schedule(model.train_on_batch, args=(it,)) for _ in range(8)]
                coord.join()
                res = coord.fetch(vals)
                assert len(res) == 8 and all(np.isfinite(r[0]) and 0 <= r[1] <= 1 for r in res)
                with pytest.raises(StopIteration):
                    coord.schedule(model.train_on_batch, args=(it,))
                job = coord.finish()
                steps = 8
        except BaseException:
            servers.reap(failed=True)
            raise
        finally:
            if old is None:
                os.environ.pop("TF_CONFIG", None)
            else:
                os.environ["TF_CONFIG"] = old
        codes = servers.reap()
        assert codes == [0, 0, 0], servers.output()
        assert job["exactly_once"] and job["workers"] == 2 and job["per_ps"][0]["updates_applied"] == steps
        assert not np.array_equal(before, model.get_weights()[0])


@pytest.mark.parametrize("cluster,message", [
    ({"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "no such job 'chief'"),
    ({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "no worker task"),
    ({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "no ps task"),
    ({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"], "evaluator": ["h:4"]},
     "'evaluator' is not part"),
    ({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1"], "ps": ["127.0.0.1:3"]}, "worker[0] = '127.0.0.1'"),
    ({"chief": ["127.0.0.1:1"], "worker": ["h:70000"], "ps": ["127.0.0.1:3"]}, "port 1..65535"),
    ({"chief": "127.0.0.1:1", "worker": ["h:7"], "ps": ["127.0.0.1:3"]}, "chief: expected a list"),
])
def test_bad_cluster_named(cluster, message):
    with pytest.raises(ValueError) as e:
        tf.distribute.experimental.ParameterServerStrategy(
            tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster), task_type="chief",
                                                                 task_id=0))
    assert message in str(e.value)


def test_duplicate_address_named_by_the_engine():
    """What the engine checks (an address given twice) is named when the
    server starts, before any socket opens."""
    c = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:2"]}
    with pytest.raises(ValueError, match=r"duplicate address 127\.0\.0\.1:2"):
        tf.distribute.Server(tf.train.ClusterSpec(c), job_name="ps", task_index=0).join()


@pytest.mark.parametrize("text,message", [
    (None, "TF_CONFIG is not set"),
    ("{", "TF_CONFIG: not valid JSON"),
    ('{"task": {"type": "chief", "index": 0}}', 'no "cluster" object'),
    ('{"cluster": {"chief": ["h:1"]}, "task": {"type": "worker", "index": 0}}', "task.type 'worker'"),
    ('{"cluster": {"chief": ["h:1"]}, "task": {"type": "chief", "index": 1}}', "task.index 1 out of range"),
])
def test_tf_config_errors_named(monkeypatch, text, message):
    if text is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", text)
    with pytest.raises(ValueError) as e:
        tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert message in str(e.value)


def test_server_and_strategy_arguments():
    c = tf.train.ClusterSpec({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]})
    assert c.num_tasks("worker") == 1 and c.task_address("ps", 0) == "127.0.0.1:3" and sorted(c.jobs) == ["chief", "ps", "worker"]
    with pytest.raises(ValueError, match="job_name 'chief'"):
        tf.distribute.Server(c, job_name="chief", task_index=0)
    with pytest.raises(ValueError, match="protocol 'grpc\\+verbs'"):
        tf.distribute.Server(c, job_name="worker", task_index=0, protocol="grpc+verbs")
    with pytest.raises(ValueError, match="worker task 3 out of range"):
        tf.distribute.Server(c, job_name="worker", task_index=3)
    s = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.SimpleClusterResolver(c, task_type="worker", task_id=0))
    with s.scope():
        m = tf.keras.Sequential([L.Dense(2, input_shape=(4,))])
    m.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match="only the chief trains"):
        m.fit(np.zeros((4, 4), np.float32), np.zeros(4, np.uint8), verbose=0)


def test_timing_arguments_are_checked_and_insecure_warns():
    """Issue 29 D10: nan, inf, negative or contradictory timings were replaced
    by the defaults or reached the job ('inf' in the report broke fit); D2: a
    Server or strategy without keys ran insecure with no warning."""
    c = tf.train.ClusterSpec({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]})
    r = tf.distribute.cluster_resolver.SimpleClusterResolver(c, task_type="chief", task_id=0)
    PSS = tf.distribute.experimental.ParameterServerStrategy
    for kw in ({"heartbeat_interval": -1}, {"heartbeat_interval": float("nan")}, {"heartbeat_interval": float("inf")},
               {"coordinator_timeout": -5}, {"coordinator_timeout": float("nan")}, {"coordinator_timeout": 1e-9}):
        with pytest.raises(ValueError, match="out of range"):
            PSS(r, **kw)
    with pytest.raises(ValueError, match="shorter than 2 x heartbeat_interval"):
        PSS(r, heartbeat_interval=10, coordinator_timeout=5)
    for t in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="job_timeout"):
            tf.distribute.Server(c, job_name="worker", task_index=0, job_timeout=t)
    with pytest.warns(RuntimeWarning, match="running insecure"):
        tf.distribute.Server(c, job_name="worker", task_index=0, keys_dir=None)
    with pytest.warns(RuntimeWarning, match="running insecure"):
        PSS(r)


def test_server_ends_on_stop_ctrl_c_and_job_timeout():
    """join() returns on stop() from another thread, raises
    KeyboardInterrupt on SIGINT and ConnectionError when no job comes."""
    _zmq_or_skip()
    import signal
    import threading
    import time
    cluster = _cluster(1, 1)
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=0)
    t0 = time.monotonic()
    threading.Timer(0.3, server.stop).start()
    server.join()
    assert time.monotonic() - t0 < 5
    with pytest.raises(ConnectionError, match="JOB|job"):
        tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="ps", task_index=0, job_timeout=0.5).join()
    servers = Servers(cluster)
    p = servers.procs[0]
    time.sleep(1.0)  # past the import: the server is polling
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=10)
        out = p.stdout.read().decode(errors="replace")
    finally:
        codes = servers.reap(failed=True)
    assert codes[0] == -signal.SIGINT, out  # an uncaught KeyboardInterrupt re-raises SIGINT
    assert "KeyboardInterrupt" in out


def test_callback_exception_ends_the_job(fashion):
    """An exception in a chief's callback is raised again from fit and the
    servers get STOP (exit 0 at once, not after their timeouts)."""
    _zmq_or_skip()
    (x, y), _ = fashion
    cluster = _cluster(1, 1)
    servers = Servers(cluster)

    class Boom(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("boom at epoch %d" % epoch)

    try:
        strategy = tf.distribute.experimental.ParameterServerStrategy(
            tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster), task_type="chief",
                                                                 task_id=0))
        with strategy.scope():
            model = _model()
        model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        with pytest.raises(RuntimeError, match="boom at epoch 0"):
            model.fit(x[:256], y[:256], epochs=3, batch_size=64, verbose=0, callbacks=[Boom()])
    except BaseException:
        servers.reap(failed=True)
        raise
    assert servers.reap(timeout=10) == [0, 0], servers.output()


def test_label_error_on_a_worker_is_a_value_error(fashion):
    """Issue 29 D10: a label that is not a class, found by a worker, reached
    fit as ConnectionError (a lost peer); it is bad input: ValueError."""
    _zmq_or_skip()
    (x, y), _ = fashion
    cluster = _cluster(1, 1)
    servers = Servers(cluster)
    try:
        strategy = tf.distribute.experimental.ParameterServerStrategy(
            tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster), task_type="chief",
                                                                 task_id=0))
        with strategy.scope():
            model = _model()
        model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        bad = y[:256].astype(np.int64)
        bad[0] = 11
        with pytest.raises(ValueError, match="worker:0: .*label 11 .*not a class"):
            model.fit(x[:256], bad, epochs=1, batch_size=64, verbose=0)
    finally:
        servers.reap(timeout=20, failed=True)


def test_partitioners_are_honoured_exactly_or_refused():
    """tf.distribute.experimental.partitioners: each trainable variable gets
    the shard count TF's partitioner gives, through the engine's fixed-count
    or minimum-size rule; a partition the engine cannot give is refused."""
    P = tf.distribute.experimental.partitioners
    from strata.distribute.partitioners import engine_options
    shapes = [(784, 256), (256,), (256, 10), (10,)]  # 784 KiB, 1 KiB, 10 KiB, 40 B
    assert P.FixedShardsPartitioner(2)((784, 256), tf.float32) == [2, 1]
    assert P.FixedShardsPartitioner(3)((2,), tf.float32) == [2]
    assert P.MinSizePartitioner(256 << 10, 2)((784, 256), tf.float32) == [2, 1]
    assert P.MaxSizePartitioner(256 << 10)((784, 256), tf.float32) == [4, 1]
    assert engine_options(None, shapes, 2, "fit") == (0, 0)
    assert engine_options(P.FixedShardsPartitioner(2), shapes, 2, "fit") == (2, 0)
    assert engine_options(P.MinSizePartitioner(), shapes, 2, "fit") == (0, 0)  # max_shards=1: none
    shards, min_bytes = engine_options(P.MinSizePartitioner(256 << 10, max_shards=2), shapes, 2, "fit")
    assert shards == 0 and min_bytes > 0  # the tutorial's: 2 shards of the 784 KiB kernel only
    from strata.distribute.partitioners import _engine_counts
    assert _engine_counts(shapes, 2, min_bytes=min_bytes) == [2, 1, 1, 1]
    assert engine_options(P.MaxSizePartitioner(8 << 10, max_shards=2), shapes, 2, "fit")[1] > 0
    with pytest.raises(NotImplementedError, match="MaxSizePartitioner asks for 4 shards of variable 0"):
        engine_options(P.MaxSizePartitioner(256 << 10), shapes, 2, "fit")
    with pytest.raises(ValueError, match="num_shards"):
        P.FixedShardsPartitioner(0)
    with pytest.raises(NotImplementedError, match="partitioners.Nope"):
        P.Nope
    c = tf.train.ClusterSpec({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]})
    r = tf.distribute.cluster_resolver.SimpleClusterResolver(c, task_type="chief", task_id=0)
    with pytest.warns(RuntimeWarning, match="insecure"):
        tf.distribute.experimental.ParameterServerStrategy(r, variable_partitioner=P.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=1))
    with pytest.raises(ValueError, match="variable_partitioner must be a partitioner"):
        tf.distribute.experimental.ParameterServerStrategy(r, variable_partitioner=3)


def _tutorial_step(strategy, model, optimizer, loss_object, metric=None, scale=1.0, ret="loss"):
    """The parameter-server tutorial's step function (its custom-loop half)."""
    @tf.function
    def step_fn(iterator):
        def replica_fn(batch_data, labels):
            with tf.GradientTape() as tape:
                pred = model(batch_data, training=True)
                per_example_loss = loss_object(labels, pred)
                loss = tf.nn.compute_average_loss(per_example_loss) * scale
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            if metric is not None:
                metric.update_state(labels, pred)
            return loss if ret == "loss" else pred
        batch_data, labels = next(iterator)
        losses = strategy.run(replica_fn, args=(batch_data, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
    return step_fn


def test_scheduled_tape_step_refusals_name_what_cannot_be_replayed():
    """The step function is traced once on the chief before any server is
    reached: what a C step cannot replay is refused by name."""
    c = tf.train.ClusterSpec({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]})
    r = tf.distribute.cluster_resolver.SimpleClusterResolver(c, task_type="chief", task_id=0)
    with pytest.warns(RuntimeWarning, match="insecure"):
        strategy = tf.distribute.experimental.ParameterServerStrategy(r)
    rng = np.random.default_rng(0)
    x, y = rng.random((256, 12), dtype=np.float32), rng.integers(0, 4, 256)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                reduction=tf.keras.losses.Reduction.NONE)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    def dataset_fn(input_context):  # the tutorial's, through distribute_datasets_from_function
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10).repeat().batch(32)

    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)
    for fn in (per_worker_dataset_fn, lambda: dataset_fn(None)):
        with pytest.raises(NotImplementedError, match="a tf.data dataset .* pass \\(x, y\\) arrays"):
            coordinator.create_per_worker_dataset(fn)
    cases = [(dict(metric=tf.keras.metrics.SparseCategoricalAccuracy()), "SparseCategoricalAccuracy.update_state"),
             (dict(scale=2.0), "a loss other than SparseCategoricalCrossentropy averaged over the batch"),
             (dict(ret="pred"), "a return value other than the step's loss")]
    for kw, message in cases:
        with strategy.scope():
            model = tf.keras.Sequential([L.Dense(16, activation="relu", input_shape=(12,)), L.Dense(4)])
            optimizer = tf.keras.optimizers.SGD(0.1)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        it = iter(coordinator.create_per_worker_dataset((x, y), batch_size=32, epochs=1))
        before = model.get_weights()
        with pytest.raises(NotImplementedError, match=message):
            coordinator.schedule(_tutorial_step(strategy, model, optimizer, loss_object, **kw), args=(it,))
        assert _same_weights(before, model.get_weights())  # the trace applied nothing


def _same_weights(a, b):
    return all(np.array_equal(p, q) for p, q in zip(a, b))


def test_coordinator_schedules_the_tutorials_gradient_tape_step():
    """The tutorial's custom loop on 2 workers and 2 ps with its
    MinSizePartitioner(max_shards=NUM_PS): each scheduled step function is
    one worker step (applied once on each ps), the RemoteValue gives the
    step's loss, the model compiled from the step's loss and optimizer."""
    _zmq_or_skip()
    rng = np.random.default_rng(1)
    x = rng.random((512, 300), dtype=np.float32)
    y = (x[:, :10].sum(1) > 5).astype(np.int64) + (x[:, 10:20].sum(1) > 5).astype(np.int64)
    cluster = _cluster(2, 2)
    servers = Servers(cluster)
    try:
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(cluster),
                                                                        task_type="chief", task_id=0)
        NUM_PS = 2
        variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=(256 << 10), max_shards=NUM_PS)
        with pytest.warns(RuntimeWarning, match="insecure"):
            strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=variable_partitioner)
        with strategy.scope():
            model = tf.keras.Sequential([L.Dense(256, activation="relu", input_shape=(300,)), L.Dense(3)])
            optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
        step_fn = _tutorial_step(strategy, model, optimizer, loss_object)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        per_worker_iterator = iter(coordinator.create_per_worker_dataset((x, y), batch_size=32, epochs=2))
        before = model.get_weights()[0].copy()
        losses = []
        for i in range(4):
            for _ in range(8):
                losses.append(coordinator.schedule(step_fn, args=(per_worker_iterator,)))
            coordinator.join()
        values = [v.fetch() for v in losses]
        assert all(np.isfinite(v) and np.ndim(v) == 0 for v in values)
        assert np.mean(values[-8:]) < np.mean(values[:8])  # it learned
        assert type(model.optimizer).__name__ == "SGD" and model.loss._engine_name == \
            "sparse_categorical_crossentropy_from_logits"
        job = coordinator.finish()
    except BaseException:
        servers.reap(failed=True)
        raise
    codes = servers.reap()
    assert codes == [0, 0, 0, 0], servers.output()
    assert job["exactly_once"] and job["ps"] == 2 and job["workers"] == 2
    assert all(p["updates_applied"] == 32 for p in job["per_ps"])
    assert not np.array_equal(before, model.get_weights()[0])
