#!/usr/bin/env bash
# parameter_server throughput (issue 13), printed as the markdown table of
# docs/BENCHMARKS.md: cnn on Fashion-MNIST (12800 examples, batch 128, one
# epoch) with one_device (every core) against `strata launch --workers 2
# --ps 1` with CURVE and with --insecure; then the per-step overhead of a
# closure: mlp, batch 32, steps/s of one worker + one ps against one_device
# with one thread (the difference of the step times is what pulling,
# pushing and the ps's apply add). Samples/s are the reports' (training
# only). Each row notes the 1-minute load average before it: on a shared
# machine that is most of the variance.
# usage: bench/ps_cnn_bench.sh [build/strata]   (about a minute on 2 cores)
set -u
cli=${1:-build/strata}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
sps() { python3 -c "import json; print('%.0f' % json.load(open('$1'))['samples_per_sec'])"; }
cnn=(--model cnn --epochs 1 --batch-size 128 --train-examples 12800 --quiet)
echo "| run | samples/s | load before |"
echo "|---|---|---|"
l=$(load); "$cli" train "${cnn[@]}" --report "$tmp/a.json" > /dev/null 2>&1
echo "| one_device (every core) | $(sps "$tmp/a.json") | $l |"
l=$(load); "$cli" launch --workers 2 --ps 1 -- train "${cnn[@]}" --report "$tmp/b.json" > /dev/null 2>&1
echo "| parameter_server, 2 workers + 1 ps, CURVE | $(sps "$tmp/b.json") | $l |"
l=$(load); "$cli" launch --workers 2 --ps 1 --insecure -- train "${cnn[@]}" --report "$tmp/c.json" > /dev/null 2>&1
echo "| parameter_server, 2 workers + 1 ps, --insecure | $(sps "$tmp/c.json") | $l |"
mlp=(--model mlp --epochs 1 --batch-size 32 --train-examples 6400 --quiet)
l=$(load); "$cli" train "${mlp[@]}" --threads 1 --report "$tmp/d.json" > /dev/null 2>&1
"$cli" launch --workers 1 --ps 1 -- train "${mlp[@]}" --report "$tmp/e.json" > /dev/null 2>&1
python3 - "$tmp/d.json" "$tmp/e.json" "$l" <<'PY'
import json, sys
od, ps = (json.load(open(f))['samples_per_sec'] / 32 for f in sys.argv[1:3])
print('| mlp, batch 32: one_device 1 thread %.0f steps/s, 1 worker + 1 ps (CURVE) %.0f steps/s: '
      '%.2f ms per step added | - | %s |' % (od, ps, 1000 / ps - 1000 / od, sys.argv[3]))
PY
