#!/usr/bin/env python3
"""Compare two safetensors files of float32 tensors written by Strata.

usage: cmp_weights.py A B TOL [--abs]   exit 0 when every tensor of A exists
in B with the same shape and, for every tensor, ||a - b|| / ||b|| <= TOL
(Euclidean norms), or with --abs every |a_i - b_i| <= TOL; prints the largest
relative difference, the largest element-wise relative one and the largest
absolute one. Standard library only."""
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        raw = data[base + lo:base + hi]
        out[name] = (tuple(t["shape"]), struct.unpack("<%df" % (len(raw) // 4), raw))
    return out


def main():
    a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
    absolute = "--abs" in sys.argv[4:]
    worst, where, elem, most = 0.0, "", 0.0, 0.0
    for name, (shape, va) in a.items():
        if name not in b or b[name][0] != shape:
            print("tensor %s missing or reshaped in %s" % (name, sys.argv[2]))
            return 1
        vb = b[name][1]
        diff = sum((x - y) ** 2 for x, y in zip(va, vb)) ** 0.5
        norm = sum(y * y for y in vb) ** 0.5
        rel = diff / norm if norm else diff
        if rel > worst:
            worst, where = rel, name
        elem = max([elem] + [abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in zip(va, vb)])
        most = max([most] + [abs(x - y) for x, y in zip(va, vb)])
    print("max relative difference %.3g (tensor %s); element-wise %.3g; absolute %.3g"
          % (worst, where or "none", elem, most))
    return 0 if (most if absolute else worst) <= tol else 1


sys.exit(main())
