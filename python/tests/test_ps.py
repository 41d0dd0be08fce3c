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
