"""tf.keras.Sequential on Strata's engine: the layers, compile, fit,
evaluate, predict, summary and weights of one st_model (include/strata/
train.h), bound to the strategy whose scope it was created in."""
import itertools
import math
import os

import numpy as np

from .. import _strata
from .. import distribute as _distribute
from .._util import features, global_seed, labels, next_init_seed, reject_kwargs, unsupported
from . import _multi, _nested
from . import callbacks as _callbacks
from . import layers as _layers
from . import losses as _losses
from . import metrics as _metrics
from . import optimizers as _optimizers


class _Driver:
    """What the engine calls at step and epoch boundaries during fit: it
    turns the engine's numbers into Keras logs and runs the callbacks."""

    def __init__(self, model, cbs, key, every):
        self.model, self.cbs, self.key, self.every = model, cbs, key, every
        self.last = {}

    def _logs(self, loss, acc):
        logs = {"loss": loss}
        if self.key:
            logs[self.key] = acc
        return logs

    def on_epoch_begin(self, epoch):
        for cb in self.cbs:
            cb.on_epoch_begin(epoch, {})
        if self.every:
            for cb in self.cbs:
                cb.on_train_batch_begin(0, {})

    def on_batch_end(self, epoch, step, steps, loss, acc):
        logs = self._logs(loss, acc)
        for cb in self.cbs:
            cb.on_train_batch_end(step, logs)
            if type(cb).on_batch_end is not _callbacks.Callback.on_batch_end:
                cb.on_batch_end(step, logs)
        if steps < 0 or step + 1 < steps:
            for cb in self.cbs:
                cb.on_train_batch_begin(step + 1, {})

    def on_epoch_end(self, t):
        self.model._epoch_steps = t[8]  # the engine's count (unknown before for file datasets)
        logs = self.model._epoch_logs(t, self.key)
        self.last = logs
        for cb in self.cbs:
            cb.on_epoch_end(t[0], logs)


_compile_counter = itertools.count(1)


from ._fit_args import _MAX_EPOCHS, _check_class_keys, _class_weights, _validation_epochs  # noqa: E402,F401


