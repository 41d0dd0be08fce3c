#!/usr/bin/env bash
# GPT under the pipeline strategy (issue 31, "Scale"): the output head
# (ReversibleEmbedding) reads the token embedding's table (wte) from the
# last stage; the head's stage owns the table (gradient, AdamW slots), the
# first stage keeps its values, and per micro-batch the two parts of its
# gradient are summed as one device's threads sum them. So, for the small
# config (AdamW, 6 steps):
#  - in one process, 2 stages x 2 micro-batches (GPipe) = one_device
#    --threads 2 byte for byte; 2 stages x 4 micro-batches (1F1B) and 3
#    stages x 4 (a middle stage between the table's two) = --threads 4;
#    within 1e-5 of --threads 1;
#  - under mpirun -np 2 (a stage per process), GPipe and 1F1B x 4
#    micro-batches = --threads 4 byte for byte; -np 3 (3 stages) too;
#    -np 4 (2 stages x 2 data-parallel replicas) within 1e-5 of one device;
#    --save-llmc from the pipeline = one device's file;
#  - a 2-process run killed with -9 (both ranks) after a backup resumes from
#    --backup-dir to the bytes of an uninterrupted run.
#  - --clip-norm (the norm over every stage, passed from stage to stage in
#    one device's order): the bytes of one_device --threads M in one process
#    and under mpirun -np 2 and 3; -np 4 within 1e-5;
#  - after that resume (inside a stretch), --log-every 1 logs the
#    uninterrupted run's step losses, the first one too.
# The MPI part skips (77, after the in-process checks) without mpirun.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
cmpw() { python3 "$src/tests/cmp_weights.py" "$1" "$2" "$3" >/dev/null; }
cd "$tmp" || exit 1
head -c 60000 "$src/README.md" >t.txt
S0=(--model gpt --gpt-layers 2 --gpt-heads 2 --gpt-width 32 --seq-len 16 --batch-size 8
    --weight-decay 0.1 --text t.txt)
S=("${S0[@]}" --steps 6 --eval-every 3 --quiet)
for t in 1 2 3 4; do "$cli" train "${S[@]}" --threads $t --save od$t.st >/dev/null 2>&1 || fail=1; done
"$cli" train "${S[@]}" --threads 4 --save-llmc od4.bin >/dev/null 2>&1 || fail=1
pp=(--strategy pipeline)
"$cli" train "${S[@]}" "${pp[@]}" --save p2.st >out 2>&1
check "in one process, 2 stages (exit 0)" "[ $? -eq 0 ]"
check "2 stages x 2 micro-batches = one_device --threads 2 (bytes)" "cmp -s p2.st od2.st"
check "within 1e-5 of --threads 1" "cmpw p2.st od1.st 1e-5"
"$cli" train "${S[@]}" "${pp[@]}" --micro-batches 4 --pipeline-schedule 1f1b --save p4.st >/dev/null 2>&1
check "2 stages x 4 micro-batches, 1F1B = --threads 4 (bytes)" "cmp -s p4.st od4.st"
"$cli" train "${S[@]}" "${pp[@]}" --pipeline-stages 3 --micro-batches 4 --save p34.st >/dev/null 2>&1
check "3 stages x 4 micro-batches = --threads 4 (bytes)" "cmp -s p34.st od4.st"
"$cli" train "${S[@]}" "${pp[@]}" --stage-boundaries 10 --micro-batches 3 --save pb.st >/dev/null 2>&1
check "--stage-boundaries 10 (the second block), 3 micro-batches = --threads 3 (bytes)" "cmp -s pb.st od3.st"
"$cli" train "${S[@]}" --micro-batches 2 >out 2>&1
check "--micro-batches without the pipeline: exit 2 naming the flag" "[ $? -eq 2 ] && grep -q -- '--strategy pipeline' out"
# --clip-norm: the global norm over every stage's gradient, formed in one
# device's order (0.05: below the norm, so every step clips)
C=(--clip-norm 0.05)
for t in 2 4; do "$cli" train "${S[@]}" "${C[@]}" --threads $t --save odc$t.st >/dev/null 2>&1 || fail=1; done
check "--clip-norm clips (the weights differ from the unclipped run's)" "! cmp -s odc2.st od2.st"
"$cli" train "${S[@]}" "${pp[@]}" "${C[@]}" --save pc2.st >out 2>&1
check "--clip-norm, 2 stages x 2 micro-batches (exit 0) = one_device --threads 2 (bytes)" \
  "[ $? -eq 0 ] && cmp -s pc2.st odc2.st"
"$cli" train "${S[@]}" "${pp[@]}" "${C[@]}" --pipeline-stages 3 --micro-batches 4 \
  --pipeline-schedule 1f1b --save pc34.st >/dev/null 2>&1
