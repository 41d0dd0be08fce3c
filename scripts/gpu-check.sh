#!/usr/bin/env bash
# The one command for a machine with an NVIDIA GPU (issues 16 and 33,
# docs/GPU.md). Builds Strata with the CUDA module into build-gpu/ (Release,
# -DSTRATA_CUDA=ON, -j$(nproc)) or takes a build made elsewhere (--prebuilt),
# runs every GPU check with a time limit of its own, and writes one Markdown
# report ($OUT/gpu-report.md when OUT is set, else build-gpu/gpu-report.md),
# also when a step times out or fails.
#
# Usage: scripts/gpu-check.sh [--prebuilt DIR] [--only REGEX] [--report FILE]
#   --prebuilt DIR   binaries built on another machine (strata, test_cuda_backend,
#                    libstrata_cuda.so, ...); their libraries on LD_LIBRARY_PATH
#   --only REGEX     run only the steps whose name matches (a rerun of failures)
# Exit 0 when every step that ran passed, 1 otherwise, 77 without a GPU.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
b=$root/build-gpu prebuilt="" only="" report=""
while [ $# -gt 0 ]; do
  case $1 in
    --prebuilt) prebuilt=$2; b=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    *) echo "gpu-check: unknown argument '$1' (--prebuilt DIR, --only REGEX, --report FILE)" >&2; exit 2 ;;
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
{ echo "# gpu-check report"; echo; echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"; echo; } >"$report"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no NVIDIA GPU here (nvidia-smi -L failed): skip"; exit 77
fi
say "- device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
say "- nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo missing); cmake: $(cmake --version 2>/dev/null | head -1)"
say "- torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo missing); mpirun: $(command -v mpirun || echo missing)"
say "- cores: $(nproc); build deps found: $(for m in jansson libprotobuf-c libzmq; do pkg-config --exists $m 2>/dev/null && printf '%s ' $m; done)$(command -v protoc-c >/dev/null && printf 'protoc-c ')$(ls /usr/lib/x86_64-linux-gnu/libopenblas.so* >/dev/null 2>&1 && printf openblas)"
echo >>"$report"; echo "| step | result | seconds |" >>"$report"; echo "|---|---|---|" >>"$report"

# step NAME LIMIT_S COMMAND...: runs it under a time limit; exit 0 pass,
# 77 skipped, 124 timed out, else FAIL. Its output goes to the log file; the
# lines starting "RESULT " or "REPORT " go into the report too.
step() {
  local name=$1 limit=$2; shift 2
  if [ -n "$only" ] && ! grep -qE -- "$only" <<<"$name"; then return 0; fi
  local t=$(date +%s.%N) rc dt res
  echo "==== $name" >>"$logs"
  timeout -k 5 "$limit" "$@" >"$b/step.log" 2>&1
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
step "device checks (test_gpu_devices)" 60 env STRATA_CLI="$b/strata" STRATA_SOURCE_DIR="$root" bash "$root/tests/test_gpu_devices.sh"
step "CPU kernels unaffected (test_kernels)" 60 "$b/test_kernels"
step "train cnn on gpu:0 (mirrored, 1 device)" 120 "$b/strata" train --model cnn --epochs 1 --batch-size 128 \
  --strategy mirrored --devices gpu:0 --train-examples 4096 --quiet
for model in cnn mlp; do
  step "PyTorch eager, $model, batch 128" 90 env -u LD_LIBRARY_PATH python3 "$root/bench/torch_gpu.py" --model $model --batch 128 --steps 400
done
step "PyTorch torch.compile, cnn, batch 128" 120 env -u LD_LIBRARY_PATH python3 "$root/bench/torch_gpu.py" --model cnn --batch 128 --steps 400 --compile

{ echo; echo "Results (JSON lines of the steps):"; echo; echo '```'; cat "$b/results.txt"; echo '```'; echo;
  echo "Total: $(( $(date +%s) - t_start )) s; logs: $logs"; } >>"$report"
cat "$report"
exit $fail
