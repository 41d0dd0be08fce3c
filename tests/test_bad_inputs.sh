#!/usr/bin/env bash
# The bad-input matrix of ../shared/RELIABILITY.md (rows D1, D3, D4, D5, D7, C2,
# C3, C5) through the CLI, as one table. Every row runs one strata command and
# asserts:
#   - the exit code: 2 bad input or usage, 4 an output could not be written;
#   - a stderr pattern naming the file and the offset / row / field at fault;
#   - nothing half-written: the output directory $out (which holds an earlier
#     run's weights, passed again as --save) is byte-for-byte unchanged, so new
#     outputs are absent and the previous one untouched;
#   - rows marked "rss", inputs whose header claims gigabytes: peak RSS under
#     200 MB (measured with /usr/bin/time when it is installed).
# Rows already in tests/test_cli_errors.sh (bad magic, gzip truncation, train
# image/label count mismatch, train labels out of range, unknown flag, missing
# value, a missing data dir, a weights file of another model) are not repeated
# here, except the two forged-size ones, which get the memory bound here.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
max_rss_kb=204800
if [ -x /usr/bin/time ]; then have_time=1; else
  have_time=0; echo "# note: /usr/bin/time is missing: the peak-RSS assertions are skipped"
fi

mkidx() { $py "$src/tests/mkidx.py" "$@"; }
mkbad() { $py "$src/tests/mkbad.py" "$@"; }

out=$tmp/out # the directory no failing run may change
mkdir -p "$out"
snapshot() { (cd "$out" && find . | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort); }

# run_case [rss] -- command...: runs it; sets rc and problems (empty = fine)
# for the exit code $want, stderr pattern $pattern and the unchanged $out.
run_case() {
  local rss=0
  [ "$1" = rss ] && { rss=1; shift; }
  shift # --
  local before; before=$(snapshot)
  if [ $rss = 1 ] && [ $have_time = 1 ]; then
    /usr/bin/time -f %M -o "$tmp/rss" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  else
    "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  fi
  rc=$?
  problems=""
  [ "$rc" -eq "$want" ] || problems+=" exit $rc, want $want;"
  grep -qE -- "$pattern" "$tmp/stderr" || problems+=" stderr lacks /$pattern/;"
  [ "$(snapshot)" = "$before" ] || problems+=" $out changed (something was written);"
  sanitizer=""
  grep -qE "Sanitizer|runtime error:" "$tmp/stderr" && sanitizer=" sanitizer report;"
  if [ $rss = 1 ] && [ $have_time = 1 ]; then
    local kb; kb=$(tail -n 1 "$tmp/rss")
    [ "$kb" -lt $max_rss_kb ] 2>/dev/null || problems+=" peak RSS ${kb} kB >= $max_rss_kb kB;"
  fi
}

# row ID NAME EXIT PATTERN [rss] -- command...
row() {
  local id=$1 name=$2; want=$3 pattern=$4; shift 4
  run_case "$@"
  problems+=$sanitizer
  if [ -z "$problems" ]; then echo "ok - $id $name"
  else
    echo "not ok - $id $name:$problems"; sed 's/^/    /' "$tmp/stderr"; fail=1
  fi
}

# check NAME CONDITION: a plain assertion.
check() {
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi
}

# The good set and an earlier run's weights in $out (passed again as --save).
mkidx "$tmp/good"
"$cli" train --model mlp --data "$tmp/good" --seed 3 --batch-size 8 --quiet \
  --save "$out/prev.safetensors" >/dev/null 2>&1 || { echo "not ok - training on the good set"; exit 1; }
cp "$out/prev.safetensors" "$tmp/mlp.safetensors"
# Every output a training run can write: the existing weights and new files.
O=(--save "$out/prev.safetensors" --report "$out/new.json" --csv "$out/new.csv"
   --plot "$out/new.svg" --log-dir "$out/tb" --quiet)
