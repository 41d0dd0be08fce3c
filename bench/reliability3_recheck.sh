#!/usr/bin/env bash
# Re-runs the reproducers of ../shared/probes/reliability-3.md (issue 29,
# D1-D20) against a build, as the probe wrote them (smaller data where the
# probe's own size only costs time), and prints one Markdown row per
# reproducer: what the probe saw, what the issue asks, the exit code, the
# seconds, whether a signal or sanitizer report appeared, the first line of
# the message, and PASS/FAIL. Not a CTest (about 2 minutes, mpirun, several
# clusters; D13, D15 and D16 through the tests that replay them); the tests named in docs/PARAMETER_SERVER.md and docs/ERRORS.md
# assert the same in `make test`.
#   bench/reliability3_recheck.sh [build/strata]
# Run from the repository root. Every command runs under `timeout`; a hang
# shows as rc 124.
set -u
cli=$(realpath "${1:-build/strata}")
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3 # Debian's: numpy for the Python package
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHONPATH=$(dirname "$cli")/python
python3 "$src/tests/mkidx.py" a && python3 "$src/tests/mkidx.py" a2 other-seed
nfail=0
echo "| D | reproducer | expected | rc | s | signal | message | verdict |"
echo "|---|---|---|---|---|---|---|---|"
# row D WHAT EXPECT_RC PATTERN TIMEOUT CMD...: run CMD, grep PATTERN in its output
row() {
  local d=$1 what=$2 want=$3 pat=$4 lim=$5; shift 5
  local t0=$SECONDS
  export S src py p1 p2 p3 p4 p5 p6 2>/dev/null
  export -f $(compgen -A function)
  timeout "$lim" bash -c '"$@"' _ "$@" > out 2>&1 # "$@" may be a function of this script (exported)
  local rc=$? secs=$((SECONDS - t0)) sig=no verdict=PASS
  grep -Eq 'Segmentation|Aborted|double free|AddressSanitizer|core dumped|signal [0-9]+' out && sig=yes
  [ $rc -gt 128 ] && [ $rc != 124 ] && sig=yes
  local msg
  msg=$(grep -E "$pat" out | head -1 | cut -c1-160 | tr '|' '/')
  [ -n "$msg" ] || msg="(no line matching: $pat) $(grep -v '^$' out | tail -1 | cut -c1-100 | tr '|' '/')"
  if [ "$sig" = yes ] || ! grep -Eq "$pat" out || { [ "$want" != any ] && [ "$rc" != "$want" ]; }; then
    verdict=FAIL; nfail=$((nfail + 1))
  fi
  echo "| $d | $what | rc $want | $rc | $secs | $sig | \`$msg\` | $verdict |"
}
S=$cli
B="train --data a --epochs 1 --batch-size 8 --strategy pipeline --collective-timeout 5 --model mlp"
# ---- D1: pipeline flags that shape messages
row D1 "mpmd --micro-batches 2 vs 4" 2 "differs from rank 0 in micro-batches" 60 \
  mpirun -np 1 $S $B --micro-batches 2 : -np 1 $S $B --micro-batches 4
row D1 "mpmd --micro-batches 4 vs 2" 2 "differs from rank 0 in micro-batches" 60 \
  mpirun -np 1 $S $B --micro-batches 4 : -np 1 $S $B --micro-batches 2
row D1 "mpmd --micro-batches 2 vs 3" 2 "differs from rank 0 in micro-batches" 60 \
  mpirun -np 1 $S $B --micro-batches 2 : -np 1 $S $B --micro-batches 3
row D1 "mpmd --stage-boundaries 1 vs 2" 2 "stage.boundaries" 60 \
  mpirun -np 1 $S $B --stage-boundaries 1 : -np 1 $S $B --stage-boundaries 2
row D1 "mpmd --stage-boundaries 2 vs 1" 2 "stage.boundaries" 60 \
  mpirun -np 1 $S $B --stage-boundaries 2 : -np 1 $S $B --stage-boundaries 1
