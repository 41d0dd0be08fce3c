#!/usr/bin/env python3
"""Step by step against PyTorch (tests/test_gpt_torch.sh): `strata train --model gpt
--no-shuffle --log-every 1 --csv` from an llm.c checkpoint on one llm.c token shard
takes batch k = tokens [k B T + b T, ... + T] (targets the next tokens) as
../shared/peers/gpt2_torch.py and llm.c's loader do; this twin runs gpt2_torch.py's
model and loop (torch.optim.AdamW, eps 1e-8) in float64 on the same batches from the
same weights and checks each step's own loss in the CSV (rows "step,loss") within
1e-4 relative, and that there is one row per step.
Usage: gpt_torch_steps.py CKPT SHARD CSV B LR WD"""
import os, sys
try:
    import numpy as np, torch, torch.nn.functional as F
except ImportError as e:
    print(f"skip: {e} (apt-get install python3-torch)"); sys.exit(77)
ckpt, shard, csv, B, lr, wd = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
from gpt_torch_model import load_llmc, logits  # noqa: E402 (after the skip)
cfg, init = load_llmc(ckpt)
maxT, V, L, NH, C, Vp = cfg
P = [torch.nn.Parameter(t) for t in init]
T = maxT

def forward(idx, tgt):  # gpt2_torch.py's forward and loss
    return F.cross_entropy(logits(P, cfg, idx).reshape(-1, V), tgt.reshape(-1))

hdr = np.fromfile(shard, np.int32, 256)
assert hdr[0] == 20240520 and hdr[1] == 1, (shard, hdr[:3])
toks = torch.from_numpy(np.fromfile(shard, np.uint16, offset=1024).astype(np.int64))
lines = open(csv).read().split("\n")
assert lines[0] == "step,loss", lines[0]
ours = [(int(a), float(b)) for a, b in (r.split(",") for r in lines[1:] if r)]
if [k for k, _ in ours] != list(range(1, len(ours) + 1)) or not ours:
    print(f"FAIL: the CSV's steps are {[k for k, _ in ours]}, expected 1..{len(ours)}"); sys.exit(1)
opt = torch.optim.AdamW(P, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
n, bad, worst = B * T, 0, 0.0
for k, mine in ours:
    buf = toks[(k - 1) * n:(k - 1) * n + n + 1]
    x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
    loss = forward(x, y); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    e = abs(mine - loss.item()) / abs(loss.item())
    worst = max(worst, e)
    print(f"step {k}: strata {mine:.7f} torch {loss.item():.7f} rel {e:.2g}")
    bad += e > 1e-4
print(f"{len(ours)} steps, worst relative error {worst:.2g}: {'FAIL' if bad else 'OK'}")
sys.exit(1 if bad else 0)