T=("$cli" train --model mlp)
E=("$cli" evaluate --model mlp --weights "$tmp/mlp.safetensors")
d() { mkbad "$tmp/good" "$tmp/$1" "$1"; echo "$tmp/$1"; } # a broken data dir

# ---- D1: malformed IDX ------------------------------------------------------
TRI=train-images-idx3-ubyte TRL=train-labels-idx1-ubyte
TEI=t10k-images-idx3-ubyte TEL=t10k-labels-idx1-ubyte
row D1 "dtype code 0x09" 2 "$TRI.gz: offset 2: unsupported type code 0x09" \
  -- "${T[@]}" --data "$(d bad-dtype)" "${O[@]}"
row D1 "rank 0" 2 "$TRI.gz: offset 3: rank 0 out of range" -- "${T[@]}" --data "$(d rank-0)" "${O[@]}"
row D1 "rank 255" 2 "$TRI.gz: offset 3: rank 255 out of range" \
  -- "${T[@]}" --data "$(d rank-255)" "${O[@]}"
row D1 "dims product overflows size_t (labels, rank 4)" 2 \
  "$TRL.gz: offset 4: dimensions 4294967295 x .* overflow size_t" rss \
  -- "${T[@]}" --data "$(d overflow-labels)" "${O[@]}"
mkidx "$tmp/huge-dims" huge-dims
row D1 "dims product overflows size_t (images, 2^31 x 2^31 x 28)" 2 "$TRI.gz: offset 4: .*overflow" rss \
  -- "${T[@]}" --data "$tmp/huge-dims" "${O[@]}"
row D1 "payload longer than the header says (plain)" 2 \
  "$TRI: trailing data after offset 50192 \(10 extra bytes" -- "${T[@]}" --data "$(d longer-plain)" "${O[@]}"
row D1 "payload longer than the header says (gzip)" 2 \
  "$TRI.gz: trailing data after offset 50192 \(uncompressed\)" -- "${T[@]}" --data "$(d longer-gz)" "${O[@]}"
row D1 "payload shorter than the header says (plain)" 2 \
  "$TRI: truncated: expected 50176 bytes of payload after offset 16, file ends at offset 50092" \
  -- "${T[@]}" --data "$(d shorter-plain)" "${O[@]}"
row D1 "4 KiB gzip claiming 4 GiB: no allocation from the header" 2 \
  "$TRI.gz: truncated: expected 4294967296 bytes .*ends at offset 4112" rss \
  -- "${T[@]}" --data "$(d forged-gz)" "${O[@]}"
row D1 "4 KiB plain file claiming 4 GiB" 2 "$TRI: truncated: expected 4294967296 bytes" rss \
  -- "${T[@]}" --data "$(d forged-plain)" "${O[@]}"
mkidx "$tmp/bigger-than-file" bigger-than-file
row D1 "plain file claiming 100000 images, holding 2" 2 "$TRI.gz: truncated: expected 78400000 bytes" rss \
  -- "${T[@]}" --data "$tmp/bigger-than-file" "${O[@]}"
row D1 "labels file claiming 2^32-1 labels, holding 64" 2 \
  "$TRL.gz: truncated: expected 4294967295 bytes" rss -- "${T[@]}" --data "$(d forged-labels)" "${O[@]}"
row D1 "test images and labels with different counts" 2 \
  "$TEI.gz has 32 images but .*$TEL.gz has 31 labels" -- "${T[@]}" --data "$(d test-count-mismatch)" "${O[@]}"
row D1 "int32 images (valid IDX, wrong type)" 2 \
  "$TRI.gz: images must be uint8 or float32 of rank 3, got int32" -- "${T[@]}" --data "$(d i32-images)" "${O[@]}"
row D1 "evaluate on a malformed test set" 2 "$TEI.gz has 32 images but" \
  -- "${E[@]}" --data "$tmp/test-count-mismatch"

