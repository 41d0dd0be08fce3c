"""tf.distribute on Strata's strategies (src/distribute/).

A strategy object records its options; each model built in its scope gets
its own engine strategy of that kind (Strata binds one compiled model to an
engine strategy, TensorFlow lets several models share one). Variables are
never Python objects here: `scope()` only tells `tf.keras.Sequential` which
strategy its model trains under."""
import re
import threading
import itertools
import weakref

import numpy as np

from .. import _strata
from .._util import reject_kwargs

_local = threading.local()


class ReduceOp:
    """tf.distribute.ReduceOp: SUM or MEAN."""
    SUM = "SUM"
    MEAN = "MEAN"


class CrossDeviceOps:
    """Base of the cross-device reduction objects; `_strata_name` is the
    mirrored strategy's cross_device_ops option it maps to."""
    _strata_name = "all_reduce"

    def __init__(self, *args, **kwargs):
        pass


class NcclAllReduce(CrossDeviceOps):
    """Mapped to Strata's chunked all-reduce (reduce-scatter + all-gather)."""
    _strata_name = "all_reduce"


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """Mapped to Strata's chunked all-reduce (reduce-scatter + all-gather)."""
    _strata_name = "all_reduce"


class ReductionToOneDevice(CrossDeviceOps):
    """Mapped to Strata's reduction_to_one_device."""
    _strata_name = "reduction_to_one_device"


def _device(name):
    """'/cpu:0', '/device:CPU:0', '/job:localhost/replica:0/task:0/device:CPU:1'
    -> 'cpu:0' (Strata's device names)."""
    if not isinstance(name, str):
        raise ValueError("device %r: expected a string such as '/cpu:0'" % (name,))
    m = re.search(r"(?:device:)?(cpu|gpu):(\d+)$", name.strip().lower())
    if not m:
        raise ValueError("device %r: expected a device such as '/cpu:0' or '/gpu:0'" % name)
    return "%s:%s" % (m.group(1), m.group(2))


class _Scope:
    def __init__(self, strategy):
        self.strategy = strategy

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self.strategy)
        return self.strategy

    def __exit__(self, *exc):
        _local.stack.pop()
        return False


class _ClusterResolver:
    def __init__(self, task_type, task_id):
        self.task_type = task_type
        self.task_id = task_id


class PerReplica:
    """tf.distribute's per-replica value: one value per local replica
    (`.values`, in replica order), as strategy.run returns and
    experimental_distribute_dataset yields."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return "PerReplica:{%s}" % ", ".join("%d: %r" % (i, v) for i, v in enumerate(self.values))


DistributedValues = PerReplica


class ReplicaContext:
    """tf.distribute.get_replica_context() inside strategy.run: the
    replica's id, the replica count and all_reduce across the replicas."""

    def __init__(self, strategy, replica_id, handle=None, model=None):
        self._strategy, self._id, self._handle, self._model = strategy, replica_id, handle, model

    @property
    def replica_id_in_sync_group(self):
        """This replica's id among all replicas (every worker's)."""
        return self._id

    @property
    def num_replicas_in_sync(self):
        return self._strategy.num_replicas_in_sync

    @property
    def strategy(self):
        return self._strategy

    def all_reduce(self, reduce_op, value, options=None):
        """SUM or MEAN of value over every replica (float32, through the
        engine's collective); every replica must call it, in the same order."""
        op = _op(reduce_op, "all_reduce")
        if self.num_replicas_in_sync == 1:
            return value
        if self._handle is None:
            raise ValueError("all_reduce: needs the engine's replicas: compile a model in the "
                             "strategy's scope before strategy.run")
        a = np.asarray(value, dtype=np.float32)
        out = _strata.replica_all_reduce(self._handle, 1 if op == ReduceOp.MEAN else 0,
                                         np.ascontiguousarray(a.reshape(-1)))
        return np.frombuffer(out, dtype=np.float32).reshape(a.shape).copy()

    def merge_call(self, merge_fn, args=(), kwargs=None):
        raise NotImplementedError("ReplicaContext.merge_call is not supported by Strata")


class DistributedDataset:
    """strategy.experimental_distribute_dataset(dataset): iterating it yields
    each element split over the local replicas (see Strategy.
    experimental_distribute_dataset)."""

    def __init__(self, strategy, dataset):
        self._strategy, self._dataset = strategy, dataset

    def __iter__(self):
        rank, workers = self._strategy._workers()
        n = self._strategy._local_replicas()
        for elem in self._dataset:
            yield _split_element(elem, rank, workers, n)

    @property
    def element_spec(self):
        return self._dataset.element_spec

    def __repr__(self):
        return "<DistributedDataset over %r>" % (self._dataset,)


