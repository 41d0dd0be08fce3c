#!/usr/bin/env bash
# Issue 18: the share of a cnn training step spent waiting for TFRecord input
# (prefetch 2 batches on a background thread, as `strata train --data
# tfrecord:...` builds it). Method: one epoch of the cnn on the first N
# Fashion-MNIST training examples, shuffling off, from IDX (in memory: no
# input wait beyond a memcpy) and from 16 TFRecord shards (plain, GZIP);
# fit's samples/s (first 20 steps excluded); the best of R runs each.
# wait fraction = 1 - samples/s(tfrecord) / samples/s(IDX). The weights are
# the same bytes in all three (tests/test_tfrecord_cli.sh), so only the
# input differs.
#   usage: bench/tfrecord_input_wait.sh [BUILD_DIR] [N=10000] [R=3]
set -eu
build=${1:-build}; n=${2:-10000}; r=${3:-3}
cli=$build/strata
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$cli" convert --out "$tmp/fm" --shards 16 --examples "$n" --features "$tmp/spec.json" >/dev/null
"$cli" convert --out "$tmp/gz" --shards 16 --examples "$n" --compression gzip >/dev/null
"$cli" convert --out "$tmp/test" --split test --examples 256 >/dev/null
best() { # ARGS...: the best samples/s of $r runs
  local b=0 s
  for _ in $(seq "$r"); do
    s=$("$cli" train --model cnn --seed 1 --shuffle-buffer 0 --quiet "$@" | sed 's/.*samples\/s: //')
    [ "$s" -gt "$b" ] && b=$s
  done
  echo "$b"
}
idx=$(best --train-examples "$n")
plain=$(best --data "tfrecord:$tmp/fm-*" --features "$tmp/spec.json" --test-data "tfrecord:$tmp/test-*")
gz=$(best --data "tfrecord:$tmp/gz-*.tfrecord.gz" --features "$tmp/spec.json" --test-data "tfrecord:$tmp/test-*")
printf 'cnn, %d examples, batch 32: samples/s IDX %d, TFRecord plain %d, GZIP %d\n' "$n" "$idx" "$plain" "$gz"
python3 -c "import sys; i,p,g=map(float,sys.argv[1:]); print('input-wait fraction: plain %.3f, GZIP %.3f (negative = noise)' % (1-p/i, 1-g/i))" "$idx" "$plain" "$gz"
