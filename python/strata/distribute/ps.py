"""ParameterServerStrategy, tf.distribute.Server and ClusterCoordinator on
Strata's parameter-server engine (include/strata/ps.h, issue 14).

Workers and ps tasks run `tf.distribute.Server(cluster, job_name=, task_index=
).join()` (st_ps_server_run with the GIL released). The chief builds and
compiles its model inside `ParameterServerStrategy(resolver).scope()`; its
`model.fit` runs st_ps_train: the model's Keras JSON (Rescaling layers taken
out: the data carries the scale) and the training arrays go to the workers
through files in `data_dir` (a temporary directory by default: the tasks
must share the file system, as on one machine), the ps tasks apply the
compiled optimizer, and the trained variables come back into the model.
Every task builds the initial weights from the seed the chief's model was
built with (tf.random.set_seed's sequence: _util.next_init_seed), not from
weights set by hand. docs/PARAMETER_SERVER.md ("Python") lists what differs from TF."""
import json
import math
import os
import shutil
import tempfile
import uuid

import numpy as np

from .. import _strata
from .._util import features, global_seed, labels
from . import Strategy, _device
from . import partitioners as _partitioners
from . import _ps_step
from .cluster_resolver import ClusterResolver, ClusterSpec, SimpleClusterResolver


def _seconds(what, value, lo, hi, default_zero):
    """A duration in seconds within [lo, hi] (0: the default, when default_zero),
    or ValueError naming it (issue 29 D10: nan, inf and negatives were
    replaced silently or reached the report as 'inf')."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError("%s %r is not a number of seconds" % (what, value)) from None
    if default_zero and v == 0:
        return v
    if not (lo <= v <= hi):
        raise ValueError("%s %r out of range [%g, %g] s%s" % (what, value, lo, hi,
                                                            " (0: the default)" if default_zero else ""))
    return v


def _warn_insecure(what):
    """Without keys the task runs insecure: say so, as `strata server --insecure` does."""
    import warnings
    warnings.warn("%s: no keys_dir and no $STRATA_KEYS: running insecure (no encryption or "
                  "authentication); any process that reaches the cluster's ports can change the "
                  "model: create keys with `strata keygen DIR` on a network you do not trust" % what,
                  RuntimeWarning, stacklevel=3)


def _load_npz(spec, val_split, train_examples, batch, seed, input_shape):
    """The default data of a worker: the file the chief's fit wrote."""
    if not spec.startswith("npz:"):
        raise ValueError("Server: data %r is not a file of ParameterServerStrategy's fit (give "
                         "tf.distribute.Server a data= function for other data)" % spec)
    with np.load(spec[4:]) as f:
        x, y = np.ascontiguousarray(f["x"]), np.ascontiguousarray(f["y"])
    return x, y, len(y)


_MADE = []  # every Server made in this process (TF's keep serving when dropped)


def _idle_servers(what, spec):
    """TF's Server(start=True) serves at once, so the parameter-server
    tutorial makes its cluster in the chief's process and never calls join();
    Strata's serves inside join() only: refuse the job instead of waiting
    for servers that never answer."""
    mine = {(job, i, a) for job in ("worker", "ps") for i, a in enumerate(spec.as_dict().get(job, []))}
    idle = sorted("%s:%d" % (s._resolver.task_type, s._resolver.task_id) for s in _MADE
                  if not s._serving and (s._resolver.task_type, s._resolver.task_id,
                                                     s._resolver.cluster_spec().task_address(
                                                         s._resolver.task_type, s._resolver.task_id)) in mine)
    if idle:
        raise NotImplementedError(
            "%s: tf.distribute.Server objects made in this process (%s) are not serving: Strata's Server "
            "serves inside server.join() only (an in-process cluster that is never joined is not supported); "
            "run each with threading.Thread(target=server.join, daemon=True).start(), or in its own process"
            % (what, ", ".join(idle)))