row D1 "cnn mpmd --stage-boundaries 2 vs 4" 2 "stage.boundaries" 60 \
  mpirun -np 1 $S ${B/mlp/cnn} --stage-boundaries 2 : -np 1 $S ${B/mlp/cnn} --stage-boundaries 4
row D1 "np 4 (4 stages), --micro-batches 2 on rank 0 only" 2 "micro-batches" 90 \
  mpirun -np 1 $S $B --micro-batches 2 : -np 3 $S $B
# ---- D3: stages whose input pipelines differ
B3="train --train-examples 4000 --epochs 3 --batch-size 32 --strategy pipeline --collective-timeout 10 --model mlp --quiet"
row D3 "mpirun -np 2 (control)" 0 "test_accuracy" 180 mpirun -np 2 $S $B3
row D3 "--shuffle-buffer 0 on rank 1 only" 2 "read other examples" 180 mpirun -np 1 $S $B3 : -np 1 $S $B3 --shuffle-buffer 0
row D3 "other files of the same shape (a vs a2)" 2 "read other examples" 120 \
  mpirun -np 1 $S train --data a --strategy pipeline --model mlp --batch-size 8 : \
         -np 1 $S train --data a2 --strategy pipeline --model mlp --batch-size 8
# ---- D2: a forged JOB + RUN at insecure workers (CLI, then Python's keyless Server)
read -r p1 p2 p3 p4 p5 p6 <<< "$(python3 -c "
import random, socket
out = []
while len(out) < 6:
    p = random.randint(20000, 32000); s = socket.socket()
    try: s.bind(('127.0.0.1', p)); out.append(p)
    except OSError: pass
    s.close()
