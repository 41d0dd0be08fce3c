#!/usr/bin/env python3
"""Predicted multi_worker_mirrored step time and scaling efficiency beyond this
machine, from measurements plus a cost model (issue 20 item 5).

Inputs (measured):
  * per-step compute time of one worker: `strata train --report R.json`
    (step = global_batch_size / samples_per_sec), or seconds given directly;
  * the parameter count (gradient bytes = 4 x params): `strata summary`;
  * all-reduce cost: latency a and bandwidth b fitted to the Strata rows of
    bench/mpi_allreduce_bench output (--bench FILE, one per rank count), or
    given per named network (--network NAME=LAT_US,GBIT).

Model (weak scaling: each worker keeps its per-worker batch):
  ring all-reduce of S bytes on n workers
      T_ar(n, S) = 2(n-1) a + 2(n-1)/n * S / b
  the gradients go in packs of P bytes (--bytes-per-pack, default 4 MiB as
  strata train's), each all-reduced on its own (its own latency terms)
  no overlap:   T_step = T_comp + sum over packs of T_ar(n, pack)
  overlap:      backward (T_bwd = f T_comp, f = --backward-fraction, default
                2/3) produces the gradients evenly; a pack's all-reduce starts
                when backward has produced it and the previous pack's is done;
                T_step = max(T_comp, end of the last pack's all-reduce).
                A model whose gradients fit in one pack gains nothing.
  efficiency    E(n) = T_comp / T_step (<= 1; throughput n*B/T_step over n
                times one worker's B/T_comp)
One worker (n = 1) needs no all-reduce. Not modelled: stragglers, the per-step
agreement message (one small all-reduce: ~2(n-1) a), contention between
compute and communication for cores, hierarchical (intra-node) reduction.

usage:
  bench/scaling.py --measure build/strata [--bench FILE]... [--network N=US,GBIT]...
  bench/scaling.py --input models.json [...]       (no measurement: fixed input)
  --grid prints one row per model and network (efficiency without / with
  overlap); --json prints the table as JSON (for tests); --save-input FILE writes the
  measured inputs as JSON (then --input FILE reproduces the table).
"""
import argparse
import signal
import json
import os
import re
import subprocess
import sys
import tempfile

WORKERS = [2, 4, 8, 16, 32, 64, 128, 256]
NETWORKS = {"10Gbit/s, 50us": (50e-6, 10e9 / 8), "100Gbit/s, 50us": (50e-6, 100e9 / 8)}


