"""tf.data beyond the core (issue 32, point 6): Dataset.range / zip /
from_generator / from_tensors / concatenate, the Python-side transforms
filter / enumerate / padded_batch / flat_map / reduce, and tf.data.Options
(experimental_distribute.auto_shard_policy). Sources that are not arrays
(a generator, a zip of datasets) iterate in Python; fit reads what they
yield (the pipeline runs in Python once, its batches fed to the engine), as
for a Python map."""
import itertools

import numpy as np

from .._tensor import Tensor, convert

UNKNOWN = -2


class PySource:
    """A dataset source iterated in Python: make() returns a fresh iterator
    of elements (nests of NumPy arrays / bytes)."""

    def __init__(self, make, what):
        self.make, self.what = make, what


def slices_tree(tensors, as_array):
    """from_tensor_slices' structure: tuples and dicts are structure, a list
    (or anything else) is one tensor, with TF's dtypes for Python values."""
    if isinstance(tensors, tuple):
        return tuple(slices_tree(t, as_array) for t in tensors)
    if isinstance(tensors, dict):
        return {k: slices_tree(v, as_array) for k, v in tensors.items()}
    if isinstance(tensors, (Tensor, np.ndarray)):
        a = np.asarray(tensors)
        if a.dtype.kind in "SU":  # strings: exact bytes (NumPy's S drops trailing NULs)
            return np.array([s.encode() if isinstance(s, str) else bytes(s) for s in a.reshape(-1).tolist()],
                            dtype=object).reshape(a.shape)
        return as_array(a, "from_tensor_slices")
    a = convert(tensors, None, "from_tensor_slices")
    if a.dtype == object:  # strings: exact bytes, as TF's string tensors
        return np.array([s.encode() if isinstance(s, str) else s for s in a.reshape(-1)],
                        dtype=object).reshape(a.shape)
    return as_array(np.asarray(a), "from_tensor_slices")


def range_source(args, dtype):
    """Dataset.range(stop) / (start, stop[, step]): int64 elements."""
    if not 1 <= len(args) <= 3:
        raise TypeError("Dataset.range takes 1 to 3 arguments (start, stop, step), got %d" % len(args))
    r = range(*[int(a) for a in args])
    return np.arange(r.start, r.stop, r.step, dtype=np.dtype(dtype)), len(r)


