#!/usr/bin/env bash
# Resume identity (issue 17): a backup records the run that wrote it (model
# structure, optimizer, learning rate, seed, global batch size, data
# fingerprint); resuming it with any of them changed exits 2 naming the
# field and both values, before any step, leaving the backup as it was;
# --resume-anyway resumes with this run's values (its learning rate shows in
# the CSV log); the same command resumes to an uninterrupted run's bytes.
# Small IDX sets from tests/mkidx.py; the backup comes from a run stopped by
# SIGTERM (exit 5), retried if the run finished before the signal.
set -u
cli=${STRATA_CLI:?set by CTest}
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
[ -x $py ] || { echo "SKIP: $py missing"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
$py "$src/tests/mkidx.py" a && $py "$src/tests/mkidx.py" b other-seed || exit 1

run=(train --data a --epochs 20 --quiet)
same=(--model mlp --batch-size 8 --seed 3 --lr 0.001)
for try in 1 2 3 4 5; do
  rm -rf bk
  "$cli" "${run[@]}" "${same[@]}" --backup-dir bk --backup-every 2 2>/dev/null >/dev/null &
  pid=$!
  for _ in $(seq 1000); do [ -e bk/latest ] && break; sleep 0.01; done
  kill -TERM $pid 2>/dev/null
  wait $pid
  rc=$?
  [ $rc -eq 5 ] && break
done
check "a backup from a run stopped by SIGTERM (exit 5)" "[ $rc -eq 5 ] && [ -e bk/latest ]"
sums() { find bk -type f | sort | xargs sha256sum; }
before=$(sums)

# refused: exit 2 naming the field, backup untouched
refuse() { # NAME GREP ARGS...
  local name=$1 pat=$2; shift 2
  "$cli" "$@" --backup-dir bk >/dev/null 2>err
  local rc=$?
  cat err
  check "$name: exit 2 naming the field" "[ $rc -eq 2 ] && grep -q \"bk was written by a run with $pat\" err"
  check "$name: backup untouched" '[ "$(sums)" = "$before" ]'
}
refuse "--lr" "learning rate 0.001, this run has 0.01 (--resume-anyway" \
  "${run[@]}" --model mlp --batch-size 8 --seed 3 --lr 0.01
refuse "--seed" "seed 3, this run has 4 " "${run[@]}" --model mlp --batch-size 8 --seed 4 --lr 0.001
refuse "--batch-size" "batch size 8, this run has 16 " \
  "${run[@]}" --model mlp --batch-size 16 --seed 3 --lr 0.001
refuse "--optimizer" "optimizer adam, this run has sgd " "${run[@]}" "${same[@]}" --optimizer sgd
refuse "--model" "model structure" "${run[@]}" --model cnn --batch-size 8 --seed 3 --lr 0.001
refuse "--data" "data '64 examples of 28x28x1 uint8, first and last CRC32C 0x[0-9a-f]*', this run has '64 examples" \
  train --data b --epochs 20 --quiet "${same[@]}"
refuse "--train-examples" "data .*this run has '32 examples" "${run[@]}" "${same[@]}" --train-examples 32

# --resume-anyway: resumes, with this run's learning rate and seed
cp -a bk anyway
"$cli" "${run[@]}" --model mlp --batch-size 8 --seed 4 --lr 0.01 --resume-anyway \
  --backup-dir anyway --csv anyway.csv >/dev/null 2>err
rc=$?
cat err
check "--resume-anyway: exit 0, warning for each field, backup removed" \
  "[ $rc -eq 0 ] && grep -q 'learning rate 0.001; resuming anyway' err && grep -q 'seed 3; resuming anyway' err && [ ! -e anyway ]"
check "--resume-anyway: this run's learning rate (CSV lr column 0.01 as float32)" \
  "[ \"\$(tail -n 1 anyway.csv | cut -d, -f6)\" = 0.00999999978 ]"
"$cli" train --data a --quiet --resume-anyway >/dev/null 2>err
check "--resume-anyway without --backup-dir: exit 2" "[ $? -eq 2 ] && grep -q 'needs --backup-dir' err"

# the same command resumes to the bytes of an uninterrupted run
"$cli" "${run[@]}" "${same[@]}" --save ref.st >/dev/null 2>&1
"$cli" "${run[@]}" "${same[@]}" --backup-dir bk --save w.st >/dev/null 2>err
rc=$?
cat err
check "same arguments: resumes to the uninterrupted run's weights" \
  "[ $rc -eq 0 ] && cmp -s ref.st w.st && [ ! -e bk ]"
exit $fail
