#!/usr/bin/python3
"""Side-by-side benchmark: Strata vs the PyTorch peer on Fashion-MNIST.

For each model (mlp, cnn) it runs, alternating, R repetitions of
  (a) build/strata train --model M --epochs 1 --batch-size 128 --seed S --report F
  (b) /usr/bin/python3 ../shared/peers/torch_train.py --model M --epochs 1
      --batch 128 --seed S at the peer's best configuration on 2 cores
      (mlp: --threads 2 with OMP_WAIT_POLICY=passive; cnn: --threads 2
      --blas-threads 1; see ../shared/peers/RESULTS.md, note 1)
and prints median [min-max] of training samples/s (first 20 steps excluded by
both programs) and peak RSS, with the Strata/PyTorch ratios; then Strata's
model FLOPs per second as a fraction of the measured sgemm peak (roofline).

Usage: /usr/bin/python3 bench/bench.py [--reps 3] [--quick] [--models mlp,cnn]
           [--markdown docs/BENCHMARKS-table.md] [--json raw.jsonl]
           [--only strata|peer] [--strata-threads N]
Exit: 0 all runs ok; 1 a run failed; 2 a prerequisite is missing.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_PY = os.environ.get("PEER_PYTHON", "/usr/bin/python3")  # Debian python3 with python3-torch
# Best peer settings measured on the 2-core machine (peers/RESULTS.md note 1).
PEER_CONFIG = {
    "mlp": (["--threads", "2"], {"OMP_WAIT_POLICY": "passive"}),
    "cnn": (["--threads", "2", "--blas-threads", "1"], {}),
}
PEER_LABEL = {
    "mlp": "PyTorch 2 threads, OMP_WAIT_POLICY=passive",
    "cnn": "PyTorch 2 threads, 1 OpenBLAS thread",
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions per side (default 3)")
    ap.add_argument("--quick", action="store_true", help="1 repetition")
    ap.add_argument("--models", default="mlp,cnn", help="comma list (default mlp,cnn)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--seed-base", type=int, default=1, help="rep r uses seed base+r-1")
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "strata"))
    ap.add_argument("--peers", default=os.environ.get(
        "STRATA_PEERS_DIR", os.path.join(os.path.dirname(REPO), "shared", "peers")))
    ap.add_argument("--strata-threads", type=int,
                    help="pass --threads N to strata (default: its own, all cores)")
    ap.add_argument("--only", choices=["strata", "peer"], help="run one side only")
    ap.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    ap.add_argument("--json", metavar="FILE", help="append one JSON line per run")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    a = ap.parse_args()
    if a.quick:
        a.reps = 1
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    for m in a.models:
        if m not in PEER_CONFIG:
            ap.error(f"unknown model '{m}' (expected mlp or cnn)")
    if a.reps < 1:
        ap.error("--reps must be >= 1")
    return a


def check_prereqs(a):
    if a.only != "peer" and not os.access(a.strata, os.X_OK):
        print(f"bench: {a.strata} not found; build it first with `make`", file=sys.stderr)
        sys.exit(2)
    if a.only == "strata":
        return
    script = os.path.join(a.peers, "torch_train.py")
    if not os.path.isfile(script):
        print(f"bench: PyTorch peer not found at {script} (the shared folder sits beside "
              f"the checkout; set --peers or STRATA_PEERS_DIR)", file=sys.stderr)
        sys.exit(2)
    r = subprocess.run([PEER_PY, "-c", "import torch, numpy"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"bench: {PEER_PY} cannot import torch/numpy:\n  "
              f"{(r.stderr.strip().splitlines() or ['?'])[-1]}\n"
              "Install them with `make bench` (runs scripts/deps.sh --bench) or:\n"
              "  sudo apt-get install -y --no-install-recommends python3-torch python3-numpy",
              file=sys.stderr)
        sys.exit(2)


def run_cmd(cmd, env_extra, cwd, timeout):
    env = dict(os.environ, **env_extra)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=timeout, start_new_session=True)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or "", e.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    return rc, out, err, time.perf_counter() - t0


def run_strata(a, model, seed):
    fd, report = tempfile.mkstemp(prefix="strata_bench_", suffix=".json")
    os.close(fd)
    cmd = [a.strata, "train", "--model", model, "--epochs", str(a.epochs),
           "--batch-size", str(a.batch_size), "--seed", str(seed), "--report", report]
    if a.strata_threads:
        cmd += ["--threads", str(a.strata_threads)]
    try:
        rc, out, err, wall = run_cmd(cmd, {}, REPO, a.timeout)
        rec = dict(side="strata", model=model, seed=seed, cmd=" ".join(cmd), rc=rc,
                   process_wall_s=round(wall, 3))
        if rc == 0:
            try:
                with open(report) as f:
                    rep = json.load(f)
                rec.update(samples_per_s=float(rep["samples_per_sec"]),
                           peak_rss_mib=float(rep["peak_rss_bytes"]) / 2**20,
                           test_acc=float(rep["test_accuracy"]),
                           wall_s=float(rep["wall_seconds"]), report=rep)
            except (OSError, ValueError, KeyError, TypeError) as e:
                rec.update(rc="bad report", error=f"{report}: {e}")
        if "samples_per_s" not in rec:
            rec["stderr_tail"] = (err or out)[-2000:]
        return rec
    finally:
        os.unlink(report)


def run_peer(a, model, seed):
    flags, env = PEER_CONFIG[model]
    cmd = [PEER_PY, os.path.join(a.peers, "torch_train.py"), "--model", model,
           "--epochs", str(a.epochs), "--batch", str(a.batch_size), "--seed", str(seed)] + flags
    rc, out, err, wall = run_cmd(cmd, env, a.peers, a.timeout)
    shown = " ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "")
    rec = dict(side="peer", model=model, seed=seed, cmd=shown + " ".join(cmd), rc=rc,
               process_wall_s=round(wall, 3))
    res = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            try:
                res = json.loads(line[len("RESULT "):])
            except ValueError:
                pass
    if rc == 0 and res and res.get("samples_per_s"):
        rec.update(samples_per_s=float(res["samples_per_s"]),
                   peak_rss_mib=float(res["peak_rss_mib"]),
                   test_acc=float(res["test_acc"]),
                   wall_s=float(sum(res["epoch_s"]) + sum(res.get("eval_s", []))),
                   report=res)
    else:
        if rc == 0:
            rec["rc"] = "no RESULT line"
        rec["stderr_tail"] = (err or out)[-2000:]
    return rec


def stat(recs, key, fmt):
    vals = [r[key] for r in recs if key in r]
    if not vals:
        return "n/a"
    med = statistics.median(vals)
    if len(vals) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(vals))}–{fmt.format(max(vals))}]"


def median(recs, key):
    vals = [r[key] for r in recs if key in r]
    return statistics.median(vals) if vals else None


def build_rows(a, records):
    """Rows of (model, implementation, samples/s, peak RSS MiB, test acc, wall s, ok)."""
    rows = []
    for m in a.models:
        label = f"Strata ({a.strata_threads or os.cpu_count()} threads)"
        sides = [("strata", label)] if a.only != "peer" else []
        if a.only != "strata":
            sides.append(("peer", PEER_LABEL[m]))
        for side, label in sides:
            recs = [r for r in records if r["model"] == m and r["side"] == side]
            good = [r for r in recs if "samples_per_s" in r]
            rows.append([m, label, stat(good, "samples_per_s", "{:.0f}"),
                         stat(good, "peak_rss_mib", "{:.0f}"), stat(good, "test_acc", "{:.4f}"),
                         stat(good, "process_wall_s", "{:.1f}"), f"{len(good)}/{len(recs)}"])
        if a.only is None:
            s = [r for r in records if r["model"] == m and r["side"] == "strata"]
            p = [r for r in records if r["model"] == m and r["side"] == "peer"]
            ss, ps = median(s, "samples_per_s"), median(p, "samples_per_s")
            sr, pr = median(s, "peak_rss_mib"), median(p, "peak_rss_mib")
            ratio = lambda x, y: f"{x / y:.2f}x" if x is not None and y else "n/a"  # noqa: E731
            rows.append([m, "Strata / PyTorch",
                         ratio(ss, ps), ratio(sr, pr), "", "", ""])
    return rows


# Training FLOPs per example of the built-in models: 2 per multiply-add for the
# forward pass, the weight gradient and the input gradient (none for the first
# layer, whose input needs no gradient). Layers as (multiply-adds per example,
# has an input gradient): Dense in x out = in*out; Conv2D = out pixels x filters
# x kh*kw*cin (src/train/builtin_models.c).
MODEL_MACS = {
    "mlp": [(784 * 256, False), (256 * 128, True), (128 * 10, True)],
    "cnn": [(26 * 26 * 32 * 9, False), (11 * 11 * 64 * 288, True), (1600 * 128, True),
            (128 * 10, True)],
}


def train_flops(model):
    return sum(2 * macs * (3 if dx else 2) for macs, dx in MODEL_MACS[model])


def sgemm_peaks(a):
    """{threads: GFLOP/s} of a 512^3 sgemm through Strata's OpenBLAS loader
    (bench/sgemm_bench.c built against the library next to a.strata), or {}."""
    lib = os.path.join(os.path.dirname(a.strata), "libstrata.a")
    exe = os.path.join(tempfile.mkdtemp(prefix="strata-sgemm-"), "sgemm_bench")
    cc = subprocess.run(["gcc", "-O2", "-std=c11", "-I" + os.path.join(REPO, "include"),
                         "-I" + os.path.join(REPO, "src"),
                         os.path.join(REPO, "bench", "sgemm_bench.c"), lib,
                         "-ldl", "-lm", "-lpthread", "-lz", "-ljansson", "-o", exe],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        print("# note: could not build bench/sgemm_bench.c, no roofline figures:\n" +
              cc.stderr[-500:], flush=True)
        return {}
    peaks = {}
    for t in (1, 2):
        out = subprocess.run([exe, "fix", str(t)], capture_output=True, text=True).stdout
        m = re.search(r"square 512\^3\s+([0-9.]+) GFLOP/s", out)
        if m:
            peaks[t] = float(m.group(1))
    return peaks


def roofline_lines(a, records, peaks):
    """One line per model: Strata's model GFLOP/s and its fraction of the peaks."""
    lines = []
    for m in a.models:
        sps = median([r for r in records if r["model"] == m and r["side"] == "strata"],
                     "samples_per_s")
        if sps is None or not peaks:
            continue
        gf = sps * train_flops(m) / 1e9
        frac = ", ".join(f"{100 * gf / p:.0f}% of the {t}-thread peak ({p:.0f})"
                         for t, p in sorted(peaks.items()))
        lines.append(f"{m}: {train_flops(m) / 1e6:.2f} MFLOP per training example x "
                     f"{sps:.0f} samples/s = {gf:.1f} GFLOP/s = {frac}")
    return lines


