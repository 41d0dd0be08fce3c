"""tf.distribute.experimental.partitioners: FixedShardsPartitioner,
MinSizePartitioner and MaxSizePartitioner for ParameterServerStrategy's
variable_partitioner.

A partitioner is TF's callable: partitioner(shape, dtype) -> the number of
shards on each axis (axis 0 only). Strata's parameter-server job splits
every trainable variable along axis 0 with one of two rules (src/ps/job.c,
`strata train --ps-shards K` / `--ps-min-shard-bytes B`):

    fixed K:    min(K, rows)
    min bytes:  max(1, min(ps tasks, rows, floor(bytes / B)))

At fit (or the coordinator's start) the partitioner is asked for every
trainable variable of the model, as TF asks it when the variables are made,
and the job gets the rule that gives exactly those shard counts. When no rule
does (MinSizePartitioner rounds bytes / min_shard_bytes up and caps at
max_shards, the engine rounds down and caps at the ps count; MaxSizePartitioner
gives each variable its own count), the job is refused with a
NotImplementedError naming the variable, TF's shard count and Strata's
nearest one: Strata never trains with another partition than the one asked
for."""
import math

import numpy as np


class Partitioner:
    """Base class (tf.distribute.experimental.partitioners.Partitioner)."""

    def __call__(self, shape, dtype, axis=0):
        raise NotImplementedError


def _rows_bytes(shape, dtype):
    shape = [int(d) for d in shape]
    item = np.dtype(getattr(dtype, "as_numpy_dtype", dtype) or np.float32).itemsize
    return (shape[0] if shape else 1), int(np.prod(shape)) * item, len(shape)


def _axis0(k, rank, axis):
    if axis != 0:
        raise NotImplementedError("partitioners: axis=%r is not supported by Strata (its parameter "
                                  "servers split variables along axis 0)" % (axis,))
    return [int(k)] + [1] * max(rank - 1, 0)


class FixedShardsPartitioner(Partitioner):
    """num_shards shards of every variable (fewer when it has fewer rows)."""

    def __init__(self, num_shards):
        if isinstance(num_shards, bool) or int(num_shards) != num_shards or num_shards < 1:
            raise ValueError("FixedShardsPartitioner: num_shards must be a positive integer, got %r"
                             % (num_shards,))
        self._num_shards = int(num_shards)

    def __call__(self, shape, dtype, axis=0):
        rows, _b, rank = _rows_bytes(shape, dtype)
        return _axis0(min(self._num_shards, rows), rank, axis)


class MinSizePartitioner(Partitioner):
    """Shards of at least min_shard_bytes, at most max_shards (TF's formula:
    min(rows, max_shards, ceil(bytes / min_shard_bytes)), at least 1)."""

    def __init__(self, min_shard_bytes=256 << 10, max_shards=1, bytes_per_string=16):
        if min_shard_bytes < 1:
            raise ValueError("MinSizePartitioner: min_shard_bytes must be positive, got %r" % (min_shard_bytes,))
        if max_shards < 1:
            raise ValueError("MinSizePartitioner: max_shards must be positive, got %r" % (max_shards,))
        self._min, self._max = int(min_shard_bytes), int(max_shards)

    def __call__(self, shape, dtype, axis=0):
        rows, nbytes, rank = _rows_bytes(shape, dtype)
        return _axis0(max(1, min(rows, self._max, math.ceil(nbytes / self._min))), rank, axis)


class MaxSizePartitioner(Partitioner):
    """Shards of at most max_shard_bytes (as few as that allows), at most
    max_shards when given."""

    def __init__(self, max_shard_bytes, max_shards=None, bytes_per_string=16):
        if max_shard_bytes < 1:
            raise ValueError("MaxSizePartitioner: max_shard_bytes must be positive, got %r" % (max_shard_bytes,))
        if max_shards is not None and max_shards < 1:
            raise ValueError("MaxSizePartitioner: max_shards must be positive, got %r" % (max_shards,))
        self._max_bytes, self._max = int(max_shard_bytes), max_shards

    def __call__(self, shape, dtype, axis=0):
        rows, nbytes, rank = _rows_bytes(shape, dtype)
        k = max(1, math.ceil(nbytes / self._max_bytes))
        if self._max is not None:
            k = min(k, int(self._max))
        return _axis0(min(k, rows), rank, axis)


def _engine_counts(shapes, nps, fixed=0, min_bytes=0):
    out = []
    for s in shapes:
        rows, nbytes, _r = _rows_bytes(s, np.float32)
        k = fixed if fixed > 0 else 1
        if min_bytes > 0:
            k = min(nbytes // min_bytes, nps)
        out.append(max(1, min(k, rows)))
    return out


def engine_options(partitioner, shapes, nps, what):
    """The job's (ps_shards, ps_min_shard_bytes) giving each trainable
    variable of shapes the shard count partitioner asks for; raises
    NotImplementedError when no engine rule gives them all."""
    if partitioner is None:
        return 0, 0
    want = [int(partitioner(s, np.float32)[0]) for s in shapes]
    if all(k == 1 for k in want):
        return 0, 0
    for k in sorted(set(want)):
        if _engine_counts(shapes, nps, fixed=k) == want:
            return k, 0
    sizes = [_rows_bytes(s, np.float32)[1] for s in shapes]
    candidates = sorted({max(1, b // k + d) for b in sizes for k in range(1, nps + 2) for d in (0, 1)})
    for b in candidates:
        if _engine_counts(shapes, nps, min_bytes=b) == want:
            return 0, b
    i = int(np.argmax(want))
    raise NotImplementedError(
        "%s: variable_partitioner %s asks for %d shards of variable %d (shape %s), %s in all (the trainable "
        "variables in model order); Strata's parameter servers split every variable into one fixed count "
        "(FixedShardsPartitioner) or by a minimum size with at most one shard per ps (%d here), which cannot "
        "give these: use FixedShardsPartitioner, or MinSizePartitioner(min_shard_bytes, max_shards=%d)"
        % (what, type(partitioner).__name__, want[i], i, tuple(shapes[i]), want, nps, nps))


def __getattr__(name):
    from .._util import missing
    raise missing("tf.distribute.experimental.partitioners", name)
