#!/usr/bin/env bash
# ParameterServerStrategy with --backup-dir (issue 13; RELIABILITY.md rows
# P3, P4), on loopback, each run bounded by `timeout`:
#  - kill -9 of ps:1 mid-epoch 2 under `strata launch --restart-failed`: the
#    chief pauses, the new ps process gets the JOB, every ps reloads the
#    epoch-1 backup, the chief rewinds; the job finishes with applied ==
#    scheduled on every ps and each example once per epoch, the steps run
#    again counted apart (steps_rolled_back, updates_rolled_back);
#  - the same loss without a restart: the chief exits 3 naming the ps after
#    --coordinator-timeout;
# (tests/test_ps_resume.sh: kill -9 of the chief, then the same command again.)
. "$(dirname "$0")/ps_common.bash"
T0=$SECONDS
export STRATA_PS_TEST_STEP_DELAY_MS=$delay
args=(--model mlp --epochs 2 --train-examples 2000 --batch-size 32 --heartbeat-interval $hb)
wait_for() { for _ in $(seq 1 600); do grep -q "$1" "$2" && return 0; sleep 0.05; done; return 1; }
pid_of() { sed -n "s/.*$1 on .*, pid \([0-9]*\)/\1/p" "$2"; }

# ---- P3: kill -9 of ps:1 mid-epoch 2, restarted by launch: rollback to the
# epoch-1 backup, finishes exactly once ----
timeout 120 "$cli" launch --workers 2 --ps 2 --insecure --restart-failed -- train "${args[@]}" \
  --coordinator-timeout 20 --backup-dir "$tmp/b1" --report "$tmp/r1.json" > /dev/null 2> "$tmp/l1" &
launch=$!
wait_for 'Epoch 1/' "$tmp/l1"
sleep 0.2 # into epoch 2 (63 steps of >= 8 ms on 2 workers)
kill -9 "$(pid_of ps:1 "$tmp/l1")"
wait $launch
rc=$?
check "[ $rc = 0 ] && grep -q 'ps:1 lost' $tmp/l1 && grep -q 'every ps reloaded the backup' $tmp/l1" \
  "kill -9 of ps:1, restarted: every ps reloads the backup and the job finishes (rc $rc)"
[ $rc = 0 ] || cat "$tmp/l1"
check "json $tmp/r1.json '$every_ps_exact and $every_epoch and p[\"ps_lost\"] == 1 and p[\"rollbacks\"] == 1'" \
  "after the rollback: applied == scheduled on every ps, each example once per epoch"
check "json $tmp/r1.json 'p[\"steps_rolled_back\"] + sum(x[\"updates_rolled_back\"] for x in p[\"per_ps\"]) >= 1'" \
  "the steps run again after the rollback are counted apart"
check "[ ! -e $tmp/b1/latest ]" "the backup is deleted when the job is done"

# ---- P3 bound: the ps does not come back: exit 3 naming it after
# --coordinator-timeout (2 s here) ----
timeout 60 "$cli" launch --workers 1 --ps 2 --insecure -- train "${args[@]}" --coordinator-timeout 2 \
  --backup-dir "$tmp/b2" > /dev/null 2> "$tmp/l2" &
launch=$!
wait_for 'Epoch 1/' "$tmp/l2"
kill -9 "$(pid_of ps:1 "$tmp/l2")"
wait $launch
rc=$?
check "[ $rc = 3 ] && grep -q 'ps:1 lost and not back within 2 s' $tmp/l2" \
  "a lost ps that does not return: exit 3 naming it after --coordinator-timeout (rc $rc)"
[ $rc = 3 ] || cat "$tmp/l2"

echo "took $((SECONDS - T0)) s"
exit $fail
