"""tf.data on NumPy arrays. A Dataset records its source arrays and its
transforms. Iterating it in Python yields NumPy arrays (Tensor, an ndarray
with a .numpy() method); `model.fit(dataset)` runs the same transforms in
Strata's C pipeline (src/data/) instead, without a copy of the arrays.
A pipeline with `map` (a Python function) is run once in Python when fit
starts and its batches are then fed to the engine as they came out."""
import itertools

import numpy as np

from .. import _strata
from .._util import as_array, features, global_seed, labels

AUTOTUNE = -1


class _Experimental:
    AUTOTUNE = -1


experimental = _Experimental()
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2


class Tensor(np.ndarray):
    """A NumPy array that also answers .numpy() (as TensorFlow's eager
    tensors), for code written against tf.data iteration."""

    def numpy(self):
        return np.asarray(self)


def _tensor(a):
    a = np.asarray(a)
    return a.view(Tensor) if a.ndim else a[()]


def _map_tree(fn, tree):
    if isinstance(tree, tuple):
        return tuple(_map_tree(fn, t) for t in tree)
    if isinstance(tree, list):
        return tuple(_map_tree(fn, t) for t in tree)
    if isinstance(tree, dict):
        return {k: _map_tree(fn, v) for k, v in tree.items()}
    return fn(tree)


def _leaves(tree):
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in _leaves(t)]
    if isinstance(tree, dict):
        return [x for k in tree for x in _leaves(tree[k])]
    return [tree]


