#!/usr/bin/env bash
# Memory per pipeline stage across processes (issue 15), printed as the
# markdown table of docs/BENCHMARKS.md: the 101M-parameter Keras mlp of
# tests/test_pipeline_memory.sh (12 x Dense(3000), Adam), one step of
# --train-examples EX at batch EX (default 64), no memory limit:
#  - one device (--threads 1, then every core): peak RSS of the process;
#  - 2 stages under mpirun -np 2, M = 1, 2, 4, 8, GPipe and 1F1B: each
#    stage's parameters, peak RSS, buffer bytes, replayed schedule bubble
#    ((S-1)/(M+S-1)), max in flight, timed bubble (1 - busy/step) and the
#    step's wall seconds.
# usage: bench/pipeline_memory.sh [build/strata] [EX]   (~2 minutes on 2 cores)
set -u
cli=$(readlink -f "${1:-build/strata}"); ex=${2:-64}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
python3 "$src/tests/mkidx.py" a >/dev/null || exit 1
sed -n '/^python3 - <<.PY. >nparams/,/^PY$/p' "$src/tests/test_pipeline_memory.sh" | sed '1d;$d' >mk.py
python3 mk.py >/dev/null || exit 1
args=(train --model big.json --data a --epochs 1 --train-examples "$ex" --batch-size "$ex" --optimizer adam --quiet)
mib() { python3 -c "print('%.0f' % ($1 / 2**20))"; }
echo "| 101M mlp, Adam, batch $ex | stage layers / params | peak RSS (MiB) | buffers (MiB) | schedule bubble | in flight | timed bubble | step s |"
echo "|---|---|---|---|---|---|---|---|"
for t in 1 2; do
  "$cli" "${args[@]}" --threads $t --report r.json >/dev/null || continue
  echo "| one device, --threads $t | all / 101,418,010 | $(mib "$(python3 -c "import json; print(json.load(open('r.json'))['peak_rss_bytes'])")") | - | - | - | - | - |"
done
for sched in gpipe 1f1b; do
  for M in 1 2 4 8; do
    mpirun -np 2 "$cli" "${args[@]}" --strategy pipeline --micro-batches $M --pipeline-schedule $sched \
      --report r.json >/dev/null 2>>mpi.log || continue
    python3 - "$sched" "$M" <<'PY'
import json, sys
st = json.load(open("r.json"))["pipeline"]["stage"]
j = lambda f: " / ".join(f(s) for s in st)
print("| 2 ranks, %s, M=%s | %s | %s | %s | %s | %s | %s | %.1f |" % (
    sys.argv[1], sys.argv[2],
    j(lambda s: "%d-%d: %s" % (s["first_layer"], s["end_layer"] - 1, format(s["params"], ","))),
    j(lambda s: "%.0f" % (s["peak_rss_bytes"] / 2**20)), j(lambda s: "%.0f" % (s["peak_bytes"] / 2**20)),
    j(lambda s: "%.3f" % s["schedule_bubble"]), j(lambda s: "%d" % s["max_in_flight"]),
    j(lambda s: "%.2f" % s["bubble_fraction"]), st[0]["step_seconds"]))
PY
  done
done