class InputContext:
    """tf.distribute.InputContext: what distribute_datasets_from_function's
    dataset_fn is given."""

    def __init__(self, num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1):
        self.num_input_pipelines = num_input_pipelines
        self.input_pipeline_id = input_pipeline_id
        self.num_replicas_in_sync = num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size):
        if global_batch_size % self.num_replicas_in_sync:
            raise ValueError("The `global_batch_size` %r is not divisible by `num_replicas_in_sync` %r"
                             % (global_batch_size, self.num_replicas_in_sync))
        return global_batch_size // self.num_replicas_in_sync


class _PerReplicaDataset(DistributedDataset):
    """distribute_datasets_from_function's result: consecutive elements, one
    per local replica."""

    def __init__(self, dataset, n):
        self._dataset, self._n = dataset, n

    def __iter__(self):
        it = iter(self._dataset)
        while True:
            group = []
            for e in it:
                group.append(e)
                if len(group) == self._n:
                    break
            if not group:
                return
            if self._n == 1:
                yield group[0]
                continue
            while len(group) < self._n:
                group.append(_map_nest(lambda a: a[:0], group[-1]))
            yield _map_nest_many(group)


def _map_nest_many(group):
    """[nest per replica] -> one nest of PerReplica leaves."""
    first = group[0]
    if isinstance(first, (tuple, list)):
        out = [_map_nest_many([g[i] for g in group]) for i in range(len(first))]
        return tuple(out) if isinstance(first, tuple) else out
    if isinstance(first, dict):
        return {k: _map_nest_many([g[k] for g in group]) for k in first}
    return PerReplica(group)


def _span(total, n, i):
    """Part i of total items over n parts: [total*i//n, total*(i+1)//n), the
    engine's split (src/base/split.h)."""
    return total * i // n, total * (i + 1) // n


def _split_element(elem, rank, workers, n):
    leaves = _nest_leaves(elem)
    if not leaves:
        return elem
    total = len(leaves[0])
    lo, hi = _span(total, workers, rank)
    if workers > 1:
        elem = _map_nest(lambda a: a[lo:hi], elem)
    if n == 1:
        return elem
    parts = [_span(hi - lo, n, r) for r in range(n)]
    return _map_nest(lambda a: PerReplica(a[p:q] for p, q in parts), elem)


def _map_nest(fn, tree):
    if isinstance(tree, tuple):
        return tuple(_map_nest(fn, t) for t in tree)
    if isinstance(tree, list):
        return [_map_nest(fn, t) for t in tree]
    if isinstance(tree, dict):
        return {k: _map_nest(fn, v) for k, v in tree.items()}
    return fn(tree)


def _nest_leaves(tree):
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in _nest_leaves(t)]
    if isinstance(tree, dict):
        return [x for k in tree for x in _nest_leaves(tree[k])]
    return [tree]


def _select(tree, rid, n):
    """Replica rid's view of fn's arguments: each PerReplica leaf replaced
    by its value for that replica."""
    def pick(v):
        if isinstance(v, PerReplica):
            if len(v.values) != n:
                raise ValueError("strategy.run: a PerReplica argument has %d values for %d local "
                                 "replicas" % (len(v.values), n))
            return v.values[rid]
        return v
    return _map_nest(pick, tree)


def _regroup(results):
    """Per-replica results -> one nest with PerReplica leaves (as TF)."""
    first = results[0]
    if isinstance(first, (tuple, list)) and all(type(r) is type(first) and len(r) == len(first)
                                                for r in results):
        out = [_regroup([r[i] for r in results]) for i in range(len(first))]
        return tuple(out) if isinstance(first, tuple) else out
    if isinstance(first, dict) and all(isinstance(r, dict) and r.keys() == first.keys() for r in results):
        return {k: _regroup([r[k] for r in results]) for k in first}
    if first is None and all(r is None for r in results):
        return None
    return PerReplica(results)


def _op(reduce_op, where):
    if isinstance(reduce_op, str) and reduce_op.upper() in (ReduceOp.SUM, ReduceOp.MEAN):
        return reduce_op.upper()
    raise ValueError("%s: reduce_op %r (expected ReduceOp.SUM or ReduceOp.MEAN)" % (where, reduce_op))