# ---- D3: non-finite values --------------------------------------------------
row D3 "NaN in float32 training images: rejected naming element and offset" 2 \
  "$TRI.gz: offset 4016: element 1000 is NaN" -- "${T[@]}" --data "$(d f32-nan-train)" "${O[@]}"
check "D3 the NaN message says how to accept it" "grep -q -- '--allow-nonfinite' '$tmp/stderr'"
row D3 "Inf in float32 test images: rejected" 2 "$TEI.gz: offset 36: element 5 is Inf" \
  -- "${T[@]}" --data "$(d f32-inf-test)" "${O[@]}"
row D3 "evaluate rejects Inf in the test images too" 2 "$TEI.gz: offset 36: element 5 is Inf" \
  -- "${E[@]}" --data "$tmp/f32-inf-test"
# Finite float32 images are used as they are: values equal to the u8 pipeline's
# (b * (1/255)) train to the same weights bytes as the u8 files.
"${T[@]}" --data "$(d f32)" --seed 3 --batch-size 8 --quiet --save "$tmp/f32.safetensors" >/dev/null 2>&1
check "D3 float32 images (finite) train to the u8 set's exact weights (no 1/255 rescale)" \
  "cmp -s '$tmp/f32.safetensors' '$tmp/mlp.safetensors'"
# --allow-nonfinite gets past loading; with a model that has no ReLU the NaN
# reaches the loss and TerminateOnNaN stops fit naming the step (exit 2), and
# the backup keeps the last finite state.
lin=$tmp/linear.json
cat >"$lin" <<'EOF'
{"class_name": "Sequential", "config": {"name": "linear", "layers": [
 {"class_name": "Flatten", "config": {"name": "flatten", "batch_input_shape": [null, 28, 28, 1]}},
 {"class_name": "Dense", "config": {"name": "dense", "units": 10, "activation": "linear"}}]}}
EOF
row D3 "--allow-nonfinite: loads; the NaN loss stops fit at its step (linear model, seed 0)" 2 \
  "loss became nan at epoch 1, step 6 \(TerminateOnNaN\)" \
  -- "$cli" train --model "$lin" --data "$tmp/f32-nan-train" --allow-nonfinite --batch-size 8 \
     --seed 0 --backup-dir "$tmp/nanbk" --backup-every 1 "${O[@]}"
check "D3 ... and did not complain about the input file" "! grep -q 'element 1000' '$tmp/stderr'"
check "D3 ... the backup's latest checkpoint is step 5, the last finite one, with finite weights" \
  "$py '$src/tests/check_backup.py' '$tmp/nanbk' 5"
cp -a "$tmp/nanbk" "$tmp/nanbk2"
"$cli" train --model "$lin" --data "$tmp/f32" --batch-size 8 --seed 0 --backup-dir "$tmp/nanbk2" \
  --quiet >/dev/null 2>"$tmp/stderr"
check "D3 ... and that checkpoint verifies: a run on finite data resumes from it and completes" \
  "[ \$? -eq 0 ] && [ ! -e '$tmp/nanbk2' ]"
row D3 "--allow-nonfinite with the mlp: ReLU passes the NaN on, so the loss stops fit (no silent NaN weights)" 2 \
  "loss became nan at epoch 1, step [0-9]+ \(TerminateOnNaN\)" -- "${T[@]}" --data "$tmp/f32-nan-train" --allow-nonfinite --batch-size 8 "${O[@]}"

# ---- D4: shapes and labels vs the model --------------------------------------
row D4 "20x20 images for the 28x28 mlp: both shapes named" 2 \
  "\(None, 20, 20, 1\) do not fit model input \(None, 28, 28, 1\)" \
  -- "${T[@]}" --data "$(d small-images)" "${O[@]}"
row D4 "20x20 images for the cnn" 2 "\(None, 20, 20, 1\) do not fit model input \(None, 28, 28, 1\)" \
  -- "$cli" train --model cnn --data "$tmp/small-images" "${O[@]}"