print(*out)")"
d2cli() {
  TF_CONFIG="{\"cluster\": {\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
    $S server --insecure --job-timeout 30 & local pid=$!
  sleep 0.5; PYTHONPATH=$src/tests python3 "$src/tests/ps_forge.py" "127.0.0.1:$p2" fashion-mnist
  wait $pid
}
row D2 "forged JOB batch=2^62+1 + RUN, strata server --insecure" 3 "batch [0-9]+ out of range" 60 d2cli
d2py() {
  $py -c "import numpy as np; np.savez('evil.npz', x=np.zeros((100,28,28),'uint8'), y=np.zeros(100,'uint8'))"
  $py -c "
import strata as tf
tf.distribute.Server(tf.train.ClusterSpec({'chief': ['127.0.0.1:$p4'], 'worker': ['127.0.0.1:$p5'], 'ps': ['127.0.0.1:$p6']}),
                     job_name='worker', task_index=0, protocol='grpc', job_timeout=20).join()" & local pid=$!
  sleep 2; PYTHONPATH=$src/tests python3 "$src/tests/ps_forge.py" "127.0.0.1:$p5" npz:evil.npz
  wait $pid
}
row D2 "the same at a Python Server without keys (warns: insecure)" any "batch [0-9]+ out of range" 60 d2py
# ---- D4: a TFRecord bomb of empty feature-map entries (16 MiB record; the probe's 63 MiB one costs the same per byte)
$S convert --out fm --shards 4 --examples 2000 --features spec.json > /dev/null 2>&1 # writes spec.json too
$py - <<'EOF'
import gzip, struct, strata as tf
feats = b"\x0a\x00" * ((16 << 20) // 2 - 8)
def varint(n):
    o = b""
    while True:
        b, n = n & 0x7f, n >> 7
        if not n: return o + bytes([b])
        o += bytes([b | 0x80])
w = tf.io.TFRecordWriter("map16.tfrecord")
w.write(b"\x0a" + varint(len(feats)) + feats); w.close()
open("map16.tfrecord.gz", "wb").write(gzip.compress(open("map16.tfrecord", "rb").read(), 9))
EOF
d4() { /usr/bin/time -f "peak_rss_kb %M" $S train --data tfrecord:map16.tfrecord.gz --features spec.json --model mlp --quiet --shuffle-buffer 0 2>&1; }
row D4 "16 MiB record of empty map entries (.gz $(( $(stat -c %s map16.tfrecord.gz) / 1024 )) KB)" 2 "tfrecord|record" 120 d4
rss=$(grep -o 'peak_rss_kb [0-9]*' out | cut -d' ' -f2)
if [ "${rss:-999999999}" -lt 400000 ]; then v=PASS; else v=FAIL; nfail=$((nfail + 1)); fi
echo "| D4 | peak RSS of that run | < 2 x 64 MiB + buffers (400 MB here) | | | | \`peak_rss_kb ${rss:-?}\` | $v |"
# ---- D5: Python TFRecordDataset keeps trailing zero bytes
d5() {
  $py -c "
import strata as tf, os
w = tf.io.TFRecordWriter('copy.tfrecord')
for r in tf.data.TFRecordDataset('fm-00000-of-00004.tfrecord'): w.write(r)
w.close()
spec = {'image': tf.io.FixedLenFeature([], tf.string), 'label': tf.io.FixedLenFeature([], tf.int64)}
bad = 0
for r in tf.data.TFRecordDataset('fm-00000-of-00004.tfrecord'):
    try: tf.io.parse_single_example(r, spec)
    except ValueError: bad += 1
a, b = os.path.getsize('fm-00000-of-00004.tfrecord'), os.path.getsize('copy.tfrecord')
print('bad', bad, 'sizes', a, b, 'equal' if a == b else 'DIFFER')"
}
row D5 "copy loop over TFRecordDataset; parse every record" 0 "bad 0 sizes [0-9]+ [0-9]+ equal" 120 d5
# ---- D6: a damaged second gzip member
$py -c "
import gzip; g = open('fm-00000-of-00004.tfrecord','rb').read()
b = bytearray(gzip.compress(g)); b[0] ^= 1
open('two.tfrecord.gz','wb').write(gzip.compress(g) + bytes(b))
open('two-ok.tfrecord.gz','wb').write(gzip.compress(g) + gzip.compress(g))"
row D6 "second member's magic damaged" 2 "gzip|offset" 60 $S train --data tfrecord:two.tfrecord.gz --features spec.json --model mlp --quiet
row D6 "two intact members (control: 1000 examples)" 0 "test_accuracy" 120 \
  $S train --data tfrecord:two-ok.tfrecord.gz --features spec.json --model mlp --quiet --validation-split 0
# ---- D7: --enable-recovery, a rank killed during start-up
d7() {
  rm -f pid.0 pid.1
  mpirun --enable-recovery -np 2 sh -c "echo \$\$ > pid.\$OMPI_COMM_WORLD_RANK; exec $S train --model mlp --strategy pipeline --collective-timeout 3 --quiet" &
  local job=$!
  for _ in $(seq 1 2000); do [ -e pid.1 ] && break; sleep 0.01; done
  sleep 0.05; kill -9 "$(cat pid.1)"
  wait $job
}
row D7 "mpirun --enable-recovery, rank 1 kill -9 at start-up" any "start-up|did not|lost|exited|mpirun" 60 d7
# ---- D8: host names in the cluster spec
d8() {
  TF_CONFIG="{\"cluster\": {\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"localhost:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
    $S server --insecure --job-timeout 1.5
}
row D8 "worker at localhost:PORT serves (then no JOB)" 3 "no JOB from the chief within 1.5 s" 30 d8
# ---- D9: launch with ps:0's port taken
row D9 "launch, ps:0's port grabbed (the helper prints launch's rc)" 0 "grabbed 1 rc 2 seconds ([0-9]|[12][0-9])[.]" 150 \
  python3 "$src/tests/ps_grab_port.py" $S launch --workers 1 --ps 1 --insecure -- train --model mlp --train-examples 512 --batch-size 64 --quiet
# ---- D10: contradictory timing options
row D10 "--heartbeat-interval 10 --coordinator-timeout 5" 2 "heartbeat" 60 \
  $S launch --workers 2 --ps 1 -- train --model mlp --train-examples 4000 --epochs 5 --batch-size 32 --heartbeat-interval 10 --coordinator-timeout 5
row D10 "Python ParameterServerStrategy(heartbeat_interval=-1)" 1 "ValueError" 30 \
  $py -c "import strata as tf; tf.distribute.experimental.ParameterServerStrategy(tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({'chief': ['127.0.0.1:1'], 'worker': ['127.0.0.1:2'], 'ps': ['127.0.0.1:3']})), heartbeat_interval=-1)"
# ---- D11: Python fit arguments that hung or exhausted memory
d11() {
  $py -c "
import numpy as np, strata as tf
X = np.random.rand(64, 4).astype('float32'); Y = np.random.randint(0, 3, 64)
m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation='softmax')])
m.compile(optimizer='sgd', loss='sparse_categorical_crossentropy')
try: m.fit(X, Y, class_weight={10**20: 1.0}, verbose=0); print('class_weight accepted')
except ValueError as e: print('class_weight ValueError:', e)
class Stop(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1: self.model.stop_training = True
h = m.fit(X, Y, epochs=10**6, callbacks=[Stop()], verbose=0); print('epochs=10**6 stopped after', len(h.history['loss']))
for e in (2**40, 2**63):
    try: m.fit(X, Y, epochs=e, verbose=0); print(e, 'accepted')
    except ValueError as ex: print('epochs', e, 'ValueError:', ex)"
}
row D11 "class_weight={10**20: 1}: ValueError at once" 0 "class_weight ValueError" 60 d11
if grep -q "stopped after 2" out && grep -q "epochs 1099511627776 ValueError" out &&
   grep -q "epochs 9223372036854775808 ValueError" out; then v=PASS; else v=FAIL; nfail=$((nfail + 1)); fi
