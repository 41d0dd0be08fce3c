#!/usr/bin/env bash
# Bad input through the CLI: every case exits 2 with a message naming what is
# wrong and where, and writes nothing (--save/--report files stay absent).
set -u
cli=${STRATA_CLI:?set by CTest}
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0

# mkidx DIR [CASE]: a small valid MNIST-style set, or one broken as CASE says.
mkidx() { $py "${STRATA_SOURCE_DIR:?set by CTest}/tests/mkidx.py" "$@"; }

# expect NAME EXIT PATTERN -- command...: exit code and a stderr pattern.
expect() {
  local name=$1 code=$2 pattern=$3; shift 4
  rm -f "$tmp/out.safetensors" "$tmp/out.json"
  "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  if [ $rc -eq "$code" ] && grep -qE -- "$pattern" "$tmp/stderr" \
     && [ ! -e "$tmp/out.safetensors" ] && [ ! -e "$tmp/out.json" ]; then
    echo "ok - $name"
  else
    echo "not ok - $name (exit $rc, want $code; stderr:)"; sed 's/^/    /' "$tmp/stderr"; fail=1
  fi
}
out=(--save "$tmp/out.safetensors" --report "$tmp/out.json" --quiet)
T=("$cli" train --model mlp)

expect "unknown flag" 2 "unknown option '--frobnicate'" -- "${T[@]}" --frobnicate 3 "${out[@]}"
expect "missing value" 2 "needs a value" -- "${T[@]}" "${out[@]}" --epochs
expect "non-numeric epochs" 2 "--epochs: 'abc'" -- "${T[@]}" --epochs abc "${out[@]}"
expect "unknown model" 2 "unknown model 'resnet'" -- "$cli" train --model resnet "${out[@]}"
expect "unknown optimizer" 2 "optimizer" -- "${T[@]}" --optimizer adamax "${out[@]}"
expect "unknown command" 2 "unknown command" -- "$cli" fly
expect "missing data dir" 2 "$tmp/nowhere" -- "${T[@]}" --data "$tmp/nowhere" "${out[@]}"
for case in bad-magic truncated count-mismatch huge-dims bigger-than-file labels-out-of-range; do
  mkidx "$tmp/$case" "$case"
done
expect "wrong magic names file and offset" 2 "train-images-idx3-ubyte.gz.*offset" -- "${T[@]}" --data "$tmp/bad-magic" "${out[@]}"
expect "truncated payload" 2 "train-images-idx3-ubyte.gz.*(truncated|short|ends)" -- "${T[@]}" --data "$tmp/truncated" "${out[@]}"
expect "image/label count mismatch" 2 "train-labels.*(64|63)" -- "${T[@]}" --data "$tmp/count-mismatch" "${out[@]}"
expect "dimension product overflow" 2 "train-images-idx3-ubyte.gz" -- "${T[@]}" --data "$tmp/huge-dims" "${out[@]}"
expect "header larger than the file" 2 "train-images-idx3-ubyte.gz" -- "${T[@]}" --data "$tmp/bigger-than-file" "${out[@]}"
expect "label out of range" 2 "label 12 .*10 classes" -- "${T[@]}" --data "$tmp/labels-out-of-range" "${out[@]}"
mkidx "$tmp/good"
mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
if [ "$(id -u)" != 0 ]; then
  expect "read-only output dir" 2 "not writable" -- "${T[@]}" --data "$tmp/good" --save "$tmp/ro/w.safetensors"
fi
expect "output dir missing" 2 "not writable" -- "${T[@]}" --data "$tmp/good" --save "$tmp/nodir/w.safetensors"
# weights files: wrong model, corrupted
"$cli" train --model mlp --data "$tmp/good" --epochs 1 --save "$tmp/mlp.safetensors" --quiet >/dev/null 2>&1 \
  || { echo "not ok - training on the small set"; fail=1; }
expect "weights of another model" 2 "mlp.safetensors.*(tensor|missing)" -- "$cli" evaluate --model cnn --weights "$tmp/mlp.safetensors" --data "$tmp/good"
head -c 100 "$tmp/mlp.safetensors" >"$tmp/cut.safetensors"
expect "truncated weights file" 2 "cut.safetensors" -- "$cli" evaluate --model mlp --weights "$tmp/cut.safetensors" --data "$tmp/good"
expect "evaluate without --weights" 2 "required" -- "$cli" evaluate --model mlp
exit $fail