row D4 "20x20 test images for evaluate" 2 "\(None, 20, 20, 1\) do not fit model input" \
  -- "${E[@]}" --data "$tmp/small-images"
row D4 "test label 10 for a 10-class model" 2 "test labels: label 10 of example 31 is out of range" \
  -- "${T[@]}" --data "$(d test-labels-out-of-range)" "${O[@]}"
row D4 "--batch-size 0" 2 "--batch-size: '0' is not an integer in \[1, " \
  -- "${T[@]}" --data "$tmp/good" --batch-size 0 "${O[@]}"
row D4 "evaluate --batch-size 0" 2 "--batch-size: '0'" -- "${E[@]}" --data "$tmp/good" --batch-size 0

# ---- D5: Keras JSON model configs -------------------------------------------
for c in json-invalid json-unknown-layer json-deep json-not-sequential; do mkbad - "$tmp/$c.json" $c; done
row D5 "invalid JSON: file, line and column" 2 "json-invalid.json: invalid JSON at line 3, column" \
  -- "$cli" train --model "$tmp/json-invalid.json" --data "$tmp/good" "${O[@]}"
row D5 "unknown layer class: layer index, name and class" 2 \
  "json-unknown-layer.json: layer 1 \('fancy', FancyAttention\): layer class 'FancyAttention' is not supported" \
  -- "$cli" train --model "$tmp/json-unknown-layer.json" --data "$tmp/good" "${O[@]}"
row D5 "100000-deep nesting: depth capped, no stack overflow" 2 \
  "json-deep.json: invalid JSON at line 1, column [0-9]+: maximum parsing depth" rss \
  -- "$cli" train --model "$tmp/json-deep.json" --data "$tmp/good" "${O[@]}"
row D5 "summary of the deep config" 2 "json-deep.json: .*maximum parsing depth" \
  -- "$cli" summary --model "$tmp/json-deep.json"
row D5 "a model class other than Sequential, Functional or Model" 2 "json-not-sequential.json: model class_name \"Graph\" is not supported" \
  -- "$cli" train --model "$tmp/json-not-sequential.json" --data "$tmp/good" "${O[@]}"
row D5 "a --model FILE.json that does not exist" 2 "--model $tmp/nowhere.json: No such file or directory" \
  -- "$cli" train --model "$tmp/nowhere.json" --data "$tmp/good" "${O[@]}"

# ---- D7: CLI misuse -----------------------------------------------------------
row D7 "--threads with --strategy mirrored" 2 "--threads is for --strategy one_device" \
  -- "${T[@]}" --data "$tmp/good" --strategy mirrored --threads 2 "${O[@]}"
row D7 "two --devices for one_device" 2 "one_device runs on one device: give one" \
  -- "${T[@]}" --data "$tmp/good" --devices cpu:0,cpu:1 "${O[@]}"
row D7 "--replicas without a multi-device strategy" 2 "--devices, --replicas and --cross-device-ops need" \
  -- "${T[@]}" --data "$tmp/good" --replicas 2 "${O[@]}"
row D7 "--bytes-per-pack with central_storage" 2 "--bytes-per-pack and --no-overlap need --strategy mirrored" \
  -- "${T[@]}" --data "$tmp/good" --strategy central_storage --bytes-per-pack 0 "${O[@]}"
row D7 "--backup-every without --backup-dir" 2 "--backup-every needs --backup-dir" \
  -- "${T[@]}" --data "$tmp/good" --backup-every 3 "${O[@]}"
row D7 "an option given twice" 2 "option --epochs given twice" \
  -- "${T[@]}" --data "$tmp/good" --epochs 1 --epochs 2 "${O[@]}"
row D7 "a value for a flag" 2 "option --quiet takes no value" \
  -- "${T[@]}" --data "$tmp/good" --save "$out/prev.safetensors" --report "$out/new.json" --quiet=yes
row D7 "--validation-split out of range" 2 "--validation-split: '1.5' is not a number in \[0, 0.99\]" \
  -- "${T[@]}" --data "$tmp/good" --validation-split 1.5 "${O[@]}"
