"""A subclassed tf.keras.Model that holds custom layers (keras/_custom.py):
Strata cannot put those in the engine's graph, so the model runs call()
eagerly, layer by layer, and its verbs are Python loops over batches:
fit takes each batch through a GradientTape step (the compiled loss plus
the layers' add_loss terms, optimizer.apply_gradients on the model's
tf.Variables with the optimizer's NumPy update), evaluate and predict call
the model. A model becomes one when a custom layer is assigned to it
(Model.__setattr__). Weights: get_weights / set_weights / save_weights
(NumPy .npz) work; model.save (.keras) is refused naming save_weights."""
import numpy as np

from . import _custom
from . import callbacks as _callbacks
from . import losses as _losses
from . import metrics as _metrics
from . import optimizers as _optimizers
from .models import Model, Sequential

_DERIVED = {}


def derived(cls):
    """cls with EagerModel's verbs (the user's own methods first)."""
    if issubclass(cls, EagerModel):
        return cls
    if cls not in _DERIVED:
        _DERIVED[cls] = type(cls.__name__, (cls, EagerModel), {"__module__": cls.__module__,
                                                               "__qualname__": cls.__qualname__})
    return _DERIVED[cls]


def _accuracy_for(loss):
    name = getattr(loss, "_engine_name", "")
    if name.startswith("sparse"):
        return _metrics.SparseCategoricalAccuracy
    if name.startswith("categorical"):
        return _metrics.CategoricalAccuracy
    if name.startswith("binary"):
        return _metrics.BinaryAccuracy
    return _metrics.Accuracy


def _batches(x, y, batch_size, shuffle, where, seed=0):
    """[(x, y)] batches of arrays, or the elements of a tf.data.Dataset."""
    from .. import data as _data
    if isinstance(x, _data.Dataset):
        for el in x:
            if isinstance(el, tuple):
                yield el[0], (el[1] if len(el) > 1 else None)
            else:
                yield el, None
        return
    xa = np.asarray(x)
    ya = None if y is None else np.asarray(y)
    n = len(xa)
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    bs = int(batch_size or 32)
    for i in range(0, n, bs):
        idx = order[i:i + bs]
        yield xa[idx], (None if ya is None else ya[idx])


_HARMLESS = ("max_queue_size", "workers", "use_multiprocessing", "steps", "callbacks", "validation_steps",
             "validation_batch_size", "validation_freq")


def _refuse(where, kwargs, validation_split=0.0):
    """The arguments an eager model's loop does not implement, named."""
    bad = [k for k, v in kwargs.items() if k not in _HARMLESS and v not in (None, False)]
    if validation_split:
        bad.append("validation_split")
    if bad:
        raise NotImplementedError("%s of a model with custom layers (run eagerly): argument %s is not supported "
                                  "by Strata (pass validation_data, or use a tape loop)" % (where, ", ".join(bad)))


def _one_device_note(model):
    strategy = getattr(model, "_strategy", None)
    if strategy is not None and strategy.num_replicas_in_sync > 1 and not getattr(model, "_warned_eager", False):
        import warnings
        model._warned_eager = True
        warnings.warn("model %s holds custom layers and runs eagerly on one device: the strategy's %d replicas "
                      "are not used" % (model.name, strategy.num_replicas_in_sync), RuntimeWarning, stacklevel=3)


