"""tf.keras.optimizers: SGD, Adam, AdamW, RMSprop with Keras's defaults, and
learning-rate schedules (tf.keras.optimizers.schedules)."""
from .._tensor import Variable
from .._util import reject_kwargs


class _LearningRate(Variable):
    """optimizer.learning_rate: a float32 Variable whose assign sets the
    optimizer's rate."""

    def __init__(self, opt, value):
        super().__init__(value, dtype="float32", name="learning_rate")
        self._opt = opt

    def _assigned(self):
        self._opt.learning_rate = float(self._value)


class _Schedules:
    pass


class LearningRateSchedule:
    """Base of the schedules Strata runs in C."""
    _kind = "constant"


class ExponentialDecay(LearningRateSchedule):
    """lr * decay_rate ** (step / decay_steps) (floored with staircase)."""
    _kind = "exponential"

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False, name=None):
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = int(decay_steps)
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)
        if self.decay_steps <= 0:
            raise ValueError("ExponentialDecay: decay_steps=%r must be positive" % (decay_steps,))

    def __call__(self, step):
        p = step / self.decay_steps
        if self.staircase:
            p = p // 1
        return self.initial_learning_rate * self.decay_rate ** p

    def _spec(self):
        return ("exponential", self.initial_learning_rate, self.decay_steps, self.decay_rate,
                self.staircase, 0.0)


class CosineDecay(LearningRateSchedule):
    """Keras CosineDecay(initial_learning_rate, decay_steps, alpha=0.0)."""
    _kind = "cosine"

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name=None, warmup_target=None,
                 warmup_steps=0):
        if warmup_target is not None or warmup_steps:
            raise NotImplementedError("CosineDecay: warmup_target/warmup_steps are not supported by Strata")
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = int(decay_steps)
        self.alpha = float(alpha)
        if self.decay_steps <= 0:
            raise ValueError("CosineDecay: decay_steps=%r must be positive" % (decay_steps,))

    def _spec(self):
        return ("cosine", self.initial_learning_rate, self.decay_steps, 0.0, False, self.alpha)


schedules = _Schedules()
schedules.LearningRateSchedule = LearningRateSchedule
schedules.ExponentialDecay = ExponentialDecay
schedules.CosineDecay = CosineDecay

_CLIP = ("clipnorm", "clipvalue", "global_clipnorm", "use_ema", "ema_momentum",
         "ema_overwrite_frequency", "jit_compile", "loss_scale_factor", "gradient_accumulation_steps")


class Optimizer:
    """Base of the optimizers: the options handed to the engine at compile."""
    _kind = "adam"

    def __init__(self, learning_rate, name=None, **kwargs):
        for k in _CLIP:
            if kwargs.get(k) not in (None, False):
                raise NotImplementedError("%s: argument %s=%r is not supported by Strata"
                                          % (type(self).__name__, k, kwargs[k]))
            kwargs.pop(k, None)
        reject_kwargs(type(self).__name__, kwargs, ("decay", "weight_decay"))
        if isinstance(learning_rate, LearningRateSchedule):
            self._schedule = learning_rate._spec()
        else:
            try:
                lr = float(learning_rate)
            except (TypeError, ValueError):
                if callable(learning_rate):
                    raise NotImplementedError(
                        "%s: a learning_rate function is not supported by Strata (use "
                        "ExponentialDecay, CosineDecay or the LearningRateScheduler callback)"
                        % type(self).__name__) from None
                raise ValueError("%s: learning_rate=%r is not a number" % (type(self).__name__, learning_rate)) from None
            if not lr > 0 or lr == float("inf"):
                raise ValueError("%s: learning_rate=%r must be positive and finite" % (type(self).__name__, lr))
            self._schedule = ("constant", lr, 0, 0.0, False, 0.0)
        self.name = name or self._kind
        self.momentum = 0.0
        self.nesterov = False
        self.beta_1, self.beta_2, self.epsilon, self.rho = 0.9, 0.999, 1e-7, 0.9
        self.weight_decay = float(kwargs.get("weight_decay") or 0.0)
        self._model = None
        from .. import distribute as _distribute
        # strategy.run may compile an uncompiled model with it (GradientTape loops, as TF's never compile)
        (_distribute._scoped_strategy() or _distribute.get_strategy())._register_optimizer(self)

    def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
        """Apply the gradients a GradientTape left in the engine (inside
        strategy.run): summed over the replicas, then this optimizer's update."""
        from .. import _tape
        _tape.apply_gradients(self, grads_and_vars)

    @property
    def learning_rate(self):
        """The current learning rate as a tf.Variable (float32): .numpy(),
        float(), arithmetic; assign() sets it, as `optimizer.learning_rate
        = x` does."""
        return _LearningRate(self, self._lr_value())

    def _lr_value(self):
        if self._model is not None and self._model._compiled:
            from .. import _strata
            return _strata.learning_rate(self._model._cap)
        return self._schedule[1]

    @learning_rate.setter
    def learning_rate(self, lr):
        lr = float(lr)
        if self._model is not None and self._model._compiled:
            from .. import _strata
            _strata.learning_rate(self._model._cap, float(lr))
        else:
            self._schedule = ("constant", float(lr), 0, 0.0, False, 0.0)

    lr = learning_rate

    def _args(self):
        return (self._kind, self._schedule, self.momentum, self.nesterov, self.beta_1, self.beta_2,
                self.epsilon, self.rho, self.weight_decay)


class SGD(Optimizer):
    """SGD(learning_rate=0.01, momentum=0.0, nesterov=False)."""
    _kind = "sgd"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name=None, **kwargs):
        super().__init__(learning_rate, name, **kwargs)
        self.momentum, self.nesterov = float(momentum), bool(nesterov)
        if not 0 <= self.momentum <= 1:
            raise ValueError("SGD: momentum=%r must be in [0, 1]" % (momentum,))


class Adam(Optimizer):
    """Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07)."""
    _kind = "adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False,
                 name=None, **kwargs):
        if amsgrad:
            raise NotImplementedError("%s: argument amsgrad=True is not supported by Strata" % type(self).__name__)
        super().__init__(learning_rate, name, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)


class AdamW(Adam):
    """AdamW(learning_rate=0.001, weight_decay=0.004, beta_1=0.9, ...)."""
    _kind = "adamw"

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, amsgrad=False, name=None, **kwargs):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, name, **kwargs)
        self.weight_decay = float(weight_decay)


class RMSprop(Optimizer):
    """RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-07)."""
    _kind = "rmsprop"

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
                 name=None, **kwargs):
        if centered:
            raise NotImplementedError("RMSprop: argument centered=True is not supported by Strata")
        super().__init__(learning_rate, name, **kwargs)
        self.rho, self.momentum, self.epsilon = float(rho), float(momentum), float(epsilon)


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop}


def get(identifier):
    """An optimizer from a name ('adam', 'sgd', ...) or an optimizer object."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError("Could not interpret optimizer identifier: %r (Strata has: %s)"
                             % (identifier, ", ".join(sorted(_BY_NAME))))
        return cls()
    raise NotImplementedError("optimizer %r is not supported by Strata (SGD, Adam, AdamW, RMSprop)"
                              % (identifier,))


def __getattr__(name):
    from .._util import missing
    raise missing("tf.keras.optimizers", name)
