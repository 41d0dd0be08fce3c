#!/usr/bin/python3
"""Graph models beside PyTorch 1.13 (issue 28): resnet20 and a 4-block
post-LN transformer encoder (d_model 256, 4 heads, seq 128, ff 1024).

Each repetition runs, alternating, every configuration of both sides on the
same synthetic data shape, the same batch, optimizer and step count:
  Strata   build/graph_bench --model M ... (one_device with 2 compute threads,
           and mirrored with 2 replicas)
  PyTorch  /usr/bin/python3 bench/graph_torch.py --model M ... --threads 1 / 2
and prints, per configuration, the median [min-max] of training samples/s
(first --warmup steps excluded by both programs) and of peak RSS (ru_maxrss
of the child, from wait4), then Strata's best configuration over PyTorch's
best (ratios of medians) and Strata's activation memory report
(src/nn/memplan.c).

Roofline: each model's training FLOPs per sample (the matrix products only:
forward, weight gradients and input gradients, counted from the layer
shapes by model_flops below; element-wise work is not counted) turn
samples/s into GFLOP/s, set against the machine's sgemm peak measured in the
same run (bench/sgemm_bench.c, 512^3 on every core, once per repetition,
the best of them: noise only lowers it): "of peak" in the table, and what
1.5x PyTorch's best would need.

Usage: /usr/bin/python3 bench/graph_bench.py [--reps 3] [--models resnet20,transformer]
         [--opt sgd|adam] [--json raw.jsonl] [--quick] [--before OLD/build/graph_bench]
--before adds the Strata configurations of an older build to the same
alternation ("before: ..." rows, not counted as Strata's best).
Exit: 0 all runs ok; 1 a run failed; 2 a prerequisite is missing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.environ.get("PEER_PYTHON", "/usr/bin/python3")
SIZES = {  # batch, steps, warmup: small enough for a loaded 2-core machine
    "resnet20": ["--batch", "64", "--steps", "25", "--warmup", "5"],
    "transformer": ["--batch", "16", "--steps", "10", "--warmup", "2"],
}
STRATA = {"strata 1 device, 2 threads": ["--threads", "2"],
          "strata mirrored, 2 replicas": ["--replicas", "2"]}
TORCH = {"torch 1 thread": (["--threads", "1"], {}),
         "torch 2 threads": (["--threads", "2"], {}),
         "torch 2 threads, OMP passive": (["--threads", "2"], {"OMP_WAIT_POLICY": "passive"})}


def conv_macs(hw, cin, cout, k, stride=1):
    """Multiply-adds of a 'same'-padded k x k convolution on an hw x hw input."""
    out = -(-hw // stride)
    return out * out * cout * cin * k * k


def model_flops(model):
    """Training FLOPs of one sample: 2 x (forward + weight-gradient + input-
    gradient multiply-adds); the model input gets no gradient."""
    if model == "resnet20":  # bench/graph_bench.c: st_builtin_model_create("resnet20"), 28x28x1
        fwd, first = conv_macs(28, 1, 16, 3), conv_macs(28, 1, 16, 3)
        hw, cin = 28, 16
        for stage, cout in enumerate((16, 32, 64)):
            for block in range(3):
                stride = 2 if stage and not block else 1
                fwd += conv_macs(hw, cin, cout, 3, stride)
                if stride == 2:
                    fwd += conv_macs(hw, cin, cout, 1, 2)  # the projection shortcut
                    hw = -(-hw // 2)
                fwd += conv_macs(hw, cout, cout, 3)
                cin = cout
        fwd += 64 * 10
        return 2 * (3 * fwd - first)
    # the transformer of bench/graph_bench.c: 4 blocks, seq 128, d_model 256, 4 heads, ff 1024
    t, d, ff, layers = 128, 256, 1024, 4
    block = 4 * t * d * d + 2 * t * t * d + 2 * t * d * ff  # Q,K,V,O; scores and P.V; the FFN
    fwd = layers * block + d * 10
    return 2 * (3 * fwd - 3 * t * d * d)  # no input gradient of the first Q, K, V


def sgemm_peak(bench):
    """GFLOP/s of bench/sgemm_bench.c's 512^3 sgemm on every core (built
    against the libstrata.a beside the graph_bench binary), or None."""
    lib = os.path.join(os.path.dirname(bench), "libstrata.a")
    exe = os.path.join(os.path.dirname(bench), "sgemm_bench_peak")
    if not os.access(exe, os.X_OK) and subprocess.run(
            ["gcc", "-O2", "-std=c11", "-I" + os.path.join(REPO, "include"), "-I" + os.path.join(REPO, "src"),
             os.path.join(REPO, "bench", "sgemm_bench.c"), lib, "-ldl", "-lm", "-lpthread", "-lz", "-ljansson",
             "-o", exe], capture_output=True).returncode:
        return None
    out = subprocess.run([exe, "fix", str(os.cpu_count())], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "512^3" in line:
            return float(line.split()[-2])
    return None


def run_rss(cmd, env_extra, timeout):
    """run() with the child's peak RSS: a wrapper process per run, so that
    RUSAGE_CHILDREN of the wrapper is the one child's."""
    wrap = [sys.executable, "-c",
            "import os,resource,subprocess,sys;"
            "r=subprocess.run(sys.argv[1:]);"
            "print('MAXRSS_KB',resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,flush=True);"
            "sys.exit(r.returncode)"] + cmd
    env = dict(os.environ, **env_extra)
    t0 = time.time()
    try:
        p = subprocess.run(wrap, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.stderr.write("TIMEOUT: %s\n" % " ".join(cmd))
        return None
    res, rss = None, None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
        elif line.startswith("MAXRSS_KB "):
            rss = int(line.split()[1]) / 1024.0
    if res is None or p.returncode:
        sys.stderr.write("FAILED (%d): %s\n%s\n" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
        return None
    res["peak_rss_mib"] = round(rss, 1)
    res["wall"] = round(time.time() - t0, 2)
    return res


def med(xs):
    return "%.1f [%.1f-%.1f]" % (statistics.median(xs), min(xs), max(xs)) if xs else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 repetition")
    ap.add_argument("--models", default="resnet20,transformer")
    ap.add_argument("--opt", choices=["sgd", "adam"], default="sgd")
    ap.add_argument("--bench", default=os.path.join(REPO, "build", "graph_bench"))
    ap.add_argument("--json", metavar="FILE", help="append one JSON line per run")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--before", metavar="GRAPH_BENCH", help="an older build's graph_bench, run too")
    ap.add_argument("--no-peak", action="store_true", help="skip the sgemm peak measurement")
    a = ap.parse_args()
    reps = 1 if a.quick else a.reps
    if not os.access(a.bench, os.X_OK):
        print("graph_bench.py: %s not built (cmake --build build --target graph_bench)" % a.bench)
        return 2
    if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode:
        print("graph_bench.py: %s cannot import torch (apt-get install python3-torch)" % PY)
        return 2
    models = a.models.split(",")
    runs = {}  # (model, config) -> [result]
    ok = True
    with open("/proc/loadavg") as f:
        load0 = f.read().split()[:3]
    peaks = []
    for r in range(reps):
        pk = None if a.no_peak else sgemm_peak(a.bench)
        if pk:
            peaks.append(pk)
            print("rep %d sgemm 512^3 on %d threads: %.1f GFLOP/s" % (r + 1, os.cpu_count(), pk), flush=True)
        for m in models:
            common = SIZES[m] + ["--opt", a.opt]
            jobs = [(k, [a.bench, "--model", m] + common + v, {}) for k, v in STRATA.items()]
            if a.before:
                jobs += [("before: " + k, [a.before, "--model", m] + common + v, {})
                         for k, v in STRATA.items()]
            jobs += [(k, [PY, os.path.join(REPO, "bench", "graph_torch.py"), "--model", m] + common + v, e)
                     for k, (v, e) in TORCH.items()]
            if r % 2:
                jobs.reverse()
            for key, cmd, env in jobs:
                res = run_rss(cmd, env, a.timeout)
                ok &= res is not None
                print("rep %d %s %s: %s" % (r + 1, m, key, json.dumps(res)), flush=True)
                if res:
                    res.update(rep=r + 1, config=key)
                    runs.setdefault((m, key), []).append(res)
                    if a.json:
                        with open(a.json, "a") as f:
                            f.write(json.dumps(res) + "\n")
    with open("/proc/loadavg") as f:
        load1 = f.read().split()[:3]
    print("\nload average before %s, after %s (%d CPUs)" % (" ".join(load0), " ".join(load1), os.cpu_count()))
    peak = max(peaks) if peaks else None
    if peak:
        print("sgemm peak (512^3, %d threads, best of %d): %.1f GFLOP/s" % (os.cpu_count(), len(peaks), peak))
    print("\n| model | configuration | samples/s | GFLOP/s | of peak | peak RSS MiB | runs |")
    print("|---|---|---|---|---|---|---|")
    best = {}
    for m in models:
        before = ["before: " + k for k in STRATA] if a.before else []
        for key in list(STRATA) + before + list(TORCH):
            rs = runs.get((m, key), [])
            sps = [x["samples_per_sec"] for x in rs]
            rss = [x["peak_rss_mib"] for x in rs]
            gf = statistics.median(sps) * model_flops(m) / 1e9 if sps else None
            print("| %s | %s | %s | %s | %s | %s | %d/%d |" % (
                m, key, med(sps), "%.1f" % gf if gf else "-",
                "%.0f%%" % (100 * gf / peak) if gf and peak else "-", med(rss), len(rs), reps))
            if sps and not key.startswith("before"):
                side = "strata" if key.startswith("strata") else "torch"
                cur = best.get((m, side))
                s_med = statistics.median(sps)
                if cur is None or s_med > cur[1]:
                    best[(m, side)] = (key, s_med, statistics.median(rss))
    print()
    for m in models:
        s, t = best.get((m, "strata")), best.get((m, "torch"))
        if s and t:
            print("%s: best Strata (%s) / best PyTorch (%s): samples/s %.2fx (target >= 1.5x: %s), "
                  "peak RSS %.2fx (target <= 0.33x: %s)" % (
                      m, s[0], t[0], s[1] / t[1], "holds" if s[1] / t[1] >= 1.5 else "does not hold",
                      s[2] / t[2], "holds" if s[2] / t[2] <= 1 / 3 else "does not hold"))
            need = 1.5 * t[1] * model_flops(m) / 1e9
            print("%s: %.3f GFLOP a training sample; 1.5x PyTorch's best = %.1f samples/s = %.1f GFLOP/s%s" % (
                m, model_flops(m) / 1e9, 1.5 * t[1], need,
                " = %.0f%% of the sgemm peak" % (100 * need / peak) if peak else ""))
        rs = runs.get((m, "strata 1 device, 2 threads"), []) or runs.get((m, "strata mirrored, 2 replicas"), [])
        if rs:
            x = rs[0]
            print("%s activation memory at batch %d (one replica): all activations %.2f MiB, layer caches "
                  "%.2f MiB, gradient buffers %d slots = %.2f MiB (one per tensor: %.2f MiB), inference "
                  "peak with liveness %.2f MiB" % (m, x["batch"], x["activations_mib"], x["caches_mib"],
                                                    x["grad_slots"], x["grad_buffers_mib"],
                                                    x["grad_per_tensor_mib"], x["inference_peak_mib"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
