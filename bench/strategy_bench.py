#!/usr/bin/python3
"""Strategy benchmark: training throughput of the synchronous strategies.

Runs `build/strata train` (1 epoch, batch 128, seeds 1..R) for each
configuration, alternating, and prints median [min-max] samples/s:
  one_device (its default: one worker thread per core), mirrored with 1 and 2
  replicas, central_storage with 2, and mirrored 2 with small gradient packs
  (64 KiB) with overlap on and off.
Usage: /usr/bin/python3 bench/strategy_bench.py [--reps 3] [--models mlp,cnn]
       [--markdown FILE] [--baseline OLD_STRATA]
--baseline: each run is made by both binaries back to back (alternating which
goes first), and the table gives both medians and new/old: a refactor's
before/after in one run on the same machine.
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
    ap.add_argument("--baseline", help="an older build/strata to compare with, run by run")
    a = ap.parse_args()
    if a.baseline:
        return compare(a)
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


def compare(a):
    """Old and new binaries, run by run, alternating which goes first."""
    rows = []
    for model in a.models.split(","):
        res = {(name, side): [] for name, _ in CONFIGS for side in ("old", "new")}
        for rep in range(a.reps):
            for i, (name, extra) in enumerate(CONFIGS if rep % 2 == 0 else CONFIGS[::-1]):
                sides = [("old", a.baseline), ("new", a.strata)]
                for side, cli in (sides if (rep + i) % 2 == 0 else sides[::-1]):
                    v = run(cli, model, rep + 1, extra)["samples_per_sec"]
                    res[(name, side)].append(v)
                    print(f"[rep {rep + 1}] {model} {name} {side}: {v:.0f} samples/s", file=sys.stderr)
        for name, _ in CONFIGS:
            o, n = res[(name, "old")], res[(name, "new")]
            rows.append((model, name, f"{statistics.median(o):.0f} [{min(o):.0f}–{max(o):.0f}]",
                         f"{statistics.median(n):.0f} [{min(n):.0f}–{max(n):.0f}]",
                         f"{statistics.median(n) / statistics.median(o):.3f}"))
    head = ("model", "configuration", "old samples/s", "new samples/s", "new/old")
    for r in [head] + rows:
        print(f"{r[0]:5}  {r[1]:40}  {r[2]:20}  {r[3]:20}  {r[4]}")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
            for r in rows:
                f.write("| " + " | ".join(r) + " |\n")


if __name__ == "__main__":
    main()