class Model:
    """tf.keras.Model: the engine model's verbs (compile, fit, evaluate,
    predict, summary, weights) shared by Sequential and the functional
    Model(inputs, outputs) (functional.py builds the latter; Keras's
    Model(inputs, outputs) call lands there). Created inside
    `strategy.scope()` a model trains under that strategy."""

    def __new__(cls, *args, **kwargs):
        if cls is Model:
            from .functional import Functional
            return super().__new__(Functional)
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):  # reached by subclasses of tf.keras.Model only
        from .functional import Functional
        if type(self) is Functional:
            raise ValueError("Model: give inputs and outputs (tf.keras.Model(inputs, outputs)), or subclass "
                             "tf.keras.Model with layers in __init__ and a call method")
        if args or "inputs" in kwargs or "outputs" in kwargs:
            raise NotImplementedError("a subclassed tf.keras.Model that passes inputs / outputs to "
                                      "Model.__init__ is not supported by Strata: build tf.keras.Model(inputs, "
                                      "outputs) directly, or define call()")
        reject_kwargs("Model", kwargs, ("name", "trainable", "dtype", "autocast"))
        from . import _subclass
        _subclass.init_state(self, kwargs.get("name"))

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if not name.startswith("_") and self.__dict__.get("_subclass_pending"):
            from . import _custom  # a custom layer: the model runs eagerly (keras/_eager_model.py)
            items = value.values() if isinstance(value, dict) else (
                value if isinstance(value, (list, tuple)) else [value])
            if any(isinstance(v, _layers.Layer) and (_custom.is_custom(v) or _custom.contains_custom(v))
                   for v in items):
                from . import _eager_model
                object.__setattr__(self, "__class__", _eager_model.derived(type(self)))

    @property
    def built(self):
        return self._cap is not None

    def _build(self, shape):
        """A subclassed model's graph: call() traced on an Input of shape
        (keras/_subclass.py)."""
        if not getattr(self, "_subclass_pending", False):
            raise ValueError("%s: cannot be built from an input shape" % type(self).__name__)
        from . import _subclass
        _subclass.trace(self, tuple(int(d) for d in shape))

    def build(self, input_shape=None):
        """Build a subclassed model for inputs of input_shape (with the
        batch dimension): its call() is traced."""
        if input_shape is None:
            raise ValueError("build: give the input shape, e.g. model.build((None, 784))")
        if getattr(self, "_subclass_pending", False):
            self._build(tuple(input_shape)[1:])

    def _flatten_inputs(self, x, where):
        """x as the engine's rows (functional models with several inputs
        override it); other models take x as it is."""
        return x

    def _require_built(self, what):
        if self._cap is None:
            raise ValueError("%s: this model has not yet been built (give the first layer an "
                             "input_shape, start with tf.keras.Input, or call fit/build first)" % what)

    @property
    def input_shape(self):
        return None if self._input_shape is None else (None,) + self._input_shape

    @property
    def output_shape(self):
        shapes = getattr(self, "_out_shapes", None)
        if shapes and len(shapes) > 1:  # several outputs (keras/_multi.py): one shape each
            return list(shapes)
        return self._flat_out()

    def _flat_out(self):
        """The engine's output row shape (several outputs: concatenated)."""
        if getattr(self, "_out_shape", None) is not None:
            return self._out_shape
        return self._engine_layers[-1].output_shape if self._engine_layers else None

    def _label_positions(self):
        """Sparse labels per example: the output's size over its last axis."""
        out = self._flat_out() if self._cap is not None else None
        return int(np.prod(out[1:-1])) if out and len(out) > 2 else 1

    @property
    def distribute_strategy(self):
        return self._strategy or _distribute.get_strategy()

    def count_params(self):
        self._require_built("count_params")
        return sum(l._params for l in self._engine_layers)

    def summary(self, line_length=None, positions=None, print_fn=None, **kwargs):
        """Keras's summary table (Strata's engine writes it)."""
        self._require_built("summary")
        text = _strata.model_summary(self._cap).rstrip("\n")
        (print_fn or print)(text)

    # ---- compile ----
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None,
                weighted_metrics=None, run_eagerly=None, steps_per_execution=1, jit_compile=None,
                **kwargs):
        """optimizer: a name or tf.keras.optimizers object; loss: a name or
        tf.keras.losses object (from_logits as Keras); metrics: at most one
        accuracy metric."""
        unsupported("compile", weighted_metrics=(weighted_metrics, None))
        reject_kwargs("compile", kwargs, ("auto_scale_loss",))
        if loss is None:
            raise ValueError("compile: a loss is required (Strata trains with the engine's losses)")
        self._placeholder_loss = False  # set after compiles made for a GradientTape or a Checkpoint
        from .. import _eager
        _eager.close(self)
        opt = _optimizers.get(optimizer)
        multi = None
        if _multi.is_multi(self):
            objs, engine_names, weights = _multi.compile_losses(self, loss, loss_weights)
            multi, lossobj = (engine_names, weights), objs[0]
            self._sparse_per_output = [n.startswith("sparse") for n in engine_names]
        else:
            unsupported("compile", loss_weights=(loss_weights, None))
            lossobj = _losses.get(loss)
        if getattr(lossobj, "reduction", "auto") not in ("auto", "sum_over_batch_size"):
            raise NotImplementedError("compile: a loss with reduction=%r is not supported by Strata's "
                                      "engine (it averages over the batch); reduction 'none' / 'sum' work in "
                                      "a custom loop's loss calls" % (lossobj.reduction,))
        mets = list(metrics or [])
        if isinstance(metrics, dict):
            raise NotImplementedError("compile: metrics as a dict are not supported by Strata")
        resolved = [_metrics.resolve(m) for m in mets]
        if len(resolved) > 1:
            raise NotImplementedError("compile: metrics=%r: Strata reports one accuracy metric per model"
                                      % (mets,))
        self.optimizer, self.loss = opt, (objs if multi else lossobj)
        self._multi_losses = multi
        self._compile_metrics = mets
        opt._model = self
        self._metric_key = resolved[0][1] if resolved else None
        self._compile_args = (opt, lossobj, [c for c, _ in resolved])
        self._sparse = lossobj._engine_name.startswith("sparse")
        if self._cap is not None:
            self._engine_compile()

    def _engine_compile(self):
        opt, lossobj, codes = self._compile_args
        multi = getattr(self, "_multi_losses", None)
        _strata.model_compile(self._cap, *opt._args(), lossobj._engine_name, codes or [0],
                              *(multi if multi else ()))
        self._compiled = True
        self._compile_order = next(_compile_counter)
        self._compiled_at = next(_distribute._ORDER)

    def _ensure_compiled(self, what):
        self._require_built(what)
        from .. import _eager
        _eager.close(self)  # an eager custom loop's open run ends before another verb
        if not self._compiled:
            if self._compile_args is not None:
                self._engine_compile()
            else:  # weights exist once compiled: a placeholder optimizer and loss
                _strata.model_compile(self._cap, *_optimizers.Adam()._args(), "mean_squared_error", [0])
                self._compiled = True
        if getattr(self, "_nested", None):
            _nested.pull(self)  # a nested model's current weights (keras/_nested.py)

    @property
    def metrics_names(self):
        if _multi.is_multi(self):
            return _multi.metrics_names(self, getattr(self, "_metric_key", None))
        return ["loss"] + ([self._metric_key] if getattr(self, "_metric_key", None) else [])

    # ---- data ----
    def _arrays(self, x, y, batch, where, shuffle=False, steps=None, labelled=True, epoch=0,
                weights=None, endless=False):
        """(engine dataset, batch) for arrays or a tf.data.Dataset; weights:
        fit's sample_weight (an array, or True for a dataset of (x, y, w)),
        appended to the labels."""
        from .. import data as _data
        x = self._flatten_inputs(x, where)
        sparse = getattr(self, "_sparse", False)
        if isinstance(x, _distribute.DistributedDataset):
            x = x._dataset
        if isinstance(x, _data.Dataset):
            if y is not None:
                raise ValueError("%s: `y` must be None when x is a dataset" % where)
            if _multi.is_multi(self) and labelled:
                _multi.label_rows(self, x, where)  # refused: arrays only
            _data._more.check_options(x, self.distribute_strategy, where)
            if self._cap is None:
                first = next(iter(x.as_numpy_iterator()))
                self._build(np.shape(first[0] if isinstance(first, tuple) else first)[1:])
            return _data.engine_pipeline(x, self._scale, sparse, where, steps, labelled, epoch,
                                         weights is True, endless)
        if isinstance(x, dict):
            raise NotImplementedError("%s: dict inputs are not supported by Strata" % where)
        xa = features(x, where + ": x")
        if self._cap is None:
            self._build(xa.shape[1:])
        ya = None
        if labelled:
            if y is None:
                raise ValueError("%s: y is required with array inputs" % where)
            ya = _multi.label_rows(self, y, where) if _multi.is_multi(self) else \
                labels(y, sparse, where + ": y", self._label_positions())
            if len(ya) != len(xa):
                raise ValueError("%s: x has %d examples and y has %d; they must match" % (where, len(xa), len(ya)))
        if len(xa) == 0:
            raise ValueError("%s: no examples (x is empty)" % where)
        if weights is not None:
            ya = _data.with_weights(ya, weights, len(xa), where)
        batch = 32 if batch is None else batch
        if not isinstance(batch, (int, np.integer)) or isinstance(batch, bool) or not 0 < batch < 2 ** 31:
            raise ValueError("%s: batch_size=%r must be an integer in [1, 2147483647]" % (where, batch))
        h = _strata.dataset_from_arrays(xa, ya, self._scale)
        if shuffle:  # a later fit call shuffles differently (the engine's epochs restart at 0)
            seed = (global_seed() + getattr(self, "_fit_calls", 0)) % 2 ** 63
            _strata.dataset_transform(h, "shuffle", len(xa), seed, 1)
        _strata.dataset_transform(h, "batch", int(batch), 0)
        if steps is not None:
            _strata.dataset_transform(h, "take", int(steps))
        return h, int(batch)

    # ---- fit ----
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
            sample_weight=None, initial_epoch=0, steps_per_epoch=None, validation_steps=None,
            validation_batch_size=None, validation_freq=1, **kwargs):
        """Train; returns a History whose .history has Keras's keys
        ('loss', the metric, 'val_loss', 'val_<metric>')."""
        cweights = _class_weights("fit", class_weight)
        if sample_weight is not None and cweights is not None:
            raise ValueError("fit: you cannot use class_weight and sample_weight at the same time")
        reject_kwargs("fit", kwargs, ("max_queue_size", "workers", "use_multiprocessing"))
        ps_fit = getattr(self.distribute_strategy, "_ps_fit", None)  # ParameterServerStrategy's chief
        if ps_fit is not None:
            return ps_fit(self, x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
                          shuffle, initial_epoch, steps_per_epoch)
        if self._compile_args is None or getattr(self, "_placeholder_loss", False):
            raise RuntimeError("You must compile your model before training/testing. Use `model.compile(optimizer, loss)`.")
        if getattr(self, "_nested", None):
            self._ensure_compiled("fit")  # takes the nested model's current weights
        if shuffle not in (True, False, "batch"):
            raise ValueError("fit: shuffle=%r (expected a bool)" % (shuffle,))
        for name, v in (("epochs", epochs), ("initial_epoch", initial_epoch)):  # 1.5 ran 1 epoch (D20)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError("fit: %s=%r must be an integer" % (name, v))
        if steps_per_epoch is not None and (isinstance(steps_per_epoch, bool) or not isinstance(
                steps_per_epoch, (int, np.integer)) or steps_per_epoch < 1):
            raise ValueError("fit: steps_per_epoch=%r must be None or a positive integer" % (steps_per_epoch,))
        epochs, initial_epoch = int(epochs), int(initial_epoch)
        if epochs < 0 or initial_epoch < 0:
            raise ValueError("fit: epochs=%d, initial_epoch=%d must be >= 0" % (epochs, initial_epoch))
        if epochs > _MAX_EPOCHS:
            raise ValueError("fit: epochs=%d: at most %d (with EarlyStopping, a large count such as "
                             "10**6 stops where the callback says)" % (epochs, _MAX_EPOCHS))
        from .. import data as _data
        if not 0.0 <= float(validation_split) < 1.0:
            raise ValueError("fit: validation_split=%r must be in [0, 1)" % (validation_split,))
        keep = []
        if isinstance(x, (_data.Dataset, _distribute.DistributedDataset)) and sample_weight is not None:
            raise ValueError("fit: sample_weight is not supported when x is a dataset (yield "
                             "(x, y, sample_weight) elements instead)")
        xds = x._dataset if isinstance(x, _distribute.DistributedDataset) else x
        weighted = sample_weight if sample_weight is not None else (
            True if isinstance(xds, _data.Dataset) and _data.yields_weights(xds) else None)
        if weighted is not None and cweights is not None:
            raise ValueError("fit: you cannot use class_weight and sample_weight at the same time")
        if validation_split and validation_data is None:
            if _multi.is_multi(self):
                raise NotImplementedError("fit: validation_split with several outputs is not supported by "
                                          "Strata; split the arrays and pass validation_data=(x_val, [y1, ...])")
            if sample_weight is not None:
                raise NotImplementedError("fit: sample_weight with validation_split is not supported "
                                          "by Strata (validation sample weights); split the arrays "
                                          "and pass validation_data=(x_val, y_val)")
            if isinstance(x, _data.Dataset):
                raise ValueError("fit: validation_split is only supported for NumPy arrays, not datasets")
            x = self._flatten_inputs(x, "fit")
            xa, ya = features(x, "fit: x"), np.asarray(y)
            split = int(math.floor(len(xa) * (1.0 - validation_split)))
            if split <= 0 or split >= len(xa):
                raise ValueError("fit: validation_split=%r of %d examples leaves no training or "
                                 "validation examples" % (validation_split, len(xa)))
            x, y, validation_data = xa[:split], ya[:split], (xa[split:], ya[split:])
        validate = _validation_epochs(validation_freq)
        train, batch = self._arrays(x, y, batch_size, "fit", bool(shuffle), steps_per_epoch,
                                    epoch=int(initial_epoch), weights=weighted, endless=True)
        # an endless dataset stays whole: the engine reads it as one stream
        # across the epochs, epoch e its batches [e n, (e + 1) n) (Keras)
        stream = int(steps_per_epoch) if steps_per_epoch is not None and \
            _strata.dataset_cardinality(train) == -1 else 0
        self._ensure_compiled("fit")
        _check_class_keys("fit", cweights, self._flat_out())
        val = None
        if validation_data is not None:
            if isinstance(validation_data, _data.Dataset):
                val, _ = self._arrays(validation_data, None, None, "fit: validation_data", steps=validation_steps)
            else:
                vd = tuple(validation_data)
                if len(vd) == 3 and vd[2] is not None:
                    raise NotImplementedError("fit: validation sample weights are not supported by Strata")
                if len(vd) not in (2, 3):
                    raise ValueError("fit: validation_data must be (x_val, y_val)")
                val, _ = self._arrays(vd[0], vd[1], validation_batch_size or batch, "fit: validation_data")
        history = _callbacks.History()
        cbs = list(callbacks or [])
        backups = [cb for cb in cbs if isinstance(cb, _callbacks.BackupAndRestore)]
        if len(backups) > 1:
            raise ValueError("fit: more than one BackupAndRestore callback")
        cbs = [cb for cb in cbs if not isinstance(cb, _callbacks.BackupAndRestore)]
        backup = (backups[0].backup_dir, backups[0].save_every) if backups else (None, 0)
        for cb in cbs:
            if not isinstance(cb, _callbacks.Callback):
                raise TypeError("fit: callback %r is not a tf.keras.callbacks.Callback" % (cb,))
        verbose = 1 if verbose == "auto" else int(verbose)
        if verbose:
            cbs.insert(0, _callbacks.ProgbarLogger(verbose=verbose))
        cbs.append(history)
        steps = stream or int(_strata.dataset_cardinality(train))
        params = {"verbose": verbose, "epochs": epochs, "steps": steps if steps >= 0 else None}
        for cb in cbs:
            cb.set_model(self)
            cb.set_params(params)
        every = 1 if any(_callbacks._overrides_batch(cb) or getattr(cb, "_wants_batches", lambda: False)()
                         for cb in cbs if not (isinstance(cb, _callbacks.ProgbarLogger) and verbose != 1)) else 0
        driver = _Driver(self, cbs, self._metric_key, every)
        self.history = history
        self._fit_validates = val is not None
        for cb in cbs:
            cb.on_train_begin({})
        n = max(epochs - initial_epoch, 0)
        if isinstance(x, _distribute.DistributedDataset):
            x = x._dataset
        pystream = None
        if n > 1 and not stream and steps_per_epoch is not None and isinstance(x, _data.Dataset) \
                and int(x.cardinality()) == -1:
            # an endless pipeline run in Python: one iterator across the
            # epochs (Keras's), each epoch its next steps_per_epoch batches
            pystream = _data.Stream(x, self._scale, getattr(self, "_sparse", False), "fit",
                                    steps_per_epoch, True, int(initial_epoch))
            train, _ = pystream.next_epoch()
        if n > 1 and isinstance(x, _data.Dataset) and (pystream or _data.python_epochs(x)):
            # a Python map over a reshuffled dataset: run it again for every
            # epoch (its new order), one engine epoch at a time
            self._stop, rates = False, []
            for e in range(initial_epoch, epochs):
                if e > initial_epoch and pystream:
                    train, _ = pystream.next_epoch()
                elif e > initial_epoch:
                    train, _ = self._arrays(x, None, None, "fit", steps=steps_per_epoch, epoch=e,
                                            weights=weighted)
                _logs, sps = _strata.model_fit(self._cap, train, 1, val if validate(e + 1) else None,
                                               driver, every, e, *backup, None, cweights,
                                               weighted is not None)
                rates.append(sps)
                if self._stop:
                    break
            sps = sum(rates) / len(rates)
        else:
            # the engine counts this call's epochs from 1: Keras's epoch initial_epoch + c
            # every epoch validates (validation_freq=1): no list (epochs=10**6 with
            # EarlyStopping built one entry per epoch first: issue 29 D11)
            every_epoch = isinstance(validation_freq, (int, np.integer)) and int(validation_freq) == 1
            listed = None if val is None or every_epoch else \
                [c for c in range(1, n + 1) if validate(initial_epoch + c)]
            use_val = val if (every_epoch and n) or listed else None
            _logs, sps = _strata.model_fit(self._cap, train, n, use_val, driver, every,
                                           initial_epoch, *backup, listed, cweights,
                                           weighted is not None, stream)
        history.samples_per_sec = sps  # the engine's, training only, first 20 steps excluded
        self._fit_calls = getattr(self, "_fit_calls", 0) + 1
        for cb in cbs:
            cb.on_train_end(driver.last)
        del keep
        _nested.push(self)
        return history

    def _epoch_logs(self, t, key):
        if _multi.is_multi(self):
            return _multi.epoch_logs(self, t, key)
        _, loss, acc, has_val, vloss, vacc = t[:6]
        logs = {"loss": loss}
        if key:
            logs[key] = acc
        if has_val:
            logs["val_loss"] = vloss
            if key:
                logs["val_" + key] = vacc
        return logs

    @property
    def stop_training(self):
        return self._stop

    @stop_training.setter
    def stop_training(self, value):
        self._stop = bool(value)
        if value and self._cap is not None:
            _strata.stop_training(self._cap)

    # ---- evaluate / predict ----
    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 steps=None, callbacks=None, return_dict=False, **kwargs):
        """Loss (and metric) over the data: a float when compiled without
        metrics, else [loss, metric]; a dict with return_dict=True."""
        unsupported("evaluate", sample_weight=(sample_weight, None))
        reject_kwargs("evaluate", kwargs, ("max_queue_size", "workers", "use_multiprocessing"))
        if self._compile_args is None or getattr(self, "_placeholder_loss", False):
            raise RuntimeError("You must compile your model before training/testing. Use `model.compile(optimizer, loss)`.")
        ds, _ = self._arrays(x, y, batch_size, "evaluate", steps=steps)
        self._ensure_compiled("evaluate")
        loss, acc, _n, out_losses, out_accs = _strata.model_evaluate(self._cap, ds)
        logs = {"loss": loss}
        if _multi.is_multi(self):
            logs = _multi.eval_logs(self, loss, out_losses, out_accs, self._metric_key)
        elif self._metric_key:
            logs[self._metric_key] = acc
        if verbose not in (0, False):
            print(" - ".join("%s: %.4f" % kv for kv in logs.items()))
        if return_dict:
            return logs
        return loss if len(logs) == 1 else list(logs.values())

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None, **kwargs):
        """The model's outputs for x as a float32 NumPy array [n, ...]."""
        reject_kwargs("predict", kwargs, ("max_queue_size", "workers", "use_multiprocessing"))
        ds, _ = self._arrays(x, None, batch_size, "predict", steps=steps, labelled=False)
        self._ensure_compiled("predict")
        buf, rows = _strata.model_predict(self._cap, ds)
        out = np.frombuffer(buf, dtype=np.float32)
        out = out.reshape((rows,) + tuple(self._flat_out()[1:]))
        return _multi.split(self, out) if _multi.is_multi(self) else out

    def __call__(self, x, training=False):
        if isinstance(x, (_layers.KerasTensor, list, tuple)) and any(
                isinstance(t, _layers.KerasTensor) for t in (x if isinstance(x, (list, tuple)) else [x])):
            raise NotImplementedError("calling a model on KerasTensors (a nested model) is not supported by "
                                      "Strata yet: call its layers on the tensors instead")
        ctx = _distribute._current_replica()
        if ctx is not None and ctx._handle is not None:
            return self._replica_call(ctx, x, training)
        from .. import _tape
        if training or _tape.recording() is not None or _tape.recorded(x):
            return self._eager_call(x, training)
        from .._tensor import tensor
        out = self.predict(x, verbose=0)
        if isinstance(out, list):  # several outputs
            return [tensor(o) for o in out]
        return tensor(out)  # an eager tensor, as TF (predict stays NumPy)

    def _eager_call(self, x, training):
        """model(x) outside strategy.run with training=True or under a
        GradientTape: the forward of the model's open engine run
        (strata/_eager.py), recorded by the tape."""
        from .. import _eager, _tape
        xin = self._flatten_inputs(x, "model call")
        xa = features(xin, "model call: x")
        if self._cap is None:
            self._build(xa.shape[1:])
        if tuple(xa.shape[1:]) != tuple(self._input_shape):
            raise ValueError("model call: x has examples of shape %s, the model takes %s"
                             % (tuple(xa.shape[1:]), tuple(self._input_shape)))
        x32 = xa if xa.dtype == np.float32 else xa.astype(np.float32)
        if self._scale != 1.0:
            x32 = x32 * np.float32(self._scale)
        s = _eager.session(self)
        x32 = np.ascontiguousarray(x32)
        out = s.forward(x32, training)
        src = x if _tape.recorded(x) and xin is x else None
        if src is not None and not isinstance(src, _tape.Tensor):
            src = _tape.live(src)
        return _tape.eager_output(self, s, out, src, int(np.prod(self._input_shape)), self._scale,
                                  np.ascontiguousarray(x32), training)

    def _trainable_offsets(self):
        """[(offset into the gradients, shape)] of model.trainable_variables."""
        return [(o, s) for _, ws in self._weight_layout() for s, t, o in ws if t]

    def _replica_call(self, ctx, x, training):
        """model(x) inside strategy.run: this replica's forward in the
        engine (st_replica_forward), recorded by a GradientTape."""
        from .. import _tape
        if ctx._model is not self:
            raise NotImplementedError("model call inside strategy.run: this run is bound to %s (the most "
                                      "recently compiled model of the strategy)" % getattr(ctx._model, "name", None))
        xa = features(self._flatten_inputs(x, "model call"), "model call: x")
        x32 = xa if xa.dtype == np.float32 else xa.astype(np.float32)
        if self._scale != 1.0:
            x32 = x32 * np.float32(self._scale)
        cols = int(np.prod(self._flat_out()[1:]))
        buf = _strata.replica_forward(ctx._handle, np.ascontiguousarray(x32), bool(training), cols)
        out = np.frombuffer(buf, dtype=np.float32).reshape((len(xa),) + tuple(self._flat_out()[1:])).copy()
        return _tape.model_output(self, ctx, out)

    @property
    def trainable_variables(self):
        """The trainable weights (Keras's order) as variables of the engine
        (GradientTape.gradient's sources; .numpy() reads one)."""
        from .. import _tape
        if getattr(self, "_tvars", None) is None:
            self._require_built("trainable_variables")
            out, i = [], 0
            for l, ws in self._weight_layout():
                for j, (s, t, _o) in enumerate(ws):
                    if t:
                        out.append(_tape.ModelVariable(self, i, "%s/%d" % (l.name, j), s, len(out)))
                    i += 1
            self._tvars = out
        return list(self._tvars)

    trainable_weights = trainable_variables

    @property
    def losses(self):
        """The layers' added losses: none in Strata (no regularizers)."""
        return []

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict=False):
        """One optimizer step on the batch (split over the replicas by the
        strategy); returns the batch's loss (and metric) as evaluate does."""
        cweights = _class_weights("train_on_batch", class_weight)
        if sample_weight is not None and cweights is not None:
            raise ValueError("train_on_batch: you cannot use class_weight and sample_weight at the same time")
        if self._compile_args is None or getattr(self, "_placeholder_loss", False):
            raise RuntimeError("You must compile your model before training/testing. Use `model.compile(optimizer, loss)`.")
        ctx = _distribute._current_replica()
        if ctx is not None:
            if cweights is not None or sample_weight is not None:
                raise NotImplementedError("train_on_batch inside strategy.run: class_weight and "
                                          "sample_weight are not supported by Strata there (fit and "
                                          "train_on_batch outside take them)")
            return self._replica_step(ctx, self._flatten_inputs(x, "train_on_batch"), y, return_dict)
        xa = features(self._flatten_inputs(x, "train_on_batch"), "train_on_batch: x")
        ds, _ = self._arrays(xa, y, len(xa) or 1, "train_on_batch", weights=sample_weight)
        self._ensure_compiled("train_on_batch")
        driver = _Driver(self, [], self._metric_key, 0)
        logs, _ = _strata.model_fit(self._cap, ds, 1, None, driver, 0, 0, None, 0, None, cweights,
                                    sample_weight is not None)
        _nested.push(self)
        out = self._epoch_logs(logs[0], self._metric_key)
        if return_dict:
            return out
        return out["loss"] if len(out) == 1 else list(out.values())

    def _replica_step(self, ctx, x, y, return_dict):
        """train_on_batch inside strategy.run: this replica's share of one
        step (its examples' gradients, all-reduced, applied once per step).
        Returns the replica's loss sum and correct count divided by the
        global batch (tf.nn.compute_average_loss's scaling): reduce with
        ReduceOp.SUM for the global batch's mean loss and accuracy."""
        if ctx._handle is None or ctx._model is not self:
            other = "no compiled model" if ctx._model is None else "model %r" % ctx._model.name
            raise NotImplementedError(
                "train_on_batch inside strategy.run: this run is bound to %s of the strategy (the "
                "most recently compiled one); Strata trains one model per strategy.run, compiled "
                "before the run" % other)
        xa = features(x, "train_on_batch: x")
        if tuple(xa.shape[1:]) != tuple(self._input_shape):
            raise ValueError("train_on_batch: x has examples of shape %s, the model takes %s"
                             % (tuple(xa.shape[1:]), tuple(self._input_shape)))
        ya = labels(y, self._sparse, "train_on_batch: y", self._label_positions())
        if len(ya) != len(xa):
            raise ValueError("train_on_batch: x has %d examples and y has %d; they must match" % (len(xa), len(ya)))
        x32 = xa if xa.dtype == np.float32 else xa.astype(np.float32)
        if self._scale != 1.0:  # as the engine's source: float(x) * float32(scale)
            x32 = x32 * np.float32(self._scale)
        y32 = np.ascontiguousarray(ya.astype(np.float32).reshape(len(ya), -1))
        want = 1 if self._sparse else int(np.prod(self._flat_out()[1:]))
        if y32.shape[1] != want:
            raise ValueError("train_on_batch: labels of %d values per example, the model's loss takes %d"
                             % (y32.shape[1], want))
        loss_sum, correct, global_batch = _strata.replica_train(ctx._handle, np.ascontiguousarray(x32), y32)
        out = {"loss": loss_sum / global_batch}
        if self._metric_key:
            out[self._metric_key] = correct / global_batch
        if return_dict:
            return out
        return out["loss"] if len(out) == 1 else list(out.values())

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        x = self._flatten_inputs(x, "test_on_batch")
        return self.evaluate(x, y, batch_size=max(len(np.asarray(x)), 1), verbose=0,
                             sample_weight=sample_weight, return_dict=return_dict)

    def predict_on_batch(self, x):
        x = self._flatten_inputs(x, "predict_on_batch")
        return self.predict(x, batch_size=max(len(np.asarray(x)), 1), verbose=0)

    # ---- weights ----
    def _weight_layout(self):
        """[(layer, [(shape, trainable, offset into the flat vector)])] in
        Keras's order; the engine keeps trainable variables first. Kept
        while the engine layers and the input shape stay (a GradientTape
        step reads it several times)."""
        key = (tuple(id(l) for l in self._engine_layers), self._input_shape)
        memo = getattr(self, "_layout_memo", None)
        if memo is not None and memo[0] == key:
            return memo[1]
        out = self._weight_layout_now()
        self._layout_memo = (key, out)
        return out

    def _weight_layout_now(self):
        n_params = sum(int(np.prod(s)) for l in self._engine_layers
                       for s, t in l._weight_shapes(self._in_shape(l)) if t)
        p, q, out = 0, n_params, []
        for l in self._engine_layers:
            ws = []
            for s, t in l._weight_shapes(self._in_shape(l)):
                size = int(np.prod(s))
                if t:
                    ws.append((s, t, p))
                    p += size
                else:
                    ws.append((s, t, q))
                    q += size
            out.append((l, ws))
        return out

    def get_weights(self):
        """Every variable as a list of NumPy arrays in Keras's order (per
        layer: kernel, bias; BatchNormalization gamma, beta, mean, variance)."""
        self._ensure_compiled("get_weights")
        flat = np.frombuffer(_strata.get_weights(self._cap), dtype=np.float32)
        return [flat[o:o + int(np.prod(s))].reshape(s).copy()
                for _, ws in self._weight_layout() for s, _t, o in ws]

    def _layer_weights(self, layer):
        self._ensure_compiled("get_weights")
        flat = np.frombuffer(_strata.get_weights(self._cap), dtype=np.float32)
        return [flat[o:o + int(np.prod(s))].reshape(s).copy()
                for l, ws in self._weight_layout() if l is layer for s, _t, o in ws]

    def set_weights(self, weights):
        """Set every variable from a list as get_weights returns it."""
        self._ensure_compiled("set_weights")
        layout = [w for _, ws in self._weight_layout() for w in ws]
        weights = list(weights)
        if len(weights) != len(layout):
            raise ValueError("set_weights: %d arrays given, the model has %d weights" % (len(weights), len(layout)))
        flat = np.frombuffer(_strata.get_weights(self._cap), dtype=np.float32).copy()
        for i, (w, (s, _t, o)) in enumerate(zip(weights, layout)):
            w = np.asarray(w, dtype=np.float32)
            if w.shape != tuple(s):
                raise ValueError("set_weights: weight %d has shape %s, expected %s" % (i, w.shape, tuple(s)))
            flat[o:o + w.size] = w.reshape(-1)
        _strata.set_weights(self._cap, flat)
        _nested.push(self)

    def _set_layer_weights(self, layer, weights):
        all_w = self.get_weights()
        i = 0
        for l, ws in self._weight_layout():
            if l is layer:
                if len(weights) != len(ws):
                    raise ValueError("set_weights: %d arrays given, layer %s has %d" % (len(weights), l.name, len(ws)))
                all_w[i:i + len(ws)] = weights
            i += len(ws)
        self.set_weights(all_w)

    def save_weights(self, filepath, overwrite=True, save_format=None, options=None):
        """Write the variables as safetensors (whatever the file's suffix)."""
        self._ensure_compiled("save_weights")
        path = os.fspath(filepath)
        if not overwrite and os.path.exists(path):
            raise FileExistsError("save_weights: %s exists (overwrite=False)" % path)
        from .. import _checkpoint
        _checkpoint.make_parent(path)
        _strata.weights_file(self._cap, path, True)
        _checkpoint.record(path)

    def load_weights(self, filepath, skip_mismatch=False, by_name=False, options=None):
        """Read variables save_weights wrote (names, dtypes and shapes are
        checked before anything changes)."""
        unsupported("load_weights", skip_mismatch=(skip_mismatch, False), by_name=(by_name, False))
        self._ensure_compiled("load_weights")
        _strata.weights_file(self._cap, os.fspath(filepath), False)
        _nested.push(self)

    def to_json(self, **kwargs):
        """The model's Keras JSON (Keras 2 layout; `strata train --model
        FILE.json` and tf.keras.models.model_from_json read it)."""
        from ._json import to_json
        return to_json(self, **kwargs)

    def save(self, filepath, overwrite=True, zipped=None, **kwargs):
        """Save the whole model (config, compile settings, weights and
        optimizer state) to a .keras archive (keras/_saving.py says what is
        inside); tf.keras.models.load_model reads it back."""
        from ._saving import save_model
        if zipped not in (None, True):
            raise NotImplementedError("save: zipped=False is not supported by Strata")
        save_model(self, filepath, overwrite)