echo "| D11 | epochs=10**6 + a callback stopping at 2; epochs=2**40 and 2**63 | 2 epochs; ValueError, at once | | | | \`$(grep -E 'stopped after|epochs 1099' out | tr '\n' ' ' | cut -c1-160)\` | $v |"
# ---- D12: --cache in the output-collision checks
row D12 "--cache o.bin --save o.bin" 2 "o.bin" 60 \
  $S train --data 'tfrecord:fm-*.tfrecord' --features spec.json --model mlp --cache o.bin --save o.bin
row D12 "--cache o.bin --report o.bin" 2 "o.bin" 60 \
  $S train --data 'tfrecord:fm-*.tfrecord' --features spec.json --model mlp --cache o.bin --report o.bin
# ---- D13, D15, D16: the tests that replay them (a training cluster each)
for t in test_ps_handshake_refusals test_ps_chief_refusals test_ps_launch_signals; do
  d=D13; [ $t = test_ps_launch_signals ] && d="D15, D16"
  row "$d" "tests/$t.sh" 0 "^ok" 180 env STRATA_CLI="$S" bash "$src/tests/$t.sh"
  n_ok=$(grep -c '^ok' out); n_bad=$(grep -c '^FAIL' out)
  echo "| $d | ... its checks | all ok | | | | \`$n_ok ok, $n_bad FAIL\` | $([ "$n_bad" = 0 ] && echo PASS || echo FAIL) |"
  [ "$n_bad" = 0 ] || nfail=$((nfail + 1))
