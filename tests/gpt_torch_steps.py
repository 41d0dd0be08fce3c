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
raw = np.fromfile(ckpt, np.int32, 256)
magic, ver, maxT, V, L, NH, C, Vp = (int(x) for x in raw[:8])
flat = np.fromfile(ckpt, np.float32, offset=1024).astype(np.float64)
shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
          (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
P, o = [], 0
for s in shapes:
    n = int(np.prod(s)); P.append(torch.nn.Parameter(torch.from_numpy(flat[o:o + n].reshape(s).copy()))); o += n
wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = P
T = maxT
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

def forward(idx, tgt):  # gpt2_torch.py's forward
    x = wte[idx] + wpe[:T]
    for l in range(L):
        h = F.layer_norm(x, (C,), ln1w[l], ln1b[l], 1e-5)
        q, k, v = F.linear(h, qkvw[l], qkvb[l]).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / np.sqrt(C // NH)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        yy = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(yy, apw[l], apb[l])
        h = F.layer_norm(x, (C,), ln2w[l], ln2b[l], 1e-5)
        x = x + F.linear(F.gelu(F.linear(h, fcw[l], fcb[l]), approximate="tanh"), fpw[l], fpb[l])
    logits = F.linear(F.layer_norm(x, (C,), lnfw, lnfb, 1e-5), wte[:V])
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))

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
