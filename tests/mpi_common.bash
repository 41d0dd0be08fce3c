# Shared by the tests that run strata under mpirun (sourced; not a test itself:
# CTest runs tests/*.sh only). Skips (77) without mpirun or when Strata was
# built without MPI; sets cli, src, a temp dir $tmp (removed at exit),
# OpenMPI's run-as-root and oversubscribe settings and the sanitizers'
# OpenMPI suppressions (tests/lsan-mpi.supp, tests/tsan-mpi.supp), and
# `check NAME CMD`, which prints ok / not ok and sets fail=1 on a failure.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export LSAN_OPTIONS="suppressions=$src/tests/lsan-mpi.supp:fast_unwind_on_malloc=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$src/tests/tsan-mpi.supp"
python3 "$src/tests/mkidx.py" "$tmp/probe-data" || exit 1
if ! "$cli" train --strategy multi_worker_mirrored --model mlp --data "$tmp/probe-data" \
     --batch-size 64 --quiet >/dev/null 2>"$tmp/probe.err"; then
  grep -q "has no MPI" "$tmp/probe.err" &&
    { echo "SKIP: this build of Strata has no MPI transport ($(cat "$tmp/probe.err"))"; exit 77; }
fi
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
