"""tf.keras.mixed_precision: Strata computes in float32 only. The
'mixed_float16' and 'mixed_bfloat16' policies are accepted (set_global_policy,
Policy, a layer's dtype=) with a one-time warning saying so: the model then
trains exactly as under 'float32' (float32 compute and variables), without
the speed-up float16 gives on GPUs. LossScaleOptimizer returns the optimizer
it wraps (no loss scaling is needed in float32)."""
import warnings

_MIXED = ("mixed_float16", "mixed_bfloat16")
_KNOWN = ("float32",) + _MIXED
_state = {"policy": "float32", "warned": False}


def _warn_once(name):
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn("mixed precision policy %r: Strata computes in float32 only; the model trains as "
                      "under 'float32' (same results, no float16 speed-up)" % name, RuntimeWarning, stacklevel=3)


class Policy:
    """A dtype policy: 'float32', 'mixed_float16' or 'mixed_bfloat16'
    (the mixed ones compute in float32 in Strata)."""

    def __init__(self, name):
        name = getattr(name, "name", name)
        if name not in _KNOWN:
            raise ValueError("Policy: %r is not supported by Strata (supported: %s)" % (name, ", ".join(_KNOWN)))
        if name in _MIXED:
            _warn_once(name)
        self.name = name

    @property
    def compute_dtype(self):
        return "float32"

    @property
    def variable_dtype(self):
        return "float32"

    def __repr__(self):
        return '<Policy "%s">' % self.name


def set_global_policy(policy):
    _state["policy"] = Policy(policy if policy is not None else "float32").name


def global_policy():
    return Policy(_state["policy"])


def is_mixed(dtype):
    """Whether a layer's dtype= names a mixed policy (accepted: float32)."""
    name = getattr(dtype, "name", dtype)
    if isinstance(name, str) and name in _MIXED:
        _warn_once(name)
        return True
    return False


def LossScaleOptimizer(inner_optimizer, dynamic=True, initial_scale=None, dynamic_growth_steps=None):
    """The wrapped optimizer itself: float32 training needs no loss scaling."""
    return inner_optimizer


def __getattr__(name):
    from .._util import missing
    raise missing("tf.keras.mixed_precision", name)