class Server:
    """tf.distribute.Server for a 'worker' or 'ps' task: join() serves the
    chief's job until it sends STOP (returns), Ctrl-C (KeyboardInterrupt) or
    stop() from another thread (returns). protocol 'grpc' is accepted and
    mapped to Strata's ZeroMQ transport. keys_dir (or $STRATA_KEYS): the CURVE
    keys of `strata keygen`; without keys the task runs insecure (trusted
    networks only, as TF's grpc). data: worker tasks' training set,
    fn(spec, val_split, train_examples, batch, seed, input_shape) -> (x, y,
    n_train); by default the file ParameterServerStrategy's fit writes."""

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None, config=None,
                 start=True, keys_dir=None, data=None, job_timeout=120.0, on_message=None):
        spec = server_or_cluster_def
        if isinstance(spec, ClusterResolver):
            job_name = spec.task_type if job_name is None else job_name
            task_index = spec.task_id if task_index is None else task_index
            spec = spec.cluster_spec()
        spec = spec if isinstance(spec, ClusterSpec) else ClusterSpec(spec)
        if protocol not in (None, "grpc"):
            raise ValueError("Server: protocol %r (only 'grpc' is accepted: Strata uses ZeroMQ)" % (protocol,))
        if job_name not in ("worker", "ps"):
            raise ValueError("Server: job_name %r: Strata's servers are 'worker' or 'ps' tasks (the chief "
                             "runs ParameterServerStrategy's fit or a ClusterCoordinator)" % (job_name,))
        task_index = 0 if task_index is None else task_index
        self._resolver = SimpleClusterResolver(spec, task_type=job_name, task_id=task_index)
        self._tf_config = self._resolver._tf_config("Server")
        self._keys = keys_dir or os.environ.get("STRATA_KEYS") or None
        self._data = data or _load_npz
        self._timeout = _seconds("Server: job_timeout", job_timeout, 0.01, 1e6, False)
        if self._keys is None:
            _warn_insecure("Server")
        self._on_message = on_message
        self._stop = False
        self._started = bool(start)
        self._serving = False
        _MADE.append(self)  # the chief refuses a job while one of these never serves (_idle_servers)

    @property
    def target(self):
        return "grpc://" + self._resolver.master()

    def start(self):
        self._started = True

    def stop(self):
        """Ask join() to return (polled about every 0.2 s; callable from any thread)."""
        self._stop = True

    def join(self):
        """Serve until the chief's STOP; ConnectionError when the chief was
        lost or never sent a job within job_timeout seconds."""
        self._started = self._serving = True
        _strata.ps_server_run(self._tf_config, self._keys, self._keys is None, self._timeout, self._data,
                              lambda: self._stop, self._on_message)


def _resolver_of(cluster_resolver, what):
    if cluster_resolver is None:
        from .cluster_resolver import TFConfigClusterResolver
        cluster_resolver = TFConfigClusterResolver()
    if not isinstance(cluster_resolver, ClusterResolver):
        raise ValueError("%s: cluster_resolver %r is not a tf.distribute.cluster_resolver object" % (what, cluster_resolver))
    spec = cluster_resolver.cluster_spec()
    jobs = spec.as_dict()
    for job in jobs:
        if job not in ("chief", "worker", "ps"):
            raise ValueError("%s: cluster job %r is not part of a parameter-server cluster (chief, worker, ps)"
                             % (what, job))
    for job, lo in (("chief", 1), ("worker", 1), ("ps", 1)):
        if len(jobs.get(job, [])) < lo:
            raise ValueError("%s: the cluster has no %s task (it needs exactly one chief, at least one "
                             "worker and one ps)" % (what, job))
    if len(jobs["chief"]) != 1:
        raise ValueError("%s: the cluster has %d chief tasks (exactly one)" % (what, len(jobs["chief"])))
    return cluster_resolver


