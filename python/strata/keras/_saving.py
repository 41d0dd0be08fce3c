"""model.save(path.keras) and tf.keras.models.load_model: Keras 3's .keras
archive layout (a zip) with Strata's weights inside:

  config.json      the model's Keras JSON (model.to_json(): what
                   model_from_json and `strata train --model` read) plus a
                   "compile_config" entry (optimizer, loss, metrics)
  metadata.json    {"keras_version": "strata-<version>", "date_saved": ...,
                    "weights_format": "safetensors"}
  model.weights.safetensors
                   the variables, named "<layer>/<param>" (save_weights'
                   file; Keras 3 writes model.weights.h5 here: Strata has
                   no HDF5, so Keras cannot read Strata's archive nor Strata
                   Keras's)
  optimizer/       Strata's checkpoint of the compiled model (variables,
                   optimizer slots, step: st_checkpoint_save), so training
                   resumes where it stopped
Written to a temporary file and renamed into place. .h5 / .hdf5 and
SavedModel directories are refused naming .keras."""
import json
import os
import tempfile
import time
import zipfile

from .. import _strata


def _check_path(path, where):
    p = os.fspath(path)
    low = p.lower()
    if low.endswith((".h5", ".hdf5")):
        raise NotImplementedError("%s: %s: the legacy HDF5 format is not supported by Strata; use a path "
                                  "ending in .keras (or save_weights for the weights alone)" % (where, p))
    if not low.endswith(".keras"):
        raise ValueError("%s: %s: the path must end in .keras (Keras 3's format; SavedModel directories "
                         "are not supported by Strata)" % (where, p))
    return p


def _compile_config(model):
    if getattr(model, "_compile_args", None) is None or getattr(model, "_placeholder_loss", False):
        return None  # never compiled by the user (a GradientTape loop's or a Checkpoint's compile)
    opt, loss, _codes = model._compile_args
    mets = []
    for m in getattr(model, "_compile_metrics", []) or []:
        mets.append(m if isinstance(m, str) else {"class_name": type(m).__name__, "name": m.name})
    return {"optimizer": {"class_name": type(opt).__name__, "config": {
        "name": opt.name, "schedule": list(opt._schedule), "momentum": opt.momentum, "nesterov": opt.nesterov,
        "beta_1": opt.beta_1, "beta_2": opt.beta_2, "epsilon": opt.epsilon, "rho": opt.rho,
        "weight_decay": opt.weight_decay}},
        "loss": {"class_name": type(loss).__name__, "from_logits": loss.from_logits, "name": loss.name},
        "metrics": mets}


def save_model(model, filepath, overwrite=True):
    path = _check_path(filepath, "save")
    if not overwrite and os.path.exists(path):
        raise FileExistsError("save: %s exists (overwrite=False)" % path)
    model._ensure_compiled("save")
    doc = json.loads(model.to_json())
    cc = _compile_config(model)
    if cc is not None:
        doc["compile_config"] = cc
    meta = {"keras_version": "strata-" + _strata.version, "date_saved": time.strftime("%Y-%m-%d@%H:%M:%S"),
            "weights_format": "safetensors"}
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".strata-save-", dir=d) as tmp:
        weights = os.path.join(tmp, "model.weights.safetensors")
        _strata.weights_file(model._cap, weights, True)
        ckpt = os.path.join(tmp, "optimizer")
        if cc is not None:
            _strata.checkpoint_dir(model._cap, ckpt, True)
        part = os.path.join(tmp, "archive.keras")
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("metadata.json", json.dumps(meta))
            z.writestr("config.json", json.dumps(doc))
            z.write(weights, "model.weights.safetensors")
            for root, _dirs, files in os.walk(ckpt):
                for f in sorted(files):
                    full = os.path.join(root, f)
                    z.write(full, os.path.relpath(full, tmp))
        with open(part, "rb") as f:
            os.fsync(f.fileno())
        os.replace(part, path)


def _rebuild_compile(model, cc):
    from . import losses, metrics, optimizers
    oc = cc["optimizer"]
    cls = getattr(optimizers, oc["class_name"])
    opt = cls()
    c = oc["config"]
    opt.name, opt._schedule = c["name"], tuple(c["schedule"])
    for k in ("momentum", "nesterov", "beta_1", "beta_2", "epsilon", "rho", "weight_decay"):
        setattr(opt, k, c[k])
    lc = cc["loss"]
    lcls = getattr(losses, lc["class_name"])
    loss = lcls(from_logits=lc["from_logits"], name=lc["name"]) if lc["class_name"] != "MeanSquaredError" \
        else lcls(name=lc["name"])
    mets = [m if isinstance(m, str) else getattr(metrics, m["class_name"])(name=m["name"]) for m in cc["metrics"]]
    model.compile(optimizer=opt, loss=loss, metrics=mets)


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """A model from a .keras archive model.save wrote: built from its
    config under the strategy in scope, compiled as it was (compile=True),
    with its weights and optimizer state."""
    path = _check_path(filepath, "load_model")
    if custom_objects:
        raise NotImplementedError("load_model: custom_objects are not supported by Strata")
    from .models import model_from_json
    with tempfile.TemporaryDirectory(prefix=".strata-load-") as tmp:
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
                if "config.json" not in names or "model.weights.safetensors" not in names:
                    raise ValueError("load_model: %s is not a .keras archive Strata wrote (it has %s; Keras's own "
                                     "archives hold model.weights.h5, which Strata cannot read)"
                                     % (path, ", ".join(sorted(names)[:6])))
                for n in names:
                    if n.startswith("/") or ".." in n.split("/"):
                        raise ValueError("load_model: %s: unsafe member name %r" % (path, n))
                z.extractall(tmp)
        except zipfile.BadZipFile as e:
            raise ValueError("load_model: %s is not a .keras archive (a zip): %s" % (path, e)) from None
        with open(os.path.join(tmp, "config.json"), encoding="utf-8") as f:
            doc = json.load(f)
        cc = doc.pop("compile_config", None)
        model = model_from_json(json.dumps(doc))
        ckpt = os.path.join(tmp, "optimizer")
        if compile and cc is not None:
            _rebuild_compile(model, cc)
            model._ensure_compiled("load_model")
            if os.path.isdir(ckpt):
                _strata.checkpoint_dir(model._cap, ckpt, False)
                return model
        model.load_weights(os.path.join(tmp, "model.weights.safetensors"))
        return model
