#!/usr/bin/env bash
# The one command for a machine with an NVIDIA GPU (issues 16 and 33,
# docs/GPU.md). Builds Strata with the CUDA module into build-gpu/ (Release,
# -DSTRATA_CUDA=ON, -j$(nproc)) or takes a build made elsewhere (--prebuilt),
# runs every GPU check with a time limit of its own, and writes one Markdown
# report ($OUT/gpu-report.md when OUT is set, else build-gpu/gpu-report.md),
# also when a step times out or fails.
#
# Usage: scripts/gpu-check.sh [--prebuilt DIR] [--emulated] [--only REGEX] [--report FILE]
#   --prebuilt DIR   binaries built on another machine (strata, test_cuda_backend,
#                    libstrata_cuda.so, ...); their libraries on LD_LIBRARY_PATH
#   --emulated       the rehearsal without a GPU (CI: tests/test_gpu_check.sh):
#                    the same steps on the emulated CUDA runtime of tests/cuda_emu
#                    (DIR/cuda_emu), on small synthetic data, PyTorch left out
#   --only REGEX     run only the steps whose name matches (a rerun of failures)
# Data: Fashion-MNIST from $FMNIST_DIR, else /usr/share/datasets/fashion-mnist.
# Exit 0 when every step that ran passed, 1 otherwise, 77 without a GPU.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
b=$root/build-gpu prebuilt="" only="" report="" emulated=0
while [ $# -gt 0 ]; do
  case $1 in
    --prebuilt) prebuilt=$2; b=$(cd "$2" && pwd); shift 2 ;;
    --emulated) emulated=1; shift ;;
    --only) only=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    *) echo "gpu-check: unknown argument '$1' (--prebuilt DIR, --emulated, --only REGEX, --report FILE)" >&2; exit 2 ;;
  esac
done
out=${OUT:-$b}
mkdir -p "$out" "$b"
report=${report:-$out/gpu-report.md}
logs=$out/gpu-logs.txt
: >"$logs"
fail=0
t_start=$(date +%s)
say() { echo "$1" | tee -a "$report"; }
{ echo "# gpu-check report"; echo; echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?') (of the tree the script ran in; a --prebuilt build may be another: its strata's sha256 $(sha256sum "$b/strata" 2>/dev/null | cut -c1-12))"; echo; } >"$report"

if [ $emulated = 1 ]; then
  [ -n "$prebuilt" ] || { echo "gpu-check: --emulated needs --prebuilt DIR (a build with cuda_emu/)" >&2; exit 2; }
  [ -f "$b/cuda_emu/libstrata_cuda_emu.so" ] && [ -f "$b/fake_cuda/libcuda.so.1" ] ||
    { say "skip: no emulated CUDA module in $b (the build found no C++ compiler)"; exit 77; }
  export STRATA_CUDA_MODULE=$b/cuda_emu/libstrata_cuda_emu.so
  export LD_LIBRARY_PATH=$b/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  say "- device: the emulated CUDA runtime (tests/cuda_emu: host memory, guarded)"
elif ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no NVIDIA GPU here (nvidia-smi -L failed): skip"; exit 77
else
say "- device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
say "- nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo missing); cmake: $(cmake --version 2>/dev/null | head -1)"
say "- torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo missing); mpirun: $(command -v mpirun || echo missing)"
fi
say "- cores: $(nproc); build deps found: $(for m in jansson libprotobuf-c libzmq; do pkg-config --exists $m 2>/dev/null && printf '%s ' $m; done)$(command -v protoc-c >/dev/null && printf 'protoc-c ')$(ls /usr/lib/x86_64-linux-gnu/libopenblas.so* >/dev/null 2>&1 && printf openblas)"
echo >>"$report"; echo "| step | result | seconds |" >>"$report"; echo "|---|---|---|" >>"$report"