class ParameterServerStrategy(Strategy):
    """tf.distribute.experimental.ParameterServerStrategy(cluster_resolver):
    asynchronous training; on the chief, model.fit in its scope runs the job
    (see the module's docstring). Strata options: keys_dir (CURVE keys;
    default $STRATA_KEYS, else insecure), data_dir (where fit writes the
    workers' data and the model JSON: a directory every task can read;
    default a temporary one, removed after fit), heartbeat_interval and
    coordinator_timeout (seconds)."""
    _kind = "one_device"

    def __init__(self, cluster_resolver=None, variable_partitioner=None, keys_dir=None, data_dir=None,
                 heartbeat_interval=0.0, coordinator_timeout=0.0):
        super().__init__()
        if variable_partitioner is not None and not callable(variable_partitioner):
            raise ValueError("ParameterServerStrategy: variable_partitioner must be a partitioner (e.g. "
                             "tf.distribute.experimental.partitioners.MinSizePartitioner(...)), got %r"
                             % (variable_partitioner,))
        self._partitioner = variable_partitioner  # honoured exactly or refused: partitioners.py
        self._device = _device("/cpu:0")
        self._resolver = _resolver_of(cluster_resolver, "ParameterServerStrategy")
        self._keys = keys_dir or os.environ.get("STRATA_KEYS") or None
        self._data_dir = data_dir or os.environ.get("STRATA_PS_DATA_DIR") or None
        self._hb = _seconds("ParameterServerStrategy: heartbeat_interval", heartbeat_interval, 0.01, 3600, True)
        self._ct = _seconds("ParameterServerStrategy: coordinator_timeout", coordinator_timeout, 0.1, 1e6, True)
        if (self._ct or 60.0) < 2 * (self._hb or 1.0):
            raise ValueError("ParameterServerStrategy: coordinator_timeout %g s is shorter than 2 x "
                             "heartbeat_interval (%g s): the servers would take the live chief for lost"
                             % (self._ct or 60.0, self._hb or 1.0))
        if self._keys is None:
            _warn_insecure("ParameterServerStrategy")
        self.last_job = None

    @property
    def cluster_resolver(self):
        return self._resolver

    @property
    def num_replicas_in_sync(self):
        return 1

    def run(self, fn, args=(), kwargs=None, options=None):
        if _ps_step.active() is not None:  # a step function scheduled by ClusterCoordinator
            return _ps_step.run_strategy(fn, args, kwargs)
        raise NotImplementedError("ParameterServerStrategy.run is not supported by Strata: use model.fit, or "
                                  "ClusterCoordinator.schedule(model.train_on_batch, args=(iterator,))")

    def _chief_config(self, what):
        r = self._resolver
        if r.task_type not in (None, "chief") or (r.task_type is None and r.task_id not in (None, 0)):
            raise ValueError("%s: this process is task %s:%s; only the chief trains (workers and ps run "
                             "tf.distribute.Server(...).join())" % (what, r.task_type, r.task_id))
        _idle_servers(what, r.cluster_spec())
        return SimpleClusterResolver(r.cluster_spec(), task_type="chief", task_id=0)._tf_config(what)

    def _job_files(self, model, x, y, what):
        """(directory, remove it?, model JSON path, data spec, n) of a job."""
        lossname = model.loss._engine_name
        softmax = getattr(model._layers[-1], "activation", None) == "softmax"
        want = "sparse_categorical_crossentropy" if softmax else "sparse_categorical_crossentropy_from_logits"
        if lossname != want:
            raise NotImplementedError("%s: loss %s with a %s output: Strata's parameter-server job trains "
                                      "SparseCategoricalCrossentropy(from_logits=%s) for this model"
                                      % (what, lossname, "softmax" if softmax else "linear", not softmax))
        xa = np.asarray(features(x, what + ": x"), dtype=np.float32)
        if model._scale != 1.0:  # as the engine's source: float(x) * float32(scale)
            xa = xa * np.float32(model._scale)
        ya = labels(y, True, what + ": y")
        if len(ya) != len(xa) or len(xa) == 0:
            raise ValueError("%s: x has %d examples and y has %d (they must match, at least 1)" % (what, len(xa), len(ya)))
        if ya.min() < 0 or ya.max() > 255:
            raise ValueError("%s: y has class %d (the parameter-server job takes classes 0..255)"
                             % (what, ya.min() if ya.min() < 0 else ya.max()))
        from ..keras._json import to_doc
        doc = to_doc(model, rescaling=False)  # the job scales xa above
        temp = self._data_dir is None
        d = tempfile.mkdtemp(prefix="strata-ps-") if temp else self._data_dir
        tag = uuid.uuid4().hex[:12]
        mpath, dpath = os.path.join(d, "model-%s.json" % tag), os.path.join(d, "data-%s.npz" % tag)
        with open(mpath, "w") as f:
            json.dump(doc, f)
        np.savez(dpath, x=np.ascontiguousarray(xa.reshape(len(xa), -1)), y=ya.astype(np.uint8))
        return d, temp, [mpath, dpath], "npz:" + dpath, len(xa)

    def _options(self, model, what):
        model._ensure_compiled(what)
        shapes = [s for _l, ws in model._weight_layout() for s, t, _o in ws if t]
        nps = len(self._resolver.cluster_spec().as_dict().get("ps", []))
        shards, min_bytes = _partitioners.engine_options(self._partitioner, shapes, max(nps, 1), what)
        return dict(tf_config=self._chief_config(what), keys=self._keys, insecure=self._keys is None,
                    ps_shards=shards, ps_min_shard_bytes=min_bytes,
                    seed=getattr(model, "_init_seed", global_seed()), optimizer=model.optimizer._args(), heartbeat_interval=self._hb,
                    coordinator_timeout=self._ct)

    def _ps_fit(self, model, x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
                shuffle, initial_epoch, steps_per_epoch):
        from ..keras import callbacks as _callbacks
        from .. import data as _data
        what = "fit (ParameterServerStrategy)"
        if model._compile_args is None:
            raise RuntimeError("You must compile your model before training/testing. Use `model.compile(optimizer, loss)`.")
        if isinstance(x, _data.Dataset):
            raise NotImplementedError("%s: datasets are not supported by Strata here: pass NumPy arrays x, y" % what)
        for name, v, ok in (("validation_split", validation_split, 0.0), ("validation_data", validation_data, None),
                            ("initial_epoch", initial_epoch, 0)):
            if v != ok if ok is not None else v is not None:
                raise NotImplementedError("%s: %s is not supported by Strata's parameter-server job" % (what, name))
        if shuffle is not True:
            raise NotImplementedError("%s: shuffle=%r: the chief always draws a new permutation each epoch" % (what, shuffle))
        batch = 32 if batch_size is None else batch_size
        if not isinstance(batch, (int, np.integer)) or isinstance(batch, bool) or batch <= 0:
            raise ValueError("%s: batch_size=%r must be a positive integer" % (what, batch))
        if model._cap is None:
            model._build(features(x, what + ": x").shape[1:])
        o = self._options(model, what)
        if steps_per_epoch is not None:
            n = int(steps_per_epoch) * int(batch)
            if steps_per_epoch <= 0 or n > len(x):
                raise ValueError("%s: steps_per_epoch=%r x batch_size=%d needs %d examples, x has %d"
                                 % (what, steps_per_epoch, batch, n, len(x)))
            x, y = x[:n], y[:n]
        d, temp, files, spec, n = self._job_files(model, x, y, what)
        history = _callbacks.History()
        cbs = [cb for cb in (callbacks or [])]
        for cb in cbs:
            if not isinstance(cb, _callbacks.Callback) or isinstance(cb, _callbacks.BackupAndRestore):
                raise NotImplementedError("%s: callback %r is not supported here (epoch-level Keras callbacks "
                                          "only; BackupAndRestore: `strata train --backup-dir`)" % (what, cb))
        cbs.append(history)
        steps = math.ceil(n / batch)
        for cb in cbs:
            cb.set_model(model)
            cb.set_params({"verbose": verbose, "epochs": int(epochs), "steps": steps})
        key = model._metric_key
        model._stop = False

        def on_epoch(kind, arg):
            if kind == "begin":
                for cb in cbs:
                    cb.on_epoch_begin(arg, {})
                return False
            logs = model._epoch_logs(arg, key)
            if verbose:
                print("Epoch %d/%d - %d steps - %s" % (arg[0] + 1, epochs, arg[8],
                                                       " - ".join("%s: %.4f" % kv for kv in logs.items())))
            for cb in cbs:
                cb.on_epoch_end(arg[0], logs)
            return bool(model._stop)

        model.history = history
        for cb in cbs:
            cb.on_train_begin({})
        try:
            w, once, per_ps, workers, nps, epochs_run, report = _strata.ps_train(
                model=files[0], data=spec, n_train=n, epochs=int(epochs), batch=int(batch),
                steps_per_execution=1, epoch_fn=on_epoch, **o)
        finally:
            for f in files:
                os.unlink(f)
            if temp:
                shutil.rmtree(d, ignore_errors=True)
        _strata.set_weights(model._cap, np.frombuffer(w, dtype=np.float32))
        self.last_job = {"exactly_once": once, "per_ps": per_ps, "workers": workers, "ps": nps,
                         "report": json.loads(report)}
        last = model._epoch_logs(epochs_run[-1], key) if epochs_run else {}
        for cb in cbs:
            cb.on_train_end(last)
        return history


