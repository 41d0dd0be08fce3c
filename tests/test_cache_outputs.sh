#!/usr/bin/env bash
# Issue 29 D12: --cache was outside the output-collision checks: `--cache
# o.bin --save o.bin` exited 0 and the saved weights replaced the cache (the
# next run of the same command exited 2, "not a Strata dataset cache"); the
# same with --report and --csv, and a cache inside --backup-dir (deleted when
# training completes) was accepted. Now each is exit 2 before anything is
# written, naming both options. Skips (77) without the Fashion-MNIST package.
set -u
cli=${STRATA_CLI:?set by CTest}
data=/usr/share/datasets/fashion-mnist
if [ ! -e $data/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
"$cli" convert --out "$tmp/fm" --shards 2 --examples 256 --features "$tmp/spec.json" >/dev/null ||
  { echo "not ok - convert"; exit 1; }
train() {
  "$cli" train --model mlp --data "tfrecord:$tmp/fm-*.tfrecord" --features "$tmp/spec.json" \
    --epochs 1 --batch-size 64 --quiet "$@" >"$tmp/out" 2>"$tmp/err"
}
for opt in --save --report --csv; do
  train --cache "$tmp/o.bin" $opt "$tmp/o.bin"; rc=$?
  check "--cache o.bin $opt o.bin: exit 2 naming both (rc $rc: $(cat "$tmp/err"))" \
    "[ $rc = 2 ] && grep -q -- '$opt .*o.bin and --cache .*o.bin are the same\|--cache .*o.bin and $opt .*o.bin are the same' '$tmp/err' && [ ! -e '$tmp/o.bin' ]"
done
train --cache "$tmp/bk/c.bin" --backup-dir "$tmp/bk"; rc=$?
check "--cache inside --backup-dir: exit 2 (rc $rc: $(cat "$tmp/err"))" \
  "[ $rc = 2 ] && grep -q -- '--cache .*c.bin is inside --backup-dir' '$tmp/err'"
train --cache "$tmp/c.bin" --save "$tmp/w.st"; r1=$?
train --cache "$tmp/c.bin" --save "$tmp/w.st"; r2=$?
check "a cache apart from the outputs: written, then read (exit $r1, $r2)" "[ $r1 = 0 ] && [ $r2 = 0 ] && [ -s '$tmp/c.bin' ]"
exit $fail
