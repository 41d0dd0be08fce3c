#!/usr/bin/env bash
# Issue 29 D1/D3/D14: the processes of a pipeline agree on their flags and
# their data before (or as) they exchange anything (reliability-3.md).
#  - D1: ranks launched with different --micro-batches, --stage-boundaries or
#    --pipeline-stages (an MPMD line) wrote a message past the receiving
#    stage's buffer (SIGABRT, ASan heap-buffer-overflow) before any check:
#    now exit 2 on every rank naming the flag, the ranks and both values;
#  - D3: ranks whose input pipelines differ (--shuffle-buffer 0 on one,
#    other files of the same shape, the same images with other labels)
#    paired inputs with the wrong labels and exited 0: now exit 2 at step 1
#    naming the rank;
#  - D14: --save or --backup-dir given to one rank only ran into
#    --collective-timeout blaming a rank that had not died: now exit 2 at
#    once on every rank naming the option and the ranks.
# Skips (77) when mpirun is missing or Strata was built without MPI.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_common.bash"
python3 "$src/tests/mkidx.py" "$tmp/a" || exit 1
python3 "$src/tests/mkidx.py" "$tmp/a2" other-seed || exit 1
# a3: a's images with a2's labels
mkdir -p "$tmp/a3" && cp "$tmp/a"/*images* "$tmp/a3/" && cp "$tmp/a2"/*labels* "$tmp/a3/"
cd "$tmp" || exit 1
B=(train --data a --epochs 1 --batch-size 8 --strategy pipeline --collective-timeout 20 --model mlp --quiet)
# mpmd NAME NP0 ARGS0 -- NP1 ARGS1: the job's exit code in rc, stderr in NAME.err
mpmd() {
  local name=$1 n0=$2; shift 2
  local a=() b=()
  while [ "$1" != -- ]; do a+=("$1"); shift; done; shift
  local n1=$1; shift
  b=("$@")
  timeout 120 mpirun -np "$n0" "$cli" "${a[@]}" : -np "$n1" "$cli" "${b[@]}" >"$name.out" 2>"$name.err"
  rc=$?
}
# every rank exits 2 with the message (no signal, no timeout)
refused() { # NAME NP PATTERN
  [ "$rc" = 2 ] && [ "$(grep -c "^strata train: $3" "$1.err")" = "$2" ] &&
    ! grep -Eq 'signal|Aborted|AddressSanitizer|did not join' "$1.err"
}
mpmd m24 1 "${B[@]}" --micro-batches 2 -- 1 "${B[@]}" --micro-batches 4
check "D1 --micro-batches 2 vs 4: exit 2 on both ranks naming the flag and both values (rc $rc)" \
  "refused m24 2 'pipeline: rank 1 differs from rank 0 in micro-batches (--micro-batches): 4 (rank 0: 2)'"
mpmd m42 1 "${B[@]}" --micro-batches 4 -- 1 "${B[@]}" --micro-batches 2
check "D1 --micro-batches 4 vs 2 (rc $rc)" "refused m42 2 'pipeline: rank 1 differs .*: 2 (rank 0: 4)'"
mpmd b12 1 "${B[@]}" --stage-boundaries 1 -- 1 "${B[@]}" --stage-boundaries 2
check "D1 --stage-boundaries 1 vs 2 (rc $rc)" \
  "refused b12 2 'pipeline: rank 1 differs from rank 0 in stage boundaries (--stage-boundaries): 2 (rank 0: 1)'"
mpmd b21 1 "${B[@]}" --stage-boundaries 2 -- 1 "${B[@]}" --stage-boundaries 1
check "D1 --stage-boundaries 2 vs 1 (rc $rc)" "refused b21 2 'pipeline: rank 1 differs .*: 1 (rank 0: 2)'"
mpmd sch 1 "${B[@]}" --pipeline-schedule gpipe -- 1 "${B[@]}" --pipeline-schedule 1f1b
check "D1 --pipeline-schedule gpipe vs 1f1b (rc $rc)" "refused sch 2 'pipeline: rank 1 differs .*schedule.*: 1f1b (rank 0: gpipe)'"
mpmd s24 2 "${B[@]}" --pipeline-stages 2 -- 2 "${B[@]}" --pipeline-stages 4
check "D14 --pipeline-stages 2 on ranks 0-1, 4 on ranks 2-3: exit 2 at once on all four (rc $rc)" \
  "refused s24 4 'pipeline: rank 2 (and 1 more rank) differs from rank 0 in pipeline stages (--pipeline-stages): 4 (rank 0: 2)'"
mpmd save1 1 "${B[@]}" -- 1 "${B[@]}" --save w.st
check "D14 --save given to rank 1 only: exit 2 at once on both, naming it (rc $rc)" \
  "refused save1 2 '--save is given to rank 1 but not to rank 0' && [ ! -e w.st ]"
mpmd bk0 1 "${B[@]}" --backup-dir bk -- 1 "${B[@]}"
check "D14 --backup-dir given to rank 0 only (rc $rc)" "refused bk0 2 '--backup-dir is given to rank 0 but not to rank 1'"
mpmd m16 1 "${B[@]}" --micro-batches 16 -- 1 "${B[@]}" --micro-batches 16
check "D14 --micro-batches 16 with --batch-size 8: exit 2 instead of 8 empty micro-batches (rc $rc)" \
  "refused m16 2 'pipeline: 16 micro-batches for a batch of 8 examples per replica: 8 of them would be empty'"

mpmd shuf 1 "${B[@]}" -- 1 "${B[@]}" --shuffle-buffer 0
check "D3 --shuffle-buffer 0 on rank 1 only: exit 2 naming rank 1, not a model trained on wrong labels (rc $rc)" \
  "refused shuf 2 'pipeline: at step 1 rank 1 read other examples than rank 0'"
mpmd other 1 "${B[@]}" -- 1 "${B[@]/#a/a2}"
check "D3 other files of the same shape on rank 1 (rc $rc)" \
  "refused other 2 'pipeline: at step 1 rank 1 read other examples than rank 0'"
mpmd labels 1 "${B[@]}" --shuffle-buffer 0 -- 1 "${B[@]/#a/a3}" --shuffle-buffer 0
check "D3 the same images with other labels on rank 1 (rc $rc)" \
  "refused labels 2 'pipeline: at step 1 rank 1 read other labels than rank 0'"
# the same flags and data still train (exit 0)
mpmd same 1 "${B[@]}" --micro-batches 4 -- 1 "${B[@]}" --micro-batches 4
check "the same flags and data on both ranks: exit 0 (rc $rc)" "[ $rc = 0 ]"
[ "$fail" = 0 ] || tail -5 ./*.err
exit $fail
