#!/usr/bin/env bash
# The pipeline strategy's throughput and bubble (issue 15), printed as the
# markdown tables of docs/BENCHMARKS.md:
#  1. cnn, Fashion-MNIST, 12800 examples, batch 128, Adam: one device (every
#     core), mirrored x2, and 2 pipeline stages (one process, a thread each)
#     with M = 1, 2, 4, 8 micro-batches under GPipe and 1F1B: samples/s (the
#     report's, first 20 steps excluded), each stage's buffer bytes and
#     bubble fraction, and the peak RSS of the process;
#  2. a balanced model (Flatten + 4 Dense(1024) + Dense(10) from Keras JSON,
#     split 2 | 4 layers of equal cost): the measured GPipe bubble of the
#     busier stage against (S-1)/(M+S-1).
# usage: bench/pipeline_bench.sh [build/strata]   (a few minutes on 2 cores)
set -u
cli=${1:-build/strata}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--train-examples 12800 --batch-size 128 --quiet)
fig() { # REPORT -> "samples/s | stage bytes | bubbles | rss"
  python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
p = r.get('pipeline')
mb = lambda b: '%.1f' % (b / 2**20)
if p:
    st = p['stage']
    print('| %.0f | %s | %s | %s |' % (r['samples_per_sec'], ' / '.join(mb(s['peak_bytes']) for s in st),
          ' / '.join('%.2f' % s['bubble_fraction'] for s in st), mb(r['peak_rss_bytes'])))
else:
    print('| %.0f | - | - | %s |' % (r['samples_per_sec'], mb(r['peak_rss_bytes'])))
EOF
}
echo "| cnn, batch 128 | samples/s | stage buffers (MiB) | bubble per stage | peak RSS (MiB) |"
echo "|---|---|---|---|---|"
"$cli" train --model cnn "${common[@]}" --report "$tmp/r.json" >/dev/null &&
  echo "| one_device | $(fig "$tmp/r.json" | cut -c3-)"
"$cli" train --model cnn "${common[@]}" --strategy mirrored --replicas 2 --report "$tmp/r.json" >/dev/null &&
  echo "| mirrored x2 | $(fig "$tmp/r.json" | cut -c3-)"
for sched in gpipe 1f1b; do
  for M in 1 2 4 8; do
    "$cli" train --model cnn "${common[@]}" --strategy pipeline --devices cpu:0,cpu:1 \
      --micro-batches $M --pipeline-schedule $sched --report "$tmp/r.json" >/dev/null &&
      echo "| pipeline 2 stages, $sched, M=$M | $(fig "$tmp/r.json" | cut -c3-)"
  done
done

python3 - "$src/tests/keras/mlp_keras3.json" "$tmp/wide.json" <<'EOF'
import copy, json, sys
d = json.load(open(sys.argv[1]))
layers = d["config"]["layers"]
dense = [l for l in layers if l["class_name"] == "Dense"]
first = layers.index(dense[0])
hidden = []
for i in range(4):
    l = copy.deepcopy(dense[0])
    l["config"]["name"] = "wide%d" % i
    l["config"]["units"] = 1024
    hidden.append(l)
out = copy.deepcopy(dense[-1])
d["config"]["layers"] = layers[:first] + hidden + [out]
json.dump(d, open(sys.argv[2], "w"))
EOF
echo
echo "| balanced model, GPipe, 2 stages | measured bubble (stage 1) | (S-1)/(M+S-1) | samples/s |"
echo "|---|---|---|---|"
for M in 1 2 4 8; do
  "$cli" train --model "$tmp/wide.json" "${common[@]}" --strategy pipeline --stage-boundaries 3 \
    --micro-batches $M --report "$tmp/w.json" >/dev/null || continue
  python3 - "$tmp/w.json" $M <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); M = int(sys.argv[2])
st = r['pipeline']['stage']
print('| M=%d (layers %d-%d / %d-%d) | %.2f | %.2f | %.0f |' % (M, st[0]['first_layer'], st[0]['end_layer'] - 1,
      st[1]['first_layer'], st[1]['end_layer'] - 1, st[1]['bubble_fraction'], 1 / (M + 1), r['samples_per_sec']))
EOF
done
