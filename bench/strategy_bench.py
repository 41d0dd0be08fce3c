#!/usr/bin/python3
"""Strategy benchmark: training throughput of the synchronous strategies.

Runs `build/strata train` (1 epoch, batch 128, seeds 1..R) for each
configuration, alternating, and prints median [min-max] samples/s:
  one_device (its default: one worker thread per core), mirrored with 1 and 2
  replicas, central_storage with 2, and mirrored 2 with small gradient packs
  (64 KiB) with overlap on and off.
Usage: /usr/bin/python3 bench/strategy_bench.py [--reps 3] [--models mlp,cnn]
       [--markdown FILE]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = [
    ("one_device (default threads)", []),
    ("mirrored, 1 replica", ["--strategy", "mirrored", "--replicas", "1"]),
    ("mirrored, 2 replicas", ["--strategy", "mirrored", "--devices", "cpu:0,cpu:1"]),
    ("central_storage, 2 replicas", ["--strategy", "central_storage", "--replicas", "2"]),
    ("mirrored 2, 64 KiB packs, overlap on", ["--strategy", "mirrored", "--replicas", "2", "--bytes-per-pack", "65536"]),
    ("mirrored 2, 64 KiB packs, overlap off", ["--strategy", "mirrored", "--replicas", "2", "--bytes-per-pack", "65536", "--no-overlap"]),
]


def run(strata, model, seed, extra):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [strata, "train", "--model", model, "--epochs", "1", "--batch-size", "128",
               "--seed", str(seed), "--quiet", "--report", f.name] + extra
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.load(open(f.name))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "strata"))
    ap.add_argument("--markdown")
    a = ap.parse_args()
    if not os.access(a.strata, os.X_OK):
        sys.exit(f"{a.strata} not built: run make first")
    rows = []
    for model in a.models.split(","):
        res = {name: [] for name, _ in CONFIGS}
        for rep in range(a.reps):
            order = CONFIGS if rep % 2 == 0 else CONFIGS[::-1]
            for name, extra in order:
                r = run(a.strata, model, rep + 1, extra)
                res[name].append(r["samples_per_sec"])
                print(f"[rep {rep + 1}] {model} {name}: {r['samples_per_sec']:.0f} samples/s",
                      file=sys.stderr)
        base = statistics.median(res[CONFIGS[1][0]])
        for name, _ in CONFIGS:
            v = res[name]
            rows.append((model, name, f"{statistics.median(v):.0f} [{min(v):.0f}–{max(v):.0f}]",
                         f"{statistics.median(v) / base:.2f}x"))
    head = ("model", "configuration", "samples/s median [min–max]", "vs mirrored 1 replica")
    for r in [head] + rows:
        print(f"{r[0]:5}  {r[1]:40}  {r[2]:24}  {r[3]}")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
            for r in rows:
                f.write("| " + " | ".join(r) + " |\n")


if __name__ == "__main__":
    main()
