#!/usr/bin/env bash
# End to end through the CLI on a slice of Fashion-MNIST: a short run reaches a
# loss threshold; the same seed gives identical weights bytes and an identical
# report (timings aside); evaluate reproduces the test figures from the saved
# weights; summary and help work.
set -u
cli=${STRATA_CLI:?set by CTest}
data=/usr/share/datasets/fashion-mnist
if [ ! -e $data/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
py=/usr/bin/python3

for run in a b; do
  "$cli" train --model mlp --train-examples 3000 --epochs 2 --batch-size 64 --seed 7 \
    --validation-split 0.1 --save "$tmp/$run.safetensors" --report "$tmp/$run.json" --quiet \
    >"$tmp/$run.out" 2>"$tmp/$run.err"
  check "train run $run exits 0" "[ $? -eq 0 ]"
done
cat "$tmp/a.out" "$tmp/a.err"
check "same seed, identical weights bytes" "cmp -s $tmp/a.safetensors $tmp/b.safetensors"
strip='import json,sys
d=json.load(open(sys.argv[1]))
for k in ("samples_per_sec","wall_seconds","peak_rss_bytes"): d.pop(k)
for h in d["history"]: h.pop("seconds")
print(json.dumps(d, sort_keys=True))'
check "same seed, identical report (timings aside)" \
  "[ \"\$($py -c '$strip' $tmp/a.json)\" = \"\$($py -c '$strip' $tmp/b.json)\" ]"
check "report has the documented fields" "$py -c '
import json; d=json.load(open(\"$tmp/a.json\"))
need=\"model strategy replicas epochs global_batch_size seed train_loss train_accuracy test_loss test_accuracy samples_per_sec wall_seconds peak_rss_bytes history\".split()
missing=[k for k in need if k not in d]; assert not missing, missing
assert d[\"model\"]==\"mlp\" and d[\"strategy\"]==\"one_device\" and d[\"replicas\"]==1 and d[\"epochs\"]==2
assert len(d[\"history\"])==2 and \"val_loss\" in d[\"history\"][0]'"
check "loss falls below 0.75 and test accuracy above 0.70 on the slice" "$py -c '
import json; d=json.load(open(\"$tmp/a.json\"))
print(\"train_loss\", d[\"train_loss\"], \"test_accuracy\", d[\"test_accuracy\"])
assert d[\"train_loss\"] < 0.75 and d[\"test_accuracy\"] > 0.70'"
"$cli" evaluate --model mlp --weights "$tmp/a.safetensors" >"$tmp/eval.out" 2>&1
check "evaluate exits 0" "[ $? -eq 0 ]"
check "evaluate reproduces the reported test accuracy" "$py -c '
import json,re; d=json.load(open(\"$tmp/a.json\"))
acc=float(re.search(r\"test_accuracy: ([0-9.]+)\", open(\"$tmp/eval.out\").read()).group(1))
assert abs(acc-d[\"test_accuracy\"])<1e-4, (acc, d[\"test_accuracy\"])'"
"$cli" summary --model cnn >"$tmp/sum.out"
check "summary prints the cnn table with 225,034 params" "grep -q 'Total params: 225,034' $tmp/sum.out && grep -q 'conv2d_1 (Conv2D)' $tmp/sum.out"
"$cli" summary --model mlp >"$tmp/sum2.out"
check "summary prints the mlp with 235,146 params" "grep -q 'Total params: 235,146' $tmp/sum2.out"
"$cli" --help >"$tmp/help.out"
check "strata --help lists the commands" "grep -q 'train' $tmp/help.out && grep -q evaluate $tmp/help.out"
"$cli" train --help >"$tmp/thelp.out"
check "strata train --help lists its options" "grep -q -- '--batch-size' $tmp/thelp.out && grep -q -- '--report' $tmp/thelp.out"
# Switching strategy is one flag: mirrored over two devices gives the weights a
# one-thread one-device run gives, within 1e-4 relative (same seed and batch).
for st in "--strategy one_device --threads 1" "--strategy mirrored --devices cpu:0,cpu:1" \
          "--strategy central_storage --replicas 3"; do
  tag=$(echo "$st" | tr -cd 'a-z0-9')
  "$cli" train --model mlp --train-examples 2000 --epochs 1 --batch-size 64 --seed 3 $st \
    --save "$tmp/$tag.safetensors" --report "$tmp/$tag.json" --quiet >/dev/null 2>&1
  check "train $st exits 0" "[ $? -eq 0 ]"
done
cmpw='import json,struct,sys
def load(p):
    b=open(p,"rb").read(); n=struct.unpack("<Q",b[:8])[0]; h=json.loads(b[8:8+n]); h.pop("__metadata__",None)
    return {k:struct.unpack("<%df"%((v["data_offsets"][1]-v["data_offsets"][0])//4), b[8+n+v["data_offsets"][0]:8+n+v["data_offsets"][1]]) for k,v in h.items()}
a,b=load(sys.argv[1]),load(sys.argv[2]); assert a.keys()==b.keys()
d=max(abs(x-y) for k in a for x,y in zip(a[k],b[k])); m=max(abs(x) for k in a for x in a[k])
print("max relative difference", d/m); assert d/m<1e-4'
one=strategyonedevicethreads1
check "mirrored 2 replicas matches one device within 1e-4" \
  "$py -c '$cmpw' $tmp/$one.safetensors $tmp/strategymirroreddevicescpu0cpu1.safetensors"
check "central storage 3 replicas matches one device within 1e-4" \
  "$py -c '$cmpw' $tmp/$one.safetensors $tmp/strategycentralstoragereplicas3.safetensors"
check "the report says which strategy ran on how many replicas" "$py -c '
import json; d=json.load(open(\"$tmp/strategycentralstoragereplicas3.json\"))
assert d[\"strategy\"]==\"central_storage\" and d[\"replicas\"]==3, d'"

# Callbacks from the command line: CSVLogger, TensorBoard, the SVG plot,
# ModelCheckpoint with --keep, EarlyStopping.
"$cli" train --model mlp --train-examples 3000 --epochs 3 --batch-size 64 --validation-split 0.2 \
  --csv "$tmp/log.csv" --log-dir "$tmp/tb" --plot "$tmp/curves.svg" --checkpoint-dir "$tmp/ck" \
  --keep 2 --early-stopping 5 --quiet >/dev/null 2>"$tmp/cb.err"
check "train with every callback flag exits 0" "[ $? -eq 0 ]"
check "CSV: header and one row per epoch" \
  "[ \"\$(head -1 $tmp/log.csv)\" = 'epoch,loss,accuracy,val_loss,val_accuracy,lr' ] && [ \$(wc -l < $tmp/log.csv) -eq 4 ]"
check "TensorBoard files decode with the independent reader (train and validation runs)" \
  "$py $STRATA_SOURCE_DIR/tests/tb_decode.py $tmp/tb > $tmp/tb.jsonl && grep -q '\"validation\"' $tmp/tb.jsonl && grep -q epoch_loss $tmp/tb.jsonl"
check "the SVG plot parses and has 4 curves" "$py -c '
import xml.etree.ElementTree as ET; r=ET.parse(\"$tmp/curves.svg\").getroot()
assert r.tag.endswith(\"svg\"); assert len([e for e in r.iter() if e.tag.endswith(\"polyline\")])==4'"
check "ModelCheckpoint kept the newest 2 checkpoints" "[ \$(ls -d $tmp/ck/ckpt-* | wc -l) -eq 2 ] && [ -e $tmp/ck/latest ]"
"$cli" train --model mlp --keep 2 --quiet >/dev/null 2>"$tmp/e.err"
check "--keep without --checkpoint-dir is a usage error" "[ $? -eq 2 ] && grep -q checkpoint-dir $tmp/e.err"
"$cli" train --model mlp --early-stopping 2 --quiet >/dev/null 2>"$tmp/e.err"
check "EarlyStopping on val_loss without validation is a usage error" "[ $? -eq 2 ] && grep -q validation-split $tmp/e.err"

# Keras model import: the cnn's Keras 3 JSON is the built-in cnn (summary and
# trained weights), a bad config exits 2 naming layer and option.
k=$STRATA_SOURCE_DIR/tests/keras
check "summary of cnn_keras3.json equals the built-in cnn's" \
  "diff <(\"$cli\" summary --model $k/cnn_keras3.json) <(\"$cli\" summary --model cnn) >/dev/null"
"$cli" train --model "$k/cnn_keras2.json" --train-examples 640 --epochs 1 --quiet --save "$tmp/k.safetensors" >/dev/null 2>&1
"$cli" train --model cnn --train-examples 640 --epochs 1 --quiet --save "$tmp/b.safetensors" >/dev/null 2>&1
check "a Keras 2 JSON of the cnn trains to the built-in cnn's exact weights" "cmp -s $tmp/k.safetensors $tmp/b.safetensors"
"$cli" train --model "$k/bad_dilation.json" --quiet >/dev/null 2>"$tmp/k.err"
check "an unsupported Keras option exits 2 naming layer and option" \
  "[ $? -eq 2 ] && grep -q \"layer 3 ('conv2d_1', Conv2D): dilation_rate\" $tmp/k.err"
sed 's/"batch_shape": \[null, 28, 28, 1\]/"batch_shape": [null, 784]/' "$k/mlp_keras3.json" >"$tmp/flat.json"
"$cli" train --model "$tmp/flat.json" --train-examples 640 --epochs 1 --quiet --save "$tmp/f.safetensors" >"$tmp/f.out" 2>&1
check "a Keras JSON model with a flat (None, 784) input trains on the images (flattened by the CLI)" \
  "[ $? -eq 0 ] && \"$cli\" evaluate --model $tmp/flat.json --weights $tmp/f.safetensors | grep -q test_accuracy"

# The example program trains the cnn through the public API (small generated set).
example="$(dirname "$cli")/example_train_cnn"
$py "$STRATA_SOURCE_DIR/tests/mkidx.py" "$tmp/small"
"$example" "$tmp/small" 1 >"$tmp/ex.out" 2>"$tmp/ex.err"
check "examples/train_cnn.c runs and reports test accuracy" \
  "[ $? -eq 0 ] && grep -q 'test_accuracy' $tmp/ex.out && grep -q 'Total params: 225,034' $tmp/ex.out"
"$(dirname "$cli")/example_custom_loop" "$tmp/small" 2 2 >"$tmp/cl.out" 2>"$tmp/cl.err"
check "examples/custom_loop.c trains with 2 mirrored replicas" \
  "[ $? -eq 0 ] && grep -q 'epoch 2: 2 replicas - loss' $tmp/cl.out"
exit $fail
