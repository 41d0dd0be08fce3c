"""tf.data on NumPy arrays and TFRecord files. A Dataset records its source
(arrays, file names, or TFRecord files) and its transforms. Iterating it in
Python yields NumPy arrays (Tensor, an ndarray with a .numpy() method);
`model.fit(dataset)` runs the same transforms in Strata's C pipeline
(src/data/) instead, without a copy of the arrays. A `map` function is
traced once with symbolic stand-ins (data/_trace.py): the common Keras
preprocessing (float32 casts, scale / shift by constants, reshape, one_hot
of labels, parse_single_example of TFRecord records) then runs in C; any
other map runs in Python when fit starts (slower) and its batches are fed to
the engine as they came out."""
import itertools
import os

import numpy as np

from .. import _strata
from .._util import as_array, features, global_seed, labels
from . import _trace
from ._trace import Sym
from .._tensor import Tensor
from . import _more
from ._more import AutoShardPolicy, Options

AUTOTUNE = -1


class _Experimental:
    AUTOTUNE = -1

    @property
    def AutoShardPolicy(self):
        return _more.AutoShardPolicy

    @property
    def DistributeOptions(self):
        return _more.DistributeOptions

    @staticmethod
    def TFRecordWriter(filename, compression_type=None):
        """tf.data.experimental.TFRecordWriter(filename).write(dataset): a
        dataset of serialized records (bytes) to a TFRecord file."""
        from ..io import TFRecordWriter

        class _DatasetWriter:
            def write(self, dataset):
                with TFRecordWriter(filename, compression_type) as w:
                    for rec in dataset.as_numpy_iterator():
                        if not isinstance(rec, bytes):
                            raise TypeError("TFRecordWriter.write: the dataset's elements must be scalar "
                                            "strings (serialized records), got %r" % (type(rec).__name__,))
                        w.write(rec)
        return _DatasetWriter()

    @staticmethod
    def cardinality(dataset):
        return dataset.cardinality()

    @staticmethod
    def get_single_element(dataset):
        return dataset.get_single_element()

    def __getattr__(self, name):
        from .._util import missing
        raise missing("tf.data.experimental", name)


experimental = _Experimental()
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2


class Bytes(bytes):
    """A scalar string element (a TFRecord record): Python bytes, exact to the
    last byte (NumPy's bytes_ drops trailing NULs: issue 29 D5), that also
    answers .numpy() as TensorFlow's eager string tensors do."""

    def numpy(self):
        return bytes(self)


def _tensor(a):
    if isinstance(a, (bytes, str)):
        return Bytes(a) if isinstance(a, bytes) else a
    a = np.asarray(a)
    return a.view(Tensor)


def _numpy(a):
    """as_numpy_iterator's leaf: bytes stay bytes (TF yields bytes for a
    scalar string), arrays of strings are object arrays."""
    if isinstance(a, bytes):
        return bytes(a)
    a = np.asarray(a)
    return a[()] if a.ndim == 0 else a  # a NumPy scalar, as TF's as_numpy_iterator


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
    if isinstance(first, (bytes, str)) or (isinstance(first, np.ndarray) and first.dtype == object):
        return np.array(items, dtype=object)  # records stay exact (NumPy's S dtype drops trailing NULs)
    return np.stack([np.asarray(i) for i in items])


class _Files:
    """A dataset source of file names (list_files, from_tensor_slices of
    strings): what interleave / TFRecordDataset take."""

    def __init__(self, names):
        self.names = [os.fspath(n) for n in names]


class _TFRecord:
    """A dataset source of TFRecord records: files read cycle_length at a
    time, block_length records from each in turn (st_dataset_tfrecord's
    order)."""

    def __init__(self, files, compression, buffer_size, cycle=1, block=1):
        self.files, self.compression, self.buffer_size = files, compression, buffer_size
        self.cycle, self.block = cycle, block

    def records(self):
        """Records in the C source's interleave order (src/data/dataset_tfrecord.c)."""
        files, cycle, block = self.files, min(self.cycle, len(self.files)), self.block
        slots, cur, in_block, nxt, live = [None] * cycle, 0, 0, 0, 0
        while True:
            r = slots[cur]
            if r is None:
                if nxt < len(files):
                    slots[cur] = _strata.tfrecord_reader(files[nxt], self.compression, self.buffer_size)
                    nxt, live = nxt + 1, live + 1
                elif live == 0:
                    return
                else:
                    cur, in_block = (cur + 1) % cycle, 0
                continue
            rec = _strata.tfrecord_next(r)
            if rec is None:
                slots[cur], live = None, live - 1
                cur, in_block = (cur + 1) % cycle, 0
                continue
            yield rec
            in_block += 1
            if in_block >= block:
                cur, in_block = (cur + 1) % cycle, 0


