#!/usr/bin/env bash
# ParameterServerStrategy end to end on loopback (issue 13; RELIABILITY.md
# rows P1, D6), each run bounded by `timeout`:
#  - bad TF_CONFIG / --cluster: exit 2 naming the field, before any socket;
#  - strata launch --workers 2 --ps 2 -- train (mlp, CURVE, --max-staleness
#    0): every step applied exactly once on every ps, every example once per
#    epoch, no staleness over the bound, --save read back by strata evaluate
#    with the same test accuracy;
#  - a worker killed with kill -9 in the middle of a closure (after ps:0
#    applied a step, before ps:1 did; a test-only hook raises SIGKILL there):
#    the job finishes on the other worker, the closure is re-run, ps:0 skips
#    the step it had applied, applied == scheduled on each ps;
#  - the same kill under strata launch --restart-failed: the worker is
#    started again and rejoins (and may be killed again by the hook, when
#    it gets the re-run closure: the same task lost twice);
# tests/test_ps_faults.sh and tests/test_ps_recovery.sh cover the other faults.
. "$(dirname "$0")/ps_common.bash"

check "[ -s $tmp/keys/worker-0.pub ] && [ \"\$(stat -c %a $tmp/keys/worker-0.secret)\" = 600 ]" \
  "strata keygen: a key pair per task, secret keys mode 0600"

# ---- D6: bad cluster descriptions, exit 2 naming the field ----
TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:2"]}, "task": {"type": "ps"}}' \
  timeout 20 "$cli" server --insecure > /dev/null 2> "$tmp/e1"
rc=$?
check "[ $rc = 2 ] && grep -q 'cluster.ps\[0\]: duplicate address 127.0.0.1:2' $tmp/e1" "duplicate address: exit 2 naming cluster.ps[0] (rc $rc)"
TF_CONFIG='{"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}, "task": {"type": "worker", "index": 3}}' \
  timeout 20 "$cli" server --insecure > /dev/null 2> "$tmp/e2"
rc=$?
check "[ $rc = 2 ] && grep -q 'task.index: 3 out of range' $tmp/e2" "index out of range: exit 2 (rc $rc)"
echo '{"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"], "evaluator": ["127.0.0.1:4"]}' > "$tmp/c.json"
timeout 20 "$cli" train --strategy parameter_server --cluster "$tmp/c.json" --task chief:0 --model mlp \
  > /dev/null 2> "$tmp/e3"
rc=$?
check "[ $rc = 2 ] && grep -q 'cluster.evaluator' $tmp/e3" "evaluator in the training cluster: exit 2 (rc $rc)"
TF_CONFIG='{"cluster": ' timeout 20 "$cli" server > /dev/null 2> "$tmp/e4"
rc=$?
check "[ $rc = 2 ] && grep -q 'TF_CONFIG: line 1' $tmp/e4" "bad JSON: exit 2 with line and column (rc $rc)"

# ---- 2 workers + 2 ps, CURVE, --max-staleness 0: exactly once, evaluate reads --save ----
common=(--model mlp --train-examples 1024 --batch-size 64 --seed 3)
timeout 120 "$cli" launch --workers 2 --ps 2 -- train "${common[@]}" --epochs 2 --max-staleness 0 --save "$tmp/w.safetensors" \
  --report "$tmp/r1.json" > "$tmp/o1" 2> "$tmp/l1"
rc=$?
check "[ $rc = 0 ]" "launch 2 workers + 2 ps: exit 0 (rc $rc)"
[ $rc = 0 ] || cat "$tmp/l1"
check "json $tmp/r1.json '$every_ps_exact and $every_epoch and p[\"steps_scheduled\"] == 32 and p[\"ps\"] == 2'" \
  "every step applied exactly once on each of 2 ps, every example once per epoch"
acc=$(sed -n 's/.*test_accuracy: \([0-9.]*\).*/\1/p' "$tmp/o1")
timeout 60 "$cli" evaluate --model mlp --weights "$tmp/w.safetensors" > "$tmp/o1e" 2>&1
check "grep -q 'test_accuracy: $acc' $tmp/o1e && [ -n '$acc' ]" "strata evaluate reads --save: test accuracy $acc"
check "! grep -q insecure $tmp/l1" "CURVE by default (no --insecure warning)"
check "json $tmp/r1.json 'p[\"max_staleness\"] == 0 and all(x[\"staleness_max\"] == 0 for x in p[\"per_ps\"])'" \
  "--max-staleness 0: no gradient applied to variables newer than it was computed from"

# ---- kill -9 of a worker in the middle of a closure (P1) ----
STRATA_PS_TEST_FAULT=kill:1:5 timeout 120 "$cli" launch --workers 2 --ps 2 -- train "${common[@]}" \
  --epochs 2 --steps-per-execution 4 --heartbeat-interval $hb --report "$tmp/r2.json" > "$tmp/o2" 2> "$tmp/l2"
rc=$?
check "[ $rc = 0 ] && grep -q 'test hook: SIGKILL at step 5' $tmp/l2 && grep -q 'worker:1 lost' $tmp/l2" \
  "worker killed mid-closure: detected, job finishes (rc $rc)"
check "json $tmp/r2.json '$every_ps_exact and $every_epoch and p[\"workers_lost\"] >= 1 and p[\"closures_retried\"] >= 1'" \
  "after the kill: applied == scheduled on every ps, each example once per epoch"
check "json $tmp/r2.json 'p[\"per_ps\"][0][\"duplicates_skipped\"] >= 1'" \
  "ps:0, which had applied part of the lost closure, skipped it on the re-run"

# ---- strata launch --restart-failed: the killed worker is started again
# and rejoins (P1: "the worker rejoins") ----
STRATA_PS_TEST_STEP_DELAY_MS=8 STRATA_PS_TEST_FAULT=kill:1:5 timeout 120 "$cli" launch --workers 2 --ps 1 \
  --insecure --restart-failed -- train --model mlp --train-examples 8000 --batch-size 32 --steps-per-execution 4 \
  --heartbeat-interval $hb --report "$tmp/r9.json" > /dev/null 2> "$tmp/l9"
rc=$?
# (the hook is in the environment of the restarted process too: when that
# one is given the re-run closure it is killed at step 5 again, and restarted
# again: the same task lost twice, P2)
check "[ $rc = 0 ] && grep -q 'worker:1 (pid [0-9]*) killed by signal 9: restarted' $tmp/l9" \
  "--restart-failed: the killed worker is started again ($(grep -c restarted "$tmp/l9") time(s)) (rc $rc)"
check "json $tmp/r9.json '$every_ps_exact and $every_epoch and p[\"workers_rejoined\"] >= 1'" \
  "the restarted worker rejoined; applied == scheduled"

exit $fail