check "--clip-norm, 3 stages x 4 micro-batches, 1F1B = --threads 4 (bytes)" "cmp -s pc34.st odc4.st"

if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev): the MPI part"
  [ $fail = 0 ] && exit 77
  exit $fail
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export LSAN_OPTIONS="suppressions=$src/tests/lsan-mpi.supp:fast_unwind_on_malloc=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$src/tests/tsan-mpi.supp"
mpi() { timeout 300 mpirun -np "$@" 2>>mpi.log; }
mpi 2 "$cli" train "${S[@]}" "${pp[@]}" --micro-batches 4 --save m2.st >out
rc=$?
if [ $rc -ne 0 ] && grep -q "has no MPI" mpi.log; then
  echo "SKIP: this build of Strata has no MPI transport: the MPI part"
  [ $fail = 0 ] && exit 77
  exit $fail
fi
check "mpirun -np 2, GPipe x 4 (exit 0)" "[ $rc -eq 0 ]"
check "2 processes, GPipe x 4 = --threads 4 (bytes)" "cmp -s m2.st od4.st"
mpi 2 "$cli" train "${S[@]}" "${pp[@]}" --micro-batches 4 --pipeline-schedule 1f1b \
  --save-llmc m2.bin >/dev/null
check "2 processes, 1F1B x 4: --save-llmc = one device's file" "[ $? -eq 0 ] && cmp -s m2.bin od4.bin"
mpi 3 "$cli" train "${S[@]}" "${pp[@]}" --micro-batches 4 --save m3.st >/dev/null
check "3 processes (a stage between the table's two) = --threads 4 (bytes)" "[ $? -eq 0 ] && cmp -s m3.st od4.st"
mpi 4 "$cli" train "${S[@]}" "${pp[@]}" --pipeline-stages 2 --micro-batches 2 --save m4.st >/dev/null
check "4 processes (2 stages x 2 replicas): within 1e-5 of one device" "[ \$? -eq 0 ] && cmpw m4.st od4.st 1e-5"
mpi 2 "$cli" train "${S[@]}" "${pp[@]}" "${C[@]}" --micro-batches 4 --pipeline-schedule 1f1b \
  --save mc2.st >/dev/null
check "--clip-norm, 2 processes, 1F1B x 4 = --threads 4 (bytes)" "[ \$? -eq 0 ] && cmp -s mc2.st odc4.st"
mpi 3 "$cli" train "${S[@]}" "${pp[@]}" "${C[@]}" --micro-batches 4 --save mc3.st >/dev/null
check "--clip-norm, 3 processes = --threads 4 (bytes)" "[ \$? -eq 0 ] && cmp -s mc3.st odc4.st"
mpi 4 "$cli" train "${S[@]}" "${pp[@]}" "${C[@]}" --pipeline-stages 2 --micro-batches 2 --save mc4.st >/dev/null
check "--clip-norm, 4 processes (2 stages x 2 replicas): within 1e-5 of one device" \
  "[ \$? -eq 0 ] && cmpw mc4.st odc4.st 1e-5"

# kill -9 both ranks once a backup exists; the same command resumes there
cat >rank.sh <<'EOF'
#!/bin/sh
echo $$ > "$RANKDIR/pid.$OMPI_COMM_WORLD_RANK"
exec "$@"
EOF
chmod +x rank.sh
export RANKDIR=$tmp/ranks; mkdir -p "$RANKDIR"
B=("${S0[@]}" --steps 200 --eval-every 50 "${pp[@]}" --micro-batches 2)
mpi 2 "$cli" train "${B[@]}" --quiet --log-every 1 --report whole.json --save whole.st >/dev/null
mpi 2 ./rank.sh "$cli" train "${B[@]}" --quiet --backup-dir bk --backup-every 2 --save res.st >/dev/null &
job=$!
for _ in $(seq 3000); do [ -e bk/latest ] && break; sleep 0.01; done
kill -9 "$(cat "$RANKDIR/pid.1")" "$(cat "$RANKDIR/pid.0")" 2>/dev/null
wait $job 2>/dev/null
check "the killed job left a backup" "[ -e bk/latest ] && [ ! -e res.st ]"
mpi 2 "$cli" train "${B[@]}" --backup-dir bk --backup-every 2 --log-every 1 --save res.st \
  --report res.json >res.out
check "resumed after kill -9 (exit 0, its first steps not run again)" \
  "[ \$? -eq 0 ] && ! grep -q '^step 1: step_loss' res.out && grep -q '^step 200: step_loss' res.out"
check "resumed = uninterrupted, byte for byte" "cmp -s whole.st res.st"
check "--log-every 1 after the resume: every step's loss = the uninterrupted run's" \
  "python3 $src/tests/cmp_step_logs.py whole.json res.json 50"
check "the backup is removed once training completes" "[ ! -e bk/latest ]"
[ $fail = 0 ] || tail -20 mpi.log
exit $fail
