"""tf.keras.callbacks. They run in Python at Strata's step and epoch
boundaries (the engine calls back into Python with the GIL), with Keras's
`logs` dicts: {'loss', '<metric>', 'val_loss', 'val_<metric>'}."""
import csv
import math
import os
import sys
import time

import numpy as np


class Callback:
    """Base class: override on_epoch_begin/end, on_train_batch_begin/end,
    on_train_begin/end. self.model is the model being trained."""

    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None): pass
    def on_train_end(self, logs=None): pass
    def on_epoch_begin(self, epoch, logs=None): pass
    def on_epoch_end(self, epoch, logs=None): pass
    def on_train_batch_begin(self, batch, logs=None): pass
    def on_train_batch_end(self, batch, logs=None): pass
    def on_batch_begin(self, batch, logs=None): pass
    def on_batch_end(self, batch, logs=None): pass
    def on_test_begin(self, logs=None): pass
    def on_test_end(self, logs=None): pass
    def on_predict_begin(self, logs=None): pass
    def on_predict_end(self, logs=None): pass


def _overrides_batch(cb):
    for name in ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end"):
        if getattr(type(cb), name, None) is not getattr(Callback, name):
            return True
    return False


class History(Callback):
    """fit's return value: .history maps each logs key to its per-epoch list."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_train_begin(self, logs=None):
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)


class ProgbarLogger(Callback):
    """Keras-style progress on stdout: verbose 1 a bar per epoch, 2 a line."""

    def __init__(self, count_mode="steps", stateful_metrics=None, verbose=1):
        super().__init__()
        self.verbose = verbose
        self._last = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        print("Epoch %d/%d" % (epoch + 1, self.params.get("epochs", 0)))
        self._t0 = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if self.verbose != 1 or not sys.stdout.isatty():
            return
        now = time.time()
        if now - self._last < 0.1:
            return
        self._last = now
        steps = self.params.get("steps") or 0
        n = batch + 1
        done = int(30 * n / steps) if steps > 0 else 0
        bar = "=" * max(done - 1, 0) + (">" if done < 30 else "=") + "." * (30 - done)
        total = str(steps) if steps > 0 else "Unknown"  # file datasets: not known before the epoch ends
        sys.stdout.write("\r%d/%s [%s] - %s" % (n, total, bar, _fmt(logs)))
        sys.stdout.flush()

    def on_epoch_end(self, epoch, logs=None):
        steps = self.params.get("steps") or getattr(self.model, "_epoch_steps", 0) or 0
        secs = time.time() - self._t0
        head = "\r%d/%d [%s]" % (steps, steps, "=" * 30) if self.verbose == 1 else "%d/%d" % (steps, steps)
        print("%s - %.0fs %.0fms/step - %s" % (head, secs, 1000 * secs / max(steps, 1), _fmt(logs)))


def _fmt(logs):
    return " - ".join("%s: %.4f" % (k, v) for k, v in (logs or {}).items())


def _improved(monitor, mode, current, best, min_delta):
    if mode == "auto":
        mode = "max" if ("acc" in monitor or monitor.startswith("fmeasure")) else "min"
    if mode == "min":
        return current < best - min_delta
    return current > best + min_delta


def _mode_best(monitor, mode):
    if mode == "auto":
        mode = "max" if "acc" in monitor else "min"
    return math.inf if mode == "min" else -math.inf


class EarlyStopping(Callback):
    """Stop when `monitor` has not improved by min_delta for patience epochs;
    restore_best_weights puts the best epoch's weights back."""

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto",
                 baseline=None, restore_best_weights=False, start_from_epoch=0):
        super().__init__()
        if mode not in ("auto", "min", "max"):
            raise ValueError("EarlyStopping: mode=%r (expected 'auto', 'min' or 'max')" % (mode,))
        if patience < 0:
            raise ValueError("EarlyStopping: patience=%r must be >= 0" % (patience,))
        self.monitor, self.min_delta, self.patience = monitor, abs(float(min_delta)), int(patience)
        self.verbose, self.mode, self.baseline = verbose, mode, baseline
        self.restore_best_weights, self.start_from_epoch = restore_best_weights, int(start_from_epoch)
        self.stopped_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = _mode_best(self.monitor, self.mode) if self.baseline is None else self.baseline
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch, logs=None):
        current = (logs or {}).get(self.monitor)
        if current is None:
            print("EarlyStopping: metric %r is not available; available: %s"
                  % (self.monitor, ", ".join(logs or {})), file=sys.stderr)
            return
        if epoch < self.start_from_epoch:
            return
        self.wait += 1
        if _improved(self.monitor, self.mode, current, self.best, self.min_delta):
            self.best, self.best_epoch, self.wait = current, epoch, 0
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.restore_best_weights and self.best_weights is not None:
            self.model.set_weights(self.best_weights)
        if self.stopped_epoch > 0 and self.verbose:
            print("Epoch %d: early stopping" % (self.stopped_epoch + 1))


