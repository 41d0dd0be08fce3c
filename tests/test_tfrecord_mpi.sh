#!/usr/bin/env bash
# TFRecord data under multi_worker_mirrored with auto-shard FILE (issue 18):
# Fashion-MNIST's first 512 examples in 16 shards; mpirun -np 2: each worker
# reads 8 of the 16 files, the two workers' examples add up to the 512 of a
# one-process run (count and the sum of per-example CRC32Cs: no example twice,
# none missing); AUTO resolves to FILE for tfrecord data; --auto-shard data
# gives the bytes of one process with 2 replicas; 2 workers over 1 file:
# exit 2 naming the shortage.
# Skips (77) without mpirun, an MPI build or the Fashion-MNIST package.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_common.bash"
data=/usr/share/datasets/fashion-mnist
if [ ! -e $data/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
"$cli" convert --out "$tmp/fm" --shards 16 --examples 512 --features "$tmp/spec.json" >/dev/null
"$cli" convert --out "$tmp/test" --split test --examples 200 >/dev/null
args=(train --model mlp --data "tfrecord:$tmp/fm-*.tfrecord" --features "$tmp/spec.json"
      --test-data "tfrecord:$tmp/test-*" --batch-size 64 --seed 1)
line() { grep -o '[0-9]* examples (checksum 0x[0-9a-f]*)' "$1" | sed 's/ examples (checksum / /; s/)//'; }
"$cli" "${args[@]}" >/dev/null 2>"$tmp/one.err"
read -r n1 c1 <<<"$(line "$tmp/one.err")"
check "one process reads 16 of 16 files, 512 examples" "grep -q 'read 16 of 16 files' $tmp/one.err && [ '$n1' = 512 ]"
timeout 120 mpirun -np 2 "$cli" "${args[@]}" --strategy multi_worker_mirrored --save "$tmp/mw.st" \
  >"$tmp/mw.out" 2>"$tmp/mw.err"
rc=$?
check "mpirun -np 2 (auto-shard AUTO = FILE): exit 0" "[ $rc -eq 0 ] && [ -s $tmp/mw.st ]"
check "each worker reads 8 of the 16 files (auto-shard file)" \
  "[ \$(grep -c 'read 8 of 16 files (auto-shard file)' $tmp/mw.err) -eq 2 ]"
sum=$(line "$tmp/mw.err" | python3 -c "
import sys
n = c = 0
for l in sys.stdin:
    a, b = l.split(); n += int(a); c += int(b, 16)
print(n, '%016x' % c)")
check "the workers' examples add up to the one-process set, none twice ($sum vs $n1 ${c1#0x})" \
  "[ '$sum' = '$n1 ${c1#0x}' ]"
# DATA on tfrecord data: every worker reads every file and keeps its share of
# each global batch, as 2 in-process replicas split it: the same bytes
timeout 120 mpirun -np 2 "$cli" "${args[@]}" --strategy multi_worker_mirrored --auto-shard data \
  --save "$tmp/data.st" >/dev/null 2>"$tmp/data.err"
"$cli" "${args[@]}" --strategy mirrored --replicas 2 --save "$tmp/mirrored.st" >/dev/null 2>&1
check "auto-shard data: each worker reads 16 of 16 files, weights = one process with 2 replicas" \
  "[ \$(grep -c 'read 16 of 16 files (auto-shard data)' $tmp/data.err) -eq 2 ] && cmp -s $tmp/data.st $tmp/mirrored.st"
timeout 120 mpirun -np 2 "$cli" "${args[@]/fm-\*/fm-00000-*}" --strategy multi_worker_mirrored \
  --auto-shard file >/dev/null 2>"$tmp/few.err"
rc=$?
check "2 workers, 1 file, auto-shard file: exit 2 naming the shortage" \
  "[ $rc -eq 2 ] && grep -q 'needs at least 2 files, got 1' $tmp/few.err"
[ $fail -eq 0 ] || { echo "--- stderr of the 2-worker run:"; cat "$tmp/mw.err"; }
exit $fail