class _SymFile:
    """The file name interleave's function is traced with."""


def _compression(c):
    if c is None:
        return ""
    if not isinstance(c, str) or c.upper() not in ("", "GZIP", "NONE"):
        raise ValueError("TFRecordDataset: compression_type %r (expected None, '' or 'GZIP')" % (c,))
    return "" if c.upper() == "NONE" else c.upper()


class Dataset:
    """tf.data.Dataset over in-memory arrays or TFRecord files:
    from_tensor_slices, list_files, shuffle, batch, repeat, take, skip,
    shard, prefetch, cache, map, interleave (of TFRecordDataset), unbatch."""

    _options = None  # tf.data.Options (with_options)

    def __init__(self, source, ops, n):
        self._source, self._ops, self._n = source, ops, n
        self._epoch = 0

    # ---- construction ----
    @staticmethod
    def from_tensor_slices(tensors, name=None):
        """Elements are the rows of the arrays (tuples and dicts kept); a list
        of strings gives a dataset of file names (for interleave)."""
        if isinstance(tensors, (str, bytes)) or (isinstance(tensors, (list, tuple)) and tensors
                                                  and all(isinstance(t, str) for t in tensors)):
            names = [tensors] if isinstance(tensors, (str, bytes)) else list(tensors)
            return Dataset(_Files(names), [], len(names))
        src = _more.slices_tree(tensors, as_array)
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

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None, name=None):
        """The files matching a glob pattern (or a list of them), sorted, or
        in a seeded random order with shuffle (default True as TensorFlow;
        seed None: the global seed, so the order repeats). ValueError when
        nothing matches."""
        patterns = [file_pattern] if isinstance(file_pattern, (str, os.PathLike)) else list(file_pattern)
        if shuffle is not None and not isinstance(shuffle, (bool, np.bool_, int)):
            raise ValueError("list_files: shuffle=%r (expected a bool)" % (shuffle,))
        shuffle = True if shuffle is None else bool(shuffle)
        seed = global_seed() if seed is None else int(seed)
        names = []
        for p in patterns:
            names += _strata.list_files(os.fspath(p), shuffle, seed % 2 ** 64)
        return Dataset(_Files(names), [], len(names))

    def interleave(self, map_func, cycle_length=None, block_length=None, num_parallel_calls=None,
                   deterministic=None, name=None):
        """Over a dataset of file names: `lambda f: tf.data.TFRecordDataset(f,
        ...)` reads cycle_length files at a time (default: the CPU count),
        block_length records (default 1) from each in turn, in C when fit
        reads it. Other interleave functions are not supported."""
        if not isinstance(self._source, _Files) or self._ops:
            raise NotImplementedError("interleave: only over a dataset of file names (list_files / "
                                      "from_tensor_slices of strings) is it supported by Strata")
        try:
            inner = map_func(_SymFile())
        except Exception as e:  # noqa: BLE001 - anything the function does with a name
            raise NotImplementedError("interleave: map_func must be `lambda f: tf.data.TFRecordDataset(f, "
                                      "...)` for Strata (it raised %s: %s)" % (type(e).__name__, e)) from None
        if not isinstance(inner, Dataset) or not isinstance(inner._source, _TFRecord) or \
                inner._source.files != [_SymFile] or inner._ops:
            raise NotImplementedError("interleave: map_func must return tf.data.TFRecordDataset(f, ...) of "
                                      "its argument, untransformed, for Strata")
        cycle = os.cpu_count() or 1 if cycle_length in (None, AUTOTUNE) else int(cycle_length)
        block = 1 if block_length in (None, AUTOTUNE) else int(block_length)
        if cycle < 1 or block < 1:
            raise ValueError("interleave: cycle_length=%r, block_length=%r must be >= 1" % (cycle_length, block_length))
        src = inner._source
        return Dataset(_TFRecord(list(self._source.names), src.compression, src.buffer_size, cycle, block),
                       [], UNKNOWN_CARDINALITY)

    def _with(self, op):
        d = Dataset(self._source, self._ops + [op], self._n)
        d._options = self._options
        return d

    @staticmethod
    def range(*args, output_type=np.int64, name=None):
        """Dataset.range(stop) / (start, stop[, step]): int64 scalars."""
        arr, n = _more.range_source(args, output_type)
        return Dataset(arr, [], n)

    @staticmethod
    def from_tensors(tensors, name=None):
        """One element: the tensors as they are."""
        src = _map_tree(lambda a: np.asarray(a)[None], _more.slices_tree(tensors, as_array))
        return Dataset(src, [], 1)

    @staticmethod
    def from_generator(generator, output_types=None, output_shapes=None, args=None, output_signature=None,
                       name=None):
        """Elements from generator() (called again for each pass), cast to
        output_signature's dtypes, shapes checked."""
        return Dataset(_more.generator_source(generator, output_types, output_shapes, args, output_signature),
                       [], UNKNOWN_CARDINALITY)

    @staticmethod
    def zip(*datasets, name=None):
        """Dataset.zip((a, b)) (or zip(a, b), or a dict of datasets)."""
        if len(datasets) == 1 and isinstance(datasets[0], (tuple, list, dict)):
            datasets = datasets[0]
        src, n = _more.zip_source(datasets if isinstance(datasets, dict) else tuple(datasets))
        return Dataset(src, [], n)

    def concatenate(self, dataset, name=None):
        src, n = _more.concat_source(self, dataset)
        return Dataset(src, [], n)

    def filter(self, predicate, name=None):
        """Elements for which predicate(element) is True (runs in Python)."""
        if not callable(predicate):
            raise TypeError("filter: predicate %r is not callable" % (predicate,))
        d = self._with(("filter", predicate))
        return d

    def enumerate(self, start=0, name=None):
        """(index, element) pairs, the index an int64 from start."""
        return self._with(("enumerate", int(start)))

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None, drop_remainder=False, name=None):
        """Batches whose elements are padded (with padding_values, default
        0) to padded_shapes (None dimensions: the batch's longest)."""
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise ValueError("padded_batch: batch_size=%r must be positive" % (batch_size,))
        return self._with(("padded_batch", batch_size, padded_shapes, padding_values, bool(drop_remainder)))

    def flat_map(self, map_func, name=None):
        return self._with(("flat_map", map_func))

    def reduce(self, initial_state, reduce_func, name=None):
        """reduce_func(state, element) over every element; the final state
        as Tensors."""
        return _more.reduce(self, initial_state, reduce_func)

    def apply(self, transformation_func):
        return transformation_func(self)

    def with_options(self, options, name=None):
        """A dataset with tf.data.Options attached (see Options)."""
        if not isinstance(options, _more.Options):
            raise TypeError("with_options: %r is not a tf.data.Options" % (options,))
        d = Dataset(self._source, list(self._ops), self._n)
        d._options = options
        return d

    def options(self):
        return self._options or _more.Options()

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
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, (int, np.integer)) or \
                (buffer_size < 0 and buffer_size != AUTOTUNE):
            raise ValueError("prefetch: buffer_size=%r must be >= 0 or tf.data.AUTOTUNE" % (buffer_size,))
        return self._with(("prefetch", int(buffer_size)))

    def cache(self, filename="", name=None):
        if filename:  # (issue 29 D20: the file name was ignored silently)
            raise NotImplementedError("cache: filename=%r: Strata's Dataset.cache keeps the elements in "
                                      "memory only (call cache() without a file name; the CLI's --cache "
                                      "FILE writes a file)" % (filename,))
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
            if k in ("filter", "flat_map"):
                n = -2
            elif k in ("batch", "padded_batch"):
                drop = op[2] if k == "batch" else op[4]
                n = n // op[1] if drop else -(-n // op[1])
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

    def get_single_element(self, name=None):
        """The dataset's only element (ValueError for none or several)."""
        it = iter(self)
        try:
            first = next(it)
        except StopIteration:
            raise ValueError("get_single_element: the dataset is empty") from None
        for _ in it:
            raise ValueError("get_single_element: the dataset has more than one element")
        return first

    def __len__(self):
        n = int(self.cardinality())
        if n < 0:
            raise TypeError("The dataset is infinite." if n == -1 else "The dataset length is unknown.")
        return n

    @property
    def element_spec(self):
        """TensorSpecs of the elements (from the first one; a batch
        dimension that may be short is None, as TF)."""
        from .._ops import TensorSpec
        first = next(iter(self))
        ragged = any(op[0] in ("batch", "padded_batch") and not op[2 if op[0] == "batch" else 4]
                     for op in self._ops)

        def spec(a):
            shape = list(np.shape(a))
            if ragged and shape:
                shape[0] = None
            dt = object if isinstance(a, (bytes, str)) else np.asarray(a).dtype
            return TensorSpec(shape, dt if dt != np.dtype(object) else object)
        return _map_tree(spec, first)

    # ---- Python iteration ----
    def _iter(self, k):
        if k == 0:
            src = self._source
            if isinstance(src, _Files):
                return iter(list(src.names))
            if isinstance(src, _TFRecord):
                return src.records()
            if isinstance(src, _more.PySource):
                return src.make()
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
        if kind in ("filter", "enumerate", "padded_batch", "flat_map"):
            return _more.iter_op(op, self._iter(k - 1))
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
        size = (self._n if self._n >= 0 else 10000) if size == AUTOTUNE else size
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
        return (_map_tree(_numpy, e) for e in self._iter(len(self._ops)))

    def __repr__(self):
        return "<Dataset %s>" % " -> ".join(["from_tensor_slices"] + [op[0] for op in self._ops])


