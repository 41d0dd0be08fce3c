#!/usr/bin/env bash
# RELIABILITY T2: valgrind memcheck over CLI runs end to end — training with
# every output (weights, report, CSV, plot, TensorBoard, checkpoints, backup),
# the mirrored strategy's threads, the cnn, evaluate, summary of a Keras JSON
# and failing runs (bad data, a truncated weights file), and the C API
# misuse suite (build/test_api_misuse): no memory
# error and no "definitely lost" block (valgrind --error-exitcode).
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
if [ "${STRATA_SANITIZED:-0}" = 1 ]; then
  echo "SKIP: sanitizer build (valgrind cannot run it); the Release build runs this test"; exit 77
fi
if ! command -v valgrind >/dev/null; then
  echo "SKIP: valgrind is not installed (apt-get install valgrind)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
# vg WANT_EXIT NAME command...: under memcheck; 99 = a valgrind error
vg() {
  local want=$1 name=$2; shift 2
  valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq "$want" ]; then echo "ok - $name (exit $rc)"
  else echo "not ok - $name: exit $rc, want $want"; sed 's/^/    /' "$tmp/err" | head -40; fail=1; fi
}
python3 "$src/tests/mkidx.py" "$tmp/d"
o=(--quiet --save "$tmp/w.st" --report "$tmp/r.json" --csv "$tmp/l.csv" --plot "$tmp/p.svg"
   --log-dir "$tmp/tb" --checkpoint-dir "$tmp/ck" --backup-dir "$tmp/bk" --validation-split 0.25)
vg 0 "train mlp with every output" "$cli" train --model mlp --data "$tmp/d" --epochs 2 --batch-size 16 "${o[@]}"
vg 0 "train mlp, mirrored, 2 replicas" "$cli" train --model mlp --data "$tmp/d" --epochs 1 --batch-size 16 \
  --strategy mirrored --replicas 2 --quiet
vg 0 "train cnn" "$cli" train --model cnn --data "$tmp/d" --epochs 1 --batch-size 16 --quiet --save "$tmp/c.st"
vg 0 "evaluate" "$cli" evaluate --model mlp --weights "$tmp/w.st" --data "$tmp/d"
vg 0 "summary of a Keras JSON model" "$cli" summary --model "$src/tests/keras/mlp_keras3.json"
python3 "$src/tests/mkbad.py" "$tmp/d" "$tmp/bad" test-labels-out-of-range
vg 2 "train on bad data" "$cli" train --model mlp --data "$tmp/bad" --epochs 1 --quiet
head -c 3000 "$tmp/w.st" >"$tmp/cut.st"
vg 2 "evaluate a truncated weights file" "$cli" evaluate --model mlp --weights "$tmp/cut.st" --data "$tmp/d"
# the C API misuse suite (issue 21): NULLs, lifetimes, replicas leaving a run
misuse="$(dirname "$cli")/test_api_misuse"
if [ -x "$misuse" ]; then vg 0 "C API misuse suite" "$misuse"
else echo "not ok - $misuse is missing"; fail=1; fi
exit $fail
