#!/usr/bin/env bash
# bench/scaling.py (issue 20 item 5) on a fixed input: the ring all-reduce
# cost at a point worked by hand, efficiency <= 1 and never rising with more
# workers, overlap never slower than no overlap, a one-pack model gaining
# nothing from overlap, and a model fitted to mpi_allreduce_bench output.
set -u
src=${STRATA_SOURCE_DIR:?set by CTest}
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/in.json" <<'J'
{"models": {"small": {"params": 1000000, "batch": 128, "step_s": 0.010},
            "big": {"params": 20000000, "batch": 128, "step_s": 0.5}},
 "networks": {"test": {"latency_s": 5e-05, "bandwidth_Bps": 1.25e9}}}
J
# a bench output whose Strata rows follow T = 2(n-1) 10us + 2(n-1)/n S / 1 GB/s
python3 - "$tmp/bench.txt" <<'P'
import sys
n, a, b = 4, 10e-6, 1e9
with open(sys.argv[1], "w") as f:
    f.write(f"# {n} processes, 3 trials, medians\n")
    for s in (4096, 65536, 1048576, 16777216):
        t = 2 * (n - 1) * a + 2 * (n - 1) / n * s / b
        f.write(f"{s:<10} strata all-reduce {t * 1e6:15.1f} 0 0\n{s:<10} MPI_Allreduce {t * 2e6:15.1f} 0 0\n")
P
python3 "$src/bench/scaling.py" --input "$tmp/in.json" --bench "$tmp/bench.txt" --json --workers 1,2,4,8,256 \
  >"$tmp/out.json" || { echo "not ok - scaling.py runs"; exit 1; }
python3 "$src/bench/scaling.py" --input "$tmp/in.json" --bench "$tmp/bench.txt" >"$tmp/out.md"
grep -q "latency 10.0 us, bandwidth 8.00 Gbit/s" "$tmp/out.md" ||
  { echo "not ok - the fit recovers 10 us and 8 Gbit/s from the bench rows"; exit 1; }
echo "ok - the fit recovers 10 us and 8 Gbit/s from the bench rows"
python3 - "$tmp/out.json" <<'P'
import sys, json
rows = json.load(open(sys.argv[1]))
fail = 0
def check(what, ok):
    global fail
    print(("ok - " if ok else "not ok - ") + what)
    fail |= not ok
# 4 workers, 4 MB (1M params) in one 4 MiB pack, 50 us, 1.25e9 B/s:
# 2*3*50us + 2*3/4 * 4e6 / 1.25e9 = 0.3 ms + 4.8 ms = 5.1 ms
r = [x for x in rows if x["model"] == "small" and x["network"] == "test" and x["workers"] == 4][0]
check("ring all-reduce at 4 workers, 4 MB, 50 us, 10 Gbit/s: 5.1 ms (got %.4f)" % r["allreduce_ms"],
      abs(r["allreduce_ms"] - 5.1) < 1e-9)
check("... and the step without overlap 10 + 5.1 ms", abs(r["no_overlap_step_ms"] - 15.1) < 1e-9)
check("one worker: no all-reduce, efficiency 1",
      all(x["allreduce_ms"] == 0 and x["no_overlap_efficiency"] == 1 for x in rows if x["workers"] == 1))
check("efficiency <= 1 everywhere", all(x[k] <= 1 + 1e-12 for x in rows for k in ("no_overlap_efficiency", "overlap_efficiency")))
check("overlap never slower", all(x["overlap_step_ms"] <= x["no_overlap_step_ms"] + 1e-9 for x in rows))
check("a one-pack model gains nothing from overlap",
      all(abs(x["overlap_step_ms"] - x["no_overlap_step_ms"]) < 1e-9 for x in rows if x["model"] == "small"))
check("the 80 MB model gains from overlap at 2 workers",
      any(x["overlap_step_ms"] < x["no_overlap_step_ms"] for x in rows if x["model"] == "big" and x["workers"] == 2))
mono = True
for m in ("small", "big"):
    for net in set(x["network"] for x in rows):
        for k in ("no_overlap_efficiency", "overlap_efficiency"):
            e = [x[k] for x in sorted(rows, key=lambda x: x["workers"]) if x["model"] == m and x["network"] == net]
            mono &= all(b <= a + 1e-12 for a, b in zip(e, e[1:]))
check("efficiency never rises with more workers", mono)
sys.exit(fail)
P
