#!/usr/bin/env python3
"""Strata's layers against PyTorch (issue 28): forward and every gradient of one
layer on the same inputs and weights.

  test_torch_layers.py [--probe PATH] [-k SUBSTRING]

Loads every tests/torch_cases_*.py; each defines CASES, a list of

  dict(name=..., layer={"class_name": ..., "config": {...}},  # a Keras layer config
       inputs=[[per-example shape of input 0], ...], batch=B,
       torch=fn,             # fn(xs, ws) -> y, computed with torch in float64
       int_inputs={j: vocab},  # optional: input j holds integer ids in [0, vocab)
                               # stored as floats; its dx is not compared
       rtol=1e-5,            # optional tolerance (see below)
       input_range=(lo, hi)) # optional: range of the random float inputs, (-2, 2)

xs is the list of inputs as float64 tensors [B, *shape]; ws the layer's
parameters in Strata's order and layout (trainable and state alike, as
`layer_probe --describe` lists them). For every case the harness makes seeded
random float32 inputs (uniform in input_range), parameters (uniform in [-1, 1];
those whose name holds "variance" in [0.5, 1.5]) and dy (uniform in [-1, 1]);
runs tests/layer_probe.c (the layer made by Strata's Keras importer, forward in
training mode and backward with dy) on the reference and the cpu backend; and
computes y and the autograd gradients (dx of each float input, dw of each
trainable parameter) with torch in float64 from the same float32 values.

Measure: for each tensor, max |strata - torch| / max(max |torch|, 1e-6) (the
largest error relative to the tensor's largest magnitude) must be <= rtol
(1e-5 unless the case says otherwise); a failure names the case, backend,
tensor and its worst element. Exit 0 when every case passes, 1 otherwise, 77
(with the reason) when torch or numpy cannot be imported.
"""
import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("reference", "cpu")

try:
    import numpy as np
    import torch
except Exception as e:  # ImportError, or a broken installation
    print("skip: PyTorch or numpy is not importable (%s: %s); install python3-torch"
          % (type(e).__name__, e))
    sys.exit(77)


