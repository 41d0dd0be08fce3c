"""tf.function: Strata runs the decorated Python function eagerly (no graph
is traced: the work inside runs in the C engine or in NumPy either way).
TensorFlow's arguments are accepted: input_signature is checked (the
number of arguments, each one's dtype and shape against its TensorSpec,
as TF refuses a call that does not match); jit_compile, reduce_retracing,
autograph and the experimental_* options change nothing here. It works as
a decorator with or without arguments and on methods."""
import functools

import numpy as np

_ACCEPTED = ("input_signature", "autograph", "jit_compile", "reduce_retracing", "experimental_relax_shapes",
             "experimental_compile", "experimental_implements", "experimental_autograph_options",
             "experimental_follow_type_hints", "experimental_attributes", "name")


class Function:
    """What tf.function returns: calling it calls the Python function."""

    def __init__(self, fn, input_signature=None, name=None, **options):
        self._fn = fn
        self.python_function = fn
        self.input_signature = None if input_signature is None else tuple(input_signature)
        self._options = options
        self.__name__ = name or getattr(fn, "__name__", "function")
        functools.update_wrapper(self, fn, updated=())

    def _check(self, args, kwargs):
        sig = self.input_signature
        if sig is None:
            return
        if kwargs or len(args) != len(sig):
            raise TypeError("%s: called with %d positional arguments%s; its input_signature has %d TensorSpecs"
                            % (self.__name__, len(args), " and keywords %s" % sorted(kwargs) if kwargs else "",
                               len(sig)))
        from ._tensor import Variable, convert
        for i, (a, spec) in enumerate(zip(args, sig)):
            if not hasattr(spec, "is_compatible_with"):
                continue
            arr = np.asarray(a) if isinstance(a, (np.ndarray, np.generic, Variable)) else np.asarray(convert(a))
            if spec.dtype != object and arr.dtype != spec.dtype:
                raise TypeError("%s: argument %d has dtype %s, the input_signature says %s"
                                % (self.__name__, i, arr.dtype.name, spec.dtype.name))
            if spec._rank_known and not spec.shape.is_compatible_with(arr.shape):
                raise ValueError("%s: argument %d of shape %s does not match the input_signature's %r"
                                 % (self.__name__, i, tuple(arr.shape), spec))

    def __call__(self, *args, **kwargs):
        self._check(args, kwargs)
        return self._fn(*args, **kwargs)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        bound = Function(self._fn.__get__(obj, objtype), None, self.__name__, **self._options)
        bound.input_signature = self.input_signature
        return bound

    def get_concrete_function(self, *args, **kwargs):
        """The function itself (Strata traces no graph)."""
        return self

    def experimental_get_tracing_count(self):
        return 0

    def __repr__(self):
        return "<strata.function %s (runs eagerly)>" % self.__name__


def function(func=None, input_signature=None, **kwargs):
    """tf.function(func) or @tf.function(input_signature=..., jit_compile=...)."""
    for k in kwargs:
        if k not in _ACCEPTED:
            raise TypeError("tf.function got an unexpected keyword argument %r" % k)
    if func is None:
        return lambda f: Function(f, input_signature, **kwargs)
    return Function(func, input_signature, **kwargs)