# run_limited LIMIT_S COMMAND...: a command or a function of this script,
# stopped with everything it started after LIMIT_S (exit 124 then).
kill_tree() { local p; for p in $(pgrep -P "$1"); do kill_tree "$p"; done; kill -TERM "$1" 2>/dev/null; }
run_limited() {
  local limit=$1; shift
  ( "$@" ) &
  local pid=$! w rc
  ( sleep "$limit" && touch "$b/step.timedout" && kill_tree "$pid" ) >/dev/null 2>&1 &
  w=$!
  rm -f "$b/step.timedout"
  wait "$pid"; rc=$?
  kill_tree "$w"; wait "$w" 2>/dev/null
  [ -f "$b/step.timedout" ] && rc=124
  rm -f "$b/step.timedout"
  return $rc
}

# step NAME LIMIT_S COMMAND...: runs it under a time limit; exit 0 pass,
# 77 skipped, 124 timed out, else FAIL. Its output goes to the log file; the
# lines starting "RESULT " or "REPORT " go into the report too.
step() {
  local name=$1 limit=$2; shift 2
  if [ -n "$only" ] && ! grep -qE -- "$only" <<<"$name"; then return 0; fi
  local t=$(date +%s.%N) rc dt res
  echo "==== $name" >>"$logs"
  run_limited "$limit" "$@" >"$b/step.log" 2>&1
  rc=$?
  dt=$(python3 -c "import time; print(f'{time.time() - $t:.1f}')")
  cat "$b/step.log" >>"$logs"
  case $rc in
    0) res="pass" ;;
    77) res="skipped: $(grep -m1 -i skip "$b/step.log" | cut -c1-160)" ;;
    124|137) res="TIMED OUT after $limit s"; fail=1 ;;
    *) res="FAIL (exit $rc): $( (grep -v '^RESULT' "$b/step.log" | grep -m3 -iE 'fail|error|not ok|mismatch' || tail -n 2 "$b/step.log") | tr '\n|' ' /' | cut -c1-300)"; fail=1 ;;
  esac
  echo "| $name | $res | $dt |" >>"$report"
  echo "== $name: $res ($dt s)"
  grep -E '^(RESULT|REPORT) ' "$b/step.log" | sed 's/^/    /' >>"$b/results.txt"
}
: >"$b/results.txt"

if [ -z "$prebuilt" ]; then
  step "build (-DSTRATA_CUDA=ON, -j$(nproc))" 300 bash -c "cmake -S '$root' -B '$b' -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON && cmake --build '$b' -j$(nproc)"
fi
[ -x "$b/strata" ] || { say "no build at $b: stop"; exit 1; }

step "conformance: every cuda slot vs the reference (test_cuda_backend)" 180 "$b/test_cuda_backend"
[ $emulated = 0 ] && step "device checks (test_gpu_devices)" 60 env STRATA_CLI="$b/strata" STRATA_SOURCE_DIR="$root" bash "$root/tests/test_gpu_devices.sh"

# The training checks (issue 33's acceptance): data, sizes and tolerances.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ $emulated = 1 ]; then
  python3 "$root/tests/mkidx.py" "$tmp/data" >/dev/null || exit 1
  data=$tmp/data; full=(--train-examples 64 --batch-size 32); sgd_n=64; sgd_b=16; seeds="1 2"; cpu_n=64
else
  data=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
  full=(--batch-size 128); sgd_n=2560; sgd_b=128; seeds="1 2 3"; cpu_n=512
fi
S=("$b/strata" train --data "$data" --quiet)
# same_weights A B LABEL: max |a - b| <= 1e-5 (issue 33), the figure in the report.
same_weights() { python3 "$root/tests/cmp_weights.py" "$1" "$2" 1e-5 --abs | sed "s/^/REPORT $3: /"; return "${PIPESTATUS[0]}"; }

