#!/usr/bin/env bash
# ParameterServerStrategy with --backup-dir (issue 13; RELIABILITY.md row
# P4), on loopback, each run bounded by `timeout`: kill -9 of the chief
# after a --backup-every backup: the servers exit; the same command again
# resumes from the backup (every ps reloads it) and finishes with applied ==
# scheduled on every ps and each example once per epoch.
# Then the epoch-level callbacks with this strategy: ModelCheckpoint,
# CSVLogger, TensorBoard, --plot and EarlyStopping (which stops the job;
# applied == the steps of the epochs run).
# (tests/test_ps_backup.sh: a lost ps.)
. "$(dirname "$0")/ps_common.bash"
T0=$SECONDS
export STRATA_PS_TEST_STEP_DELAY_MS=$delay
args=(--model mlp --epochs 2 --train-examples 2000 --batch-size 32 --heartbeat-interval $hb)
wait_for() { for _ in $(seq 1 600); do grep -q "$1" "$2" && return 0; sleep 0.05; done; return 1; }
pid_of() { sed -n "s/.*$1 on .*, pid \([0-9]*\)/\1/p" "$2"; }

# ---- P4: kill -9 of the chief after a backup (every 20 steps): the servers
# exit; the same command again resumes from the backup, exactly once ----
cmd=("$cli" launch --workers 2 --ps 2 --insecure -- train "${args[@]}" --coordinator-timeout 5
     --backup-dir "$tmp/b3" --backup-every 20 --report "$tmp/r3.json")
timeout 60 "${cmd[@]}" > /dev/null 2> "$tmp/l3" &
launch=$!
wait_for 'Epoch 1/' "$tmp/l3"
sleep 0.2
kill -9 "$(pid_of chief:0 "$tmp/l3")"
wait $launch
rc=$?
check "[ $rc != 0 ] && [ -e $tmp/b3/latest ]" "chief kill -9: the job ends (rc $rc), its backup stays"
timeout 60 "${cmd[@]}" > /dev/null 2> "$tmp/l4"
rc=$?
check "[ $rc = 0 ] && grep -q 'resuming from' $tmp/l4" "the same command again resumes from the backup (rc $rc)"
[ $rc = 0 ] || cat "$tmp/l4"
check "json $tmp/r3.json '$every_ps_exact and $every_epoch and p[\"resumed_from_step\"] >= 63'" \
  "resumed after epoch 1: applied == scheduled on every ps, each example once per epoch"

# ---- callbacks (default 1 s heartbeats: no backup here, so a false ps loss
# under a loaded sanitizer run would end the job): EarlyStopping (patience 0 on val_accuracy, 6 epochs: it
# stops when the first epoch fails to improve), ModelCheckpoint, CSV,
# TensorBoard, plot ----
unset STRATA_PS_TEST_STEP_DELAY_MS
timeout 60 "$cli" launch --workers 2 --ps 1 --insecure -- train --model mlp --epochs 6 --train-examples 3000 \
  --batch-size 32 --validation-split 0.2 --checkpoint-dir "$tmp/ck" --csv "$tmp/h.csv" \
  --log-dir "$tmp/tb" --plot "$tmp/p.svg" --early-stopping 0 --monitor val_accuracy --report "$tmp/r5.json" \
  > /dev/null 2> "$tmp/l5"
rc=$?
[ $rc = 0 ] || grep -v insecure "$tmp/l5"
n=$(( $(cat "$tmp/h.csv" 2>/dev/null | wc -l) - 1 ))
check "[ $rc = 0 ] && [ -e $tmp/ck/latest ] && [ -s $tmp/p.svg ] && ls $tmp/tb/train/* > /dev/null 2>&1" \
  "ModelCheckpoint, TensorBoard and --plot wrote their files (rc $rc)"
check "json $tmp/r5.json 'len(p[\"train_examples_per_epoch\"]) == $n and p[\"steps_scheduled\"] == $n * 75 and $every_ps_exact'" \
  "CSVLogger: $n epochs logged, as many as ran; applied == scheduled for them"
echo "took $((SECONDS - T0)) s"
exit $fail