def ring_allreduce_s(n, nbytes, lat_s, bw_Bps):
    """Ring all-reduce time: 2(n-1) latency steps, 2(n-1)/n of the bytes."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * lat_s + 2 * (n - 1) / n * nbytes / bw_Bps


def packs(nbytes, pack):
    """The gradient packs (bytes each), as the strategy's reducer makes them
    (--bytes-per-pack; 0 = one pack)."""
    if pack <= 0 or pack >= nbytes:
        return [nbytes]
    k, rest = divmod(nbytes, pack)
    return [pack] * int(k) + ([rest] if rest else [])


def step_s(n, comp_s, nbytes, lat_s, bw_Bps, overlap, bwd_frac, pack):
    """One step of n workers: compute, then (no overlap) every pack's
    all-reduce; or (overlap) each pack's all-reduce starting once backward has
    produced it (gradients produced evenly over backward) and the network is
    free (packs go one after another)."""
    ps = packs(nbytes, pack)
    if not overlap:
        return comp_s + sum(ring_allreduce_s(n, p, lat_s, bw_Bps) for p in ps)
    fwd, bwd = comp_s * (1 - bwd_frac), comp_s * bwd_frac
    done = produced = 0.0
    for p in ps:
        produced += p
        ready = fwd + bwd * produced / nbytes
        done = max(done, ready) + ring_allreduce_s(n, p, lat_s, bw_Bps)
    return max(comp_s, done)


def fit_bench(path):
    """Fit T(S) = A + B S to the Strata rows of one mpi_allreduce_bench run;
    return (ranks, latency a, bandwidth b) of the ring model."""
    ranks, pts = None, []
    with open(path) as f:
        for line in f:
            m = re.match(r"#\s*(\d+) processes", line)
            if m:
                ranks = int(m.group(1))
            m = re.match(r"(\d+)\s+strata all-reduce\s+([\d.]+)", line)
            if m:
                pts.append((float(m.group(1)), float(m.group(2)) * 1e-6))
    if not ranks or len(pts) < 2:
        sys.exit(f"scaling.py: {path}: no '# N processes' header or fewer than 2 'strata' rows")
    # least squares on relative error (small and large sizes weigh alike)
    sw = sx = sy = sxx = sxy = 0.0
    for s, t in pts:
        w = 1 / (t * t)
        sw += w; sx += w * s; sy += w * t; sxx += w * s * s; sxy += w * s * t
    det = sw * sxx - sx * sx
    A = (sxx * sy - sx * sxy) / det
    B = (sw * sxy - sx * sy) / det
    n = ranks
    lat = max(A, 0.0) / (2 * (n - 1))
    bw = 2 * (n - 1) / n / B
    return n, lat, bw


def measure(cli, examples, repeat):
    """Per-step compute time (one process, one_device) and parameter count
    of mlp, cnn and a 20M-parameter mlp (Keras JSON)."""
    tmp = tempfile.mkdtemp()
    big = os.path.join(tmp, "mlp20m.json")
    layers = [{"class_name": "Flatten", "config": {"name": "flatten", "batch_input_shape": [None, 28, 28, 1]}},
              {"class_name": "Dense", "config": {"name": "dense", "units": 4096, "activation": "relu"}},
              {"class_name": "Dense", "config": {"name": "dense_1", "units": 4096, "activation": "relu"}},
              {"class_name": "Dense", "config": {"name": "dense_2", "units": 10, "activation": "linear"}}]
    with open(big, "w") as f:
        json.dump({"class_name": "Sequential", "config": {"name": "mlp20m", "layers": layers}}, f)
    models = {}
    for name, model, batch, n in [("mlp", "mlp", 128, examples), ("cnn", "cnn", 128, examples),
                                  ("mlp-20M", big, 128, max(examples // 4, 3200))]:
        summ = subprocess.run([cli, "summary", "--model", model], capture_output=True, text=True, check=True).stdout
        params = int(re.search(r"Total params: ([\d,]+)", summ).group(1).replace(",", ""))
        rep = os.path.join(tmp, name + ".json")
        for _ in range(repeat):  # the fastest run: the least disturbed by other load
            subprocess.run([cli, "train", "--model", model, "--epochs", "1", "--batch-size", str(batch),
                            "--train-examples", str(n), "--quiet", "--report", rep],
                           check=True, stdout=subprocess.DEVNULL)
            m = model_from_report(rep, params)
            if name not in models or m["step_s"] < models[name]["step_s"]:
                models[name] = m
        if name == "mlp-20M":
            models[name]["source"] = "Keras JSON 784-4096-4096-10, " + models[name]["source"]
        models[name]["source"] += f", fastest of {repeat}"
    return models


def model_from_report(path, params):
    with open(path) as f:
        r = json.load(f)
    b = r["global_batch_size"]
    return {"params": params, "batch": b, "step_s": b / r["samples_per_sec"],
            "source": f"{r.get('strategy')} x{r.get('replicas')}: {r['samples_per_sec']:.0f} samples/s"}


def table(models, networks, workers, bwd_frac, pack):
    rows = []
    for mname, m in models.items():
        S = 4 * m["params"]
        for nname, (lat, bw) in networks.items():
            for n in workers:
                row = {"model": mname, "network": nname, "workers": n, "params": m["params"],
                       "compute_ms": m["step_s"] * 1e3,
                       "allreduce_ms": sum(ring_allreduce_s(n, p, lat, bw) for p in packs(S, pack)) * 1e3}
                for ov in (False, True):
                    t = step_s(n, m["step_s"], S, lat, bw, ov, bwd_frac, pack)
                    key = "overlap" if ov else "no_overlap"
                    row[key + "_step_ms"] = t * 1e3
                    row[key + "_efficiency"] = m["step_s"] / t
                rows.append(row)
    return rows


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measure", metavar="CLI", help="measure compute with this strata binary")
    ap.add_argument("--examples", type=int, default=12800, help="training examples per measurement")
    ap.add_argument("--repeat", type=int, default=3, help="measurements per model (the fastest is kept)")
    ap.add_argument("--input", help="models and networks as JSON (see --save-input)")
    ap.add_argument("--save-input", help="write the inputs used as JSON")
    ap.add_argument("--report", action="append", default=[], metavar="NAME=R.json:PARAMS",
                    help="a model's compute from a strata --report file and its parameter count")
    ap.add_argument("--bench", action="append", default=[], metavar="FILE",
                    help="mpi_allreduce_bench output: adds a network fitted to it")
    ap.add_argument("--network", action="append", default=[], metavar="NAME=LAT_US,GBIT")
    ap.add_argument("--workers", default=",".join(map(str, WORKERS)))
    ap.add_argument("--backward-fraction", type=float, default=2 / 3)
    ap.add_argument("--bytes-per-pack", type=int, default=4194304,
                    help="gradient pack size, as strata train's (default 4194304; 0 = one pack)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--grid", action="store_true",
                    help="one row per model and network: efficiency without / with overlap per worker count")
    a = ap.parse_args()

    models, networks, notes = {}, dict(NETWORKS), []
    if a.input:
        with open(a.input) as f:
            inp = json.load(f)
        models.update(inp.get("models", {}))
        for k, v in inp.get("networks", {}).items():
            networks[k] = (v["latency_s"], v["bandwidth_Bps"])
    for spec in a.report:
        name, rest = spec.split("=", 1)
        path, params = rest.rsplit(":", 1)
        models[name] = model_from_report(path, int(params))
    for path in a.bench:
        n, lat, bw = fit_bench(path)
        name = f"fit {os.path.basename(path)} ({n} ranks)"
        networks[name] = (lat, bw)
        notes.append(f"{name}: latency {lat * 1e6:.1f} us, bandwidth {bw * 8 / 1e9:.2f} Gbit/s")
    if a.measure:
        models.update(measure(a.measure, a.examples, a.repeat))
    for spec in a.network:
        name, rest = spec.split("=", 1)
        us, gbit = rest.split(",")
        networks[name] = (float(us) * 1e-6, float(gbit) * 1e9 / 8)
    if not models:
        sys.exit("scaling.py: no models (give --measure CLI, --input FILE or --report)")
    workers = [int(w) for w in a.workers.split(",")]
    if a.save_input:
        with open(a.save_input, "w") as f:
            json.dump({"models": models, "networks": {k: {"latency_s": v[0], "bandwidth_Bps": v[1]}
                                                      for k, v in networks.items()}}, f, indent=1)
    rows = table(models, networks, workers, a.backward_fraction, a.bytes_per_pack)
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return
    for note in notes:
        print("#", note)
    if a.grid:
        print("| model | network | " + " | ".join(f"{n}" for n in workers) + " |")
        print("|---|---|" + "---:|" * len(workers))
        for mname in models:
            for nname in networks:
                cells = [f"{r['no_overlap_efficiency']:.0%} / {r['overlap_efficiency']:.0%}" for r in rows
                         if r["model"] == mname and r["network"] == nname]
                print(f"| {mname} | {nname} | " + " | ".join(cells) + " |")
        return
    for mname, m in models.items():
        print(f"\n#### {mname}: {m['params']:,} params ({4 * m['params'] / 2**20:.1f} MiB of gradients), "
              f"compute {m['step_s'] * 1e3:.2f} ms/step at batch {m['batch']} per worker ({m.get('source', '')})")
        print(f"| network | workers | all-reduce ms (all packs) | step ms (no overlap) | efficiency | step ms (overlap) | efficiency |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r["model"] != mname:
                continue
            print(f"| {r['network']} | {r['workers']} | {r['allreduce_ms']:.2f} | {r['no_overlap_step_ms']:.2f} | "
                  f"{r['no_overlap_efficiency']:.1%} | {r['overlap_step_ms']:.2f} | {r['overlap_efficiency']:.1%} |")


if __name__ == "__main__":
    main()
