#!/usr/bin/env bash
# `strata train --data tfrecord:... --cache FILE` and `--num-parallel-reads N`
# end to end (issue 18 items 3 and 5): Fashion-MNIST's first 512 training
# examples in 4 shards (`strata convert --examples 512`);
#  - --cache: the first run writes FILE (nothing left beside it), a second run
#    reads it, and both give the weights bytes of a run without a cache;
#  - a damaged cache (one flipped byte) or a foreign file: exit 2 naming the
#    file (and the offset of the damaged item);
#  - --num-parallel-reads 3: exit 0, every example read once per epoch, and
#    the same weights bytes on a second run (deterministic order);
#  - usage errors: the flags without tfrecord data, --num-parallel-reads 0.
# Skips (77) without the Fashion-MNIST package.
set -u
cli=${STRATA_CLI:?set by CTest}
data=/usr/share/datasets/fashion-mnist
if [ ! -e $data/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
"$cli" convert --out "$tmp/fm" --shards 4 --examples 512 --features "$tmp/spec.json" >/dev/null ||
  { echo "not ok - convert"; exit 1; }
train() { # out-weights extra-args...
  local w=$1; shift
  "$cli" train --model mlp --data "tfrecord:$tmp/fm-*.tfrecord" --features "$tmp/spec.json" \
    --epochs 2 --batch-size 64 --shuffle-buffer 0 --save "$tmp/$w" "$@" >"$tmp/$w.out" 2>"$tmp/$w.err"
}
check "no cache: exit 0" "train w0"
check "cache, first run: exit 0" "train w1 --cache '$tmp/c.cache'"
check "the cache file is in place, no temp file beside it" \
  "[ -s '$tmp/c.cache' ] && [ -z \"\$(ls '$tmp' | grep -F c.cache.tmp)\" ]"
check "cache, second run: exit 0" "train w2 --cache '$tmp/c.cache'"
check "weights with the cache written = without a cache" "cmp -s '$tmp/w0' '$tmp/w1'"
check "weights with the cache read = without a cache" "cmp -s '$tmp/w0' '$tmp/w2'"
check "the reading run counted 1024 examples" "grep -q '1024 examples' '$tmp/w2.err'"
printf '\x55' | dd of="$tmp/c.cache" bs=1 seek=5000 conv=notrunc 2>/dev/null
train w3 --cache "$tmp/c.cache"; rc=$?
check "damaged cache: exit 2" "[ $rc = 2 ]"
check "damaged cache: the file and the item's offset named" \
  "grep -q 'cache $tmp/c.cache: offset 3212: item CRC mismatch' '$tmp/w3.err'"
echo "not a cache" >"$tmp/foreign"
train w4 --cache "$tmp/foreign"; rc=$?
check "foreign file: exit 2 naming it" \
  "[ $rc = 2 ] && grep -q '$tmp/foreign: not a Strata dataset cache' '$tmp/w4.err'"
check "--num-parallel-reads 3: exit 0" "train w5 --num-parallel-reads 3"
check "--num-parallel-reads 3: every example once per epoch" "grep -q '1024 examples' '$tmp/w5.err'"
check "--num-parallel-reads 3: deterministic" "train w6 --num-parallel-reads 3 && cmp -s '$tmp/w5' '$tmp/w6'"
"$cli" train --model mlp --cache "$tmp/x" --quiet 2>"$tmp/u1.err"; rc=$?
check "--cache on IDX data: exit 2" "[ $rc = 2 ] && grep -q 'need --data tfrecord' '$tmp/u1.err'"
train w7 --num-parallel-reads 0; rc=$?
check "--num-parallel-reads 0: exit 2" "[ $rc = 2 ] && grep -q 'num-parallel-reads' '$tmp/w7.err'"
exit $fail
