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

def load(name):
    raw = np.fromfile(os.path.join(d, name), np.int32, 256)
    magic, ver, maxT, V, L, NH, C, Vp = (int(x) for x in raw[:8])
    assert magic == 20240326 and ver == 3, (name, magic, ver)
    flat = np.fromfile(os.path.join(d, name), np.float32, offset=1024).astype(np.float64)
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    out, o = [], 0
    for s in shapes:
        n = int(np.prod(s)); out.append(torch.from_numpy(flat[o:o + n].reshape(s).copy())); o += n
    assert o == flat.size, (name, o, flat.size)
    return (maxT, V, L, NH, C, Vp), out

(maxT, V, L, NH, C, Vp), init = load("init.bin")
P = [torch.nn.Parameter(t.clone()) for t in init]
wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = P
toks = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.i32"), np.int32).astype(np.int64))
T = maxT
B = (toks.numel() - 1) // T
x, y = toks[:B * T].view(B, T), toks[1:B * T + 1].view(B, T)
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

def logits_of(idx):  # gpt2_torch.py's forward, to the logits
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
    return F.linear(F.layer_norm(x, (C,), lnfw, lnfb, 1e-5), wte[:V])

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
