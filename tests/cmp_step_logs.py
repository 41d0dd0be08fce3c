#!/usr/bin/env python3
"""A resumed run's --log-every steps against an uninterrupted run's (the
reports' "steps": [[step, loss], ...]): every step the resumed run logged
has the uninterrupted run's loss (relative 1e-6: both print %.9g), and the
resume fell inside a stretch (its first step is not the first of one), so
the first step after it is the case a mean recovered from running means got
wrong. Usage: cmp_step_logs.py WHOLE.json RESUMED.json EVAL_EVERY"""
import json
import sys

whole = {int(k): v for k, v in json.load(open(sys.argv[1]))["steps"]}
res = json.load(open(sys.argv[2]))["steps"]
every = int(sys.argv[3])
if not res:
    sys.exit("the resumed run logged no step")
first = int(res[0][0])
if first == 1 or (first - 1) % every == 0:
    sys.exit(f"the resume fell on a stretch boundary (step {first}): nothing to check")
for k, v in res:
    w = whole.get(int(k))
    if w is None or abs(v - w) > 1e-6 * max(1.0, abs(w)):
        sys.exit(f"step {k}: resumed run's loss {v}, uninterrupted {w} (resumed at step {first})")
print(f"resumed at step {first}: {len(res)} steps equal to the uninterrupted run's")