def load_cases(pattern):
    cases = []
    for path in sorted(glob.glob(os.path.join(HERE, "torch_cases_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for c in mod.CASES:
            if not pattern or pattern in c["name"]:
                cases.append((name, c))
    return cases


def probe_run(probe, args):
    r = subprocess.run([probe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode != 0:
        raise RuntimeError("layer_probe %s failed (exit %d): %s"
                           % (" ".join(args), r.returncode, r.stderr.strip()))
    return r.stdout


def make_data(case, desc, rng):
    """Random float32 inputs, parameters and dy."""
    b = case["batch"]
    ints = case.get("int_inputs", {})
    lo, hi = case.get("input_range", (-2.0, 2.0))
    xs = []
    for j, shape in enumerate(case["inputs"]):
        full = [b] + list(shape)
        if j in ints:
            xs.append(rng.integers(0, ints[j], size=full).astype(np.float32))
        else:
            xs.append(rng.uniform(lo, hi, size=full).astype(np.float32))
    ws = []
    for p in desc["params"]:
        lo_w, hi_w = (0.5, 1.5) if "variance" in p["name"] else (-1.0, 1.0)
        ws.append(rng.uniform(lo_w, hi_w, size=p["shape"]).astype(np.float32))
    dy = rng.uniform(-1.0, 1.0, size=[b] + desc["output"]).astype(np.float32)
    return xs, ws, dy


def torch_reference(case, desc, xs, ws, dy):
    """[(tensor name, torch value float64 ndarray)] in layer_probe's order."""
    ints = case.get("int_inputs", {})
    tx = [torch.tensor(x, dtype=torch.float64, requires_grad=j not in ints)
          for j, x in enumerate(xs)]
    tw = [torch.tensor(w, dtype=torch.float64, requires_grad=p["trainable"])
          for w, p in zip(ws, desc["params"])]
    y = case["torch"](tx, tw)
    want = tuple([case["batch"]] + desc["output"])
    if tuple(y.shape) != want:
        raise RuntimeError("torch gives y of shape %s, Strata %s" % (tuple(y.shape), want))
    if y.requires_grad:
        y.backward(torch.tensor(dy, dtype=torch.float64))

    def grad(t):
        return t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
    out = [("y", y.detach().numpy())]
    out += [("dx%d" % j, grad(t)) for j, t in enumerate(tx)]
    out += [("d" + p["name"], grad(t)) for t, p in zip(tw, desc["params"]) if p["trainable"]]
    return out


def split_out(path, ref):
    """OUT.bin cut into the tensors of ref (same shapes and order)."""
    flat = np.fromfile(path, dtype="<f4")
    need = sum(v.size for _, v in ref)
    if flat.size != need:
        raise RuntimeError("layer_probe wrote %d floats, expected %d" % (flat.size, need))
    out, at = [], 0
    for _, v in ref:
        out.append(flat[at:at + v.size].reshape(v.shape).astype(np.float64))
        at += v.size
    return out


def compare(label, ints, ref, got, rtol):
    """Failure messages (empty when every tensor is within rtol); worst error."""
    fails, worst = [], 0.0
    for (name, want), have in zip(ref, got):
        if name.startswith("dx") and int(name[2:]) in ints:
            continue
        if want.size == 0:
            continue
        diff = np.abs(have - want)
        if not np.all(np.isfinite(have)):
            diff = np.where(np.isfinite(have), diff, np.inf)
        scale = max(float(np.max(np.abs(want))), 1e-6)
        err = float(np.max(diff)) / scale
        worst = max(worst, err)
        if not err <= rtol:
            i = np.unravel_index(int(np.argmax(diff)), diff.shape)
            fails.append("%s: %s: error %.3g > %.3g (worst element %s: strata %.9g, torch "
                         "%.9g; max |torch| %.4g)" % (label, name, err, rtol, list(map(int, i)),
                                                       have[i], want[i], scale))
    return fails, worst


def run_case(probe, tmp, module, case):
    name = case["name"]
    rtol = case.get("rtol", 1e-5)
    case_path = os.path.join(tmp, "case.json")
    with open(case_path, "w") as f:
        json.dump({"layer": case["layer"], "inputs": case["inputs"], "batch": case["batch"]}, f)
    desc = json.loads(probe_run(probe, ["--describe", case_path]))
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    xs, ws, dy = make_data(case, desc, rng)
    data = os.path.join(tmp, "data.bin")
    with open(data, "wb") as f:
        for a in xs + ws + [dy]:
            f.write(a.astype("<f4").tobytes())
    ref = torch_reference(case, desc, xs, ws, dy)
    fails, worst = [], 0.0
    for be in BACKENDS:
        out = os.path.join(tmp, "out.bin")
        probe_run(probe, ["--backend", be, case_path, data, out])
        f, w = compare("%s (%s, %s)" % (name, module, be), case.get("int_inputs", {}), ref,
                       split_out(out, ref), rtol)
        fails += f
        worst = max(worst, w)
    return fails, worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--probe", default=os.environ.get("STRATA_LAYER_PROBE",
                                                      os.path.join(HERE, "..", "build", "layer_probe")))
    ap.add_argument("-k", dest="pattern", default="", help="only cases whose name holds this")
    args = ap.parse_args()
    if not os.access(args.probe, os.X_OK):
        print("layer_probe not found at %s (build it, or pass --probe)" % args.probe)
        return 1
    torch.set_num_threads(1)
    cases = load_cases(args.pattern)
    if not cases:
        print("no cases%s" % (" matching %r" % args.pattern if args.pattern else ""))
        return 1
    failed = 0
    with tempfile.TemporaryDirectory(prefix="strata_torch_") as tmp:
        for module, case in cases:
            try:
                fails, worst = run_case(args.probe, tmp, module, case)
            except Exception as e:  # a probe or torch error fails this case only
                fails, worst = ["%s (%s): %s: %s" % (case["name"], module, type(e).__name__, e)], 0.0
            if fails:
                failed += 1
                print("FAIL - %s" % case["name"])
                for line in fails:
                    print("  " + line)
            else:
                print("ok - %s (%s, worst relative error %.2g)" % (case["name"], module, worst))
    print("%d of %d cases passed (torch %s)" % (len(cases) - failed, len(cases), torch.__version__))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
