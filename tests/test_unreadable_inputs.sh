#!/usr/bin/env bash
# Issue 29 D17: TFRecord inputs that cannot be read exited 4 ("an output
# could not be written"). Now: a self-referencing or dangling symlink
# ("cannot open: ...") exits 2 (a missing input), /proc/self/mem (read
# fails: Input/output error) exits 1 (an I/O error while reading), each
# naming the file, as docs/ERRORS.md says. Skips (77) without Fashion-MNIST.
set -u
cli=${STRATA_CLI:?set by CTest}
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: /usr/share/datasets/fashion-mnist missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
"$cli" convert --out "$tmp/fm" --shards 1 --examples 64 --features "$tmp/spec.json" >/dev/null || exit 1
ln -s loop.tfrecord "$tmp/loop.tfrecord"
ln -s nowhere "$tmp/dangling.tfrecord"
for case in "loop.tfrecord 2 Too many levels of symbolic links" "dangling.tfrecord 2 No such file" \
            "/proc/self/mem 1 read failed: Input/output error"; do
  read -r f want msg <<< "$case"
  p=$f; [ "${f:0:1}" = / ] || p=$tmp/$f
  "$cli" train --data "tfrecord:$p" --features "$tmp/spec.json" --model mlp --quiet >/dev/null 2>"$tmp/err"
  rc=$?
  check "$f: exit $want naming it (rc $rc: $(cat "$tmp/err"))" "[ $rc = $want ] && grep -q '$p.*$msg' '$tmp/err'"
done
exit $fail