HEAD = ["model", "implementation", "samples/s", "peak RSS MiB", "test acc", "process wall s",
        "runs ok"]


def text_table(rows):
    w = [max(len(str(r[i])) for r in rows + [HEAD]) for i in range(len(HEAD))]
    line = lambda r: "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    return "\n".join([line(HEAD), line(["-" * x for x in w])] + [line(r) for r in rows])


def cpu_busy_fraction(seconds=1.0):
    """Fraction of all CPUs' time spent busy over `seconds` (before we start)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return sum(v), v[3] + v[4]
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
        return 1.0 - (i1 - i0) / max(1, t1 - t0)
    except OSError:
        return 0.0


def machine_info():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "?"
    return dict(cpu=cpu, cores=os.cpu_count(), kernel=platform.release(), commit=commit,
                date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"))


def markdown(a, rows, info, records, roof):
    out = [f"Measured {info['date']} on {info['cpu']} ({info['cores']} CPUs, Linux "
           f"{info['kernel']}), Strata commit {info['commit']}; {a.epochs} epoch(s), batch "
           f"{a.batch_size}, {a.reps} run(s) per side alternating, seeds "
           f"{a.seed_base}..{a.seed_base + a.reps - 1}.",
           "Cells are median [min–max]. samples/s counts training only, excluding the first "
           "20 steps; peak RSS is the process's ru_maxrss; process wall s is the whole command "
           "(start-up, data loading, training, evaluation) timed by the script. Ratios are of medians "
           "(samples/s: higher is better for Strata; RSS: lower is better).", "",
           "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in rows:
        bold = r[1] == "Strata / PyTorch"
        out.append("| " + " | ".join((f"**{c}**" if bold and c else str(c)) for c in r) + " |")
    cmds = []
    for m in a.models:
        for side in ("strata", "peer"):
            rec = next((x for x in records if x["model"] == m and x["side"] == side), None)
            if rec:
                cmd = re.sub(r"--report \S+", "--report REPORT.json", rec["cmd"])
                cmds.append(cmd.replace(REPO + "/", "").replace(os.path.dirname(REPO) + "/", "../"))
    if roof:
        out += ["", "Fraction of the sgemm roofline (model FLOPs per second of the Strata "
                "median / 512^3 sgemm GFLOP/s through Strata's OpenBLAS loader, measured after "
                "the runs by bench/sgemm_bench.c):", ""] + [f"- {x}" for x in roof]
    out += ["", "Commands (first repetition):", "", "```"] + cmds + ["```", ""]
    return "\n".join(out)


def main():
    a = parse_args()
    check_prereqs(a)
    info = machine_info()
    print(f"# {info['date']}  {info['cpu']}  {info['cores']} CPUs  commit {info['commit']}",
          flush=True)
    busy = cpu_busy_fraction()
    if busy > 0.15:
        print(f"# WARNING: the machine is already {100 * busy:.0f}% busy before the benchmark; "
              "figures will be unreliable (PyTorch's thread pools suffer most)", flush=True)
    records = []
    for rep in range(a.reps):
        seed = a.seed_base + rep
        for m in a.models:
            order = [run_strata, run_peer] if rep % 2 == 0 else [run_peer, run_strata]
            for fn in order:
                if (a.only == "strata" and fn is run_peer) or (a.only == "peer" and fn is run_strata):
                    continue
                with open("/proc/loadavg") as f:
                    load = float(f.read().split()[0])
                rec = fn(a, m, seed)
                rec["loadavg_before"] = load
                records.append(rec)
                sps = rec.get("samples_per_s")
                print(f"[rep {rep + 1}/{a.reps}] {m:3} {rec['side']:6} seed {seed}: " +
                      (f"{sps:.0f} samples/s, peak RSS {rec['peak_rss_mib']:.0f} MiB, "
                       f"test acc {rec['test_acc']:.4f}" if sps else
                       f"FAILED ({rec['rc']})\n{rec.get('stderr_tail', '')}"),
                      flush=True)
                if a.json:
                    with open(a.json, "a") as f:
                        f.write(json.dumps(dict(rec, **info)) + "\n")
    rows = build_rows(a, records)
    print()
    print(text_table(rows))
    roof = roofline_lines(a, records, sgemm_peaks(a)) if a.only != "peer" else []
    if roof:
        print("\nroofline (sgemm 512^3 through Strata's OpenBLAS loader):")
        print("\n".join(roof))
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(markdown(a, rows, info, records, roof))
        print(f"\nmarkdown table written to {a.markdown}")
    return 0 if all("samples_per_s" in r for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
