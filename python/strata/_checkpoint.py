"""Checkpoint plumbing as TensorFlow programs use it: save_weights and
ModelCheckpoint create the directory they write into; a TF-style checkpoint
prefix (a path without a .h5 / .keras / .safetensors / .json suffix, such
as "training_2/cp-0005.ckpt") is recorded in that directory's `checkpoint`
file (TF's text format: model_checkpoint_path / all_model_checkpoint_paths),
which tf.train.latest_checkpoint reads. Strata writes one safetensors file
at the prefix itself (TF writes PREFIX.index and PREFIX.data-*); load_weights
reads it back. tf.io.gfile: local files only."""
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
    every = [p for p in every if p != base] + [base]
    text = "model_checkpoint_path: %s\n" % _quote(base) + "".join(
        "all_model_checkpoint_paths: %s\n" % _quote(p) for p in every)
    tmp = os.path.join(d, ".%s.tmp%d" % (STATE, os.getpid()))
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, os.path.join(d, STATE))


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


class Checkpoint:
    """tf.train.Checkpoint is not provided: say what to use instead."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("tf.train.Checkpoint is not supported by Strata yet: use model.save_weights("
                                  "prefix) / model.load_weights(tf.train.latest_checkpoint(dir)) (the optimizer "
                                  "state is saved by fit's BackupAndRestore)")


class CheckpointManager(Checkpoint):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("tf.train.CheckpointManager is not supported by Strata yet: use the "
                                  "ModelCheckpoint callback, or model.save_weights with tf.train.latest_checkpoint")
