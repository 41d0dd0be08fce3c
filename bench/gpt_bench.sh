#!/usr/bin/env bash
# GPT-2 124M training speed (issue 31 "Speed"): Strata's `strata train --model
# gpt --gpt-preset gpt2-124m`, llm.c's train_gpt2.c and PyTorch 1.13's
# gpt2_torch.py (the peers in ../shared/peers/), same config (B=4, T=64,
# AdamW lr 1e-4, all cores), same inputs (llmc/make_inputs.py: the checkpoint
# with GPT-2's initialisation and the uint16 token shard, read in order), run
# one after the other, alternating, REPS times. Each program times its own
# steps (forward + backward + update; Strata's '--log-every 1' line, llm.c's
# and PyTorch's 'took X ms'); the first step of every run is left out (page
# faults, warm-up), the medians are over all kept steps of all rounds, the
# range over the rounds' medians. It prints, per program: median ms/step,
# tokens/s, GFLOP/s and its fraction of the 2-core sgemm peak
# (bench/sgemm_bench.c's 512^3, measured once per round, median), and the
# ratios to Strata. FLOP per step: 6 B T (12 L C^2 + V C) (every matmul
# weight: the blocks' four linear layers and the tied head) + 12 L B T^2 C
# (attention's two batched products, forward and backward) = 191.6 GFLOP.
#
# Usage: bench/gpt_bench.sh [--reps R] [--steps N] [--work DIR] [--strata BIN]
#                           [--before BIN] [--peers DIR] [--only strata,llmc,torch]
# --before BIN adds a second Strata binary (an earlier build: 'before') to
# every round, so a change is measured side by side with the peers.
# Defaults: 3 rounds of 6 timed steps, DIR /tmp/gpt-bench, BIN build/strata,
# peers ../shared/peers (from the repository root). PyTorch is skipped (with a
# line saying so) when /usr/bin/python3 cannot import torch.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
reps=3 steps=6 work=/tmp/gpt-bench strata=$here/build/strata peers=$here/../shared/peers
only=strata,llmc,torch before=
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2;; --steps) steps=$2; shift 2;; --work) work=$2; shift 2;;
    --strata) strata=$2; shift 2;; --before) before=$2; only=$only,before; shift 2;; --peers) peers=$2; shift 2;; --only) only=$2; shift 2;;
    *) echo "gpt_bench.sh: unknown argument $1" >&2; exit 2;;
  esac
done
[ -d "$peers/llmc" ] || peers=/work/shared/peers
[ -x "$strata" ] || { echo "gpt_bench.sh: $strata not built" >&2; exit 2; }
py=/usr/bin/python3
mkdir -p "$work/out"
want() { case ",$only," in *",$1,"*) return 0;; esac; return 1; }

# Inputs and peers, once.
[ -f "$work/gpt2_124M.bin" ] || $py "$peers/llmc/make_inputs.py" "$work" >/dev/null
if want llmc && [ ! -x "$work/train_gpt2" ]; then
  cc -Ofast -march=native -fopenmp -DOMP -I"$peers/llmc" "$peers/llmc/train_gpt2.c" -lm \
     -o "$work/train_gpt2"
