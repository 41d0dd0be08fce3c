#!/usr/bin/env bash
# TFRecord data end to end through the CLI (issue 18):
#  - `strata convert`: Fashion-MNIST's first 512 training examples (an IDX
#    directory written here) to 16 shards, plain and GZIP, plus the spec;
#  - `strata train --data tfrecord:...` with shuffling off gives the same
#    weights bytes as the same examples from IDX (cnn and mlp; plain and GZIP);
#  - damaged shards (truncated, bit flips in a length, a length CRC, a payload,
#    a payload CRC, a valid gigabyte length field): exit 2 naming the file and
#    the byte offset, or, with --skip-corrupt-records, exit 0 and the skipped
#    record counted;
#  - usage errors: no --features, a VarLen spec, --auto-shard file on IDX data.
# Skips (77) without the Fashion-MNIST package. Multi-worker: test_tfrecord_mpi.sh.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
data=/usr/share/datasets/fashion-mnist
if [ ! -e $data/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
n=512
# a small IDX directory: the first 512 training and 500 test examples (so the
# IDX runs evaluate on the same 500 test examples as the tfrecord runs)
python3 - "$data" "$tmp/idx" <<'EOF'
import gzip, os, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
for name, n in (("train-images-idx3-ubyte", 512), ("train-labels-idx1-ubyte", 512),
                ("t10k-images-idx3-ubyte", 500), ("t10k-labels-idx1-ubyte", 500)):
    b = gzip.open(os.path.join(src, name + ".gz")).read()
    rank = b[3]
    row = 1
    for k in range(1, rank):
        row *= int.from_bytes(b[4 + 4 * k:8 + 4 * k], "big")
    head = bytearray(b[:4 + 4 * rank])
    head[4:8] = n.to_bytes(4, "big")
    off = 4 + 4 * rank
    open(os.path.join(dst, name), "wb").write(bytes(head) + b[off:off + n * row])
EOF
"$cli" convert --data "$tmp/idx" --out "$tmp/fm" --shards 16 --features "$tmp/spec.json" >"$tmp/conv.out"
check "convert: 16 plain shards and a spec" \
  "[ \$(ls $tmp/fm-*-of-00016.tfrecord | wc -l) -eq 16 ] && grep -q '\"uint8\", \"shape\": \[28, 28, 1\]' $tmp/spec.json"
"$cli" convert --data "$tmp/idx" --out "$tmp/gz" --shards 16 --compression gzip >/dev/null
check "convert: 16 GZIP shards" "[ \$(ls $tmp/gz-*-of-00016.tfrecord.gz | wc -l) -eq 16 ]"
"$cli" convert --data "$tmp/idx" --out "$tmp/test" --split test >/dev/null
tfr() { "$cli" train --data "tfrecord:$1" --features "$tmp/spec.json" --shuffle-buffer 0 "${@:2}"; }
for model in cnn mlp; do
  common=(--model $model --seed 3 --batch-size 32 --quiet)
  "$cli" train "${common[@]}" --data "$tmp/idx" --shuffle-buffer 0 --save "$tmp/idx.st" >/dev/null
  tfr "$tmp/fm-*.tfrecord" "${common[@]}" --test-data "tfrecord:$tmp/test-*" --save "$tmp/plain.st" >/dev/null
  check "$model: 16 plain shards train to the weights bytes of IDX" "cmp -s $tmp/idx.st $tmp/plain.st"
  tfr "$tmp/gz-*.tfrecord.gz" "${common[@]}" --test-data "tfrecord:$tmp/test-*" --save "$tmp/gz.st" >/dev/null
  check "$model: 16 GZIP shards train to the weights bytes of IDX" "cmp -s $tmp/idx.st $tmp/gz.st"
done
"$cli" train --data "tfrecord:$tmp/fm-*.tfrecord" --features "$tmp/spec.json" --model mlp --seed 3 --quiet \
  --test-data "tfrecord:$tmp/test-*" --shuffle-buffer 100 --save "$tmp/shuf.st" >/dev/null
check "a shuffle buffer changes the order (other weights)" "[ -s $tmp/shuf.st ] && ! cmp -s $tmp/idx.st $tmp/shuf.st"
"$cli" train --data "tfrecord:$tmp/fm-*.tfrecord" --features "$tmp/spec.json" --model mlp --seed 3 --quiet \
  --test-data "tfrecord:$tmp/test-*" --shuffle-buffer 100 --save "$tmp/shuf2.st" >/dev/null
check "the same seed, the same shuffled order (same bytes)" "cmp -s $tmp/shuf.st $tmp/shuf2.st"

# ---- CSV: features as a float_list "x", integer labels as int64 "label";
# trained by a Keras model whose input is (None, 3) ----
printf 'a,b,c,label\n1,2,3,0\n4,5,6,1\n7,8,9.5,2\n0,1,0,1\n' >"$tmp/s.csv"
"$cli" convert --data "$tmp/s.csv" --out "$tmp/csv" --shards 2 --features "$tmp/csv.json" >/dev/null
check "convert CSV: 2 shards, spec x float32 [3], y int64" \
  "[ -s $tmp/csv-00001-of-00002.tfrecord ] && grep -q '\"x\", \"dtype\": \"float32\", \"shape\": \[3\]' $tmp/csv.json && grep -q '\"int64\"' $tmp/csv.json"
sed 's/"batch_shape": \[null, 28, 28, 1\]/"batch_shape": [null, 3]/' "$src/tests/keras/mlp_keras3.json" >"$tmp/m3.json"
"$cli" train --model "$tmp/m3.json" --data "tfrecord:$tmp/csv-*" --features "$tmp/csv.json" \
  --test-data "tfrecord:$tmp/csv-*" --quiet >"$tmp/csv.out" 2>&1
check "a Keras model trains on the CSV's TFRecord shards" "[ \$? -eq 0 ] && grep -q test_accuracy $tmp/csv.out"

# ---- damaged shards: a copy of the 16 plain shards with shard 3 damaged ----
victim=fm-00003-of-00016.tfrecord
rec=$(python3 -c "import struct,sys; print(struct.unpack('<Q', open(sys.argv[1],'rb').read(8))[0] + 16)" "$tmp/$victim")
damage() { # NAME OFFSET XOR | NAME truncate BYTES | NAME append FILE
  rm -rf "$tmp/d" && mkdir "$tmp/d" && cp "$tmp"/fm-*.tfrecord "$tmp/d/"
  python3 - "$tmp/d/$victim" "$2" "$3" <<'EOF'
import sys
p, what, arg = sys.argv[1], sys.argv[2], sys.argv[3]
b = bytearray(open(p, 'rb').read())
if what == 'truncate': b = b[:int(arg)]
elif what == 'append': b += open(arg, 'rb').read()
else: b[int(what)] ^= int(arg)
open(p, 'wb').write(b)
EOF
}
size=$(stat -c %s "$tmp/$victim")
cases=(
  "truncated|truncate $((size - 100))|$((size - rec))|truncated record"
  "length bit flip|$((rec + 2)) 16|$rec|length field CRC mismatch"
  "length CRC bit flip|$((rec + 9)) 1|$rec|length field CRC mismatch"
  "payload bit flip|$((rec + 12 + 300)) 128|$rec|payload CRC mismatch"
  "payload CRC bit flip|$((2 * rec - 2)) 4|$rec|payload CRC mismatch"
  "gigabyte length field|append $src/tests/fuzz/corpus/tfrecord_fuzz/gigabyte_length|$size|record length 1073741824 exceeds the limit"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name how off msg <<<"$c"
  damage x $how
  tfr "$tmp/d/fm-*.tfrecord" --model mlp --quiet --test-data "tfrecord:$tmp/test-*" >/dev/null 2>"$tmp/err"
  rc=$?
  check "$name: exit 2 naming the file and offset $off ($(head -c 160 "$tmp/err"))" \
    "[ $rc -eq 2 ] && grep -q '$victim: offset $off: $msg' $tmp/err"
  tfr "$tmp/d/fm-*.tfrecord" --model mlp --skip-corrupt-records --test-data "tfrecord:$tmp/test-*" \
    >/dev/null 2>"$tmp/err"
  rc=$?
  check "$name, --skip-corrupt-records: exit 0, one record skipped and counted" \
    "[ $rc -eq 0 ] && grep -q ', 1 damaged records skipped' $tmp/err"
done
head -c 5000 "$tmp/gz-00000-of-00016.tfrecord.gz" >"$tmp/cut.tfrecord.gz"
tfr "$tmp/cut.tfrecord.gz" --model mlp --quiet --test-data "tfrecord:$tmp/test-*" >/dev/null 2>"$tmp/err"
rc=$?
check "a truncated GZIP shard: exit 2 naming the file and an offset ($(head -c 160 "$tmp/err"))" \
  "[ $rc -eq 2 ] && grep -q 'cut.tfrecord.gz: offset [0-9]*: ' $tmp/err"

# ---- resume mid-epoch: a run stopped by SIGTERM resumes from --backup-dir to
# the bytes of an uninterrupted run (the stream is re-read to the same
# position: same epoch, same shuffle buffer order, same step) ----
"$cli" convert --out "$tmp/small" --shards 4 --examples 256 >/dev/null
res=(train --model mlp --data "tfrecord:$tmp/small-*" --features "$tmp/spec.json"
     --test-data "tfrecord:$tmp/test-*" --epochs 20 --batch-size 8 --shuffle-buffer 64 --seed 5 --quiet)
"$cli" "${res[@]}" --save "$tmp/whole.st" >/dev/null 2>&1
for try in 1 2 3 4 5; do
  rm -rf "$tmp/bk"
  "$cli" "${res[@]}" --backup-dir "$tmp/bk" --backup-every 3 --save "$tmp/resumed.st" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1000); do [ -e "$tmp/bk/latest" ] && break; sleep 0.01; done
  kill -TERM $pid 2>/dev/null
  wait $pid
  rc=$?
  [ $rc -eq 5 ] && break
done
check "tfrecord: a run stopped by SIGTERM leaves a backup (exit 5)" "[ $rc -eq 5 ] && [ -e $tmp/bk/latest ]"
STRATA_LOG=info "$cli" "${res[@]}" --backup-dir "$tmp/bk" --backup-every 3 --save "$tmp/resumed.st" \
  >/dev/null 2>"$tmp/resume.err"
check "tfrecord: the second run resumed ($(grep -o 'resuming from .*' "$tmp/resume.err" | sed 's|.*/||'))" \
  "grep -q 'resuming from .* at epoch [0-9]*, step [0-9]*' $tmp/resume.err"
check "tfrecord: resuming mid-epoch gives the uninterrupted run's bytes" "cmp -s $tmp/whole.st $tmp/resumed.st"

# ---- usage errors ----
"$cli" train --data "tfrecord:$tmp/fm-*" --quiet >/dev/null 2>"$tmp/err"
check "tfrecord without --features: exit 2" "[ \$? -eq 2 ] && grep -q 'needs --features' $tmp/err"
echo '{"x": {"name": "image", "dtype": "uint8", "var_len": true}}' >"$tmp/varlen.json"
"$cli" train --data "tfrecord:$tmp/fm-*" --features "$tmp/varlen.json" --quiet >/dev/null 2>"$tmp/err"
check "a VarLen spec: exit 2 saying it is not supported" "[ \$? -eq 2 ] && grep -q 'VarLenFeature is not supported' $tmp/err"
"$cli" train --data "tfrecord:$tmp/none-*" --features "$tmp/spec.json" --quiet >/dev/null 2>"$tmp/err"
check "a pattern matching nothing: exit 2" "[ \$? -eq 2 ] && grep -q 'no files match' $tmp/err"
# issue 29 D18: files without a record are named, not "the dataset yielded no examples"
: > "$tmp/empty-a.tfrecord"; : > "$tmp/empty-b.tfrecord"
"$cli" train --data "tfrecord:$tmp/empty-*.tfrecord" --features "$tmp/spec.json" \
  --test-data "tfrecord:$tmp/fm-*" --quiet >/dev/null 2>"$tmp/err"
rc=$?
check "files of zero records: exit 2 naming them ($(cat "$tmp/err"))" \
  "[ $rc -eq 2 ] && grep -q 'no training examples: the 2 files it matches hold no records ($tmp/empty-a.tfrecord, $tmp/empty-b.tfrecord)' $tmp/err"
head -c 100 "$(ls "$tmp"/fm-*.tfrecord | head -1)" > "$tmp/cut.tfrecord"
"$cli" train --data "tfrecord:$tmp/cut.tfrecord" --features "$tmp/spec.json" --skip-corrupt-records \
  --test-data "tfrecord:$tmp/fm-*" --quiet >/dev/null 2>"$tmp/err"
rc=$?
check "a file of one damaged record, skipped: exit 2 saying so ($(cat "$tmp/err"))" \
  "[ $rc -eq 2 ] && grep -q 'the 1 file it matches holds no records but 1 damaged one (skipped: --skip-corrupt-records) ($tmp/cut.tfrecord)' $tmp/err"
"$cli" train --strategy multi_worker_mirrored --auto-shard file --train-examples 64 --quiet >/dev/null 2>"$tmp/err"
check "--auto-shard file on IDX data: exit 2" "[ \$? -eq 2 ] && grep -q 'needs a file dataset' $tmp/err"
exit $fail
