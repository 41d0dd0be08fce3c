#!/usr/bin/env bash
# The CUDA backend module's own sources (src/backend/cuda/: table, contexts,
# caching allocator, the gemm's row-major to cuBLASLt mapping, every kernel's
# per-element code) run on an emulated CUDA runtime and cuBLASLt
# (tests/cuda_emu/, built as build/cuda_emu/libstrata_cuda_emu.so), checked by
# the GPU conformance test tests/test_cuda_backend.c against the reference
# backend. Runs on any machine; what it cannot check (real devices,
# asynchrony, cuBLASLt's own kernels, launch limits) is for a GPU session
# (docs/GPU.md). Skips when the build has no C++ compiler (no emulated module).
set -u
cli=${STRATA_CLI:?set by CTest}
bin=$(dirname "$cli")
emu=$bin/cuda_emu/libstrata_cuda_emu.so
[ -f "$emu" ] || { echo "skip: no emulated CUDA module ($emu: the build found no C++ compiler)"; exit 77; }
[ -f "$bin/fake_cuda/libcuda.so.1" ] || { echo "skip: no stand-in libcuda.so.1"; exit 77; }
err=$(mktemp); trap 'rm -f "$err"' EXIT
STRATA_CUDA_MODULE=$emu LD_LIBRARY_PATH=$bin/fake_cuda "$bin/test_cuda_backend" 2>"$err"
rc=$?
cat "$err" >&2
if [ $rc -ne 0 ]; then echo "not ok - test_cuda_backend on the emulated module (exit $rc)"; exit 1; fi
grep -qE '^[1-9][0-9]* checks, 0 failed' "$err" ||
  { echo "not ok - test_cuda_backend ran no checks"; exit 1; }
echo "ok - test_cuda_backend on the emulated CUDA module: $(tail -n 1 "$err")"