class Sequential(Model):
    """tf.keras.Sequential: a stack of layers (a list or .add()). Created
    inside `strategy.scope()` it trains under that strategy."""

    def __init__(self, layers=None, name=None, trainable=True):
        if trainable is not True:
            raise NotImplementedError("Sequential: trainable=False is not supported by Strata")
        self.name = name or "sequential"
        self._layers = []
        self._engine_layers = []
        self._input_shape = None
        self._scale = 1.0
        self._cap = None
        self._strategy = _distribute._scoped_strategy()
        self._compiled = False
        self._compile_order = 0
        self._compile_args = None
        self.optimizer = None
        self.loss = None
        self.history = None
        self._stop = False
        for layer in (layers if layers is not None else []):
            self.add(layer)

    # ---- layers ----
    def add(self, layer):
        """Append a layer (or an Input as the first entry)."""
        if isinstance(layer, _layers.KerasTensor):
            if not layer._is_input:
                raise TypeError("Sequential.add: %r is the output of a layer call; add the layer itself "
                                "(or build a tf.keras.Model(inputs, outputs))" % (layer,))
            layer = layer._layer
        if not isinstance(layer, _layers.Layer):
            if isinstance(layer, Model):
                return _nested.add(self, layer)
            raise TypeError("Sequential.add: %r is not a layer" % (layer,))
        if isinstance(layer, _layers.InputLayer):
            if self._layers or self._input_shape is not None:
                raise ValueError("Sequential: an Input / InputLayer must come first")
            self._input_shape = layer._input_shape
            return
        from . import _custom
        if getattr(self, "_eager_seq", False) or _custom.is_custom(layer) or _custom.contains_custom(layer):
            from . import _eager_model  # custom layers: the model runs eagerly
            return _eager_model.sequential_add(self, layer)
        if layer._input_shape is not None and not self._layers and self._input_shape is None:
            self._input_shape = layer._input_shape
        if isinstance(layer, _layers.Rescaling):
            if self._layers:
                raise NotImplementedError("Rescaling: only as the model's first layer is it supported by Strata")
            self._scale *= layer.scale
            self._layers.append(layer)
            return
        self._layers.append(layer)
        if self._cap is not None:
            self._add_engine(layer)
        elif self._input_shape is not None:
            self._build(self._input_shape)

    def _add_engine(self, layer):
        if self._compiled:
            raise ValueError("Sequential.add: the model is already compiled")
        if isinstance(layer, _layers.Reshape):
            prev = self._engine_layers[-1].output_shape[1:] if self._engine_layers else self._input_shape
            layer._resolve(prev)
        layer._add(self._cap)
        _layers._apply_init_seeds(layer, self._cap)
        info = _strata.model_layers(self._cap)[-1]
        layer.name, layer.output_shape, layer._params = info[0], (None,) + info[2], info[3]
        layer._model = self
        self._engine_layers.append(layer)

    @property
    def layers(self):
        return list(self._layers)

    @property
    def built(self):
        return self._cap is not None

    def build(self, input_shape=None):
        """Build for inputs of input_shape (with the batch dimension)."""
        if self._cap is None:
            shape = tuple(input_shape)[1:] if input_shape is not None else self._input_shape
            if shape is None:
                raise ValueError("build: the input shape is unknown")
            self._build(shape)

    def _build(self, shape):
        if any(d is None or isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1
               for d in shape):  # (issue 29 D18: a bare TypeError from int(None))
            raise ValueError("input_shape=%r: every dimension must be a positive integer (Strata "
                             "builds fixed shapes; None is not supported)" % (tuple(shape),))
        shape = tuple(int(d) for d in shape)
        strategy = self._strategy or _distribute.get_strategy()
        self._strategy = strategy
        cap = _strata.model_create(shape, global_seed(), strategy._create(), self.name)
        self._init_seed = next_init_seed()
        _strata.model_init_seed(cap, self._init_seed)
        self._cap, self._input_shape = cap, shape
        strategy._register(self)
        for layer in self._layers:
            if not isinstance(layer, _layers.Rescaling):
                self._add_engine(layer)
        if self._compile_args is not None:
            self._engine_compile()

    @classmethod
    def _from_json(cls, text):
        """A built model from Keras JSON text: the engine reads and builds
        it; the layer objects are made from the engine's layers' options."""
        model = cls()
        strategy = model._strategy or _distribute.get_strategy()
        cap, shape, name = _strata.model_from_keras_json(text, global_seed(), strategy._create())
        model._init_seed = next_init_seed()
        _strata.model_init_seed(cap, model._init_seed)
        model._strategy, model._cap, model._input_shape, model.name = strategy, cap, tuple(shape), name
        strategy._register(model)
        infos = _strata.model_layers(cap)
        for (cls_name, lname, opts), info in zip(_strata.model_layer_options(cap), infos):
            # float32 options (momentum, epsilon, rate) as their shortest decimal
            opts = {k: float(str(np.float32(v))) if isinstance(v, float) else v for k, v in opts.items()}
            layer = getattr(_layers, cls_name)(**opts)
            layer.name, layer.output_shape, layer._params = info[0], (None,) + info[2], info[3]
            layer._model = model
            model._layers.append(layer)
            model._engine_layers.append(layer)
        return model

    def _in_shape(self, layer):
        i = self._engine_layers.index(layer)
        return self._input_shape if i == 0 else tuple(self._engine_layers[i - 1].output_shape[1:])