class RemoteValue:
    """What ClusterCoordinator.schedule returns: fetch() waits for the step
    and gives what train_on_batch gives (loss, or [loss, accuracy])."""

    def __init__(self, coordinator, handle, loss_only=False):
        self._coordinator, self._handle, self._value = coordinator, handle, None
        self._loss_only = loss_only  # a traced step function returns its loss (_ps_step.py)

    def fetch(self):
        if self._value is None:
            loss, acc, _n, _c = _strata.ps_coordinator_fetch(self._coordinator._cap, self._handle)
            self._value = [loss, acc] if self._coordinator._model._metric_key and not self._loss_only else loss
        return self._value

    get = fetch


class PerWorkerIterator:
    """iter(create_per_worker_dataset(...)): each scheduled step takes the
    next batch of example indices (a seeded permutation per epoch)."""

    def __init__(self, n, batch, epochs, seed):
        self._n, self._batch, self._epochs, self._seed = n, batch, epochs, seed
        self._epoch, self._pos, self._perm = 0, 0, None

    def __iter__(self):
        return self

    def __next__(self):
        t = _ps_step.active()
        if t is not None:  # inside a scheduled step function's trace
            return t.next_batch(self)
        raise TypeError("a per-worker iterator is consumed by ClusterCoordinator.schedule(model.train_on_batch, "
                        "args=(iterator,)), not on the chief")

    def _next_indices(self):
        if self._perm is None or self._pos >= self._n:
            if self._perm is not None:
                self._epoch += 1
            if self._epoch >= self._epochs:
                raise StopIteration
            self._perm = np.random.default_rng(self._seed + self._epoch).permutation(self._n).astype(np.uint32)
            self._pos = 0
        idx = self._perm[self._pos:self._pos + self._batch]
        self._pos += self._batch
        return np.ascontiguousarray(idx)


