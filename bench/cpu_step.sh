#!/usr/bin/env bash
# CPU time per training step, one thread each, of Strata builds and PyTorch
# 1.13 on the transformer (or resnet20) of bench/graph_bench.py: user +
# system seconds of a run of STEPS steps minus a run of FEW steps (what
# start-up, model building and the first steps cost cancels), over
# STEPS - FEW steps; alternating, ROUNDS rounds (the order reversed every
# other round). Robust to a loaded machine where wall time is not: a
# process's CPU time does not grow while it waits for a CPU (cache and
# frequency effects of the neighbours remain). Also prints each run's peak
# RSS (the STEPS run's, /usr/bin/time's %M).
# Usage: bench/cpu_step.sh [-m transformer|resnet20] [-r ROUNDS] [-s STEPS] [-f FEW]
#          GRAPH_BENCH [GRAPH_BENCH...]     (PyTorch is added as the last column)
set -u
model=transformer rounds=3 steps=8 few=3
while getopts "m:r:s:f:" o; do
  case $o in
    m) model=$OPTARG ;; r) rounds=$OPTARG ;; s) steps=$OPTARG ;; f) few=$OPTARG ;;
    *) sed -n 2,13p "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n 2,13p "$0"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
batch=16; [ "$model" = resnet20 ] && batch=64
declare -a names cmds
for b in "$@"; do names+=("$b"); cmds+=("$b --model $model --batch $batch --threads 1 --warmup 0"); done
names+=("torch"); cmds+=("/usr/bin/python3 $here/graph_torch.py --model $model --batch $batch --threads 1 --warmup 0")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cpu() { # cmd steps -> "cpu_seconds maxrss_kib"
  /usr/bin/time -f "%U %S %M" -o /tmp/cpu_step.$$ $1 --steps "$2" >/dev/null 2>&1 || { echo "FAIL"; return; }
  awk '{printf "%.3f %d\n", $1 + $2, $3}' /tmp/cpu_step.$$
}
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
n=${#cmds[@]}
for ((r = 1; r <= rounds; r++)); do
  order=$(seq 0 $((n - 1))); [ $((r % 2)) -eq 0 ] && order=$(seq $((n - 1)) -1 0)
  for i in $order; do
    read -r a rss < <(cpu "${cmds[$i]}" "$steps")
    read -r b _ < <(cpu "${cmds[$i]}" "$few")
    ms=$(awk -v a="$a" -v b="$b" -v s=$((steps - few)) 'BEGIN{printf "%.1f", 1000 * (a - b) / s}')
    echo "round $r ${names[$i]}: ${ms} ms CPU per step (runs ${a}s, ${b}s), peak RSS $((rss / 1024)) MiB"
  done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f /tmp/cpu_step.$$
