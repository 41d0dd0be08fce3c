#!/usr/bin/env bash
# ParameterServerStrategy: stalls and lost servers, on loopback (issue 13;
# RELIABILITY.md rows P3, P4, P6), each run bounded by `timeout`:
#  - a worker stopped (SIGSTOP) past 3 heartbeat intervals, then SIGCONT:
#    declared lost, its late push refused by the ps, it exits 3, the job
#    finishes with applied == scheduled;
#  - the chief killed with kill -9 (servers started by hand under
#    TF_CONFIG): every server exits 3 within --coordinator-timeout + 5 s;
#  - kill -9 of a ps (no recovery yet): the chief exits 3 naming it within
#    3 heartbeat intervals + 5 s;
. "$(dirname "$0")/ps_common.bash"

# ---- SIGSTOP past the heartbeat timeout, then SIGCONT (P6), --insecure ----
: > "$tmp/l3"
# (steps slowed to >= 10 ms by a test hook: worker 0 alone needs >= 2.5 s
# for the epoch, longer than the 1.5 s detection)
STRATA_PS_TEST_STEP_DELAY_MS=10 STRATA_PS_TEST_FAULT=stop:1:5 timeout 120 "$cli" launch --workers 2 --ps 1 --insecure -- train --model mlp \
  --train-examples 8000 --batch-size 32 --epochs 1 --steps-per-execution 4 --heartbeat-interval $hb \
  --report "$tmp/r3.json" > "$tmp/o3" 2> "$tmp/l3" &
job=$!
# SIGCONT once the chief has declared it lost (3 missed heartbeats: 1.5 s),
# while worker 0 still has most of the epoch to train
for _ in $(seq 1 400); do grep -q 'worker:1 lost' "$tmp/l3" && break; sleep 0.05; done
pid=$(sed -n 's/.*worker:1 on .*, pid \([0-9]*\)/\1/p' "$tmp/l3")
[ -n "$pid" ] && kill -CONT "$pid"
wait $job
rc=$?
check "[ $rc = 0 ] && grep -q 'worker:1 lost' $tmp/l3" "stopped worker declared lost, job finishes (rc $rc)"
check "grep -q 'declared this worker lost\|declared lost by the chief' $tmp/l3" "the resumed worker hears it was fenced"
# the push it had in flight is refused by the fenced ps (the ps's answer is
# in worker:1's log; the report counts it unless the epoch ended first)
check "grep -q 'ps:0: this worker was declared lost' $tmp/l3 || json $tmp/r3.json 'p[\"per_ps\"][0][\"pushes_refused\"] >= 1'" \
  "its late push refused by the ps"
check "json $tmp/r3.json '$every_ps_exact and $every_epoch'" "applied == scheduled after the stall"
check "grep -q 'warning: --insecure' $tmp/l3" "--insecure warns"
# ---- the chief killed with kill -9 (P4): every server exits 3 within
# --coordinator-timeout (5 s: the chief also gives the servers that long to
# answer its JOB, which a loaded sanitizer build needs) + slack; servers
# started by hand under TF_CONFIG ----
read -r p0 p1 p2 p3 < <(ports)
cl="\"cluster\": {\"chief\": [\"127.0.0.1:$p0\"], \"worker\": [\"127.0.0.1:$p1\", \"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}"
pids=()
for t in worker:0 worker:1 ps:0; do
  TF_CONFIG="{$cl, \"task\": {\"type\": \"${t%:*}\", \"index\": ${t#*:}}}" \
    timeout 60 "$cli" server --insecure --job-timeout 20 2> "$tmp/s_${t/:/}" &
  pids+=($!)
done
: > "$tmp/chief"
TF_CONFIG="{$cl, \"task\": {\"type\": \"chief\", \"index\": 0}}" "$cli" train --strategy parameter_server \
  --insecure --model mlp --epochs 50 --batch-size 32 --coordinator-timeout 5 --heartbeat-interval 0.2 \
  > /dev/null 2> "$tmp/chief" &
chief=$!
for _ in $(seq 1 400); do grep -q 'parameter_server job' "$tmp/chief" && break; sleep 0.05; done
sleep 0.5
alive=0
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
check "[ $alive = 3 ]" "the 3 servers are up and training when the chief is killed"
{ kill -9 $chief; wait $chief; } 2>/dev/null
t0=$(date +%s.%N)
codes=()
for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
dt=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
check "[ \"${codes[*]}\" = '3 3 3' ] && python3 -c 'import sys; sys.exit(0 if $dt < 10 else 1)'" \
  "chief killed: every server exits 3 within the coordinator timeout + 5 s (codes ${codes[*]}, ${dt}s)"
check "grep -q 'the chief has been silent' $tmp/s_ps0" "the ps names the silent chief"
# ---- P3 (without recovery): kill -9 of a ps: the chief exits 3 naming it
# within 3 heartbeats (1.5 s) + slack ----
: > "$tmp/l7"
STRATA_PS_TEST_STEP_DELAY_MS=10 timeout 60 "$cli" launch --workers 2 --ps 2 --insecure -- train --model mlp \
  --train-examples 8000 --batch-size 32 --heartbeat-interval $hb > /dev/null 2> "$tmp/l7" &
job=$!
for _ in $(seq 1 400); do grep -q 'parameter_server job' "$tmp/l7" && break; sleep 0.05; done
pid=$(sed -n 's/.*ps:1 on .*, pid \([0-9]*\)/\1/p' "$tmp/l7")
[ -n "$pid" ] && kill -9 "$pid"
wait $job
rc=$?
secs=$(sed -n 's/.*ps:1 lost (no heartbeat for \([0-9.]*\) s).*/\1/p' "$tmp/l7")
check "[ $rc = 3 ] && [ -n '$secs' ] && python3 -c 'import sys; sys.exit(0 if $secs < 6.5 else 1)'" \
  "ps:1 killed: the chief exits 3 naming it, after ${secs:-?} s without heartbeat (rc $rc)"

exit $fail