row D7 "unknown strategy" 2 "--strategy: unknown strategy 'warp'" -- "${T[@]}" --data "$tmp/good" --strategy warp "${O[@]}"
row D7 "a parameter_server chief without a cluster" 2 "TF_CONFIG is not set \(or give --cluster FILE --task TYPE:INDEX\)" \
  -- "${T[@]}" --data "$tmp/good" --strategy parameter_server --save "$out/prev.safetensors" --report "$out/new.json" --quiet
row D7 "a GPU device (no module, driver or device here)" 2 "device 'gpu:0': (this build of Strata has no CUDA backend|no NVIDIA driver|no CUDA device)|devices 'gpu:0': the GPUs are there" \
  -- "${T[@]}" --data "$tmp/good" --strategy mirrored --devices gpu:0 "${O[@]}"
row D7 "a device listed twice" 2 "'cpu:0' is listed twice" \
  -- "${T[@]}" --data "$tmp/good" --strategy mirrored --devices cpu:0,cpu:0 "${O[@]}"
row D7 "one of the four IDX files missing" 2 "$TEL: not found \(also tried .*$TEL.gz\)" \
  -- "${T[@]}" --data "$(d missing-test-labels)" "${O[@]}"
# Outputs below a regular file (a "read-only directory" that even root cannot write into).
touch "$tmp/afile"
for opt in --save --report --csv --plot --log-dir --checkpoint-dir --backup-dir; do
  row D7 "$opt below a regular file" 2 "$opt $tmp/afile/x: directory '$tmp/afile' is not writable" \
    -- "${T[@]}" --data "$tmp/good" --quiet $opt "$tmp/afile/x"
done
# An executable regular file passes access(W_OK|X_OK) as root (as /etc/hostname
# may be): the check must look for a directory.
cp "$tmp/afile" "$tmp/xfile" && chmod 755 "$tmp/xfile"
row D7 "--save below an executable regular file is a usage error before training" 2 \
  "xfile.*(not a directory|not writable)" -- "${T[@]}" --data "$tmp/good" --quiet --save "$tmp/xfile/x.safetensors"
row D7 "evaluate: unknown option" 2 "unknown option '--epochs'" -- "${E[@]}" --data "$tmp/good" --epochs 1
row D7 "evaluate --weights FILE that does not exist" 2 "--weights $tmp/nothere.safetensors: No such file or directory" \
  -- "$cli" evaluate --model mlp --weights "$tmp/nothere.safetensors" --data "$tmp/good"

# ---- C2/C3: damaged weights files and checkpoints -----------------------------
# Bit flips in the safetensors header (every 7th byte outside __metadata__, two
# bits each): all rejected naming the file. The tensor payload of a weights
# file has no checksum (safetensors has none), so payload flips are only
# detected in checkpoints, which carry a CRC32C per tensor (rows below).
n_flip=0 n_bad=0 bad_at=""
for pos in $(mkbad "$tmp/mlp.safetensors" - st-header-positions | tr ' ' '\n' | awk 'NR % 7 == 1'); do
  for bit in 0 5; do
    mkbad "$tmp/mlp.safetensors" "$tmp/flip.safetensors" "st-flip:$pos:$bit"
    "$cli" evaluate --model mlp --weights "$tmp/flip.safetensors" --data "$tmp/good" \
      >/dev/null 2>"$tmp/stderr"
    rc=$?; n_flip=$((n_flip + 1))
    if [ $rc -ne 2 ] || ! grep -q "flip.safetensors" "$tmp/stderr"; then
      n_bad=$((n_bad + 1)); bad_at+=" $pos:$bit(exit $rc)"
    fi
  done
