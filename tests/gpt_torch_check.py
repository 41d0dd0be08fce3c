#!/usr/bin/env python3
"""The PyTorch twin of a GPT run of tests/gpt_probe.c (tests/test_gpt_torch.sh): the model of
../shared/peers/gpt2_torch.py (llm.c's GPT-2: pre-LN blocks, causal attention, GELU tanh MLP, tied
head) loaded from the probe's init.bin, on the probe's batch, in float64. Checks against the probe:
the logits (logits.f32), the loss, every parameter gradient (grads.bin), the K AdamW steps' losses and the final weights
(final.bin). Exits 77 without PyTorch, 1 on a mismatch (naming the tensor and the error).
Usage: gpt_torch_check.py DIR K LR WD CLIP"""
import os, sys
try:
    import numpy as np, torch, torch.nn.functional as F
except ImportError as e:
    print(f"skip: {e} (apt-get install python3-torch)"); sys.exit(77)
d, K, lr, wd, clip = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
NAMES = "wte wpe ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb lnfw lnfb".split()
TOL = 1e-4   # the loss, every gradient, each step's loss (the acceptance)
WTOL = 1e-3  # weights after K steps: Adam's m / sqrt(v) turns float32 rounding of tiny
             # gradients into whole lr-sized steps, so the float32 run drifts from the float64 twin

from gpt_torch_model import load_llmc, logits  # noqa: E402 (after the skip)


def load(name):
    return load_llmc(os.path.join(d, name))

(maxT, V, L, NH, C, Vp), init = load("init.bin")
P = [torch.nn.Parameter(t.clone()) for t in init]
toks = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.i32"), np.int32).astype(np.int64))
T = maxT
B = (toks.numel() - 1) // T
x, y = toks[:B * T].view(B, T), toks[1:B * T + 1].view(B, T)
cfg = (maxT, V, L, NH, C, Vp)

def logits_of(idx):  # gpt2_torch.py's forward, to the logits
    return logits(P, cfg, idx)

def forward(idx, tgt):
    return F.cross_entropy(logits_of(idx).reshape(-1, V), tgt.reshape(-1))

probe = {}
for line in open(os.path.join(d, "probe.txt")):
    parts = line.split()
    probe[parts[0] if parts[0] == "loss0" else f"step{parts[1]}"] = float(parts[-1])
bad = 0
def check(what, ours, ref, tol=TOL):
    global bad
    err = float((ours - ref).abs().max()) / max(float(ref.abs().max()), 1e-12)
    if err > tol:
        print(f"MISMATCH {what}: max |ours - torch| / max |torch| = {err:.3g} (> {tol})"); bad += 1
    return err

ours = torch.from_numpy(np.fromfile(os.path.join(d, "logits.f32"), np.float32).astype(np.float64))
with torch.no_grad():
    ref = logits_of(x)
e = check("logits", ours.view(B, T, V), ref)
print(f"logits [{B}, {T}, {V}]: max |ours - torch| / max |torch| {e:.2g}")
loss = forward(x, y)
loss.backward()
e = abs(probe["loss0"] - loss.item()) / abs(loss.item())
print(f"loss0: ours {probe['loss0']:.7f} torch {loss.item():.7f} rel {e:.2g}")
bad += e > TOL
_, grads = load("grads.bin")
worst = max(check(f"gradient {n}", g[:V] if n == "wte" else g, p.grad[:V] if n == "wte" else p.grad)
            for n, g, p in zip(NAMES, grads, P))
print(f"gradients: worst relative error {worst:.2g} over {len(P)} tensors")
opt = torch.optim.AdamW(P, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
for p, t in zip(P, init): p.data.copy_(t)
for k in range(K):
    opt.zero_grad(); loss = forward(x, y); loss.backward()
    if clip > 0: torch.nn.utils.clip_grad_norm_(P, clip)
    opt.step()
    e = abs(probe[f"step{k}"] - loss.item()) / abs(loss.item())
    print(f"step {k}: ours {probe[f'step{k}']:.7f} torch {loss.item():.7f} rel {e:.2g}")
    bad += e > TOL
_, final = load("final.bin")
worst = max(check(f"weights {n} after {K} steps", f[:V] if n == "wte" else f, p.data[:V] if n == "wte" else p.data, WTOL)
            for n, f, p in zip(NAMES, final, P))
print(f"weights after {K} AdamW steps: worst relative error {worst:.2g}")
print("FAIL" if bad else "OK"); sys.exit(1 if bad else 0)