def TFRecordDataset(filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None):
    """tf.data.TFRecordDataset: the serialized records of TFRecord files (a
    name, a list, or a dataset of names such as list_files), read in C with
    every CRC checked; compression_type None / '' / 'GZIP'; buffer_size the
    read buffer in bytes (default 256 KiB); num_parallel_reads > 1 reads that
    many files in turn, a record from each (deterministic, as interleave).
    Elements are bytes; map them with tf.io.parse_single_example."""
    comp = _compression(compression_type)
    buf = 0 if buffer_size is None else int(buffer_size)
    if buf < 0:
        raise ValueError("TFRecordDataset: buffer_size=%r must be >= 0" % (buffer_size,))
    if isinstance(filenames, _SymFile):
        files = [_SymFile]
    elif isinstance(filenames, Dataset):
        if not isinstance(filenames._source, _Files):
            raise ValueError("TFRecordDataset: filenames must be file names (a dataset of strings)")
        files = list(filenames._iter(len(filenames._ops)))
    elif isinstance(filenames, (str, bytes, os.PathLike)):
        files = [os.fsdecode(filenames)]
    else:
        files = [os.fsdecode(f) for f in filenames]
    if not files:
        raise ValueError("TFRecordDataset: no file names given")
    for f in files:
        if f is not _SymFile and not isinstance(f, str):
            raise ValueError("TFRecordDataset: file name %r is not a string" % (f,))
    cycle = 1 if num_parallel_reads in (None, AUTOTUNE) else int(num_parallel_reads)
    if cycle < 1:
        raise ValueError("TFRecordDataset: num_parallel_reads=%r must be >= 1" % (num_parallel_reads,))
    return Dataset(_TFRecord(files, comp, buf, cycle, 1), [], UNKNOWN_CARDINALITY)


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