done
# ---- D14: pipeline options given to one rank
row D14 "--save on rank 1 only" 2 "save" 60 mpirun -np 1 $S $B : -np 1 $S $B --save m.safetensors
row D14 "--micro-batches 64 --batch-size 8" 2 "micro-batches" 60 mpirun -np 2 $S $B --micro-batches 64
# ---- D17: unreadable inputs
ln -sf loop.tfrecord loop.tfrecord; ln -sf nowhere.tfrecord dangling.tfrecord
row D17 "self-referencing symlink" 2 "loop.tfrecord" 30 $S train --data tfrecord:loop.tfrecord --features spec.json --model mlp
row D17 "dangling symlink" 2 "dangling.tfrecord" 30 $S train --data tfrecord:dangling.tfrecord --features spec.json --model mlp
row D17 "/proc/self/mem" any "mem" 30 $S train --data tfrecord:/proc/self/mem --features spec.json --model mlp
# ---- D18: message quality
$py -c "
import gzip; g = bytearray(gzip.compress(open('fm-00000-of-00004.tfrecord','rb').read()))
g[5000] ^= 0x55; open('bad.tfrecord.gz','wb').write(bytes(g))"
row D18 "gzip damage at compressed byte 5000: the offset named" 2 "offset [1-9]" 60 \
  $S train --data tfrecord:bad.tfrecord.gz --features spec.json --model mlp --quiet
d18t() {
  TF_CONFIG="{\"cluster\": {\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
    $S server --insecure --job-timeout 1.5
}
row D18 "--job-timeout 1.5 says 1.5 s" 3 "within 1.5 s" 30 d18t
: > empty.tfrecord
row D18 "empty TFRecord input names its file" 2 "empty.tfrecord" 30 $S train --data tfrecord:empty.tfrecord --features spec.json --model mlp
row D18 "Python fit(batch_size=2**31)" any "ValueError: fit: batch_size=2147483648 must be an integer in" 60 $py -c "
import numpy as np, strata as tf
m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)]); m.compile(optimizer='sgd', loss='mse')
m.fit(np.zeros((8, 4), 'float32'), np.zeros((8, 3), 'float32'), batch_size=2**31, verbose=0)"
# ---- D19: an interrupted convert
d19() {
  $S convert --out int --shards 8 --examples 60000 --features spec.json --compression gzip > /dev/null 2>&1 & local pid=$!
  for _ in $(seq 1 3000); do ls int-00000-of-00008.tfrecord.gz > /dev/null 2>&1 && break; sleep 0.01; done
  kill -9 $pid; wait $pid 2>/dev/null
  ls int-* 2>/dev/null | head -3
  $S train --data 'tfrecord:int-*-of-00008.tfrecord.gz' --features spec.json --model mlp --quiet
}
row D19 "convert killed -9 once its first shard is in place, then trained on its set" 2 "shard .* is missing" 60 d19
# ---- D20: permissive modes and contradictions
echo "{\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}" > k20.json
$S keygen k20 --cluster k20.json > /dev/null 2>&1
d20() { TF_CONFIG="{\"cluster\": {\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}" \
    $S server "$@" --job-timeout 1; }
row D20 "--keys DIR --insecure" 2 "insecure" 30 d20 --keys k20 --insecure
chmod 644 k20/ps-0.secret
row D20 ".secret mode 0644" 2 "0644" 30 d20 --keys k20
chmod 600 k20/ps-0.secret; chmod 777 k20
row D20 "key directory mode 0777" 2 "0777" 30 d20 --keys k20
chmod 700 k20
$py -c "
import json; s = json.load(open('spec.json')); k = next(iter(s)); s[k]['default_value'] = 0
json.dump(s, open('spec-extra.json', 'w'))"
row D20 "--features entry with an unknown key" 2 "default_value" 30 $S train --data 'tfrecord:fm-*.tfrecord' --features spec-extra.json --model mlp
row D20 "Python prefetch(-5), fit(epochs=1.5)" any "Error" 30 $py -c "
import numpy as np, strata as tf
try: tf.data.Dataset.range(4).prefetch(-5); print('prefetch(-5) accepted')
except ValueError as e: print('prefetch ValueError:', e)
m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)]); m.compile(optimizer='sgd', loss='mse')
m.fit(np.zeros((8, 4), 'float32'), np.zeros((8, 3), 'float32'), epochs=1.5, verbose=0)"
echo
echo "$nfail FAIL"
exit $((nfail > 0))