class EagerModel(Model):
    """The verbs of a subclassed model with custom layers (module comment)."""

    def __call__(self, inputs, training=None, **kwargs):
        from .. import _ops
        from .._tensor import Tensor
        if not isinstance(inputs, (Tensor, list, tuple, dict)):
            inputs = _ops.convert_to_tensor(inputs)
        if self._input_shape is None and not isinstance(inputs, (list, tuple, dict)):
            self._input_shape = tuple(np.shape(inputs)[1:])
        self.__dict__["_added_losses"] = []
        if training is not None and _custom._accepts(self.call, "training"):
            kwargs["training"] = training
        out = self.call(inputs, **kwargs)
        self._eager_built = True
        return out

    @property
    def built(self):
        return getattr(self, "_eager_built", False)

    def build(self, input_shape=None):
        if input_shape is None:
            raise ValueError("build: give the input shape, e.g. model.build((None, 784))")
        shape = tuple(1 if d is None else int(d) for d in input_shape)
        self(np.zeros(shape, np.float32))

    @property
    def layers(self):
        return [l for l in _custom.sublayers(self)]

    @property
    def weights(self):
        return _custom.weights_of(self)

    @property
    def trainable_variables(self):
        return [v for v in self.weights if v.trainable]

    trainable_weights = trainable_variables

    @property
    def non_trainable_weights(self):
        return [v for v in self.weights if not v.trainable]

    @property
    def losses(self):
        return _custom.losses_of(self)

    def add_loss(self, loss):
        self.__dict__.setdefault("_added_losses", []).append(loss)

    def count_params(self):
        return int(sum(np.prod(v.shape) for v in self.weights))

    def get_weights(self):
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights):
        ws = self.weights
        if len(weights) != len(ws):
            raise ValueError("set_weights: %d arrays given, the model has %d weights" % (len(weights), len(ws)))
        for v, w in zip(ws, weights):
            v.assign(w)

    def summary(self, *args, print_fn=None, **kwargs):
        if not self.built:
            raise ValueError("summary: this model has not yet been built (call it on data or build() first)")
        lines = ['Model: "%s" (runs eagerly: custom layers)' % self.name]
        for l in _custom.sublayers(self):
            lines.append("  %-30s %-20s %d" % (l.name, type(l).__name__, int(sum(np.prod(v.shape) for v in
                                                                             l.__dict__.get("_own_weights", [])))))
        lines.append("Total params: %d" % self.count_params())
        (print_fn or print)("\n".join(lines))

    def save(self, filepath, *args, **kwargs):
        raise NotImplementedError("save: model %s holds custom layers (run eagerly); Strata's .keras files hold "
                                  "its engine models only: use save_weights / load_weights" % self.name)

    def save_weights(self, filepath, overwrite=True, **kwargs):
        np.savez(filepath if str(filepath).endswith(".npz") else str(filepath) + ".npz",
                 *[v.numpy() for v in self.weights])

    def load_weights(self, filepath, **kwargs):
        path = filepath if str(filepath).endswith(".npz") else str(filepath) + ".npz"
        with np.load(path) as f:
            self.set_weights([f["arr_%d" % i] for i in range(len(f.files))])

    def to_json(self, **kwargs):
        raise NotImplementedError("to_json: model %s holds custom layers, which Keras JSON cannot describe for "
                                  "Strata's engine" % self.name)

    # ---- compile / fit / evaluate / predict ----
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None, **kwargs):
        _refuse("compile", {k: v for k, v in kwargs.items() if k not in ("run_eagerly", "jit_compile",
                                                                         "steps_per_execution")})
        if loss_weights is not None:
            raise NotImplementedError("compile: loss_weights for a model with custom layers (one output) is not "
                                      "supported by Strata")
        self.optimizer = _optimizers.get(optimizer)
        self.loss = None if loss is None else _losses.get(loss)
        mets = []
        for m in (metrics or []):
            if isinstance(m, str) and m.lower() in ("accuracy", "acc"):
                mets.append(_accuracy_for(self.loss)(name="accuracy"))
            elif isinstance(m, _metrics.Metric):
                mets.append(m)
            else:
                raise NotImplementedError("compile: metric %r for a model with custom layers (run eagerly): "
                                          "Strata takes 'accuracy' or tf.keras.metrics objects there" % (m,))
        self._eager_metrics = mets
        self._compile_args = (self.optimizer, self.loss, [])

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
        total = self.loss(y, y_pred) if self.loss is not None and y is not None else None
        for extra in self.losses:
            total = extra if total is None else total + extra
        if total is None:
            raise ValueError("fit: the model has no loss (compile(loss=...) or add_loss in call())")
        return total

    def train_step(self, data):
        """One GradientTape step on a batch (x, y); returns its logs."""
        from .. import _tape
        x, y = data
        with _tape.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return self._update_metrics(loss, y, y_pred)

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        return self._update_metrics(self.compute_loss(x, y, y_pred), y, y_pred)

    def _update_metrics(self, loss, y, y_pred):
        self._loss_tracker.update_state(loss, sample_weight=len(y_pred))
        logs = {"loss": float(self._loss_tracker.result())}
        for m in getattr(self, "_eager_metrics", []):
            if y is not None:
                m.update_state(y, y_pred)
            logs[m.name] = float(m.result())
        return logs

    def _reset(self):
        self._loss_tracker = _metrics.Mean(name="loss")
        for m in getattr(self, "_eager_metrics", []):
            m.reset_state()

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_data=None, shuffle=True, initial_epoch=0, validation_split=0.0, **kwargs):
        _refuse("fit", kwargs, validation_split=validation_split)
        _one_device_note(self)
        if getattr(self, "optimizer", None) is None:
            raise RuntimeError("You must compile your model before training/testing. Use `model.compile(optimizer, loss)`.")
        history = _callbacks.History()
        cbs = [cb for cb in (callbacks or [])] + [history]
        for cb in cbs:
            cb.set_model(self)
            cb.set_params({"epochs": epochs, "verbose": 0})
            cb.on_train_begin({})
        self.history, self._stop = history, False
        from .. import _util
        for epoch in range(int(initial_epoch), int(epochs)):
            for cb in cbs:
                cb.on_epoch_begin(epoch, {})
            self._reset()
            logs = {}
            for step, (xb, yb) in enumerate(_batches(x, y, batch_size, bool(shuffle), "fit",
                                                     (_util.global_seed() + epoch) % 2 ** 63)):
                logs = self.train_step((xb, yb))
                for cb in cbs:
                    cb.on_train_batch_end(step, logs)
            if validation_data is not None:
                vx, vy = (validation_data, None) if not isinstance(validation_data, tuple) else validation_data[:2]
                vlogs = self.evaluate(vx, vy, batch_size=batch_size, verbose=0, return_dict=True)
                logs.update({"val_" + k: v for k, v in vlogs.items()})
            for cb in cbs:
                cb.on_epoch_end(epoch, dict(logs))
            if verbose not in (0, False):
                print("Epoch %d/%d - %s" % (epoch + 1, epochs, " - ".join("%s: %.4f" % kv for kv in logs.items())))
            if self._stop:
                break
        for cb in cbs:
            cb.on_train_end({})
        return history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", return_dict=False, **kwargs):
        _refuse("evaluate", kwargs)
        self._reset()
        logs = {}
        for xb, yb in _batches(x, y, batch_size, False, "evaluate"):
            logs = self.test_step((xb, yb))
        if return_dict:
            return logs
        return logs["loss"] if len(logs) == 1 else list(logs.values())

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        _refuse("predict", kwargs)
        outs = [np.asarray(self(xb, training=False)) for xb, _ in _batches(x, None, batch_size, False, "predict")]
        return np.concatenate(outs) if outs else np.zeros((0,), np.float32)


class EagerSequential(EagerModel, Sequential):
    """A Sequential holding a custom layer: its layers called in order,
    eagerly (the verbs of EagerModel)."""

    def call(self, inputs, training=None):
        x = inputs
        for layer in self._layers:
            x = layer(x, training=training)
        return x


def sequential_add(model, layer):
    """Sequential.add of a custom layer (or any layer once the model runs
    eagerly): the model becomes an EagerSequential; layers already added to
    the engine's model leave it (their weights are made again, eagerly)."""
    if not isinstance(model, EagerSequential):
        model.__class__ = EagerSequential
        model._eager_seq = True
        model._cap, model._engine_layers = None, []
        for l in model._layers:
            l._model = None
    model._layers.append(layer)
