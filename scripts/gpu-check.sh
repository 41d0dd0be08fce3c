#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU and the CUDA toolkit (issue 16,
# docs/GPU.md): builds Strata with the CUDA module into build-gpu/ (Release,
# -DSTRATA_CUDA=ON), runs the GPU tests and the acceptance runs that exist,
# and prints a short report: device, versions, each check and pass/fail.
# Usage: scripts/gpu-check.sh [BUILD_DIR]   (default build-gpu)
# Exit 0 when every check that ran passed. Checks whose feature does not exist
# yet (strategies on GPUs) are reported as "not yet" and do not fail the run.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
b=${1:-$root/build-gpu}
report=()
fail=0
say() { report+=("$1"); echo "== $1"; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L failed)"; exit 77
fi
say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
say "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo missing)"

t0=$(date +%s)
if cmake -S "$root" -B "$b" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON >"$b.configure.log" 2>&1 &&
   cmake --build "$b" -j"$(nproc)" >"$b.build.log" 2>&1; then
  say "build: ok in $(( $(date +%s) - t0 )) s ($b, module $(ls "$b"/libstrata_cuda.so 2>/dev/null))"
else
  say "build: FAILED (see $b.configure.log, $b.build.log)"; printf '%s\n' "${report[@]}"; exit 1
fi

# check NAME COMMAND...: runs it, records pass/fail (exit 77: skipped).
check() {
  local name=$1; shift
  local t=$(date +%s.%N)
  "$@" >"$b/check.log" 2>&1
  local rc=$? dt; dt=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t" | bc)")
  case $rc in
    0) say "$name: pass (${dt} s)" ;;
    77) say "$name: skipped: $(grep -m1 -i skip "$b/check.log")" ;;
    *) say "$name: FAIL (exit $rc, ${dt} s; last lines below)"; tail -n 15 "$b/check.log"; fail=1 ;;
  esac
}
check "conformance: every cuda slot vs the reference (test_cuda_backend)" "$b/test_cuda_backend"
check "the same sources on the emulated runtime (test_cuda_emulated)" env STRATA_CLI="$b/strata" \
  bash "$root/tests/test_cuda_emulated.sh"
check "device checks (test_gpu_devices)" env STRATA_CLI="$b/strata" STRATA_SOURCE_DIR="$root" \
  bash "$root/tests/test_gpu_devices.sh"
check "CPU suite unaffected (test_kernels, test_strategy)" bash -c "'$b/test_kernels' && '$b/test_strategy'"

# Training on the GPU: the strategies do not use the cuda backend yet.
out=$("$b/strata" train --model cnn --epochs 1 --batch-size 128 --strategy mirrored \
  --devices gpu:0 --train-examples 1024 --quiet 2>&1); rc=$?
if [ $rc -eq 0 ]; then say "train cnn on gpu:0: ran (exit 0)"
elif grep -q "does not run strategies on GPUs yet" <<<"$out"; then
  say "train cnn on gpu:0: not yet (strategies are not wired to the cuda backend; docs/GPU.md)"
else say "train cnn on gpu:0: FAIL: $out"; fail=1; fi

echo; echo "---- gpu-check report ----"; printf '%s\n' "${report[@]}"
exit $fail
