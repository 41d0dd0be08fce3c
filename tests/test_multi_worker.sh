#!/usr/bin/env bash
# MultiWorkerMirroredStrategy end to end, with mpirun on this machine
# (issue 4; RELIABILITY.md rows S1, S2, S4, S5):
#  - 2 and 3 workers give the weights of one process with the same global
#    batch (per-tensor relative difference <= 1e-5), and a repeat run gives
#    the same bytes; 2 one-replica workers give exactly the bytes of one
#    process with 2 mirrored replicas (the same split and summation order);
#  - 2 workers x 2 local replicas give the weights of 4 mirrored replicas;
#  - a rank started with another batch size or model fails before step 1,
#    exit 2 on every rank, naming rank 1 and the field; for a model (also two
#    Keras JSON files: another Dense size, an extra layer), the first tensor
#    that differs, by its name in the saved weights, and both shapes (S4);
#  - NaN in rank 1's data only (--auto-shard off, float32 IDX, a linear
#    model, --allow-nonfinite): every rank stops at the same step with the
#    same error, exit 2, and the backup's latest checkpoint is the last finite
#    step, with finite weights (S5);
#  - the chief fails outside the collectives (its backup cannot be written,
#    exit 4): rank 1 exits 3 at once, naming rank 0 and its error, instead of
#    after the 300 s collective timeout (S5);
#  - killing rank 1 mid-epoch: rank 0 exits 3 within the collective timeout
#  - SIGTERM to rank 1: all stop at one step, exit 5, the restart resumes
#    + 10 s, naming rank 1; restarting with the same --backup-dir finishes
#    with the bytes of an uninterrupted run.
# Skips (77) when mpirun is missing or Strata was built without MPI.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
data=/usr/share/datasets/fashion-mnist
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77
fi
if [ ! -e $data/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# under `make asan-test` / `make tsan-test`: reports from inside OpenMPI are
# suppressed (documented in the files); nothing else is
export LSAN_OPTIONS="suppressions=$src/tests/lsan-mpi.supp:fast_unwind_on_malloc=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$src/tests/tsan-mpi.supp"
if "$cli" train --strategy multi_worker_mirrored --devices cpu:0,cpu:1 --model mlp --train-examples 64 --epochs 1 \
     --batch-size 64 --quiet >/dev/null 2>"$tmp/probe.err"; then :; else
  if grep -q "has no MPI" "$tmp/probe.err"; then
    echo "SKIP: this build of Strata has no MPI transport ($(cat "$tmp/probe.err"))"; exit 77
  fi
  echo "not ok - a one-process multi_worker_mirrored run works"; cat "$tmp/probe.err"; exit 1
fi
echo "ok - a one-process multi_worker_mirrored run works (MPI singleton)"
# every rank writes its pid and exit code under $RANKDIR
cat >"$tmp/rank.sh" <<'EOF'
#!/bin/sh
echo $$ > "$RANKDIR/pid.$OMPI_COMM_WORLD_RANK"
"$@"; rc=$?; echo $rc > "$RANKDIR/rc.$OMPI_COMM_WORLD_RANK"; exit $rc
EOF
chmod +x "$tmp/rank.sh"
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
close() { python3 "$src/tests/cmp_weights.py" "$1" "$2" 1e-5; }
mw=(--strategy multi_worker_mirrored)
# SGD: Adam divides by sqrt(v), which turns rounding-level differences in
# near-zero gradients into full-size steps (3 in-process mirrored replicas
# differ from one device by 2e-2 on a bias after 100 Adam steps, as 3 workers
# do); SGD keeps them at rounding level. Bit-identity is checked with Adam.
args=(train --model mlp --optimizer sgd --train-examples 3200 --epochs 2 --batch-size 64 --seed 3 --quiet)
run() { timeout 120 mpirun -np "$1" "${@:2}"; }

"$cli" "${args[@]}" --save "$tmp/one.st" >/dev/null 2>&1
check "one-process reference run" "[ -s $tmp/one.st ]"
run 2 "$cli" "${args[@]}" "${mw[@]}" --save "$tmp/two.st" >"$tmp/two.out" 2>>"$tmp/mpi.log"
check "2 workers: exit 0, one report line (the chief's)" "[ \$? -eq 0 ] && [ \$(grep -c test_loss $tmp/two.out) -eq 1 ]"
check "2 workers = one process (1e-5)" "close $tmp/one.st $tmp/two.st"
run 2 "$cli" "${args[@]}" "${mw[@]}" --save "$tmp/two_again.st" >/dev/null 2>>"$tmp/mpi.log"
check "2 workers: a repeat run gives the same bytes" "cmp -s $tmp/two.st $tmp/two_again.st"
run 2 "$cli" "${args[@]/sgd/adam}" "${mw[@]}" --save "$tmp/adam1.st" >/dev/null 2>>"$tmp/mpi.log"
run 2 "$cli" "${args[@]/sgd/adam}" "${mw[@]}" --save "$tmp/adam2.st" >/dev/null 2>>"$tmp/mpi.log"
check "2 workers, Adam: a repeat run gives the same bytes" "[ -s $tmp/adam1.st ] && cmp -s $tmp/adam1.st $tmp/adam2.st"
"$cli" "${args[@]/sgd/adam}" --strategy mirrored --replicas 2 --save "$tmp/adam_one.st" >/dev/null 2>&1
check "2 workers, Adam: the bytes of one process with 2 replicas (same split and sum order)" \
  "cmp -s $tmp/adam_one.st $tmp/adam1.st"
run 3 "$cli" "${args[@]}" "${mw[@]}" --save "$tmp/three.st" >/dev/null 2>>"$tmp/mpi.log"
check "3 workers = one process (1e-5)" "close $tmp/one.st $tmp/three.st"
"$cli" "${args[@]}" --strategy mirrored --replicas 4 --save "$tmp/mirrored4.st" >/dev/null 2>&1
run 2 "$cli" "${args[@]}" "${mw[@]}" --devices cpu:0,cpu:1 --save "$tmp/2x2.st" >/dev/null 2>>"$tmp/mpi.log"
check "2 workers x 2 local replicas = 4 mirrored replicas (1e-5)" "close $tmp/mirrored4.st $tmp/2x2.st"
run 2 "$cli" "${args[@]}" "${mw[@]}" --auto-shard off --save "$tmp/off.st" >/dev/null 2>>"$tmp/mpi.log"
check "auto-shard off: each worker trains on its own batches (weights differ from data)" \
  "[ -s $tmp/off.st ] && ! cmp -s $tmp/two.st $tmp/off.st"

# S4: configurations that differ between ranks (mpirun must not kill the
# other rank when the first exits 2, or its exit code is lost)
export RANKDIR="$tmp/cfg" OMPI_MCA_orte_abort_on_non_zero_status=0; mkdir -p "$RANKDIR"
run 1 "$tmp/rank.sh" "$cli" "${args[@]}" "${mw[@]}" : \
  -np 1 "$tmp/rank.sh" "$cli" "${args[@]/64/32}" "${mw[@]}" >/dev/null 2>"$tmp/cfg.err"
grep "strata train" "$tmp/cfg.err" | head -2
check "different batch size on rank 1: exit 2 on both ranks" \
  "[ \"\$(cat $RANKDIR/rc.0 $RANKDIR/rc.1 | tr -d '\n')\" = 22 ]"
check "... naming rank 1 and the field" "grep -q 'rank 1 differs from rank 0 in global batch size: 32' $tmp/cfg.err"
rm -f "$RANKDIR"/*
run 1 "$tmp/rank.sh" "$cli" "${args[@]}" "${mw[@]}" : \
  -np 1 "$tmp/rank.sh" "$cli" "${args[@]/mlp/cnn}" "${mw[@]}" >/dev/null 2>"$tmp/cfg2.err"
check "another model on rank 1: exit 2 on both ranks, naming rank 1 and the first tensor" \
  "[ \"\$(cat $RANKDIR/rc.0 $RANKDIR/rc.1 | tr -d '\n')\" = 22 ] && grep -qF \"rank 1 differs from rank 0 in tensor 'conv2d/kernel': rank 1 has it (shape [3, 3, 1, 32])\" $tmp/cfg2.err"
# Keras JSON models: Flatten, Dense 'dense' (UNITS), [EXTRA layer,] Dense 'dense_1' (10)
keras_mlp() { cat <<EOF
{"class_name": "Sequential", "config": {"name": "m", "layers": [
 {"class_name": "Flatten", "config": {"name": "flatten", "batch_input_shape": [null, 28, 28, 1]}},
 {"class_name": "Dense", "config": {"name": "dense", "units": $1, "activation": "relu"}},${2:-}
 {"class_name": "Dense", "config": {"name": "dense_1", "units": 10, "activation": "linear"}}]}}
EOF
}
keras_mlp 256 >"$tmp/m256.json"
keras_mlp 64 >"$tmp/m64.json"
keras_mlp 256 ' {"class_name": "Dense", "config": {"name": "dense_2", "units": 32, "activation": "relu"}},' >"$tmp/m3.json"
small=(train --train-examples 640 --epochs 1 --batch-size 64 --quiet "${mw[@]}")
# model_case NAME RANK0.json RANK1.json PATTERN: exit 2 on both ranks, each
# printing the same error line, which matches PATTERN (grep -F)
model_case() {
  rm -f "$RANKDIR"/*
  run 1 "$tmp/rank.sh" "$cli" "${small[@]}" --model "$2" : \
    -np 1 "$tmp/rank.sh" "$cli" "${small[@]}" --model "$3" >/dev/null 2>"$tmp/cfg3.err"
  grep "strata train" "$tmp/cfg3.err" | head -1
  check "$1: exit 2 on both ranks" "[ \"\$(cat $RANKDIR/rc.0 $RANKDIR/rc.1 | tr -d '\n')\" = 22 ]"
  pattern=$4
  check "... both ranks print the same error, naming rank 1, the tensor and both shapes" \
    "[ \$(grep 'strata train' $tmp/cfg3.err | sort -u | wc -l) -eq 1 ] && [ \$(grep -cF \"\$pattern\" $tmp/cfg3.err) -eq 2 ]"
}
model_case "S4 Keras JSON, Dense 'dense' of 64 units on rank 1 (256 on rank 0)" "$tmp/m256.json" "$tmp/m64.json" \
  "model: rank 1 differs from rank 0 in tensor 'dense/kernel': shape [784, 64] (rank 0: [784, 256])"
model_case "S4 Keras JSON, an extra Dense layer on rank 1" "$tmp/m256.json" "$tmp/m3.json" \
  "rank 1 differs from rank 0 in tensor 'dense_2/kernel': rank 1 has it (shape [256, 32]), rank 0 has not (rank 1: 6 tensors, rank 0: 4)"
model_case "S4 Keras JSON, the extra Dense layer on rank 0" "$tmp/m3.json" "$tmp/m256.json" \
  "rank 1 differs from rank 0 in tensor 'dense_2/kernel': rank 0 has it (shape [256, 32]), rank 1 has not (rank 0: 6 tensors, rank 1: 4)"

# S5: NaN in rank 1's data only. Each rank reads DATADIR.<rank> (auto-shard
# off: each trains on its own batches); rank 1's float32 images hold a NaN.
# A linear model carries it to the loss (TerminateOnNaN, as in
# test_bad_inputs.sh D3); the losses are gathered, so both ranks see it.
cat >"$tmp/bydata.sh" <<'EOF'
#!/bin/sh
exec "$@" --data "$DATADIR.$OMPI_COMM_WORLD_RANK"
EOF
chmod +x "$tmp/bydata.sh"
python3 "$src/tests/mkidx.py" "$tmp/good" &&
  python3 "$src/tests/mkbad.py" "$tmp/good" "$tmp/d.0" f32 &&
  python3 "$src/tests/mkbad.py" "$tmp/good" "$tmp/d.1" f32-nan-train
cat >"$tmp/linear.json" <<'EOF'
{"class_name": "Sequential", "config": {"name": "linear", "layers": [
 {"class_name": "Flatten", "config": {"name": "flatten", "batch_input_shape": [null, 28, 28, 1]}},
 {"class_name": "Dense", "config": {"name": "dense", "units": 10, "activation": "linear"}}]}}
EOF
rm -f "$RANKDIR"/*
t0=$(date +%s)
DATADIR="$tmp/d" timeout 60 mpirun -np 2 "$tmp/rank.sh" "$tmp/bydata.sh" "$cli" train --model "$tmp/linear.json" \
  --allow-nonfinite --batch-size 8 --seed 0 "${mw[@]}" --auto-shard off --backup-dir "$tmp/nanbk" \
  --backup-every 1 --quiet >/dev/null 2>"$tmp/nan.err"
elapsed=$(( $(date +%s) - t0 ))
grep "strata train" "$tmp/nan.err" | head -2
check "S5 NaN in rank 1's batch only: both ranks exit 2 (${elapsed}s, under timeout 60)" \
  "[ \"\$(cat $RANKDIR/rc.0 $RANKDIR/rc.1 | tr -d '\n')\" = 22 ]"
check "... both stop at the same step with the same error" \
  "[ \$(grep -c 'strata train: loss became nan at epoch 1, step 6 (TerminateOnNaN)' $tmp/nan.err) -eq 2 ] && [ \$(grep -c 'strata train' $tmp/nan.err) -eq 2 ]"
check "... the backup's latest checkpoint is step 5, the last finite one, with finite weights" \
  "python3 '$src/tests/check_backup.py' '$tmp/nanbk' 5"

# S5: the chief fails outside the collectives. A file-size limit on rank 0
# only (ulimit -f; strata ignores SIGXFSZ) makes its first backup, at step 5,
# fail with EFBIG: exit 4. (The temp directory's name is random, so it can no
# longer be blocked by planting a file under it.) Rank 1 then
# waits in the next step's collective: it must fail at once (exit 3, naming
# rank 0 and its error), not after the default 300 s --collective-timeout.
cat >"$tmp/blockbackup.sh" <<'EOF'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 0 ] && ulimit -f 100
exec "$@"
EOF
chmod +x "$tmp/blockbackup.sh"
rm -f "$RANKDIR"/*
t0=$(date +%s)
timeout 120 mpirun -np 2 "$tmp/rank.sh" "$tmp/blockbackup.sh" "$cli" "${args[@]}" \
  "${mw[@]}" --backup-dir "$tmp/blockbk" --backup-every 5 >/dev/null 2>"$tmp/leave.err"
elapsed=$(( $(date +%s) - t0 ))
grep "strata train" "$tmp/leave.err" | head -2
check "S5 the chief's backup fails (exit 4); rank 1 exits 3 at once (${elapsed}s <= 30; timeout 300 s)" \
  "[ \"\$(cat $RANKDIR/rc.0 $RANKDIR/rc.1 | tr -d '\n')\" = 43 ] && [ $elapsed -le 30 ]"
check "... rank 1 names rank 0 and its error" \
  "grep -q 'strata train: rank 0 failed: backup: .*\\.tmp-ckpt-000001-.*File too large (it left the job after' $tmp/leave.err"

unset OMPI_MCA_orte_abort_on_non_zero_status
# S1/S2 + backup: kill rank 1 once a backup exists, then restart
long=(train --model mlp --optimizer adam --train-examples 12800 --epochs 3 --batch-size 64 --seed 4 --quiet "${mw[@]}")
run 2 "$cli" "${long[@]}" --save "$tmp/ref.st" >/dev/null 2>>"$tmp/mpi.log"
check "uninterrupted 2-worker run" "[ -s $tmp/ref.st ]"
export RANKDIR="$tmp/kill"; mkdir -p "$RANKDIR"
bk="$tmp/backup"
timeout 120 mpirun --enable-recovery -np 2 "$tmp/rank.sh" "$cli" "${long[@]}" --backup-dir "$bk" \
  --backup-every 25 --collective-timeout 2 --save "$tmp/killed.st" >/dev/null 2>"$tmp/kill.err" &
mpipid=$!
for _ in $(seq 300); do [ -e "$bk/latest" ] && break; sleep 0.1; done
check "a backup was written before the kill" "[ -e $bk/latest ]"
pkill -9 -P "$(cat "$RANKDIR/pid.1")"
t0=$(date +%s)
for _ in $(seq 250); do [ -e "$RANKDIR/rc.0" ] && break; sleep 0.1; done
elapsed=$(( $(date +%s) - t0 ))
wait $mpipid 2>/dev/null
grep "strata train" "$tmp/kill.err" | head -2
check "rank 0 exits 3 after rank 1 is killed (${elapsed}s <= 2 + 10)" \
  "[ \"\$(cat $RANKDIR/rc.0 2>/dev/null)\" = 3 ] && [ $elapsed -le 12 ]"
check "... naming rank 1" "grep -q 'rank 1 did not join' $tmp/kill.err"
check "no temporary checkpoint left committed-looking" "[ -z \"\$(ls $bk | grep -v '^ckpt-\|^latest$\|^\.tmp')\" ]"
run 2 "$cli" "${long[@]}" --backup-dir "$bk" --backup-every 25 --save "$tmp/resumed.st" >/dev/null 2>"$tmp/resume.err"
check "the restarted job completes" "[ \$? -eq 0 ]"
check "resumed weights = uninterrupted weights (bytes)" "cmp -s $tmp/ref.st $tmp/resumed.st"
check "backup removed after completion" "[ ! -e $bk/latest ]"

# S3 preemption: SIGTERM to rank 1 only, once training runs. Every worker
# stops at the same step boundary (the stop request travels with the per-step
# agreement), the chief writes the backup there, all exit 5; the restart
# completes with the uninterrupted run's weights.
export RANKDIR="$tmp/term" OMPI_MCA_orte_abort_on_non_zero_status=0; mkdir -p "$RANKDIR"
bk="$tmp/termbk"
timeout 120 mpirun -np 2 "$tmp/rank.sh" "$cli" "${long[@]}" --backup-dir "$bk" --backup-every 25 \
  --save "$tmp/term.st" >/dev/null 2>"$tmp/term.err" &
mpipid=$!
for _ in $(seq 300); do [ -e "$bk/latest" ] && break; sleep 0.1; done
pkill -TERM -P "$(cat "$RANKDIR/pid.1")"
wait $mpipid 2>/dev/null
grep "strata train" "$tmp/term.err" | head -2
check "S3 SIGTERM to rank 1: both ranks exit 5" \
  "[ \"\$(cat $RANKDIR/rc.0 $RANKDIR/rc.1 | tr -d '\n')\" = 55 ]"
check "... and name the same step" "[ \$(grep -o 'stopped on request at epoch [0-9]* after step [0-9]*' $tmp/term.err | sort | uniq -c | awk '{print \$1}') = 2 ]"
unset OMPI_MCA_orte_abort_on_non_zero_status
run 2 "$cli" "${long[@]}" --backup-dir "$bk" --backup-every 25 --save "$tmp/termresumed.st" >/dev/null 2>>"$tmp/mpi.log"
check "... the restart completes with the uninterrupted run's weights (bytes)" \
  "[ \$? -eq 0 ] && cmp -s $tmp/ref.st $tmp/termresumed.st && [ ! -e $bk/latest ]"

if [ $fail -ne 0 ]; then echo "# mpirun output:"; tail -30 "$tmp/mpi.log"; fi
exit $fail
