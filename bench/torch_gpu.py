#!/usr/bin/env python3
"""PyTorch on one GPU: the peer that Strata's GPU strategies are measured
against (issue 33; run by scripts/gpu-check.sh on a GPU machine).

Trains the models of ../shared/peers/fmnist.py (the same layers, shapes and
initialisation family as `strata train --model mlp|cnn`) with Adam (lr 1e-3)
and reports training samples/s after WARMUP steps, eager and (--compile)
torch.compile. The data are Fashion-MNIST when --data names its IDX .gz
folder, else random images and labels of the same shape (throughput does not
depend on the values); either way they sit in GPU memory, which is PyTorch's
best case (no host-to-device copy per step).

Usage: python3 bench/torch_gpu.py --model cnn --batch 128 --steps 300 [--compile]
       [--data DIR] [--epochs E (with --data: full epochs and a test accuracy)]
Prints one line: RESULT {json}.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import torch
import torch.nn as nn


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    raise SystemExit(f"torch_gpu.py: unknown model {name!r} (mlp or cnn)")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--data", default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu.py: skip: PyTorch sees no CUDA device", file=sys.stderr)
        return 77
    dev = torch.device("cuda:0")
    torch.manual_seed(a.seed)
    if a.data:
        def imgs(n):
            return (read_idx(os.path.join(a.data, n)).float() / 255.0).reshape(-1, 1, 28, 28).to(dev)
        xtr, xte = imgs("train-images-idx3-ubyte.gz"), imgs("t10k-images-idx3-ubyte.gz")
        ytr = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).long().to(dev)
        yte = read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz")).long().to(dev)
    else:
        n = max(a.batch * 64, 8192)
        xtr = torch.rand(n, 1, 28, 28, device=dev)
        ytr = torch.randint(0, 10, (n,), device=dev)
        xte = yte = None
    model = make_model(a.model).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    fn = torch.compile(step) if a.compile else step
    n = xtr.shape[0]
    steps = a.steps if a.epochs == 0 else a.epochs * ((n + a.batch - 1) // a.batch)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    perm = torch.randperm(n, device=dev, generator=g)
    t_first = time.perf_counter()
    t0 = None
    timed = 0
    pos = 0
    loss = None
    for s in range(steps):
        if s == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if pos >= n:
            perm, pos = torch.randperm(n, device=dev, generator=g), 0
        idx = perm[pos:pos + a.batch]
        pos += a.batch
        loss = fn(xtr.index_select(0, idx), ytr.index_select(0, idx))
        if s >= a.warmup:
            timed += idx.numel()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    res = dict(script="torch_gpu", model=a.model, batch=a.batch, steps=steps,
               compile=a.compile, device=torch.cuda.get_device_name(0),
               torch=torch.__version__, data="fashion-mnist" if a.data else "random",
               samples_per_s=timed / (t1 - t0) if t0 else None,
               first_steps_s=(t0 or t1) - t_first, final_loss=float(loss))
    if xte is not None:
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum())
                          for i in range(0, xte.shape[0], 1000))
        res["test_acc"] = correct / xte.shape[0]
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