def python_epochs(ds):
    """Whether fit must run ds's pipeline in Python again for every epoch:
    an untraceable map (or other Python-only op) with a shuffle that
    reshuffles each iteration."""
    return (any(op[0] == "shuffle" and op[3] for op in ds._ops)
            and any(op[0] not in _ENGINE_OPS for op in ds._ops) and trace(ds) is None)


def yields_weights(ds):
    """Whether ds's elements are (x, y, sample_weight) (fit takes those of
    from_tensor_slices under the engine's ops: the weight rides as the
    labels' last value)."""
    return isinstance(ds._source, tuple) and len(ds._source) == 3


def engine_pipeline(ds, scale, sparse, where, steps=None, need_labels=True, epoch=0, weights=False,
                    endless=False):
    """(dataset handle, batch size) of the C pipeline that yields what ds
    yields, for fit / evaluate / predict (weights: fit's (x, y, w) source,
    w appended to each example's labels). steps: the first `steps` batches,
    except with endless (fit's steps_per_epoch) where an infinite pipeline
    stays whole: the engine's fit reads it as one stream across the epochs
    (Keras's one iterator); a pipeline run in Python is cut to `steps`."""
    if weights:
        if any(op[0] not in _ENGINE_OPS for op in ds._ops):
            raise NotImplementedError("%s: a dataset of (x, y, sample_weight) through %s is not "
                                      "supported by Strata (only %s)" % (
                                          where, ", ".join(sorted({op[0] for op in ds._ops} - set(_ENGINE_OPS))),
                                          ", ".join(sorted(_ENGINE_OPS))))
        x, y, w = ds._source
        x = features(x, where + ": x")
        y = labels(y, sparse, where + ": y")
        h = _strata.dataset_from_arrays(x, with_weights(y, w, len(x), where), scale)
        return _engine_ops(ds, h, where, steps, endless)
    traced = None
    if any(op[0] == "map" for op in ds._ops) or isinstance(ds._source, _TFRecord):
        traced = _traced_source(ds, scale, sparse, where, need_labels)
    if traced is None and (any(op[0] not in _ENGINE_OPS for op in ds._ops)
                           or isinstance(ds._source, (_Files, _TFRecord, _more.PySource))):
        return _materialized(ds, scale, sparse, where, steps, need_labels, epoch)
    if traced is not None:
        h = traced
    else:
        x, y = _split(ds._source, where)
        if need_labels and y is None:
            raise ValueError("%s: the dataset yields no labels (expected (x, y) elements)" % where)
        x = features(x, where + ": x")
        y = labels(y, sparse, where + ": y") if y is not None and need_labels else None
        h = _strata.dataset_from_arrays(x, y, scale)
    return _engine_ops(ds, h, where, steps, endless)