class Strategy:
    """Base of the strategies: scope(), num_replicas_in_sync, run(), reduce(),
    experimental_distribute_dataset()."""
    _kind = "one_device"

    def __init__(self):
        self._devices = None
        self._replicas = 0
        self._cross_ops = None
        self._device = None
        self._probe = None

    def _create(self):
        """A new engine strategy with this object's options (one per model)."""
        return _strata.strategy_create(self._kind, self._devices, self._replicas,
                                       self._cross_ops, self._device, 0)

    @property
    def num_replicas_in_sync(self):
        """Replicas that train each global batch together."""
        if self._probe is None:
            self._probe = self._create()
        return _strata.strategy_replicas(self._probe)

    @property
    def cluster_resolver(self):
        """task_type 'worker' and task_id this process's worker rank (0 but
        under MultiWorkerMirroredStrategy launched with mpirun)."""
        if self._probe is None:
            self._probe = self._create()
        rank, _count = _strata.strategy_workers(self._probe)
        return _ClusterResolver("worker", rank)

    def scope(self):
        """Context manager: models built inside train under this strategy."""
        return _Scope(self)

    # ---- custom training loops (TensorFlow's cross-replica API) ----
    def _register(self, model):
        """A model built in this strategy's scope (strategy.run binds the
        most recently compiled one)."""
        self._models = [r for r in getattr(self, "_models", []) if r() is not None]
        self._models.append(weakref.ref(model))
        model._reg_order = next(_ORDER)

    def _register_optimizer(self, opt):
        self._optimizers = [r for r in getattr(self, "_optimizers", []) if r() is not None]
        self._optimizers.append(weakref.ref(opt))
        opt._reg_order = next(_ORDER)

    def _run_model(self):
        """The model strategy.run binds: the most recently compiled one;
        but when an optimizer was made (in this scope, or outside any) after
        that compile and a built model has none (TF's custom loops never
        compile), the newest such model is compiled with the newest such
        optimizer here (the loss is the GradientTape's; the engine's is a
        placeholder)."""
        models = [m for m in (r() for r in getattr(self, "_models", [])) if m is not None]
        live = [m for m in models if m._compiled and m._compile_args is not None]
        last = max(live, key=lambda m: m._compiled_at) if live else None
        since = last._compiled_at if last is not None else 0
        opts = [o for o in (r() for r in getattr(self, "_optimizers", []))
                if o is not None and o._model is None and o._reg_order > since]
        bare = [m for m in models if m._cap is not None and m._compile_args is None]
        if opts and bare:
            m = max(bare, key=lambda m: m._reg_order)
            m.compile(optimizer=max(opts, key=lambda o: o._reg_order), loss="mean_squared_error")
            m._placeholder_loss = True  # fit / evaluate still ask for compile
            m._ensure_compiled("strategy.run")
            return m
        return last

    def _workers(self):
        if self._probe is None:
            self._probe = self._create()
        return _strata.strategy_workers(self._probe)

    def _local_replicas(self):
        return max(self.num_replicas_in_sync // self._workers()[1], 1)

    def run(self, fn, args=(), kwargs=None, options=None):
        """Calls fn(*args, **kwargs) once per local replica, as TensorFlow's
        strategy.run: a PerReplica argument gives each replica its own value
        (its slice of the global batch from experimental_distribute_dataset),
        any other argument is passed to every replica as it is. Inside fn,
        tf.distribute.get_replica_context().replica_id_in_sync_group is the
        replica's id, and `model.train_on_batch(x, y)` on the slice is one
        replica's share of a training step on Strata's engine (gradients of
        its examples, all-reduced with the other replicas', then applied):
        the replicas together compute exactly fit's step for the global batch.
        With a model of this strategy compiled, the replicas run in parallel
        on the engine's replica threads; otherwise one after the other.
        Under MultiWorkerMirroredStrategy every worker (mpirun process) calls
        run the same number of times; its local replicas' update spans every
        worker (fit's weights bytes on each).
        Returns fn's result: a PerReplica (per nest leaf) with more than one
        local replica, the plain value with one."""
        kwargs = kwargs or {}
        if not callable(fn):
            raise TypeError("strategy.run: fn %r is not callable" % (fn,))
        n = self._local_replicas()
        rank = self._workers()[0]
        from .. import _eager
        _eager.close_strategy(self)  # an eager loop's open run (strata/_eager.py) ends first
        model = self._run_model()

        def call(rid, handle):
            prev = getattr(_local, "replica", None)
            _local.replica = ReplicaContext(self, rank * n + rid, handle, model)
            try:
                return fn(*_select(tuple(args), rid, n), **_select(dict(kwargs), rid, n))
            finally:
                _local.replica = prev

        if model is not None:
            results = _strata.strategy_run(model._cap, call, n)
        else:
            results = [call(r, None) for r in range(n)]
        return results[0] if n == 1 else _regroup(results)

    def reduce(self, reduce_op, value, axis=None):
        """SUM or MEAN of a per-replica value over the replicas (in replica
        order), after summing / averaging each replica's value over `axis`
        when given (MEAN over an axis averages over every replica's
        examples together, as TensorFlow). A value that is not PerReplica is
        taken as the same on every replica. Nests of values are reduced leaf
        by leaf. Under MultiWorkerMirroredStrategy the reduction spans every
        replica of every worker (worker-major, replica order: the same value
        on every worker, which must all call reduce with the same shapes); the
        values travel as float32 (exact for integers up to 2**24), through
        the transport of the strategy's compiled model."""
        op = _op(reduce_op, "reduce")
        return _map_nest(lambda v: self._reduce_one(op, v, axis), value)

    def _reduce_one(self, op, value, axis):
        vals = list(value.values) if isinstance(value, PerReplica) else [value] * self._local_replicas()
        arrs = [np.asarray(v) for v in vals]
        if arrs[0].dtype.kind not in "biuf":
            raise ValueError("reduce: value of dtype %s is not numeric" % arrs[0].dtype)
        counts = [1] * len(arrs)
        if axis is not None:
            counts = [a.shape[axis] for a in arrs]
            arrs = [a.sum(axis=axis) for a in arrs]
        total = arrs[0]
        for a in arrs[1:]:  # replica order, as the engine sums
            total = total + a
        count = float(sum(counts))  # replicas (axis None) or examples summed over
        if self._workers()[1] > 1:
            total, count = self._reduce_workers(arrs, counts)
        if op == ReduceOp.SUM:
            return total
        return total / np.asarray(count, dtype=np.result_type(total, np.float32))

    def _reduce_workers(self, arrs, counts):
        """(sum over every worker's replicas, their count) through the
        engine's st_strategy_reduce: one float32 row per local replica, its
        values then its count (examples or 1)."""
        model = self._run_model()
        if model is None:
            raise ValueError("reduce: across MultiWorkerMirroredStrategy workers needs a model "
                             "compiled in the strategy's scope (its transport between the workers)")
        dtype, shape = np.result_type(*arrs), np.shape(arrs[0])
        if any(np.shape(a) != shape for a in arrs):
            raise ValueError("reduce: the replicas' values have different shapes %s"
                             % [np.shape(a) for a in arrs])
        rows = np.stack([np.append(np.asarray(a, dtype=np.float32).reshape(-1), np.float32(c))
                         for a, c in zip(arrs, counts)])
        out = np.frombuffer(_strata.strategy_reduce(model._cap, 0, np.ascontiguousarray(rows)),
                            dtype=np.float32)
        total = out[:-1].reshape(shape)
        total = total.astype(dtype) if dtype.kind in "biu" else total
        return (total[()] if total.ndim == 0 else total.copy()), float(out[-1])

    def experimental_distribute_dataset(self, dataset, options=None):
        """A DistributedDataset: iterating it yields each global batch split
        over the local replicas as the engine splits it (replica r of n gets
        examples [B*r/n, B*(r+1)/n) of a B-example batch; under
        MultiWorkerMirroredStrategy worker w first takes its contiguous share
        of the global batch, as AutoShardPolicy.DATA): PerReplica values with
        more than one local replica, the batch itself with one."""
        return DistributedDataset(self, dataset)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """dataset_fn(InputContext) builds this worker's dataset of
        per-replica batches (batch it with
        ctx.get_per_replica_batch_size(global_batch)); iterating the result
        gives each local replica the next element in turn, as PerReplica
        values (the element itself with one local replica). A replica left
        without an element at the end gets an empty slice."""
        rank, workers = self._workers()
        ctx = InputContext(workers, rank, self.num_replicas_in_sync)
        return _PerReplicaDataset(dataset_fn(ctx), self._local_replicas())

    def experimental_local_results(self, value):
        """The local replicas' values of a PerReplica (or of each leaf of a
        nest of them) as a tuple, one entry per replica; (value,) otherwise."""
        if isinstance(value, PerReplica):
            return tuple(value.values)
        leaves = _nest_leaves(value)
        per = [l for l in leaves if isinstance(l, PerReplica)]
        if not per:
            return (value,)
        n = len(per[0].values)
        return tuple(_map_nest(lambda v: v.values[r] if isinstance(v, PerReplica) else v, value)
                     for r in range(n))


class OneDeviceStrategy(Strategy):
    """All computation on one device (default '/cpu:0')."""
    _kind = "one_device"

    def __init__(self, device="/cpu:0"):
        super().__init__()
        self._device = _device(device)


class MirroredStrategy(Strategy):
    """Synchronous data parallelism: one replica per device, gradients
    all-reduced each step. devices=None: one replica per CPU core."""
    _kind = "mirrored"

    def __init__(self, devices=None, cross_device_ops=None):
        super().__init__()
        if devices is not None:
            if isinstance(devices, str):
                devices = [devices]
            self._devices = ",".join(_device(d) for d in devices)
        if cross_device_ops is not None:
            if not isinstance(cross_device_ops, CrossDeviceOps):
                raise ValueError("cross_device_ops %r: expected tf.distribute.NcclAllReduce(), "
                                 "HierarchicalCopyAllReduce() or ReductionToOneDevice()" % (cross_device_ops,))
            self._cross_ops = cross_device_ops._strata_name


class CentralStorageStrategy(Strategy):
    """Variables kept once (on the host), replicas compute gradients."""
    _kind = "central_storage"

    def __init__(self, compute_devices=None, parameter_device=None):
        super().__init__()
        if compute_devices is not None:
            self._devices = ",".join(_device(d) for d in compute_devices)
        if parameter_device is not None:
            _device(parameter_device)


class MultiWorkerMirroredStrategy(Strategy):
    """Mirrored across processes launched with mpirun (one worker each)."""
    _kind = "multi_worker_mirrored"

    def __init__(self, cluster_resolver=None, communication_options=None):
        super().__init__()
        if cluster_resolver is not None:
            raise NotImplementedError("MultiWorkerMirroredStrategy: argument cluster_resolver is not "
                                      "supported by Strata (workers come from mpirun)")


class _Experimental:
    CentralStorageStrategy = CentralStorageStrategy
    MultiWorkerMirroredStrategy = MultiWorkerMirroredStrategy

    def __getattr__(self, name):
        from .._util import missing
        raise missing("tf.distribute.experimental", name)


experimental = _Experimental()
_default = None
_ORDER = itertools.count(1)  # models registered, optimizers made, compiles: one sequence


def get_strategy():
    """The strategy of the innermost scope, else the default one-device one."""
    global _default
    ctx = getattr(_local, "replica", None)
    if ctx is not None:
        return ctx._strategy
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    if _default is None:
        _default = OneDeviceStrategy()
    return _default


def has_strategy():
    return bool(getattr(_local, "stack", None))


def _scoped_strategy():
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def get_replica_context():
    """Inside strategy.run: the replica's ReplicaContext. In a strategy's
    scope outside run: None (the cross-replica context, as TF). Elsewhere:
    the default strategy's single replica (id 0)."""
    ctx = getattr(_local, "replica", None)
    if ctx is not None:
        return ctx
    if has_strategy():
        return None
    return ReplicaContext(get_strategy(), 0)


def _current_replica():
    return getattr(_local, "replica", None)


def in_cross_replica_context():
    return getattr(_local, "replica", None) is None and has_strategy()


__all__ = ["ReduceOp", "Strategy", "PerReplica", "DistributedValues", "ReplicaContext",
           "DistributedDataset", "InputContext", "get_replica_context", "in_cross_replica_context", "OneDeviceStrategy", "MirroredStrategy", "CentralStorageStrategy",
           "MultiWorkerMirroredStrategy", "NcclAllReduce", "HierarchicalCopyAllReduce",
           "ReductionToOneDevice", "CrossDeviceOps", "get_strategy", "has_strategy", "experimental"]

# ParameterServerStrategy (issue 14): python/strata/distribute/ps.py, cluster_resolver.py
from . import cluster_resolver  # noqa: E402
from .ps import ParameterServerStrategy, Server, ClusterCoordinator, RemoteValue  # noqa: E402
from . import partitioners  # noqa: E402
experimental.ParameterServerStrategy = ParameterServerStrategy
experimental.partitioners = partitioners
experimental.coordinator = type("coordinator", (), {"ClusterCoordinator": ClusterCoordinator, "RemoteValue": RemoteValue})
coordinator = experimental.coordinator  # tf.distribute.coordinator (TF 2.x's non-experimental name)
__all__ += ["ParameterServerStrategy", "Server", "cluster_resolver"]


def __getattr__(name):
    from .._util import missing
    raise missing("tf.distribute", name)