class PerWorkerDataset:
    def __init__(self, coordinator, x, y, batch, epochs):
        self._coordinator, self._x, self._y, self._batch, self._epochs = coordinator, x, y, batch, epochs

    def __iter__(self):
        it = PerWorkerIterator(len(self._x), self._batch, self._epochs, global_seed())
        self._coordinator._bind(self, it)
        return it


class ClusterCoordinator:
    """tf.distribute.experimental.coordinator.ClusterCoordinator(strategy) for
    the custom loop Strata can run:

        ds = coordinator.create_per_worker_dataset((x, y), batch_size=64, epochs=2)
        it = iter(ds)
        for _ in range(steps):
            coordinator.schedule(model.train_on_batch, args=(it,))
        coordinator.join()
        coordinator.finish()   # Strata: STOP to the servers, weights into model

    fn must be `model.train_on_batch` of the model compiled in the strategy's
    scope and args one iterator of create_per_worker_dataset: each scheduled
    step is one standard training step (pull the variables, gradients of the
    iterator's next batch, push) on a free worker; a step of a lost worker
    runs again on another, each ps applies it once. Arbitrary Python
    functions cannot run on the workers (they are C closures)."""

    def __init__(self, strategy):
        if not isinstance(strategy, ParameterServerStrategy):
            raise ValueError("ClusterCoordinator: strategy %r is not a ParameterServerStrategy" % (strategy,))
        self.strategy = strategy
        self._cap = self._model = self._dataset = self._it = None
        self._files, self._values, self.last_job = None, [], None
        self._traced = {}  # id(step function) -> (it, its model): traced once (_ps_step.py)

    def create_per_worker_dataset(self, dataset_fn, batch_size=32, epochs=1):
        """dataset_fn: (x, y) NumPy arrays, or a function returning them.
        batch_size and epochs bound the steps that may be scheduled."""
        data = dataset_fn() if callable(dataset_fn) else dataset_fn
        from .. import data as _data
        from . import DistributedDataset
        if isinstance(data, (_data.Dataset, DistributedDataset)):
            raise NotImplementedError(
                "create_per_worker_dataset: a tf.data dataset (the dataset_fn's, or "
                "distribute_datasets_from_function's) is not supported by Strata's coordinator: its workers "
                "read NumPy arrays the chief hands them; pass (x, y) arrays, or a function returning them, "
                "with batch_size= and epochs=")
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise ValueError("create_per_worker_dataset: expected (x, y) NumPy arrays (or a function "
                             "returning them), got %r" % (type(data),))
        if self._dataset is not None:
            raise ValueError("create_per_worker_dataset: Strata's coordinator trains one dataset per job")
        self._dataset = PerWorkerDataset(self, data[0], data[1], int(batch_size), int(epochs))
        return self._dataset

    def _bind(self, ds, it):
        self._it = it

    def _start(self, model):
        what = "ClusterCoordinator"
        s, ds = self.strategy, self._dataset
        if model._strategy is not s:
            raise ValueError("%s: the model was not built in this strategy's scope" % what)
        o = s._options(model, what)
        d, temp, files, spec, n = s._job_files(model, ds._x, ds._y, what)
        self._files = (d, temp, files)
        self._model = model
        self._cap = _strata.ps_coordinator_create(model=files[0], data=spec, n_train=n, epochs=ds._epochs,
                                                  batch=ds._batch, steps_per_execution=1, epoch_fn=None, **o)

    def schedule(self, fn, args=None, kwargs=None):
        """Queue one training step; returns a RemoteValue. fn:
        model.train_on_batch, or a step function running a GradientTape step
        under strategy.run (traced once on the chief, then each schedule is
        the engine's step on a worker: _ps_step.py)."""
        from ..keras.models import Sequential
        model = getattr(fn, "__self__", None)
        on_batch = isinstance(model, Sequential) and getattr(fn, "__func__", None) is Sequential.train_on_batch
        if not on_batch and not callable(fn):
            raise TypeError("ClusterCoordinator.schedule: fn %r is not callable" % (fn,))
        if kwargs or not args or len(args) != 1 or not isinstance(args[0], PerWorkerIterator) or args[0] is not self._it:
            raise ValueError("ClusterCoordinator.schedule: args must be (iterator,), the iterator of "
                             "create_per_worker_dataset")
        traced = None if on_batch else self._traced.get(id(fn))
        idx = None
        if not on_batch and traced is None:
            try:
                model, idx = _ps_step.trace(self, fn, args, kwargs)
            except StopIteration:
                raise StopIteration("ClusterCoordinator.schedule: the dataset's epochs are all scheduled") from None
            self._traced[id(fn)] = (fn, model)  # fn kept: its id stays its own
        elif traced is not None:
            model = traced[1]
        if self._cap is None:
            self._start(model)
        elif model is not self._model:
            raise ValueError("ClusterCoordinator.schedule: one model per coordinator")
        try:
            idx = self._it._next_indices() if idx is None else idx
        except StopIteration:
            raise StopIteration("ClusterCoordinator.schedule: the dataset's epochs are all scheduled") from None
        v = RemoteValue(self, _strata.ps_coordinator_schedule(self._cap, idx), loss_only=not on_batch)
        self._values.append(v)
        return v

    def join(self):
        """Wait until every scheduled step is done."""
        if self._cap is not None:
            _strata.ps_coordinator_join(self._cap)

    def done(self):
        self.join()
        return True

    def fetch(self, val):
        """RemoteValue(s) -> their values (nests of lists / tuples / dicts)."""
        if isinstance(val, RemoteValue):
            return val.fetch()
        if isinstance(val, (list, tuple)):
            return type(val)(self.fetch(v) for v in val)
        if isinstance(val, dict):
            return {k: self.fetch(v) for k, v in val.items()}
        return val

    def finish(self):
        """Strata: join, bring the trained variables into the model, check
        every ps applied each scheduled step once (self.last_job), STOP the
        servers. The coordinator cannot schedule afterwards."""
        if self._cap is None:
            return None
        for v in self._values:  # keep the results: fetch is refused once the job is over
            v.fetch()
        try:
            w, once, per_ps, workers, nps, retried = _strata.ps_coordinator_finish(self._cap)
        finally:
            d, temp, files = self._files
            for f in files:
                os.unlink(f)
            if temp:
                shutil.rmtree(d, ignore_errors=True)
        _strata.set_weights(self._model._cap, np.frombuffer(w, dtype=np.float32))
        self.last_job = {"exactly_once": once, "per_ps": per_ps, "workers": workers, "ps": nps,
                         "closures_retried": retried}
        return self.last_job
