"""The PyTorch twin of Strata's GPT for the tests (tests/gpt_torch_check.py,
tests/gpt_torch_steps.py): an llm.c checkpoint read into float64 tensors and
../shared/peers/gpt2_torch.py's forward (pre-LN blocks, causal attention, GELU
tanh MLP, tied head) to the logits. Test fixture only; needs numpy and torch."""
import numpy as np
import torch
import torch.nn.functional as F


def load_llmc(path):
    """(maxT, V, L, NH, C, Vp), [16 float64 tensors in llm.c's order]."""
    raw = np.fromfile(path, np.int32, 256)
    magic, ver, maxT, V, L, NH, C, Vp = (int(x) for x in raw[:8])
    assert magic == 20240326 and ver == 3, (path, magic, ver)
    flat = np.fromfile(path, np.float32, offset=1024).astype(np.float64)
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
              (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    out, o = [], 0
    for s in shapes:
        n = int(np.prod(s)); out.append(torch.from_numpy(flat[o:o + n].reshape(s).copy())); o += n
    assert o == flat.size, (path, o, flat.size)
    return (maxT, V, L, NH, C, Vp), out


def logits(P, cfg, idx):
    """gpt2_torch.py's forward of idx [B, T] (T the checkpoint's maxT) to the logits."""
    maxT, V, L, NH, C, _ = cfg
    wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = P
    B, T = idx.shape
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
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