fi
if want torch && ! $py -c 'import torch' 2>/dev/null; then
  echo "PyTorch: not installed for $py (apt-get install python3-torch): skipped"
  only=${only//torch/}
fi
lib=$(dirname "$strata")/libstrata.a; [ -f "$lib" ] || lib=$here/build/libstrata.a
gcc -O2 -std=c11 -I"$here/include" -I"$here/src" "$here/bench/sgemm_bench.c" \
    "$lib" -ldl -lm -lpthread -lz -ljansson -o "$work/sgemm_bench"
shard=$work/dev/data/tinyshakespeare/tiny_shakespeare_train.bin

# Each runner writes one step time (ms) per line, the first step left out.
run_strata() { # the train shard only: no validation set, no validation pass
  "${1:-$strata}" train --model gpt --gpt-preset gpt2-124m --seq-len 64 --batch-size 4 \
    --init-from "$work/gpt2_124M.bin" --data "$shard" --no-shuffle --lr 1e-4 \
    --steps $((steps + 1)) --eval-every $((steps + 1)) --log-every 1 >"$work/out/${2:-strata}.log" 2>&1
  awk '/step_loss/ && $2 != "1:" {print $(NF-1)}' "$work/out/${2:-strata}.log"
}
run_before() { run_strata "$before" before; }
run_llmc() { # its 41 steps (with generation) are cut after step N
  (cd "$work" && exec stdbuf -oL ./train_gpt2 >"$work/out/llmc.log" 2>&1) & local pid=$!
  while kill -0 $pid 2>/dev/null && ! grep -q "^step $steps: " "$work/out/llmc.log" 2>/dev/null; do
    sleep 0.5
  done
  kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true
  grep -o 'took [0-9.]* ms' "$work/out/llmc.log" | awk 'NR > 1 {print $2}'
}
run_torch() {
  $py "$peers/gpt2_torch.py" "$work" --steps $steps --threads "$(nproc)" --lr 1e-4 \
    >"$work/out/torch.log" 2>&1
  grep -o 'took [0-9.]* ms' "$work/out/torch.log" | awk 'NR > 1 {print $2}'
}
peak() { "$work/sgemm_bench" fix "$(nproc)" | awk '/512/ {print $(NF-1)}'; }

: >"$work/out/peak.txt"
for p in strata before llmc torch; do : >"$work/out/$p.all"; : >"$work/out/$p.rounds"; done
for r in $(seq 1 "$reps"); do
  for p in strata before llmc torch; do
    want $p || continue
    run_$p >"$work/out/$p.r" || true # a run that timed no step (killed, failed) adds none
    [ -s "$work/out/$p.r" ] || echo "round $r $p: no step timed (see $work/out/$p.log)"
    cat "$work/out/$p.r" >>"$work/out/$p.all"
    sort -g "$work/out/$p.r" | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]}' >>"$work/out/$p.rounds"
    echo "round $r $p: $(tr '\n' ' ' <"$work/out/$p.r")ms"
  done
  peak >>"$work/out/peak.txt"
done

# The same inputs give the same losses: the first three steps of the last round.
losses() { case $1 in
  strata|before) awk '/step_loss/ {printf " %s", $4}' "$work/out/$1.log";;
  *) grep -o 'train loss [0-9.]*' "$work/out/$1.log" | awk '{printf " %s", $3}';; esac | cut -d' ' -f2-4; }
for p in strata before llmc torch; do
  if [ -s "$work/out/$p.all" ]; then echo "$p losses, steps 1-3: $(losses $p)"; fi
done
med() { sort -g "$1" | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print 0}'; }
pk=$(med "$work/out/peak.txt")
gflop=$(awk 'BEGIN{B=4;T=64;L=12;C=768;V=50257; printf "%.2f", (6*B*T*(12*L*C*C+V*C) + 12*L*B*T*T*C)/1e9}')
s_ms=$(med "$work/out/strata.all")
echo
echo "GPT-2 124M, B=4, T=64, AdamW, $(nproc) cores; $reps alternating rounds of $steps timed steps;"
echo "$gflop GFLOP/step; sgemm 512^3 peak on $(nproc) threads (median of rounds): $pk GFLOP/s"
printf "%-8s %12s %16s %10s %9s %8s %10s\n" program "ms/step" "rounds' range" tokens/s GFLOP/s "of peak" "vs Strata"
for p in strata before llmc torch; do
  [ -s "$work/out/$p.all" ] || continue
  m=$(med "$work/out/$p.all")
  lo=$(sort -g "$work/out/$p.rounds" | head -1) hi=$(sort -g "$work/out/$p.rounds" | tail -1)
  awk -v p=$p -v m="$m" -v lo="$lo" -v hi="$hi" -v g="$gflop" -v pk="$pk" -v s="$s_ms" 'BEGIN{
    printf "%-8s %12.0f %16s %10.0f %9.1f %7.0f%% %9.2fx\n", p, m, sprintf("%.0f-%.0f", lo, hi),
      256 / (m / 1000), g / (m / 1000), (pk > 0 ? 100 * g / (m / 1000) / pk : 0), (s > 0 ? m / s : 0)}'
done