acc() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['$2'])" "$1"; }
cnn_accuracy() { # cnn on gpu:0 trains to the CPU's test accuracy within 0.01
  "${S[@]}" --model cnn --epochs 1 "${full[@]}" --devices gpu:0 --report "$tmp/g.json" &&
  "${S[@]}" --model cnn --epochs 1 "${full[@]}" --report "$tmp/c.json" || return 1
  local g c; g=$(acc "$tmp/g.json" test_accuracy); c=$(acc "$tmp/c.json" test_accuracy)
  echo "REPORT cnn 1 epoch test accuracy: gpu:0 $g, CPU $c; samples/s gpu:0 $(acc "$tmp/g.json" samples_per_sec), CPU $(acc "$tmp/c.json" samples_per_sec)"
  python3 -c "import sys; sys.exit(0 if abs($g - $c) <= 0.01 else 1)"
}
# mirrored (or STRATEGY) on 2 logical GPUs = one GPU's weights within 1e-5
# (SGD, 20 steps of 128, per seed; the median is what the issue asks), and
# a repeat is bit for bit the same.
two_logical() {
  local strategy=$1 model=$2 d=() fails=0 s
  for s in $seeds; do
    local A=(--model "$model" --optimizer sgd --epochs 1 --train-examples $sgd_n --batch-size $sgd_b --seed "$s")
    "${S[@]}" "${A[@]}" --devices gpu:0 --save "$tmp/one-$s.st" &&
    "${S[@]}" "${A[@]}" --strategy "$strategy" --devices gpu:0,gpu:1 --logical-gpus 2 --save "$tmp/two-$s.st" || return 1
    same_weights "$tmp/two-$s.st" "$tmp/one-$s.st" "$strategy x2 vs one GPU, $model, seed $s" || fails=$((fails + 1))
  done
  "${S[@]}" --model "$model" --optimizer sgd --epochs 1 --train-examples $sgd_n --batch-size $sgd_b --seed 1 \
    --strategy "$strategy" --devices gpu:0,gpu:1 --logical-gpus 2 --save "$tmp/again.st" || return 1
  cmp "$tmp/two-1.st" "$tmp/again.st" && echo "REPORT $strategy x2 $model: a repeat is bit for bit the same" || return 1
  [ $fails -le $(( $(wc -w <<<"$seeds") / 2 )) ] # the median seed within 1e-5
}
# STRATEGY on 2 logical GPUs = the same on 2 CPU replicas of the reference
# backend within 1e-5 (mlp and cnn, SGD, 4 steps of 128; the kernels sum in
# other orders, and the differences grow with the steps: after 20 steps the
# cnn's first bias differed by 2.6e-5 on an H200).
vs_cpu() {
  local strategy=$1 model
  for model in mlp cnn; do
    local A=(--model $model --optimizer sgd --epochs 1 --train-examples $cpu_n --batch-size $sgd_b --seed 1
             --strategy "$strategy")
    "${S[@]}" "${A[@]}" --devices gpu:0,gpu:1 --logical-gpus 2 --save "$tmp/g.st" &&
    STRATA_BACKEND=reference "${S[@]}" "${A[@]}" --devices cpu:0,cpu:1 --save "$tmp/c.st" || return 1
    same_weights "$tmp/g.st" "$tmp/c.st" "$strategy x2 GPU vs CPU reference, $model" || return 1
  done
}
mpi_two() { # multi_worker_mirrored, 2 processes on one GPU = mirrored on 2 logical GPUs
  command -v mpirun >/dev/null || { echo "skip: no mpirun"; return 77; }
  local A=(--model cnn --optimizer sgd --epochs 1 --train-examples $sgd_n --batch-size $sgd_b --seed 1)
  mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x STRATA_CUDA_MODULE \
    "${S[@]}" "${A[@]}" --strategy multi_worker_mirrored --devices gpu:0 --save "$tmp/mw.st" || return 1
  "${S[@]}" "${A[@]}" --strategy mirrored --devices gpu:0,gpu:1 --logical-gpus 2 --save "$tmp/m2.st" || return 1
  same_weights "$tmp/mw.st" "$tmp/m2.st" "mpirun -np 2 vs mirrored x2, cnn"
}
nccl_two() { # mirrored on 2 GPUs through NCCL = on 2 logical GPUs through the host
  local gpus=2 env=()
  if [ $emulated = 1 ]; then
    env=(STRATA_EMU_GPUS=2 STRATA_NCCL_LIB="$b/cuda_emu/nccl/libnccl.so.2")
  else
    gpus=$(nvidia-smi -L | wc -l)
    [ "$gpus" -ge 2 ] || { echo "skip: NCCL needs 2 physical GPUs, this machine has $gpus"; return 77; }
  fi
  local A=(--model cnn --optimizer sgd --epochs 1 --train-examples $sgd_n --batch-size $sgd_b --seed 1)
  env "${env[@]}" STRATA_LOG=info "${S[@]}" "${A[@]}" --strategy mirrored --devices gpu:0,gpu:1 \
    --save "$tmp/nccl.st" 2>"$tmp/nccl.log" || { cat "$tmp/nccl.log"; return 1; }
  grep -q "GPU replica(s): NCCL" "$tmp/nccl.log" || { echo "NCCL was not used:"; cat "$tmp/nccl.log"; return 1; }
  "${S[@]}" "${A[@]}" --strategy mirrored --devices gpu:0,gpu:1 --logical-gpus 2 --save "$tmp/l2.st" || return 1
  same_weights "$tmp/nccl.st" "$tmp/l2.st" "NCCL vs host staging, cnn"
}
speed() { # samples/s on gpu:0, batch 128, one epoch (REPORT line; PyTorch below)
  local model=$1; shift
  "${S[@]}" --model "$model" --epochs 1 "${full[@]}" --devices gpu:0 --report "$tmp/s.json" "$@" || return 1
  echo "REPORT strata $model gpu:0 batch 128 $*: $(acc "$tmp/s.json" samples_per_sec) samples/s, test accuracy $(acc "$tmp/s.json" test_accuracy)"
}
step "cnn on gpu:0: CPU's test accuracy within 0.01" 240 cnn_accuracy
step "mirrored on 2 logical GPUs = one GPU within 1e-5 (cnn, SGD), repeatable" 240 two_logical mirrored cnn
step "mirrored on 2 logical GPUs = one GPU within 1e-5 (mlp, SGD), repeatable" 120 two_logical mirrored mlp
step "central_storage on 2 logical GPUs = one GPU within 1e-5 (cnn, SGD)" 240 two_logical central_storage cnn
step "mirrored x2 on GPUs = the CPU reference backend's mirrored x2 within 1e-5 (mlp, cnn)" 120 vs_cpu mirrored
step "central_storage x2 on GPUs = the CPU reference backend's within 1e-5 (mlp, cnn)" 120 vs_cpu central_storage
step "multi_worker_mirrored: mpirun -np 2 on one GPU = mirrored x2" 90 mpi_two
step "mirrored on 2 GPUs through NCCL = 2 logical GPUs through the host" 120 nccl_two
if [ $emulated = 0 ]; then
  step "resnet20 on gpu:0 (one epoch of 5120)" 120 speed resnet20 --train-examples 5120
else
  echo "| resnet20 on gpu:0 | skipped: a step takes minutes on the emulator's plain-loop gemm | 0 |" >>"$report"
fi
for model in cnn mlp; do
  step "speed: strata $model on gpu:0, batch 128" 120 speed $model
  [ $model = cnn ] && step "speed: strata cnn on gpu:0, batch 128, --precision tf32" 120 speed cnn --precision tf32
  [ $emulated = 0 ] && step "speed: PyTorch eager, $model, batch 128" 90 env -u LD_LIBRARY_PATH python3 "$root/bench/torch_gpu.py" --model $model --batch 128 --steps 400
done
[ $emulated = 0 ] && step "speed: PyTorch torch.compile, cnn, batch 128" 120 env -u LD_LIBRARY_PATH python3 "$root/bench/torch_gpu.py" --model cnn --batch 128 --steps 400 --compile

{ echo; echo "Results (JSON lines of the steps):"; echo; echo '```'; cat "$b/results.txt"; echo '```'; echo;
  echo "Total: $(( $(date +%s) - t_start )) s; logs: $logs"; } >>"$report"
cat "$report"
exit $fail