def with_weights(y, w, n, where):
    """Labels y [n] or [n, k] with each example's sample weight appended:
    float32 [n, k + 1] (what st_fit_options.sample_weight_column reads)."""
    w = np.asarray(w)
    if w.dtype.kind not in "fiub":
        raise ValueError("%s: sample_weight of dtype %s is not numeric" % (where, w.dtype))
    w = w.astype(np.float32)
    if w.ndim == 2 and w.shape[1] == 1:
        w = w.reshape(len(w))
    if w.ndim != 1 or len(w) != n:
        raise ValueError("%s: sample_weight of shape %s; expected one weight per example (%d,)"
                         % (where, w.shape, n))
    if n and not np.isfinite(w).all():
        row = int(np.argwhere(~np.isfinite(w))[0][0])
        raise ValueError("%s: sample_weight of example %d is %r (weights must be finite)" % (where, row, float(w[row])))
    return np.ascontiguousarray(np.concatenate([y.astype(np.float32).reshape(n, -1), w.reshape(n, 1)], axis=1))


def _engine_ops(ds, h, where, steps, endless=False):
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
    if steps is not None and not (endless and _strata.dataset_cardinality(h) == -1):
        _strata.dataset_transform(h, "take", int(steps))  # fit keeps an endless one whole
    if _strata.dataset_cardinality(h) == -1 and not (endless and steps is not None):
        raise ValueError("%s: the dataset is infinite (repeat()); give steps_per_epoch / steps" % where)
    return h, batch


def trace(ds):
    """What ds's map functions compute, traced with Sym stand-ins: the
    final element as Syms, or None when a function is not traceable (or an
    op other than the engine's and map is in the way)."""
    src = ds._source
    if isinstance(src, (_Files, _more.PySource)):
        return None
    if isinstance(src, _TFRecord):
        elem = Sym(("record",), object, ())
    else:
        count = itertools.count()
        elem = _map_tree(lambda a: Sym(("leaf", next(count)), a.dtype, a.shape[1:]), src)
    for op in ds._ops:
        if op[0] == "batch":
            elem = _map_tree(lambda v: v._with(batched=True) if isinstance(v, Sym) else v, elem)
        elif op[0] == "map":
            try:
                elem = op[1](*elem) if isinstance(elem, tuple) else op[1](elem)
            except Exception:  # noqa: BLE001 - untraceable: the map stays in Python
                return None
            if isinstance(elem, list):
                elem = tuple(elem)
        elif op[0] not in _ENGINE_OPS:
            return None
    if isinstance(elem, tuple) and len(elem) == 1:
        elem = elem[0]
    if isinstance(elem, Sym):
        elem = (elem, None)
    if not (isinstance(elem, tuple) and len(elem) == 2 and isinstance(elem[0], Sym)
            and (elem[1] is None or isinstance(elem[1], Sym))):
        return None
    return elem


