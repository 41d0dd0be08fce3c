"""ClusterCoordinator.schedule(step_fn, args=(iterator,)) for a step function
that runs a GradientTape step under strategy.run, as the parameter-server
tutorial's custom loop writes it:

    @tf.function
    def step_fn(iterator):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                per_example_loss = loss_object(y, pred)        # reduction NONE
                loss = tf.nn.compute_average_loss(per_example_loss)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        x, y = next(iterator)
        losses = strategy.run(replica_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

Strata's workers run C training steps, not Python. As tf.function traces a
step once and replays its graph, the first schedule of a step function
traces it on the chief: the function runs once on the iterator's next batch
with the chief's model, the tape computes its gradients there and
apply_gradients only records the optimizer (nothing is applied). The step is
then compared with the engine's step for the Keras loss object it called
(its class and from_logits, averaged over the batch, as fit computes it):
the model is compiled with that loss and the step's optimizer when it was
not compiled (TF's custom loops never compile), and the tape's gradients
must be the engine's for that loss on the same batch (within float
rounding) and the function must return the loss. Every schedule of that
function (the first included) is then one C step on a worker on the
iterator's next batch, and its RemoteValue gives that step's loss.
Refused by name (NotImplementedError), as they cannot be replayed by a C
step: a metric updated inside the step (read the RemoteValue's loss, or use
model.train_on_batch with compiled metrics), several batches or model
calls' losses Strata cannot match, gradients of anything else than the
model's trainable variables, another return value than the loss.
Threads: the chief's thread only."""
import threading

import numpy as np

_local = threading.local()


def active():
    """The trace running on this thread, or None."""
    return getattr(_local, "trace", None)


def refuse(what):
    raise NotImplementedError(
        "ClusterCoordinator.schedule: %s inside a scheduled step is not supported by Strata (its workers "
        "replay the step as a C training step: the RemoteValue gives the step's loss; compiled metrics "
        "come with model.train_on_batch)" % what)


class Trace:
    """What one run of the step function on the chief did."""

    def __init__(self, coordinator, iterator):
        self.coordinator, self.iterator = coordinator, iterator
        self.batch = self.idx = None
        self.losses, self.applied = [], None

    def next_batch(self, it):
        """next(iterator) inside the trace: the batch the first C step takes."""
        from .._ops import constant
        if it is not self.iterator:
            refuse("next() of an iterator other than the one passed to schedule")
        if self.idx is not None:
            refuse("a second next(iterator)")
        self.idx = it._next_indices()
        ds = self.coordinator._dataset
        x, y = np.asarray(ds._x)[self.idx], np.asarray(ds._y)[self.idx]
        self.batch = (x, y)
        return constant(x), constant(y)

    def on_loss(self, loss):
        self.losses.append(loss)

    def on_apply(self, optimizer, pairs):
        from .._tape import ModelVariable
        if self.applied is not None:
            refuse("a second apply_gradients")
        models = {id(v._model): v._model for _g, v in pairs if isinstance(v, ModelVariable)}
        if len(models) != 1 or any(not isinstance(v, ModelVariable) for _g, v in pairs):
            refuse("apply_gradients to variables other than one model's")
        model = next(iter(models.values()))
        tv = model.trainable_variables
        if len(pairs) != len(tv) or any(v is not w for (_g, v), w in zip(pairs, tv)):
            refuse("apply_gradients to a part of model.trainable_variables")
        self.applied = (optimizer, model, [np.asarray(g, dtype=np.float64) for g, _v in pairs])


def run_strategy(fn, args, kwargs):
    """ParameterServerStrategy.run inside a trace: fn on the chief (one replica)."""
    return fn(*args, **(kwargs or {}))


def _engine_loss(losses):
    """The compile loss of the one Keras loss class the step called."""
    kinds = {(type(l).__name__, l.from_logits) for l in losses}
    if len(kinds) != 1:
        refuse("a loss that is not one Keras loss object's (%s)" % (sorted(kinds) or "none"))
    l = losses[0]
    return type(l)(from_logits=l.from_logits)


def _engine_gradients(model, loss_obj, x, y):
    """The engine's gradients (and loss) of loss_obj averaged over the batch,
    on the chief's model, without applying them."""
    from .. import _eager
    from .._tape import GradientTape
    with GradientTape() as tape:
        out = model(x, training=True)
        loss = loss_obj(y, out)
    grads = tape.gradient(loss, model.trainable_variables)
    _eager.close(model)  # no apply: the engine counts no step
    return [np.asarray(g, dtype=np.float64) for g in grads], float(np.asarray(loss))


def trace(coordinator, fn, args, kwargs):
    """Run fn once on the chief (see the module's comment); returns (model,
    the indices of the batch it took)."""
    from .. import _eager
    t = Trace(coordinator, args[0] if args else None)
    _local.trace = t
    try:
        ret = fn(*args, **(kwargs or {}))
    finally:
        _local.trace = None
    if t.applied is None or t.idx is None:
        refuse("a step without %s" % ("next(iterator)" if t.idx is None else "optimizer.apply_gradients"))
    optimizer, model, grads = t.applied
    _eager.close(model)
    loss_obj = _engine_loss(t.losses)
    if model._compile_args is None or getattr(model, "_placeholder_loss", False):
        model.compile(optimizer=optimizer, loss=loss_obj)
    elif model.optimizer is not optimizer or model.loss._engine_name != loss_obj._engine_name:
        refuse("an optimizer or a loss other than the model's compiled ones")
    want, loss = _engine_gradients(model, loss_obj, *t.batch)
    scale = max(max(float(np.abs(g).max()) for g in want), 1e-30)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(grads, want))
    if worst > 1e-4 * scale + 1e-7:
        refuse("a loss other than %s averaged over the batch (the tape's gradients differ from the engine's "
               "by %.3g, largest %.3g)" % (type(loss_obj).__name__, worst, scale))
    r = np.asarray(ret, dtype=np.float64) if ret is not None else None
    if r is None or r.size != 1 or abs(float(r.reshape(-1)[0]) - loss) > 1e-4 * max(1.0, abs(loss)):
        refuse("a return value other than the step's loss (%r)" % (ret,))
    return model, t.idx