done
check "C2 $n_flip header bit flips: each exits 2 naming the file${bad_at:+ (missed:$bad_at)}" "[ $n_bad -eq 0 ]"
size=$(stat -c %s "$tmp/mlp.safetensors")
for cut in 0 7 8 100 527 528 600000 $((size - 1)); do
  mkbad "$tmp/mlp.safetensors" "$tmp/cut.safetensors" "st-cut:$cut"
  row C3 "weights cut to $cut of $size bytes" 2 "cut.safetensors" rss \
    -- "$cli" evaluate --model mlp --weights "$tmp/cut.safetensors" --data "$tmp/good"
done
mkbad "$tmp/mlp.safetensors" "$tmp/hl.safetensors" st-header-len
row C3 "safetensors header length forged to 2^62" 2 "hl.safetensors: header length 4611686018427387904 .*exceeds" rss \
  -- "$cli" evaluate --model mlp --weights "$tmp/hl.safetensors" --data "$tmp/good"
mkbad "$tmp/mlp.safetensors" "$tmp/off.safetensors" st-offsets
row C3 "a tensor's data_offsets forged to 1 TiB" 2 \
  "off.safetensors: tensor 'dense/kernel': field 'data_offsets' \[0, 1099511627776\] outside" rss \
  -- "$cli" evaluate --model mlp --weights "$tmp/off.safetensors" --data "$tmp/good"

# A checkpoint to damage: ModelCheckpoint's format is the backup's format.
"${T[@]}" --data "$tmp/good" --batch-size 8 --quiet --checkpoint-dir "$tmp/ck" --monitor loss >/dev/null 2>&1
ck1=$(cd "$tmp/ck" && ls -d ckpt-* | tail -n 1)
# damaged_backup NAME PYTHON-DAMAGE PATTERN: copy the checkpoint to a backup
# dir, damage it, resume from it; exit 2, the backup left exactly as it was.
damaged_backup() {
  local name=$1 damage=$2 pattern=$3 bk=$tmp/bk-$RANDOM
  cp -a "$tmp/ck" "$bk"
  (cd "$bk/$ck1" && $py -c "$damage")
  local before; before=$(cd "$bk" && find . -type f -exec sha256sum {} + | LC_ALL=C sort)
  row C2 "$name" 2 "$pattern" -- "${T[@]}" --data "$tmp/good" --batch-size 8 --epochs 2 \
    --backup-dir "$bk" "${O[@]}"
  check "C2 ... and the damaged backup is left as it was" \
    "[ \"\$(cd '$bk' && find . -type f -exec sha256sum {} + | LC_ALL=C sort)\" = \"\$before\" ]"
}
flip_tensor='import struct
b = bytearray(open("weights.safetensors", "rb").read()); n = struct.unpack("<Q", b[:8])[0]
b[8 + n + 1000] ^= 4; open("weights.safetensors", "wb").write(b)'
damaged_backup "--backup-dir with a bit flip in a weights tensor" "$flip_tensor" \
  "backup: cannot resume: .*$ck1/weights.safetensors: tensor 'dense/kernel': checksum mismatch"
damaged_backup "--backup-dir with a damaged state.json" \
  's = open("state.json").read(); open("state.json", "w").write(s.replace("\"step\": ", "\"step\": 9", 1))' \
  "backup: cannot resume: .*$ck1/state.json: checksum mismatch"
damaged_backup "--backup-dir with a truncated optimizer.safetensors" \
  'import os; os.truncate("optimizer.safetensors", 5000)' "backup: cannot resume: .*$ck1/optimizer.safetensors"
bk=$tmp/bk-latest; cp -a "$tmp/ck" "$bk"; echo "ckpt-000099 deadbeef" >"$bk/latest"
row C2 "--backup-dir whose 'latest' pointer is damaged: an error, not a fresh start that deletes the backup" 2 \
  "backup: cannot resume: .*bk-latest/latest: damaged checkpoint pointer" -- "${T[@]}" --data "$tmp/good" --batch-size 8 --backup-dir "$bk" "${O[@]}"