def _traced_source(ds, scale, sparse, where, need_labels):
    """The C source (with a C map stage for x's ops) of a traced pipeline,
    before its engine ops; None when it does not trace."""
    elem = trace(ds)
    if elem is None:
        return None
    xs, ys = elem
    if xs.one_hot or (ys is not None and ys.ops):
        return None
    if need_labels and ys is None:
        raise ValueError("%s: the dataset yields no labels (expected (x, y) elements)" % where)
    ops = list(xs.ops)
    if isinstance(ds._source, _TFRecord):
        xspec = _feature_spec(xs)
        yspec = _feature_spec(ys) if ys is not None and need_labels else None
        if xspec is None or (ys is not None and need_labels and (yspec is None or ys.one_hot)):
            return None
        if xs.origin[0] == "raw":
            ops.insert(0, ("round255", 0.0))  # the C source's byte * (1/255) back to the byte
        if scale != 1.0:
            ops.append(("mul", scale))
        src = ds._source
        h = _strata.dataset_tfrecord([os.fsencode(f) for f in src.files], src.compression, src.buffer_size,
                                     xspec, yspec, src.cycle, src.block)
    else:
        leaves = _leaves(ds._source)
        if xs.origin[0] != "leaf" or (ys is not None and ys.origin[0] != "leaf"):
            return None
        xa = leaves[xs.origin[1]]
        if ops and xa.ndim < 2:
            return None  # NumPy scalars (rank-1 sources) widen to float64 in Python
        x = features(xa, where + ": x")
        if tuple(xs.shape) != x.shape[1:]:
            x = x.reshape((len(x),) + tuple(xs.shape))
        y = None
        if ys is not None and need_labels:
            ya = leaves[ys.origin[1]]
            if ys.one_hot:
                from ..keras.utils import to_categorical
                ya = to_categorical(ya, ys.one_hot)
            y = labels(ya, sparse, where + ": y")
        if ops and scale != 1.0:
            ops.append(("mul", scale))
        h = _strata.dataset_from_arrays(x, y, 1.0 if ops else scale)
    if ops:
        _strata.dataset_map_ops(h, _trace.c_ops(ops))
    return h


def _feature_spec(s):
    """(name, dtype, shape) of the C feature spec a Sym reads, or None."""
    o = s.origin
    if o[0] == "raw":
        if s.shape is None or None in s.shape:
            return None
        return (o[1], "uint8", tuple(s.shape))
    if o[0] != "feature" or o[2] == "string" or s.one_hot:
        return None
    return (o[1], o[2], tuple(s.shape))


class Stream:
    """fit's steps_per_epoch over an endless dataset run in Python: one
    iterator across the epochs (Keras's), epoch e its batches
    [e steps, (e + 1) steps) as an engine dataset (next_epoch). A shuffle
    under the repeat takes the epoch's order for the repetitions that start
    in it."""

    def __init__(self, ds, scale, sparse, where, steps, need_labels, epoch):
        self._args = (ds, scale, sparse, where, int(steps), need_labels)
        self._epoch = epoch
        self._it = ds.as_numpy_iterator()  # its generators start on the first read

    def next_epoch(self):
        ds, scale, sparse, where, steps, need_labels = self._args
        self._epoch += 1
        return _materialized(ds, scale, sparse, where, steps, need_labels, self._epoch - 1, self._it)


def _materialized(ds, scale, sparse, where, steps, need_labels, epoch=0, stream=None):
    xs, ys, batch = [], [], 0
    if steps is None and int(ds.cardinality()) == -1:
        raise ValueError("%s: the dataset is infinite (repeat()); give steps_per_epoch / steps" % where)
    saved, ds._epoch = ds._epoch, epoch  # the shuffle order of that epoch (read as it runs)
    try:
        src = ds.as_numpy_iterator() if stream is None else stream
        elems = list(itertools.islice(src, None if steps is None else int(steps)))
    finally:
        ds._epoch = saved
    for elem in elems:
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


def __getattr__(name):
    from .._util import missing
    raise missing("tf.data", name)


__all__ = ["Dataset", "TFRecordDataset", "AUTOTUNE", "experimental", "Tensor", "Options", "AutoShardPolicy"]
