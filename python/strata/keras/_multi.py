"""Functional models of several outputs (tf.keras.Model(inputs, [out1,
out2])): the engine trains each output with its own loss and weight
(st_compile_options.losses / loss_weights) and reports each output's loss
and accuracy. Here: Keras's compile arguments (loss as one loss, a list or a
dict by output layer name; loss_weights as a list or dict; the metrics apply
to every output), the labels (a list, tuple or dict of arrays, one per
output) as the engine's label rows (each output's label: one class index for
a sparse loss, the output's values otherwise, concatenated), the logs and
evaluate results with Keras's names (loss, <output>_loss ...,
<output>_<metric> ...; val_ for validation), and predict's list of arrays.
Datasets of several outputs' labels are refused (give arrays)."""
import numpy as np

from .._util import labels as _labels
from . import losses as _losses


def is_multi(model):
    return len(getattr(model, "_out_shapes", None) or ()) > 1


def names(model):
    return list(model._output_names)


def _per_output(model, value, what, default):
    """value (one, a list / tuple, or a dict by output name) per output."""
    ns = names(model)
    if isinstance(value, dict):
        unknown = [k for k in value if k not in ns]
        if unknown:
            raise ValueError("compile: %s names %s; the model's outputs are %s" % (what, unknown, ns))
        return [value.get(n, default) for n in ns]
    if isinstance(value, (list, tuple)):
        if len(value) != len(ns):
            raise ValueError("compile: %d %s given; the model has %d outputs (%s)"
                             % (len(value), what, len(ns), ", ".join(ns)))
        return list(value)
    return [value] * len(ns)


def compile_losses(model, loss, loss_weights):
    """(loss objects per output, engine names, weights or None)."""
    objs = []
    for j, l in enumerate(_per_output(model, loss, "losses", None)):
        if l is None:
            raise ValueError("compile: no loss for output %s" % names(model)[j])
        o = _losses.get(l)
        if getattr(o, "reduction", "auto") not in ("auto", "sum_over_batch_size"):
            raise NotImplementedError("compile: a loss with reduction=%r is not supported by Strata's engine"
                                      % (o.reduction,))
        objs.append(o)
    weights = None
    if loss_weights is not None:
        weights = [float(w) for w in _per_output(model, loss_weights, "loss_weights", 1.0)]
    return objs, [o._engine_name for o in objs], weights


def label_rows(model, y, where):
    """The engine's label rows [n, sum of the outputs' label widths]."""
    from .. import data as _data
    if isinstance(y, _data.Dataset) or y is None:
        raise NotImplementedError("%s: a model of several outputs takes its labels as arrays (a list or a dict "
                                  "by output name) in Strata; datasets of several labels are not supported"
                                  % where)
    ns = names(model)
    if isinstance(y, dict):
        missing = [n for n in ns if n not in y]
        if missing:
            raise ValueError("%s: the labels dict has keys %s; the model's outputs are %s" % (where, sorted(y), ns))
        y = [y[n] for n in ns]
    if not isinstance(y, (list, tuple)) or len(y) != len(ns):
        raise ValueError("%s: a model of %d outputs (%s) takes a list of %d label arrays"
                         % (where, len(ns), ", ".join(ns), len(ns)))
    cols = []
    for j, (yj, sparse, shape) in enumerate(zip(y, model._sparse_per_output, model._out_shapes)):
        a = _labels(yj, sparse, "%s: y[%d] (%s)" % (where, j, ns[j]))
        width = 1 if sparse else int(np.prod(shape[1:]))
        if a.size != len(a) * width:
            raise ValueError("%s: y[%d] (%s) has %d values per example; the output's loss takes %d"
                             % (where, j, ns[j], a.size // max(len(a), 1), width))
        cols.append(a.astype(np.float32).reshape(len(a), width))
    n = {len(c) for c in cols}
    if len(n) != 1:
        raise ValueError("%s: the label arrays have %s examples; they must match" % (where, sorted(n)))
    return np.ascontiguousarray(np.concatenate(cols, axis=1))


def epoch_logs(model, t, key):
    """fit's logs of an epoch with Keras's names."""
    _, loss, _acc, has_val, vloss = t[:5]
    outs = t[10]
    logs = {"loss": loss}
    _add(logs, model, "", outs[0], outs[1], key)
    if has_val:
        logs["val_loss"] = vloss
        _add(logs, model, "val_", outs[2], outs[3], key)
    return logs


def _add(logs, model, prefix, losses, accs, key):
    for n, l in zip(names(model), losses):
        logs["%s%s_loss" % (prefix, n)] = l
    if key:
        for n, a in zip(names(model), accs):
            logs["%s%s_%s" % (prefix, n, key)] = a


def eval_logs(model, loss, out_losses, out_accs, key):
    logs = {"loss": loss}
    _add(logs, model, "", out_losses, out_accs, key)
    return logs


def metrics_names(model, key):
    return list(eval_logs(model, 0.0, [0.0] * len(names(model)), [0.0] * len(names(model)), key))


def split(model, flat):
    """predict's rows [n, sum of sizes] as one array per output."""
    out, o = [], 0
    for shape in model._out_shapes:
        size = int(np.prod(shape[1:]))
        out.append(flat[:, o:o + size].reshape((len(flat),) + tuple(shape[1:])))
        o += size
    return out
