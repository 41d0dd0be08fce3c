"""tf.distribute on Strata's strategies (src/distribute/).

A strategy object records its options; each model built in its scope gets
its own engine strategy of that kind (Strata binds one compiled model to an
engine strategy, TensorFlow lets several models share one). Variables are
never Python objects here: `scope()` only tells `tf.keras.Sequential` which
strategy its model trains under."""
import re
import threading

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

    def run(self, fn, args=(), kwargs=None, options=None):
        """Calls fn(*args, **kwargs) once for the whole global batch. Strata's
        engine splits a batch over the replicas inside the model's steps
        (`model.train_on_batch`, `fit`), so fn works on global batches and its
        result is already the replicas' combined value."""
        return fn(*args, **(kwargs or {}))

    def reduce(self, reduce_op, value, axis=None):
        """SUM or MEAN of value over `axis` (None: value is already the
        reduction over the replicas, as `run` returns it)."""
        if reduce_op not in (ReduceOp.SUM, ReduceOp.MEAN, "sum", "mean"):
            raise ValueError("reduce: reduce_op %r (expected ReduceOp.SUM or ReduceOp.MEAN)" % (reduce_op,))
        if axis is None:
            return value
        v = np.asarray(value)
        return v.sum(axis=axis) if reduce_op in (ReduceOp.SUM, "sum") else v.mean(axis=axis)

    def experimental_distribute_dataset(self, dataset, options=None):
        """The dataset itself: its global batches are split by the engine."""
        return dataset

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        return dataset_fn(None)

    def experimental_local_results(self, value):
        return (value,)


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


experimental = _Experimental()
_default = None


def get_strategy():
    """The strategy of the innermost scope, else the default one-device one."""
    global _default
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
    return None


def in_cross_replica_context():
    return has_strategy()


__all__ = ["ReduceOp", "Strategy", "OneDeviceStrategy", "MirroredStrategy", "CentralStorageStrategy",
           "MultiWorkerMirroredStrategy", "NcclAllReduce", "HierarchicalCopyAllReduce",
           "ReductionToOneDevice", "CrossDeviceOps", "get_strategy", "has_strategy", "experimental"]
