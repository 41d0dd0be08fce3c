#!/usr/bin/env bash
# GPU failures on the emulated CUDA runtime (tests/cuda_emu; issue 33): out of
# device memory names the device, the size asked for, what is free and what to
# lower; a model with a layer that has no GPU kernel is refused naming it;
# --precision bf16 (not built) and tf32 (runs); every message exits non-zero.
# Skips (77) without the emulated module (no C++ compiler).
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
bin=$(dirname "$cli")
[ -f "$bin/cuda_emu/libstrata_cuda_emu.so" ] || { echo "skip: no emulated CUDA module in $bin"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 "$src/tests/mkidx.py" "$tmp/data" >/dev/null || exit 1
export STRATA_CUDA_MODULE=$bin/cuda_emu/libstrata_cuda_emu.so LD_LIBRARY_PATH=$bin/fake_cuda
fail=0
# row NAME EXIT PATTERN [ENV=VALUE ...] -- strata train arguments...
row() {
  local name=$1 want=$2 pattern=$3; shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$cli" train --data "$tmp/data" --epochs 1 --quiet "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? problems=""
  [ "$rc" -eq "$want" ] || problems+=" exit $rc, want $want;"
  [ -z "$pattern" ] || grep -qE -- "$pattern" "$tmp/err" || problems+=" stderr lacks /$pattern/;"
  if [ -z "$problems" ]; then echo "ok - $name"
  else echo "not ok - $name:$problems"; sed 's/^/    /' "$tmp/err"; fail=1; fi
}
row "out of device memory (a context's workspace)" 1 \
  "gpu:0: out of device memory: 32.0 MiB asked for, [0-9.]+ of 2.0 MiB free .*lower the batch size" \
  STRATA_EMU_MEM_MB=2 -- --model cnn --devices gpu:0
row "out of device memory (the variables)" 1 \
  "compile: 225034 parameters: gpu:0: out of device memory: 0.9 MiB asked for" \
  STRATA_EMU_MEM_MB=34 -- --model cnn --devices gpu:0
row "a layer without GPU kernels is named" 2 \
  "layer '[a-z_0-9]+' \(DepthwiseConv2D\) runs on host memory only: backend cuda" \
  -- --model mobilenet-tiny --devices gpu:0
row "synchronized BatchNormalization on GPUs" 2 "\(BatchNormalization, synchronized\) runs on host memory only" \
  -- --model resnet20 --sync-batchnorm --strategy mirrored --devices gpu:0,gpu:1 --logical-gpus 2
row "--precision bf16 is not built" 2 "--precision bf16 is not built yet" -- --model mlp --devices gpu:0 --precision bf16
row "--precision tf32 runs" 0 "" -- --model mlp --devices gpu:0 --precision tf32
row "a layer with host loops stays on the CPU" 0 "" -- --model mobilenet-tiny
exit $fail