def _cast_to_spec(value, spec, where):
    from .._ops import TensorSpec
    if isinstance(spec, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(spec):
            raise ValueError("%s: the generator yielded %r; output_signature expects %d components"
                             % (where, value, len(spec)))
        return tuple(_cast_to_spec(v, s, where) for v, s in zip(value, spec))
    if isinstance(spec, dict):
        return {k: _cast_to_spec(value[k], s, where) for k, s in spec.items()}
    if not isinstance(spec, TensorSpec):
        raise TypeError("%s: output_signature leaf %r is not a tf.TensorSpec" % (where, spec))
    if spec.dtype == object:
        return value if isinstance(value, bytes) else str(value).encode()
    a = np.asarray(value).astype(spec.dtype)
    if spec._rank_known and not spec.shape.is_compatible_with(a.shape):
        raise ValueError("%s: the generator yielded an element of shape %s, output_signature says %s"
                         % (where, a.shape, spec.shape))
    return a


def _spec_tree(output_types, output_shapes):
    """output_types / output_shapes (TF's older form) as TensorSpecs."""
    from .._ops import TensorSpec
    if isinstance(output_types, (tuple, list)):
        shapes = output_shapes if output_shapes is not None else [None] * len(output_types)
        return tuple(_spec_tree(t, s) for t, s in zip(output_types, shapes))
    if isinstance(output_types, dict):
        return {k: _spec_tree(t, (output_shapes or {}).get(k)) for k, t in output_types.items()}
    return TensorSpec(output_shapes, output_types)


def generator_source(generator, output_types, output_shapes, args, output_signature):
    """from_generator: each element cast to the signature's dtypes and its
    shape checked (output_types / output_shapes, the older form, too)."""
    if not callable(generator):
        raise TypeError("from_generator: generator %r must be callable (a function returning an iterator)"
                        % (generator,))
    if output_signature is None and output_types is None:
        raise TypeError("from_generator: give output_signature (or output_types)")
    spec = output_signature if output_signature is not None else _spec_tree(output_types, output_shapes)

    def cast(v):
        return _cast_to_spec(v, spec, "from_generator")

    gen_args = tuple(args or ())
    return PySource(lambda: (cast(e) for e in generator(*gen_args)), "from_generator")


def zip_source(datasets):
    """Dataset.zip: elements of the datasets side by side (the nest they
    were given in), ending with the shortest."""
    leaves = list(datasets.values()) if isinstance(datasets, dict) else list(datasets)
    from . import Dataset
    for d in leaves:
        if not isinstance(d, Dataset):
            raise TypeError("Dataset.zip: %r is not a Dataset" % (d,))

    def make():
        its = [d._iter(len(d._ops)) for d in leaves]
        for row in zip(*its):
            yield dict(zip(datasets.keys(), row)) if isinstance(datasets, dict) else tuple(row)
    ns = [int(d.cardinality()) for d in leaves]
    n = UNKNOWN if any(v == UNKNOWN for v in ns) else (min([v for v in ns if v >= 0], default=-1))
    return PySource(make, "zip"), n


def concat_source(a, b):
    def make():
        return itertools.chain(a._iter(len(a._ops)), b._iter(len(b._ops)))
    na, nb = int(a.cardinality()), int(b.cardinality())
    n = -1 if -1 in (na, nb) else (UNKNOWN if UNKNOWN in (na, nb) else na + nb)
    return PySource(make, "concatenate"), n


# ---- transforms run in Python ----
def _call(fn, e):
    return fn(*e) if isinstance(e, tuple) else fn(e)


def _as_tensors(e):
    from . import _map_tree, _tensor
    return _map_tree(_tensor, e)


def iter_op(op, it):
    """The iterator of a Python-side transform over `it`."""
    kind = op[0]
    if kind == "filter":
        return (e for e in it if bool(np.asarray(_call(op[1], _as_tensors(e)))))
    if kind == "enumerate":
        return ((np.int64(i), e) for i, e in enumerate(it, op[1]))
    if kind == "padded_batch":
        return _padded_batches(it, *op[1:])
    if kind == "flat_map":
        return (x for e in it for x in _flat(op[1], e))
    raise AssertionError(kind)


def _flat(fn, e):
    from . import Dataset
    d = _call(fn, _as_tensors(e))
    if not isinstance(d, Dataset):
        raise TypeError("flat_map: the function must return a Dataset, got %r" % (type(d).__name__,))
    return d._iter(len(d._ops))


def _pad_leaf(items, shape, value):
    arrs = [np.asarray(i) for i in items]
    rank = arrs[0].ndim
    if any(a.ndim != rank for a in arrs):
        raise ValueError("padded_batch: elements of different ranks %s" % sorted({a.ndim for a in arrs}))
    most = [max(a.shape[d] for a in arrs) for d in range(rank)]
    if shape is not None:
        shape = list(shape)
        if len(shape) != rank:
            raise ValueError("padded_batch: padded_shapes %s for elements of rank %d" % (shape, rank))
        for d, s in enumerate(shape):
            if s is not None and s >= 0:
                if most[d] > s:
                    raise ValueError("padded_batch: an element of size %d in dimension %d is larger than "
                                     "the padded shape %d" % (most[d], d, s))
                most[d] = int(s)
    fill = np.asarray(0 if value is None else value).astype(arrs[0].dtype)
    out = np.full([len(arrs)] + most, fill, dtype=arrs[0].dtype)
    for i, a in enumerate(arrs):
        out[(i,) + tuple(slice(0, n) for n in a.shape)] = a
    return out


def _pad_tree(items, shapes, values):
    first = items[0]
    if isinstance(first, tuple):
        return tuple(_pad_tree([it[j] for it in items], None if shapes is None else shapes[j],
                               values[j] if isinstance(values, (tuple, list)) else values)
                     for j in range(len(first)))
    if isinstance(first, dict):
        return {k: _pad_tree([it[k] for it in items], None if shapes is None else shapes[k],
                             values[k] if isinstance(values, dict) else values) for k in first}
    return _pad_leaf(items, shapes, values)


def _padded_batches(it, size, shapes, values, drop):
    while True:
        items = list(itertools.islice(it, size))
        if not items or (drop and len(items) < size):
            return
        yield _pad_tree(items, shapes, values)


def reduce(ds, initial_state, reduce_func):
    """Dataset.reduce: reduce_func(state, element) over every element."""
    from . import _map_tree
    state = _map_tree(lambda v: v if isinstance(v, Tensor) else convert(v, None, "Dataset.reduce"), initial_state)
    for e in ds:
        state = reduce_func(state, e)
    return _map_tree(lambda v: v if isinstance(v, Tensor) else convert(v, None, "Dataset.reduce"), state)


# ---- tf.data.Options ----
class AutoShardPolicy:
    """tf.data.experimental.AutoShardPolicy."""
    OFF, AUTO, FILE, DATA, HINT = -1, 0, 1, 2, 3


class DistributeOptions:
    def __init__(self):
        self.auto_shard_policy = AutoShardPolicy.AUTO
        self.num_devices = None


class _Threading:
    def __init__(self):
        self.private_threadpool_size = 0
        self.max_intra_op_parallelism = 1


class Options:
    """tf.data.Options. experimental_distribute.auto_shard_policy: Strata's
    fit shards as AUTO (TFRecord files by FILE, other pipelines by DATA);
    DATA is honoured for in-memory pipelines; OFF, FILE, HINT (and DATA
    over files) are refused under a multi-worker strategy (one worker: no
    effect, as TF). deterministic / experimental_deterministic: Strata's
    pipelines are always deterministic (False is accepted)."""

    def __init__(self):
        self.experimental_distribute = DistributeOptions()
        self.deterministic = None
        self.experimental_deterministic = None
        self.threading = _Threading()
        self.experimental_optimization = type("OptimizationOptions", (), {})()
        self.autotune = type("AutotuneOptions", (), {"enabled": True})()


_POLICY_NAMES = {-1: "OFF", 0: "AUTO", 1: "FILE", 2: "DATA", 3: "HINT"}


def check_options(ds, strategy, where):
    """NotImplementedError when ds's auto_shard_policy asks for a sharding
    Strata's fit does not do under a multi-worker strategy."""
    opts = getattr(ds, "_options", None)
    if opts is None:
        return
    policy = opts.experimental_distribute.auto_shard_policy
    if policy not in _POLICY_NAMES:
        raise ValueError("%s: auto_shard_policy=%r is not a tf.data.experimental.AutoShardPolicy" % (where, policy))
    if policy == AutoShardPolicy.AUTO or strategy is None or strategy._workers()[1] < 2:
        return
    from . import _TFRecord
    files = isinstance(ds._source, _TFRecord)
    if policy == AutoShardPolicy.DATA and not files:
        return
    raise NotImplementedError(
        "%s: tf.data.Options auto_shard_policy=%s is not supported by Strata's fit under a multi-worker "
        "strategy (it shards as AUTO: TFRecord files by FILE, other pipelines by DATA); leave the policy "
        "AUTO, or shard the dataset yourself with Dataset.shard(num_workers, worker_index)"
        % (where, _POLICY_NAMES[policy]))