def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """A model model.save(path.keras) wrote (keras/_saving.py)."""
    from ._saving import load_model as _load
    return _load(filepath, custom_objects, compile, safe_mode)


def model_from_json(json_string, custom_objects=None):
    """A model from Keras's model.to_json() text (Keras 2 or 3 layouts):
    the library's reader (st_model_from_keras_json_text, the one `strata
    train --model FILE.json` uses) builds it, with the input shape the JSON
    gives, under the strategy in scope: a Model for a "Functional"/"Model"
    document, a Sequential for a "Sequential" one. An unsupported layer or
    option raises ValueError naming the layer's position, name, class and
    the option."""
    if custom_objects:
        raise NotImplementedError("model_from_json: custom_objects are not supported by Strata")
    if isinstance(json_string, (bytes, bytearray)):
        json_string = bytes(json_string).decode("utf-8", "replace")
    if not isinstance(json_string, str):
        raise TypeError("model_from_json: expected the JSON text (a str), got %s" % type(json_string).__name__)
    from .functional import Functional, is_functional_json
    if is_functional_json(json_string):
        return Functional._from_json(json_string)
    from ._json import peel_rescaling
    json_string, scale = peel_rescaling(json_string)
    model = Sequential._from_json(json_string)
    if scale is not None:  # the first layer again, folded into the input pipeline
        model._layers.insert(0, _layers.Rescaling(scale))
        model._scale = scale
    return model


def __getattr__(name):
    from .._util import missing
    raise missing("tf.keras.models", name)
