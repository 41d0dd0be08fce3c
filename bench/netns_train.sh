#!/usr/bin/env bash
# Training throughput of multi_worker_mirrored between 2 emulated hosts
# (the network namespaces of tests/netns_common.bash, one core each):
# launched the TensorFlow way (one `strata train` per host with its
# TF_CONFIG: the Gloo transport) against mpirun (the MPI transport over btl
# tcp), the two alternated round by round. Prints worker 0's samples/s
# (`--report`) per run and the medians [min-max] per model and launch.
#   sudo bench/netns_train.sh [ROUNDS=3] [MODELS="mlp cnn"]
# mlp: 60000 examples, cnn: 12800, batch 128 (64 a worker), 1 epoch.
# STRATA_MPI_SHM=0 for both: the namespaces share one kernel and hostname,
# and the MPI transport would otherwise all-reduce through shared memory.
# Needs root, ip, taskset, mpirun, a build with MPI and Gloo (build/strata)
# and Fashion-MNIST in /usr/share/datasets/fashion-mnist.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
cli=${STRATA_CLI:-$src/build/strata}
rounds=${1:-3} models=${2:-mlp cnn}
data=/usr/share/datasets/fashion-mnist
skip() { echo "netns_train: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
for t in ip taskset mpirun; do command -v $t >/dev/null || skip "$t not found"; done
[ -x "$cli" ] || skip "$cli not found (build first)"
. "$src/tests/netns_common.bash"
netns_launch_host
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STRATA_MPI_SHM=0
h2=("${hosts[@]:0:2}")
cl=$(printf '"%s:2345",' "${h2[@]}"); cl="\"worker\": [${cl%,}]"
examples() { [ "$1" = cnn ] && echo 12800 || echo 60000; }
args() { echo train --model "$1" --epochs 1 --batch-size 128 --train-examples "$(examples "$1")" \
  --quiet --strategy multi_worker_mirrored --collective-timeout 60; }
tf_config() { # MODEL: one worker per host; worker 0's report
  for i in 0 1; do
    TF_CONFIG="{\"cluster\": {$cl}, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
      ip netns exec "strata-$id-$i" taskset -c $((i % $(nproc))) \
      timeout 600 "$cli" $(args "$1") --report "$tmp/tf.$i.json" >/dev/null 2>"$tmp/tf.err.$i" &
  done
  wait
  cp "$tmp/tf.0.json" "$tmp/out.json" 2>/dev/null
}
mpi() { # MODEL: mpirun -np 2, one rank per host; rank 0's report
  timeout 600 "${mpi_base[@]}" -np 2 -x STRATA_MPI_SHM -H "$(IFS=,; echo "${h2[*]}")" \
    "$cli" $(args "$1") --report "$tmp/mpi.json" >/dev/null 2>"$tmp/mpi.err"
  cp "$tmp/mpi.json" "$tmp/out.json" 2>/dev/null
}
sps() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['samples_per_sec']))" "$1"; }
echo "# $(uptime)"
for m in $models; do
  for r in $(seq "$rounds"); do
    order="tf_config mpi"; [ $((r % 2)) = 0 ] && order="mpi tf_config"
    for how in $order; do
      rm -f "$tmp/out.json"
      $how "$m"
      if [ -s "$tmp/out.json" ]; then v=$(sps "$tmp/out.json"); else v=failed; fi
      echo "$m $how round $r: $v samples/s"
      echo "$m $how $v" >>"$tmp/rows"
    done
  done
done
echo "# $(uptime)"
python3 - "$tmp/rows" <<'P'
import statistics, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m, how, v = line.split()
    if v != "failed": rows[(m, how)].append(int(v))
for (m, how), v in rows.items():
    print(f"{m} {how}: median {statistics.median(v):.0f} [{min(v)}-{max(v)}] samples/s over {len(v)} runs")
P
