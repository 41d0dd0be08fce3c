#!/usr/bin/python3
"""The PyTorch 1.13 side of bench/graph_bench.py: the same two graph models
as bench/graph_bench.c, trained on the same kind of synthetic data.

  resnet20     layer for layer src/train/builtin_graphs.c: conv3x3 (16, no
               bias) + BN + ReLU; 3 stages x 3 basic blocks (16/32/64
               filters; conv3x3-BN-ReLU-conv3x3-BN, + shortcut, ReLU; the
               first block of stages 2 and 3 has stride 2 and a 1x1 strided
               conv (no bias) + BN projection shortcut); global average
               pooling; Linear(64, 10). Data channels-last [N, 28, 28, 1]
               (permuted to the layout asked by --memory-format).
  transformer  4 post-LN nn.TransformerEncoderLayer(d_model, nhead,
               dim_feedforward=ff, dropout=0, activation="gelu",
               batch_first=True, norm_first=False): x = LN(x + MHA(x));
               x = LN(x + W2 gelu(W1 x)); mean over the sequence; Linear 10.

Cross-entropy on logits; SGD lr 0.01 (no momentum) or Adam 1e-3. `distinct`
batches of uniform inputs (labels i % 10) are cycled for `steps` steps;
samples/s counts the steps after the first `warmup`. Prints one line
  RESULT {"samples_per_sec": ..., "peak_rss_mib": ...}
(peak RSS: ru_maxrss of this process: interpreter, libtorch and data included).
Usage: /usr/bin/python3 bench/graph_torch.py --model resnet20|transformer
  [--batch 64] [--steps 60] [--warmup 10] [--threads 1] [--opt sgd|adam]
  [--memory-format nchw|channels_last] [--layers 4 --seq 128 --dmodel 256
  --heads 4 --ff 1024 --distinct 4]
"""
import argparse
import json
import os
import resource
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=["resnet20", "transformer"], default="resnet20")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--warmup", type=int, default=10)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--opt", choices=["sgd", "adam"], default="sgd")
ap.add_argument("--memory-format", choices=["nchw", "channels_last"], default="nchw")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--dmodel", type=int, default=256)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--ff", type=int, default=1024)
ap.add_argument("--distinct", type=int, default=4)
args = ap.parse_args()
# Before torch loads: OpenMP and OpenBLAS read these once.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, str(args.threads))
import torch  # noqa: E402
from torch import nn  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(1)


def conv_bn(cin, cout, k, stride):
    return [nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False), nn.BatchNorm2d(cout)]


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(),
                                  *conv_bn(cout, cout, 3, 1))
        self.short = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.short(x))


class ResNet20(nn.Module):
    def __init__(self, cin=1):
        super().__init__()
        layers = [*conv_bn(cin, 16, 3, 1), nn.ReLU()]
        c = 16
        for stage, f in enumerate((16, 32, 64)):
            for b in range(3):
                layers.append(Block(c, f, 2 if stage > 0 and b == 0 else 1))
                c = f
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):  # x [N, 28, 28, 1] channels-last data
        x = x.permute(0, 3, 1, 2)
        x = x.contiguous(memory_format=MF)
        return self.fc(self.features(x).mean((2, 3)))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(args.dmodel, args.heads, args.ff, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=False)
            for _ in range(args.layers))
        self.fc = nn.Linear(args.dmodel, 10)

    def forward(self, x):  # [N, seq, d_model]
        for b in self.blocks:
            x = b(x)
        return self.fc(x.mean(1))


MF = torch.channels_last if args.memory_format == "channels_last" else torch.contiguous_format
if args.model == "resnet20":
    model, shape = ResNet20(), (28, 28, 1)
    model = model.to(memory_format=MF)
else:
    model, shape = Transformer(), (args.seq, args.dmodel)
g = torch.Generator().manual_seed(1)
n = args.distinct * args.batch
X = torch.rand((n,) + shape, generator=g)
Y = torch.arange(n) % 10
opt = (torch.optim.SGD(model.parameters(), lr=0.01) if args.opt == "sgd"
       else torch.optim.Adam(model.parameters(), lr=1e-3))
loss_fn = nn.CrossEntropyLoss()
model.train()
t0 = None
for step in range(args.steps):
    if step == args.warmup:
        t0 = time.perf_counter()
    i = step % args.distinct
    xb, yb = X[i * args.batch:(i + 1) * args.batch], Y[i * args.batch:(i + 1) * args.batch]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
timed = (args.steps - args.warmup) * args.batch
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print("RESULT " + json.dumps({
    "impl": "torch", "model": args.model, "batch": args.batch, "steps": args.steps,
    "threads": args.threads, "opt": args.opt, "memory_format": args.memory_format,
    "params": sum(p.numel() for p in model.parameters()),
    "samples_per_sec": round(timed / dt, 2), "train_seconds": round(dt, 3),
    "loss": round(float(loss), 4), "peak_rss_mib": round(rss, 1),
    "torch": torch.__version__}))
sys.stdout.flush()