check "C2 ... and the backup is still there, its pointer as it was" \
  "[ -d '$bk/$ck1' ] && [ \"\$(cat '$bk/latest')\" = 'ckpt-000099 deadbeef' ]"

# ---- C5: disk full (ulimit -f) ------------------------------------------------
# full BLOCKS command...: run with a file-size limit; SIGXFSZ ignored so write()
# fails with EFBIG instead of killing the process.
full() { local blocks=$1; shift; ( trap '' XFSZ; ulimit -f "$blocks"; exec "$@" ); }
c5=$tmp/c5; mkdir -p "$c5"
cp "$tmp/mlp.safetensors" "$c5/w.safetensors"
echo '{"previous": true}' >"$c5/r.json"
sum_before=$(sha256sum "$c5/w.safetensors" "$c5/r.json")
full 200 "${T[@]}" --data "$tmp/good" --seed 9 --quiet --save "$c5/w.safetensors" --report "$c5/r.json" \
  >/dev/null 2>"$tmp/stderr"
rc=$?
check "C5 --save on a full disk exits 4 naming the file" \
  "[ $rc -eq 4 ] && grep -q 'w.safetensors.*File too large' '$tmp/stderr'"
check "C5 ... the previous weights and report are intact, no temp file left" \
  "[ \"\$(sha256sum '$c5/w.safetensors' '$c5/r.json')\" = \"\$sum_before\" ] && [ \$(ls '$c5' | wc -l) -eq 2 ]"
# (stderr through a pipe: with ulimit -f 0 a regular file could not hold it)
full 0 "${T[@]}" --data "$tmp/good" --quiet --report "$c5/r.json" 2>&1 >/dev/null | cat >"$tmp/stderr"
rc=${PIPESTATUS[0]}
check "C5 --report on a full disk exits 4; the previous report is intact" \
  "[ $rc -eq 4 ] && grep -q 'r.json' '$tmp/stderr' && [ \"\$(sha256sum '$c5/w.safetensors' '$c5/r.json')\" = \"\$sum_before\" ] && [ \$(ls '$c5' | wc -l) -eq 2 ]"
cp -a "$tmp/ck" "$c5/ck"
ck_before=$(cd "$c5/ck" && find . | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort)
full 200 "${T[@]}" --data "$tmp/good" --quiet --epochs 2 --checkpoint-dir "$c5/ck" --monitor loss \
  >/dev/null 2>"$tmp/stderr"
rc=$?
check "C5 --checkpoint-dir on a full disk exits 4 naming the file" \
  "[ $rc -eq 4 ] && grep -q 'ModelCheckpoint: .*File too large' '$tmp/stderr'"
check "C5 ... the previous checkpoint is still latest, unchanged, no temporaries left" \
  "[ \"\$(cd '$c5/ck' && find . | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort)\" = \"\$ck_before\" ]"
cp -a "$c5/ck" "$c5/bk"
bk_before=$(cd "$c5/bk" && find . | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort)
full 200 "${T[@]}" --data "$tmp/good" --batch-size 8 --quiet --epochs 3 --backup-dir "$c5/bk" \
  >/dev/null 2>"$tmp/stderr"
rc=$?
check "C5 --backup-dir on a full disk exits 4 naming the file" \
  "[ $rc -eq 4 ] && grep -q 'backup: .*File too large' '$tmp/stderr'"
check "C5 ... the backup still holds the previous checkpoint, unchanged" \
  "[ \"\$(cd '$c5/bk' && find . | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort)\" = \"\$bk_before\" ]"
"${T[@]}" --data "$tmp/good" --batch-size 8 --quiet --epochs 3 --backup-dir "$c5/bk" >/dev/null 2>"$tmp/stderr"
check "C5 ... and it verifies: the same run with space resumes from it and completes" \
  "[ \$? -eq 0 ] && [ ! -e '$c5/bk' ]"

check "nothing was ever written to $out but the first run's weights" \
  "[ \"\$(ls -A '$out')\" = prev.safetensors ]"
exit $fail