def _stack(items):
    first = items[0]
    if isinstance(first, tuple):
        return tuple(_stack([it[i] for it in items]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _stack([it[k] for it in items]) for k in first}
    return np.stack([np.asarray(i) for i in items])


class Dataset:
    """tf.data.Dataset over in-memory arrays: from_tensor_slices, shuffle,
    batch, repeat, take, skip, shard, prefetch, cache, map, unbatch."""

    def __init__(self, source, ops, n):
        self._source, self._ops, self._n = source, ops, n
        self._epoch = 0

    # ---- construction ----
    @staticmethod
    def from_tensor_slices(tensors, name=None):
        """Elements are the rows of the arrays (tuples and dicts kept)."""
        src = _map_tree(lambda a: as_array(a, "from_tensor_slices"), tensors)
        leaves = _leaves(src)
        if not leaves:
            raise ValueError("from_tensor_slices: no arrays given")
        sizes = {a.shape[0] if a.ndim else None for a in leaves}
        if None in sizes:
            raise ValueError("from_tensor_slices: a scalar cannot be sliced (rank 0)")
        if len(sizes) != 1:
            raise ValueError("from_tensor_slices: the arrays have different first dimensions %s"
                             % sorted(sizes))
        return Dataset(src, [], sizes.pop())

    def _with(self, op):
        return Dataset(self._source, self._ops + [op], self._n)

    # ---- transforms ----
    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True, name=None):
        buffer_size = int(buffer_size)
        if buffer_size <= 0 and buffer_size != AUTOTUNE:
            raise ValueError("shuffle: buffer_size=%r must be positive" % (buffer_size,))
        return self._with(("shuffle", buffer_size, seed, bool(reshuffle_each_iteration)))

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None, name=None):
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise ValueError("batch: batch_size=%r must be positive" % (batch_size,))
        return self._with(("batch", batch_size, bool(drop_remainder)))

    def repeat(self, count=None, name=None):
        count = -1 if count is None else int(count)
        return self._with(("repeat", count))

    def take(self, count, name=None):
        return self._with(("take", int(count)))

    def skip(self, count, name=None):
        return self._with(("skip", int(count)))

    def shard(self, num_shards, index, name=None):
        num_shards, index = int(num_shards), int(index)
        if num_shards < 1 or not 0 <= index < num_shards:
            raise ValueError("shard(%d, %d): index must be in [0, num_shards)" % (num_shards, index))
        return self._with(("shard", num_shards, index))

    def prefetch(self, buffer_size, name=None):
        return self._with(("prefetch", int(buffer_size)))

    def cache(self, filename="", name=None):
        return self._with(("cache",))

    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """map_func runs in Python on each element's NumPy arrays (slower than
        the C transforms)."""
        if not callable(map_func):
            raise TypeError("map: map_func %r is not callable" % (map_func,))
        return self._with(("map", map_func))

    def unbatch(self, name=None):
        return self._with(("unbatch",))

    # ---- inspection ----
    def cardinality(self):
        """Items one pass yields (-1 infinite, -2 unknown) as a NumPy int."""
        n = self._n
        for op in self._ops:
            k = op[0]
            if n < 0 and k != "repeat":
                continue
            if k == "batch":
                n = n // op[1] if op[2] else -(-n // op[1])
            elif k == "repeat":
                n = -1 if op[1] < 0 and n != 0 else (n * op[1] if n >= 0 else n)
            elif k == "take":
                n = n if op[1] < 0 else (min(n, op[1]) if n >= 0 else op[1])
            elif k == "skip":
                n = max(n - op[1], 0) if n >= 0 else n
            elif k == "shard":
                n = -(-(n - op[2]) // op[1]) if n > op[2] else 0
            elif k == "unbatch":
                n = -2
        return np.int64(n)

    def __len__(self):
        n = int(self.cardinality())
        if n < 0:
            raise TypeError("The dataset is infinite." if n == -1 else "The dataset length is unknown.")
        return n

    @property
    def element_spec(self):
        first = next(iter(self))
        return _map_tree(lambda a: (tuple(np.shape(a)), np.asarray(a).dtype), first)

    # ---- Python iteration ----
    def _iter(self, k):
        if k == 0:
            src = self._source
            return (_map_tree(lambda a: a[i], src) for i in range(self._n))
        op = self._ops[k - 1]
        kind = op[0]
        if kind in ("prefetch", "cache"):
            return self._iter(k - 1)
        if kind == "batch":
            return self._batches(self._iter(k - 1), op[1], op[2])
        if kind == "repeat":
            rng = itertools.count() if op[1] < 0 else range(op[1])
            return itertools.chain.from_iterable(self._iter(k - 1) for _ in rng)
        if kind == "take":
            return itertools.islice(self._iter(k - 1), None if op[1] < 0 else op[1])
        if kind == "skip":
            return itertools.islice(self._iter(k - 1), max(op[1], 0), None)
        if kind == "shard":
            return itertools.islice(self._iter(k - 1), op[2], None, op[1])
        if kind == "shuffle":
            return self._shuffled(self._iter(k - 1), op)
        if kind == "map":
            fn = op[1]
            return (fn(*e) if isinstance(e, tuple) else fn(e) for e in self._iter(k - 1))
        if kind == "unbatch":
            return (_map_tree(lambda a: a[i], e) for e in self._iter(k - 1)
                    for i in range(len(_leaves(e)[0])))
        raise AssertionError(kind)

    @staticmethod
    def _batches(it, size, drop):
        while True:
            items = list(itertools.islice(it, size))
            if not items or (drop and len(items) < size):
                return
            yield _stack(items)

    def _shuffled(self, it, op):
        _, size, seed, reshuffle = op
        epoch = self._epoch if reshuffle else 0
        rng = np.random.default_rng([global_seed() if seed is None else int(seed), epoch])
        size = self._n if size == AUTOTUNE else size
        buf = list(itertools.islice(it, size))
        for e in it:
            j = int(rng.integers(len(buf)))
            yield buf[j]
            buf[j] = e
        order = rng.permutation(len(buf))
        for j in order:
            yield buf[j]

    def __iter__(self):
        it = self._iter(len(self._ops))
        self._epoch += 1
        return (_map_tree(_tensor, e) for e in it)

    def as_numpy_iterator(self):
        return (_map_tree(np.asarray, e) for e in self._iter(len(self._ops)))

    def __repr__(self):
        return "<Dataset %s>" % " -> ".join(["from_tensor_slices"] + [op[0] for op in self._ops])


_ENGINE_OPS = ("shuffle", "batch", "repeat", "take", "skip", "shard", "prefetch", "cache")


def _split(elem, where):
    if isinstance(elem, tuple):
        if len(elem) == 2:
            return elem
        if len(elem) == 1:
            return elem[0], None
        if len(elem) == 3:
            raise NotImplementedError("%s: sample weights (a third element) are not supported by Strata" % where)
    if isinstance(elem, dict):
        raise NotImplementedError("%s: datasets of dicts are not supported by Strata's models" % where)
    return elem, None


def engine_pipeline(ds, scale, sparse, where, steps=None, need_labels=True):
    """(dataset handle, batch size) of the C pipeline that yields what ds
    yields, for fit / evaluate / predict."""
    if any(op[0] not in _ENGINE_OPS for op in ds._ops):
        return _materialized(ds, scale, sparse, where, steps, need_labels)
    x, y = _split(ds._source, where)
    if need_labels and y is None:
        raise ValueError("%s: the dataset yields no labels (expected (x, y) elements)" % where)
    x = features(x, where + ": x")
    y = labels(y, sparse, where + ": y") if y is not None and need_labels else None
    h = _strata.dataset_from_arrays(x, y, scale)
    batch = 0
    for op in ds._ops:
        k = op[0]
        if k == "shuffle":
            size = ds._n if op[1] == AUTOTUNE else op[1]
            seed = global_seed() if op[2] is None else int(op[2])
            _strata.dataset_transform(h, "shuffle", size, seed, int(op[3]))
        elif k == "batch":
            if batch:
                raise NotImplementedError("%s: a dataset batched twice is not supported by Strata" % where)
            batch = op[1]
            _strata.dataset_transform(h, "batch", op[1], int(op[2]))
        elif k == "repeat":
            _strata.dataset_transform(h, "repeat", op[1])
        elif k == "prefetch":
            _strata.dataset_transform(h, "prefetch", op[1] if op[1] > 0 else 2)
        elif k in ("take", "skip"):
            _strata.dataset_transform(h, k, op[1])
        elif k == "shard":
            _strata.dataset_transform(h, "shard", op[1], op[2])
    if not batch:
        raise ValueError("%s: the dataset is not batched (call .batch(n) before giving it to Keras)" % where)
    if steps is not None:
        _strata.dataset_transform(h, "take", int(steps))
    if _strata.dataset_cardinality(h) == -1:
        raise ValueError("%s: the dataset is infinite (repeat()); give steps_per_epoch / steps" % where)
    return h, batch


def _materialized(ds, scale, sparse, where, steps, need_labels):
    xs, ys, batch = [], [], 0
    it = iter(ds.as_numpy_iterator())
    if steps is not None:
        it = itertools.islice(it, int(steps))
    elif int(ds.cardinality()) == -1:
        raise ValueError("%s: the dataset is infinite (repeat()); give steps_per_epoch / steps" % where)
    for elem in it:
        x, y = _split(elem, where)
        xs.append(np.asarray(x))
        batch = max(batch, len(xs[-1]))
        if y is not None:
            ys.append(np.asarray(y))
    if not xs:
        raise ValueError("%s: the dataset is empty" % where)
    if need_labels and len(ys) != len(xs):
        raise ValueError("%s: the dataset yields no labels (expected (x, y) elements)" % where)
    x = features(np.concatenate(xs), where + ": x")
    y = labels(np.concatenate(ys), sparse, where + ": y") if need_labels else None
    h = _strata.dataset_from_arrays(x, y, scale)
    _strata.dataset_transform(h, "batch", batch, 0)
    return h, batch


__all__ = ["Dataset", "AUTOTUNE", "experimental", "Tensor"]
