#!/usr/bin/env bash
# scripts/gpu-check.sh --emulated (issue 33): the GPU machine's one command
# rehearsed on the emulated CUDA runtime of tests/cuda_emu (guarded device
# memory): the conformance test, cnn on gpu:0 against the CPU's accuracy,
# mirrored and central_storage on 2 logical GPUs against one GPU (1e-5,
# repeatable), multi_worker_mirrored under mpirun -np 2 on one GPU against
# mirrored x2, resnet20 and the cnn/mlp speed runs; the report must list every
# step as passed. Skips (77) without the emulated module (no C++ compiler).
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
bin=$(dirname "$cli")
[ -f "$bin/cuda_emu/libstrata_cuda_emu.so" ] || { echo "skip: no emulated CUDA module in $bin"; exit 77; }
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
# its mpirun step under the sanitizers: OpenMPI's own leaks suppressed, as in
# tests/mpi_common.bash
export LSAN_OPTIONS="suppressions=$src/tests/lsan-mpi.supp:fast_unwind_on_malloc=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$src/tests/tsan-mpi.supp"
OUT=$out bash "$src/scripts/gpu-check.sh" --emulated --prebuilt "$bin" --only "${GPU_CHECK_ONLY:-}" >"$out/log" 2>&1
rc=$?
cat "$out/gpu-report.md"
[ $rc -eq 77 ] && exit 77
fails=$(grep -cE '\| (FAIL|TIMED OUT)' "$out/gpu-report.md")
passes=$(grep -c '| pass |' "$out/gpu-report.md")
if [ $rc -ne 0 ] || [ "$fails" -ne 0 ] || [ "$passes" -lt 11 ]; then
  echo "not ok - gpu-check --emulated: exit $rc, $fails failed, $passes passed (want >= 11)"
  tail -n 40 "$out/gpu-logs.txt"
  exit 1
fi
echo "ok - gpu-check --emulated: $passes steps passed"
