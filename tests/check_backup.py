#!/usr/bin/python3
"""check_backup.py DIR STEP: the checkpoint DIR/latest names is at global step
STEP and its weights are all finite (exit 0), else a message and exit 1.
Used by the NaN-loss tests: the backup must keep the last finite state."""
import json
import math
import struct
import sys

d, want = sys.argv[1], int(sys.argv[2])
name = open(d + "/latest").read().split()[0]
step = json.load(open(f"{d}/{name}/state.json"))["step"]
b = open(f"{d}/{name}/weights.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
vals = struct.unpack("<%df" % ((len(b) - 8 - n) // 4), b[8 + n:])
bad = sum(not math.isfinite(v) for v in vals)
if step != want or bad:
    sys.exit(f"{d}/{name}: step {step} (want {want}), {bad} non-finite weights")
