"""Checkpoint plumbing as TensorFlow programs use it: save_weights and
ModelCheckpoint create the directory they write into; a TF-style checkpoint
prefix (a path without a .h5 / .keras / .safetensors / .json suffix, such
as "training_2/cp-0005.ckpt") is recorded in that directory's `checkpoint`
file (TF's text format: model_checkpoint_path / all_model_checkpoint_paths),
which tf.train.latest_checkpoint reads. Strata writes one safetensors file
at the prefix itself (TF writes PREFIX.index and PREFIX.data-*); load_weights
reads it back. tf.train.Checkpoint / CheckpointManager write Strata's
checkpoint directories (st_checkpoint_save: variables, optimizer slots,
step) under the names TF gives its files. tf.io.gfile: local files only."""
import glob as _glob
import os
import re
import shutil

_FILE_SUFFIXES = (".h5", ".hdf5", ".keras", ".safetensors", ".json", ".npz")
STATE = "checkpoint"


def make_parent(path):
    """Create path's directory (and its parents) when it is missing."""
    d = os.path.dirname(os.fspath(path))
    if d:
        os.makedirs(d, exist_ok=True)


def _read_state(d, name=STATE):
    try:
        with open(os.path.join(d, name), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None, []
    latest = re.search(r'^model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', text, re.M)
    every = re.findall(r'^all_model_checkpoint_paths:\s*"((?:[^"\\]|\\.)*)"', text, re.M)
    return (latest.group(1) if latest else None), every


def _quote(p):
    return '"%s"' % p.replace("\\", "\\\\").replace('"', '\\"')


def record(path):
    """Note a TF-style checkpoint prefix as its directory's latest (written
    to a temporary file, renamed into place)."""
    path = os.fspath(path)
    if path.lower().endswith(_FILE_SUFFIXES):
        return
    d, base = os.path.split(path)
    d = d or "."
    _, every = _read_state(d)
    _write_state(d, [p for p in every if p != base] + [base])


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix of the newest checkpoint in checkpoint_dir (from its
    `checkpoint` file), or None when there is none (or it is gone)."""
    d = os.fspath(checkpoint_dir)
    latest, _ = _read_state(d, latest_filename or STATE)
    if latest is None:
        return None
    path = latest if os.path.isabs(latest) else os.path.join(d, latest)
    if os.path.exists(path) or _glob.glob(_glob.escape(path) + ".index"):
        return path
    return None


# ---- tf.io.gfile ----
def _local(path, where):
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", p):
        raise NotImplementedError("tf.io.gfile.%s: %r: Strata reads local files only (no %s file system)"
                                  % (where, p, p.split("://")[0]))
    return p


def exists(path):
    return os.path.exists(_local(path, "exists"))


def isdir(path):
    return os.path.isdir(_local(path, "isdir"))


def makedirs(path):
    os.makedirs(_local(path, "makedirs"), exist_ok=True)


def mkdir(path):
    os.mkdir(_local(path, "mkdir"))


def listdir(path):
    p = _local(path, "listdir")
    if not os.path.isdir(p):
        raise FileNotFoundError("tf.io.gfile.listdir: %s is not a directory" % p)
    return sorted(os.listdir(p))


def glob(pattern):
    """Paths matching a pattern (or a list of patterns), sorted."""
    pats = [pattern] if isinstance(pattern, (str, bytes, os.PathLike)) else list(pattern)
    return sorted({m for p in pats for m in _glob.glob(_local(p, "glob"))})


def remove(path):
    os.remove(_local(path, "remove"))


def rmtree(path):
    shutil.rmtree(_local(path, "rmtree"))


def rename(src, dst, overwrite=False):
    s, t = _local(src, "rename"), _local(dst, "rename")
    if not overwrite and os.path.exists(t):
        raise FileExistsError("tf.io.gfile.rename: %s exists (overwrite=False)" % t)
    os.replace(s, t)


def copy(src, dst, overwrite=False):
    s, t = _local(src, "copy"), _local(dst, "copy")
    if not overwrite and os.path.exists(t):
        raise FileExistsError("tf.io.gfile.copy: %s exists (overwrite=False)" % t)
    shutil.copyfile(s, t)


def walk(top, topdown=True, onerror=None):
    return os.walk(_local(top, "walk"), topdown=topdown, onerror=onerror)


class GFile:
    """tf.io.gfile.GFile(name, mode='r'): a local file (read, write,
    readline, readlines, iteration, size, with-statement)."""

    def __init__(self, name, mode="r"):
        p = _local(name, "GFile")
        self.name, self.mode = p, mode
        self._f = open(p, mode, **({} if "b" in mode else {"encoding": "utf-8"}))

    def read(self, n=-1):
        return self._f.read(n)

    def readline(self):
        return self._f.readline()

    def readlines(self):
        return self._f.readlines()

    def write(self, data):
        return self._f.write(data)

    def flush(self):
        self._f.flush()

    def size(self):
        return os.path.getsize(self.name)

    def seek(self, offset, whence=0):
        return self._f.seek(offset, whence)

    def tell(self):
        return self._f.tell()

    def close(self):
        self._f.close()

    def __iter__(self):
        return iter(self._f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


GFILE = dict(exists=exists, isdir=isdir, makedirs=makedirs, mkdir=mkdir, listdir=listdir, glob=glob,
             remove=remove, rmtree=rmtree, rename=rename, copy=copy, walk=walk, GFile=GFile, Open=GFile)


class _Status:
    """What Checkpoint.restore returns (TF's load status)."""

    def assert_consumed(self):
        return self

    def assert_existing_objects_matched(self):
        return self

    def expect_partial(self):
        return self


class Checkpoint:
    """tf.train.Checkpoint(model=..., optimizer=...): save(prefix) writes
    Strata's checkpoint of the model (variables, optimizer slots, step;
    st_checkpoint_save) to the directory PREFIX-N (N counts the saves, as
    TF's PREFIX-N files) and records it in the directory's `checkpoint`
    file, so tf.train.latest_checkpoint finds it; restore(path) reads it
    back (a model not yet compiled is compiled first with the optimizer
    given here). One Keras model per checkpoint; other trackables are
    refused."""

    def __init__(self, root=None, **kwargs):
        from .keras.models import Model
        from .keras.optimizers import Optimizer
        models = [v for v in kwargs.values() if isinstance(v, Model)] + ([root] if isinstance(root, Model) else [])
        opts = [v for v in kwargs.values() if isinstance(v, Optimizer)]
        others = [k for k, v in kwargs.items() if not isinstance(v, (Model, Optimizer))]
        if len(models) != 1 or len(opts) > 1 or others:
            raise NotImplementedError("tf.train.Checkpoint: Strata checkpoints one Keras model (and its "
                                      "optimizer); got %s" % ", ".join("%s=%s" % (k, type(v).__name__)
                                                                       for k, v in kwargs.items()))
        self._model, self._optimizer = models[0], (opts[0] if opts else None)
        self.save_counter = 0

    def _compiled(self, where):
        m = self._model
        if m._compile_args is None:
            if self._optimizer is None:
                raise ValueError("%s: the model is not compiled and the checkpoint has no optimizer" % where)
            m.compile(optimizer=self._optimizer, loss="mean_squared_error")
            m._placeholder_loss = True  # fit / evaluate still ask for compile
        m._ensure_compiled(where)
        return m

    def write(self, file_prefix, options=None):
        from . import _strata
        path = os.fspath(file_prefix)
        make_parent(path)
        _strata.checkpoint_dir(self._compiled("Checkpoint.save")._cap, path, True)
        return path

    def save(self, file_prefix, options=None):
        self.save_counter += 1
        path = self.write("%s-%d" % (os.fspath(file_prefix), self.save_counter))
        record(path)
        return path

    def restore(self, save_path, options=None):
        """Restore from save_path (None: nothing to restore, as TF)."""
        if save_path is None:
            return _Status()
        from . import _strata
        path = os.fspath(save_path)
        if not os.path.isdir(path):
            raise FileNotFoundError("Checkpoint.restore: %s is not a checkpoint Strata wrote (a directory "
                                    "Checkpoint.save makes)" % path)
        _strata.checkpoint_dir(self._compiled("Checkpoint.restore")._cap, path, False)
        m = re.search(r"-(\d+)$", path)
        if m:
            self.save_counter = int(m.group(1))
        return _Status()

    read = restore


class CheckpointManager:
    """tf.train.CheckpointManager(checkpoint, directory, max_to_keep):
    save() writes DIRECTORY/ckpt-N and keeps the newest max_to_keep."""

    def __init__(self, checkpoint, directory, max_to_keep, keep_checkpoint_every_n_hours=None,
                 checkpoint_name="ckpt", **kwargs):
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError("CheckpointManager: %r is not a tf.train.Checkpoint" % (checkpoint,))
        self._checkpoint, self.directory = checkpoint, os.fspath(directory)
        self._max, self._name = max_to_keep, checkpoint_name
        _, every = _read_state(self.directory)
        self._kept = [os.path.join(self.directory, p) for p in every if os.path.isdir(os.path.join(self.directory, p))]

    @property
    def latest_checkpoint(self):
        return latest_checkpoint(self.directory)

    @property
    def checkpoints(self):
        return list(self._kept)

    def save(self, checkpoint_number=None, check_interval=True, options=None):
        ck = self._checkpoint
        if checkpoint_number is None:
            ck.save_counter += 1
            checkpoint_number = ck.save_counter
        path = ck.write(os.path.join(self.directory, "%s-%d" % (self._name, int(checkpoint_number))))
        self._kept = [p for p in self._kept if p != path] + [path]
        while self._max is not None and len(self._kept) > self._max:
            shutil.rmtree(self._kept.pop(0), ignore_errors=True)
        _write_state(self.directory, [os.path.basename(p) for p in self._kept])
        return path


def _write_state(d, every):
    text = "model_checkpoint_path: %s\n" % _quote(every[-1]) + "".join(
        "all_model_checkpoint_paths: %s\n" % _quote(p) for p in every)
    tmp = os.path.join(d, ".%s.tmp%d" % (STATE, os.getpid()))
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, os.path.join(d, STATE))