class ModelCheckpoint(Callback):
    """Save the weights (safetensors, whatever the file's extension) to
    filepath.format(epoch=..., **logs) each epoch (save_freq='epoch') or
    every save_freq batches (an int, counted across epochs, as Keras), or
    only on improvement (save_best_only). The directory is created as TF
    creates it; a TF-style checkpoint prefix (no .h5 / .keras / .safetensors
    suffix) is recorded in the directory's `checkpoint` file, which
    tf.train.latest_checkpoint reads. save_weights_only=False writes the
    weights too (Strata's whole-model save is model.save(path.keras))."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False,
                 save_weights_only=False, mode="auto", save_freq="epoch", initial_value_threshold=None):
        super().__init__()
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError("ModelCheckpoint: save_freq=%r (expected 'epoch' or a positive number of batches)"
                             % (save_freq,))
        self.filepath, self.monitor, self.verbose = os.fspath(filepath), monitor, verbose
        self.save_best_only, self.mode, self.save_freq = save_best_only, mode, save_freq
        self.best = _mode_best(monitor, mode) if initial_value_threshold is None else initial_value_threshold
        self._batches, self._epoch = 0, 0
        if save_freq != "epoch":
            self.on_train_batch_end = self._batch_end

    def _wants_batches(self):
        return self.save_freq != "epoch"

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def _batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches % self.save_freq == 0:
            self._save(self._epoch, batch, logs or {})

    def on_epoch_end(self, epoch, logs=None):
        if self.save_freq == "epoch":
            self._save(epoch, None, logs or {})

    def _save(self, epoch, batch, logs):
        fmt = dict(logs, epoch=epoch + 1)
        if batch is not None:
            fmt["batch"] = batch + 1
        path = self.filepath.format(**fmt)
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None or not _improved(self.monitor, self.mode, current, self.best, 0):
                return
            self.best = current
        self.model.save_weights(path)
        if self.verbose:
            print("Epoch %d: saving model to %s" % (epoch + 1, path))


class CSVLogger(Callback):
    """One row per epoch: epoch then the logs keys in sorted order (Keras's
    layout); append=True continues an existing file."""

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.filename, self.sep, self.append = os.fspath(filename), separator, append

    def on_train_begin(self, logs=None):
        exists = self.append and os.path.exists(self.filename)
        self._file = open(self.filename, "a" if self.append else "w", newline="")
        self._writer = None
        self._header = exists

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self._writer is None:
            keys = sorted(logs)
            if getattr(self.model, "_fit_validates", False) and not any(k.startswith("val_") for k in keys):
                keys += ["val_" + k for k in keys]  # validation_freq skipped this epoch (Keras 3)
            self._keys = keys
            self._writer = csv.writer(self._file, delimiter=self.sep)
            if not self._header:
                self._writer.writerow(["epoch"] + keys)
        self._writer.writerow([epoch] + [logs.get(k, "NA") for k in self._keys])
        self._file.flush()

    def on_train_end(self, logs=None):
        self._file.close()


class TensorBoard(Callback):
    """Event files under log_dir/train and log_dir/validation (Strata's
    TensorBoard writer): epoch_<key> scalars, and batch_<key> every
    update_freq steps when update_freq is an int."""

    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=True, write_images=False,
                 write_steps_per_second=False, update_freq="epoch", profile_batch=0,
                 embeddings_freq=0, embeddings_metadata=None):
        super().__init__()
        if histogram_freq or embeddings_freq or write_images:
            raise NotImplementedError("TensorBoard: histograms, images and embeddings are not supported by Strata")
        self.log_dir = os.fspath(log_dir)
        self.update_freq = 0 if update_freq == "epoch" else int(update_freq)
        self._tb = None
        self._step = 0

    def on_train_begin(self, logs=None):
        from .. import _strata
        self._tb = _strata.tb_create(self.log_dir)

    def on_train_batch_end(self, batch, logs=None):
        from .. import _strata
        self._step += 1
        if self.update_freq and self._step % self.update_freq == 0:
            for k, v in (logs or {}).items():
                _strata.tb_scalar(self._tb, False, "batch_" + k, self._step, float(v))

    def on_epoch_end(self, epoch, logs=None):
        from .. import _strata
        for k, v in (logs or {}).items():
            val = k.startswith("val_")
            _strata.tb_scalar(self._tb, val, "epoch_" + (k[4:] if val else k), epoch, float(v))
        lr = self.model.optimizer.learning_rate if self.model.optimizer else None
        if lr is not None:
            _strata.tb_scalar(self._tb, False, "epoch_learning_rate", epoch, float(lr))

    def on_train_end(self, logs=None):
        self._tb = None


class LearningRateScheduler(Callback):
    """schedule(epoch, lr) -> new lr, called at each epoch's start."""

    def __init__(self, schedule, verbose=0):
        super().__init__()
        self.schedule, self.verbose = schedule, verbose

    def on_epoch_begin(self, epoch, logs=None):
        lr = float(self.model.optimizer.learning_rate)
        try:
            new = self.schedule(epoch, lr)
        except TypeError:
            new = self.schedule(epoch)
        new = float(new)
        if not math.isfinite(new) or new <= 0:
            raise ValueError("LearningRateScheduler: the schedule returned %r for epoch %d "
                             "(a learning rate must be finite and positive)" % (new, epoch))
        self.model.optimizer.learning_rate = new
        if self.verbose:
            print("Epoch %d: LearningRateScheduler setting learning rate to %s." % (epoch + 1, new))


