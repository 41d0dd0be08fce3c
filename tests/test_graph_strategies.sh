#!/usr/bin/env bash
# Every strategy runs graph models (issue 28 point 5): the built-in graphs
# resnet20 and mobilenet-tiny and a Keras 3 functional JSON (resnet20 as
# `strata summary --keras-json` writes it) through the CLI, on 32-64 random
# 28x28 examples (a few steps each, every run bounded by timeout):
#  - central_storage x2, --shard-optimizer (ZeRO-1) and the Keras JSON give
#    mirrored x2's bytes (BatchNormalization statistics are per replica, so
#    mirrored x2 is the reference, not one device); `strata evaluate` on a
#    --save file prints train's test figures (built-in name and JSON);
#  - --sync-batchnorm: mirrored x2 within 1e-4 of one device after one SGD
#    step (max |a - b| / max |b| over the trainable tensors; 1e-7..2e-5 seen
#    over seeds, the reference backend vs cpu on one device is 7e-6: twenty
#    BatchNormalizations amplify rounding), without it more than 3e-4 apart
#    (7e-4..1.4e-3 seen); central_storage and --shard-optimizer give its
#    bytes; refused (exit 2) with the pipeline and with a Keras JSON;
#  - the pipeline: a --stage-boundaries cut that two tensors cross is exit 2
#    naming the layer; a backup written by a run stopped with SIGTERM
#    resumes to the uninterrupted run's bytes (mirrored x2);
#  - under mpirun -np 2: multi_worker_mirrored (plain, --shard-optimizer,
#    the JSON, --sync-batchnorm) gives mirrored x2's bytes; ranks that differ
#    in --sync-batchnorm stop with exit 2 naming the field; a mirrored x2
#    backup resumes under it to the uninterrupted bytes; the pipeline across
#    processes (GPipe and 1F1B, --load-weights) gives the in-process
#    pipeline's bytes, its --checkpoint-dir the same weights and optimizer
#    files, and an in-process pipeline backup resumes under it to the
#    uninterrupted bytes; 2 stages x 2 replicas (mpirun -np 4) are within
#    1e-5 of mirrored x4 (the same BatchNormalization slices; the moving
#    statistics differ: a stage updates them once per micro-batch);
#  - TF_CONFIG workers (strata launch --workers 2, Gloo): mirrored x2's bytes;
#  - parameter_server (strata launch --workers 1 --ps 2): every step applied
#    once on each ps, the saved tensors those of one device, the moving
#    statistics moved, --ps-shards 2 the same bytes; the JSON model too.
# Parts whose resource is absent (mpirun, MPI, Gloo, ZeroMQ) are skipped with
# the reason printed; the test then exits 77 unless something failed.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# the sanitizer builds: OpenMPI's own leaks and races are suppressed as in tests/mpi_common.bash
export LSAN_OPTIONS="suppressions=$src/tests/lsan-mpi.supp:fast_unwind_on_malloc=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$src/tests/tsan-mpi.supp"
fail=0 skipped=()
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
skip() { echo "SKIP: $1"; skipped+=("$1"); }
# close A B TOL: max |a - b| / max |b| over the trainable tensors <= TOL (same names, shapes)
close() { python3 - "$@" <<'PY'
import json, struct, sys
def load(p):
    d = open(p, "rb").read(); (n,) = struct.unpack_from("<Q", d, 0); h = json.loads(d[8:8 + n])
    return {k: (tuple(t["shape"]), struct.unpack("<%df" % ((t["data_offsets"][1] - t["data_offsets"][0]) // 4),
            d[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]))
            for k, t in h.items() if k != "__metadata__" and "moving_" not in k}
a, b = load(sys.argv[1]), load(sys.argv[2])
if {k: v[0] for k, v in a.items()} != {k: v[0] for k, v in b.items()}: print("tensors differ"); sys.exit(1)
d = max(abs(x - y) for k in a for x, y in zip(a[k][1], b[k][1])); m = max(abs(y) for k in b for y in b[k][1])
print("max |a - b| / max |b| = %.3g" % (d / m)); sys.exit(0 if d <= float(sys.argv[3]) * m else 1)
PY
}
# moved F: every moving_mean of F has left its initial zeros
moved() { python3 - "$1" <<'PY'
import json, struct, sys
d = open(sys.argv[1], "rb").read(); (n,) = struct.unpack_from("<Q", d, 0); h = json.loads(d[8:8 + n])
mm = [t["data_offsets"] for k, t in h.items() if k.endswith("moving_mean")]
sys.exit(not mm or any(not any(struct.unpack("<%df" % ((b - a) // 4), d[8 + n + a:8 + n + b])) for a, b in mm))
PY
}
python3 - <<'PY' || exit 1
import gzip, random, struct, os
random.seed(28); os.makedirs("d")
def idx(p, dims, b): gzip.open(p, "wb").write(struct.pack(">BBBB", 0, 0, 8, len(dims)) + b"".join(struct.pack(">I", x) for x in dims) + b)
for name, n in (("train", 128), ("t10k", 32)):
    idx(f"d/{name}-images-idx3-ubyte.gz", [n, 28, 28], bytes(random.randrange(256) for _ in range(n * 784)))
    idx(f"d/{name}-labels-idx1-ubyte.gz", [n], bytes(random.randrange(10) for _ in range(n)))
PY
t() { timeout 120 "$cli" "$@"; }
c=(--data d --batch-size 32 --seed 3 --quiet --train-examples 64)
m2=(--strategy mirrored --replicas 2)
t summary --model resnet20 --keras-json r20.json >/dev/null || fail=1

# ---- in process ----
for m in resnet20 mobilenet-tiny; do
  t train --model $m "${c[@]}" "${m2[@]}" --save $m.m2.st >$m.m2.out || fail=1
  t train --model $m "${c[@]}" --strategy central_storage --replicas 2 --save $m.cs.st >/dev/null
  check "$m: central_storage x2 = mirrored x2 (bytes)" "cmp -s $m.m2.st $m.cs.st"
  t train --model $m "${c[@]}" "${m2[@]}" --shard-optimizer --save $m.z.st >/dev/null
  check "$m: mirrored x2 --shard-optimizer = mirrored x2 (bytes)" "cmp -s $m.m2.st $m.z.st"
done
t train --model r20.json "${c[@]}" "${m2[@]}" --save json.m2.st >/dev/null
check "Keras JSON of resnet20: mirrored x2 = the built-in's bytes" "cmp -s resnet20.m2.st json.m2.st"
want=$(sed -n 's/^\(test_loss: .* - test_accuracy: [0-9.]*\).*/\1/p' resnet20.m2.out)
for model in resnet20 r20.json; do
  got=$(t evaluate --model $model --weights resnet20.m2.st --data d | sed -n 's/^\(test_loss: .* - test_accuracy: [0-9.]*\).*/\1/p')
  check "strata evaluate --model $model after --save: train's figures ('$want')" "[ -n \"$want\" ] && [ \"$got\" = \"$want\" ]"
done

# SyncBatchNormalization: one SGD step of 32
one=(--data d --batch-size 32 --seed 3 --quiet --train-examples 32 --optimizer sgd --lr 0.01)
t train --model resnet20 "${one[@]}" --sync-batchnorm --save sync.od.st >/dev/null
t train --model resnet20 "${one[@]}" "${m2[@]}" --sync-batchnorm --save sync.m2.st >/dev/null
t train --model resnet20 "${one[@]}" "${m2[@]}" --save plain.m2.st >/dev/null
check "--sync-batchnorm: mirrored x2 within 1e-4 of one device" "close sync.m2.st sync.od.st 1e-4"
check "... without it more than 3e-4 apart (per-replica statistics)" "! close plain.m2.st sync.od.st 3e-4"
t train --model resnet20 "${one[@]}" --strategy central_storage --replicas 2 --sync-batchnorm --save sync.cs.st >/dev/null
check "--sync-batchnorm: central_storage x2 = mirrored x2 (bytes)" "cmp -s sync.m2.st sync.cs.st"
t train --model resnet20 "${one[@]}" "${m2[@]}" --sync-batchnorm --shard-optimizer --save sync.z.st >/dev/null
check "--sync-batchnorm: --shard-optimizer = mirrored x2 (bytes)" "cmp -s sync.m2.st sync.z.st"
t train --model resnet20 "${one[@]}" --strategy pipeline --sync-batchnorm >/dev/null 2>err
check "--sync-batchnorm with the pipeline: exit 2, saying why" "[ \$? = 2 ] && grep -q 'normalises each micro-batch' err"
t train --model r20.json "${one[@]}" --sync-batchnorm >/dev/null 2>err
check "--sync-batchnorm with a Keras JSON: exit 2 naming the config key" "[ \$? = 2 ] && grep -q '\"synchronized\": true' err"

# the pipeline's cuts: layer 4 of resnet20 is inside the first residual block
t train --model resnet20 "${one[@]}" --strategy pipeline --stage-boundaries 4 >/dev/null 2>err
check "pipeline: a cut two tensors cross is exit 2 naming the layer" \
  "[ \$? = 2 ] && grep -q \"layer 4 ('batch_normalization_1'): 2 tensors cross the cut\" err"

# backups: SIGTERM once one exists (exit 5), the same command resumes
two=(--model resnet20 "${c[@]}" --epochs 3)
# backup NAME ARGS...: a backup in bk.NAME from a run of ARGS stopped by SIGTERM
backup() {
  local name=$1 rc=0; shift
  for _ in 1 2 3 4 5; do
    rm -rf bk.$name
    "$cli" train "$@" --backup-dir bk.$name --backup-every 2 >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 3000); do [ -e bk.$name/latest ] || ! kill -0 $pid 2>/dev/null && break; sleep 0.01; done
    kill -TERM $pid 2>/dev/null; wait $pid; rc=$?
    [ $rc = 5 ] && break
  done
  check "$name: a backup from a run stopped by SIGTERM (exit 5)" "[ $rc = 5 ] && [ -e bk.$name/latest ]"
}
t train "${two[@]}" "${m2[@]}" --save ref.m2.st >/dev/null
backup m2 "${two[@]}" "${m2[@]}"
cp -a bk.m2 bk.mw
t train "${two[@]}" "${m2[@]}" --backup-dir bk.m2 --save res.m2.st >/dev/null
check "mirrored x2: resumed = uninterrupted (bytes), backup removed" "cmp -s ref.m2.st res.m2.st && [ ! -e bk.m2 ]"
pp=(--strategy pipeline)
t train "${two[@]}" "${pp[@]}" --save ref.pp.st >/dev/null
backup pp "${two[@]}" "${pp[@]}"

# ---- under mpirun ----
mpi() { timeout 120 mpirun -np 2 "$@" 2>>mpi.log; }
mw=(--strategy multi_worker_mirrored)
if ! command -v mpirun >/dev/null; then
  skip "mpirun not found (apt-get install openmpi-bin libopenmpi-dev): multi_worker_mirrored and the pipeline across processes not run"
elif ! "$cli" train --model mlp "${c[@]}" "${mw[@]}" >/dev/null 2>probe.err && grep -q "has no MPI" probe.err; then
  skip "this build has no MPI transport: $(cat probe.err)"
else
  for m in resnet20 mobilenet-tiny; do
    mpi "$cli" train --model $m "${c[@]}" "${mw[@]}" --save $m.mw.st >/dev/null
    check "$m: mpirun -np 2 multi_worker_mirrored = mirrored x2 (bytes)" "cmp -s $m.m2.st $m.mw.st"
  done
  mpi "$cli" train --model mobilenet-tiny "${c[@]}" "${mw[@]}" --shard-optimizer --save z.mw.st >/dev/null
  check "mobilenet-tiny: mpirun -np 2 --shard-optimizer = mirrored x2 (bytes)" "cmp -s mobilenet-tiny.m2.st z.mw.st"
  mpi "$cli" train --model r20.json "${c[@]}" "${mw[@]}" --save json.mw.st >/dev/null
  check "Keras JSON: mpirun -np 2 = mirrored x2 (bytes)" "cmp -s resnet20.m2.st json.mw.st"
  mpi "$cli" train --model resnet20 "${one[@]}" "${mw[@]}" --sync-batchnorm --save sync.mw.st >/dev/null
  check "--sync-batchnorm: mpirun -np 2 = mirrored x2 (bytes)" "cmp -s sync.m2.st sync.mw.st"
  timeout 120 mpirun -np 1 "$cli" train --model resnet20 "${one[@]}" "${mw[@]}" --sync-batchnorm : \
    -np 1 "$cli" train --model resnet20 "${one[@]}" "${mw[@]}" >/dev/null 2>err
  check "ranks that differ in --sync-batchnorm: exit 2 naming the field" \
    "[ \$? = 2 ] && grep -q 'rank 1 differs from rank 0 in layers that run collectives (synchronized BatchNormalization: --sync-batchnorm): 0 (rank 0: 21)' err"
  mpi "$cli" train "${two[@]}" "${mw[@]}" --backup-dir bk.mw --save res.mw.st >/dev/null
  check "a mirrored x2 backup resumed by mpirun -np 2 = uninterrupted (bytes)" "cmp -s ref.m2.st res.mw.st && [ ! -e bk.mw ]"
  # the pipeline across processes: the in-process pipeline's bytes
  for s in gpipe 1f1b; do
    t train --model mobilenet-tiny "${c[@]}" "${pp[@]}" --pipeline-schedule $s --micro-batches 4 --save $s.pi.st >/dev/null
    mpi "$cli" train --model mobilenet-tiny "${c[@]}" "${pp[@]}" --pipeline-schedule $s --micro-batches 4 --save $s.pp.st >/dev/null
    check "mobilenet-tiny: pipeline $s, 2 processes = in process (bytes)" "cmp -s $s.pi.st $s.pp.st"
  done
  t train --model resnet20 "${c[@]}" "${pp[@]}" --load-weights resnet20.m2.st --checkpoint-dir ck.pi --save lw.pi.st >/dev/null
  mpi "$cli" train --model resnet20 "${c[@]}" "${pp[@]}" --load-weights resnet20.m2.st --checkpoint-dir ck.pp --save lw.pp.st >/dev/null
  check "resnet20: pipeline with --load-weights, 2 processes = in process (bytes)" "cmp -s lw.pi.st lw.pp.st"
  check "... --checkpoint-dir: the same weights and optimizer files" \
    "cmp -s ck.pi/ckpt-000001/weights.safetensors ck.pp/ckpt-000001/weights.safetensors && cmp -s ck.pi/ckpt-000001/optimizer.safetensors ck.pp/ckpt-000001/optimizer.safetensors"
  mpi "$cli" train "${two[@]}" "${pp[@]}" --backup-dir bk.pp --save res.pp.st >/dev/null
  check "an in-process pipeline backup resumed by 2 processes = uninterrupted (bytes)" "cmp -s ref.pp.st res.pp.st && [ ! -e bk.pp ]"
  # 2 stages x 2 replicas: each replica's 2 micro-batches of 8 are 4 mirrored replicas' slices
  t train --model mobilenet-tiny "${one[@]}" --strategy mirrored --replicas 4 --save m4.st >/dev/null
  timeout 120 mpirun -np 4 "$cli" train --model mobilenet-tiny "${one[@]}" "${pp[@]}" --pipeline-stages 2 \
    --micro-batches 2 --save dp.st >/dev/null 2>>mpi.log
  check "mobilenet-tiny: pipeline 2 stages x 2 processes within 1e-5 of mirrored x4 (trainable)" "close dp.st m4.st 1e-5"
fi

# ---- TF_CONFIG workers (Gloo) ----
t launch --workers 2 -- train --model resnet20 "${c[@]}" "${mw[@]}" --save gloo.st >/dev/null 2>gloo.err
rc=$?
if grep -q "not built" gloo.err; then
  skip "this build has no Gloo transport: $(grep 'not built' gloo.err | head -1)"
else
  check "resnet20: strata launch --workers 2 (TF_CONFIG, Gloo) = mirrored x2 (bytes)" "[ $rc = 0 ] && cmp -s resnet20.m2.st gloo.st"
fi

# ---- parameter_server (one worker: sequential, deterministic) ----
ps() { t launch --workers 1 --ps 2 --insecure -- train "$@" "${c[@]}" >/dev/null 2>ps.err; }
echo '{"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}' >k.json
if ! t keygen keys --cluster k.json >keygen.out 2>&1 && grep -q "no ZeroMQ" keygen.out; then
  skip "this build has no ZeroMQ: parameter_server not run"
else
  t train --model resnet20 "${c[@]}" --save od.st >/dev/null
  ps --model resnet20 --save ps.st --report ps.json
  check "resnet20: launch --workers 1 --ps 2: exit 0" "[ $? = 0 ]" || cat ps.err
  check "... every step applied once on each ps" \
    "python3 -c \"import json,sys; p=json.load(open('ps.json'))['parameter_server']; sys.exit(not (p['exactly_once'] and all(x['updates_applied'] == p['steps_scheduled'] == 2 for x in p['per_ps'])))\""
  check "... the tensors of one device, the moving statistics moved (inf: only names and shapes)" \
    "close ps.st od.st inf && moved ps.st"
  ps --model resnet20 --ps-shards 2 --save shards.st
  check "resnet20: --ps-shards 2 = unsharded (bytes)" "cmp -s ps.st shards.st"
  ps --model r20.json --save psjson.st
  check "Keras JSON of resnet20 through the job: the built-in's bytes" "cmp -s ps.st psjson.st"
fi

[ $fail = 0 ] && [ ${#skipped[@]} -gt 0 ] && { echo "skipped parts: ${skipped[*]}"; exit 77; }
[ $fail = 0 ] || { echo "# mpirun log:"; tail -20 mpi.log 2>/dev/null; }
exit $fail