class TerminateOnNaN(Callback):
    """Stop training when a batch's loss is NaN or infinite."""

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            print("Batch %d: Invalid loss, terminating training" % batch)
            self.model.stop_training = True


class LambdaCallback(Callback):
    """Callback from plain functions (on_epoch_end=lambda epoch, logs: ...)."""

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_batch_begin=None,
                 on_train_batch_end=None, on_train_begin=None, on_train_end=None, **kwargs):
        super().__init__()
        if on_epoch_begin: self.on_epoch_begin = on_epoch_begin
        if on_epoch_end: self.on_epoch_end = on_epoch_end
        if on_train_begin: self.on_train_begin = on_train_begin
        if on_train_end: self.on_train_end = on_train_end
        if on_train_batch_begin or kwargs.get("on_batch_begin"):
            self.on_train_batch_begin = on_train_batch_begin or kwargs["on_batch_begin"]
        if on_train_batch_end or kwargs.get("on_batch_end"):
            self.on_train_batch_end = on_train_batch_end or kwargs["on_batch_end"]

    def _wants_batches(self):
        return "on_train_batch_begin" in self.__dict__ or "on_train_batch_end" in self.__dict__


class BackupAndRestore(Callback):
    """Fault tolerance: fit backs up to backup_dir at each epoch end (and
    every save_freq steps when it is an int) and, when a backup is there,
    resumes from it (same epoch, step and data position). Run by the engine
    (fit's backup_dir); Ctrl-C writes the backup at the step it stops at."""

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True, save_before_preemption=False):
        super().__init__()
        if not delete_checkpoint:
            raise NotImplementedError("BackupAndRestore: delete_checkpoint=False is not supported by Strata")
        self.backup_dir = os.fspath(backup_dir)
        if save_freq == "epoch":
            self.save_every = 0
        elif isinstance(save_freq, int) and save_freq > 0:
            self.save_every = save_freq
        else:
            raise ValueError("BackupAndRestore: save_freq=%r (expected 'epoch' or a positive int)" % (save_freq,))


def __getattr__(name):
    from .._util import missing
    raise missing("tf.keras.callbacks", name)
