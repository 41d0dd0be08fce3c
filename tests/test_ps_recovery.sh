#!/usr/bin/env bash
# ParameterServerStrategy: lossy networks, sharding and rejoining workers, on
# loopback (issue 13; RELIABILITY.md rows P1, P2, P5), each run bounded by
# `timeout`:
#  - dropped, duplicated and reordered frames between workers and ps (a
#    test-only transport switch): one worker's weights are the bytes of a
#    run without faults, every duplicate skipped;
#  - --ps-shards 2 (variables split along axis 0): the weights of the
#    unsharded run, byte for byte, the ps balanced;
#  - kill -9 of worker 1, a restart of it (a new process of the task rejoins
#    and gets work), then kill -9 of worker 0: the job finishes, applied ==
#    scheduled, every example once.
. "$(dirname "$0")/ps_common.bash"

# ---- P5: dropped, duplicated and reordered worker <-> ps frames (test-only
# transport switch) change nothing: with one worker the run is sequential, so
# its weights must be the bytes of the run without faults ----
one=(--model mlp --train-examples 1024 --batch-size 32 --seed 5)
timeout 120 "$cli" launch --workers 1 --ps 2 --insecure -- train "${one[@]}" --save "$tmp/clean.st" \
  > /dev/null 2>&1
STRATA_PS_TEST_NET="drop=0.03,dup=0.1,reorder=0.03,seed=7" timeout 120 "$cli" launch --workers 1 --ps 2 \
  --insecure -- train "${one[@]}" --save "$tmp/faulty.st" --report "$tmp/r6.json" > /dev/null 2> "$tmp/l6"
rc=$?
check "[ $rc = 0 ] && cmp -s $tmp/clean.st $tmp/faulty.st" \
  "3% dropped, 10% duplicated, 3% reordered frames: the same weights, byte for byte (rc $rc)"
check "json $tmp/r6.json '$every_ps_exact and sum(x[\"duplicates_skipped\"] for x in p[\"per_ps\"]) >= 1'" \
  "the duplicates reached the ps and were skipped; applied == scheduled"
# variables split along axis 0 into 2 shards each (--ps-shards, TF's
# FixedShardsPartitioner): the ps hold equal halves; the same weights
timeout 120 "$cli" launch --workers 1 --ps 2 --insecure -- train "${one[@]}" --ps-shards 2 \
  --save "$tmp/sharded.st" --report "$tmp/r8.json" > /dev/null 2>&1
rc=$?
check "[ $rc = 0 ] && cmp -s $tmp/clean.st $tmp/sharded.st" "--ps-shards 2: the weights of the unsharded run, byte for byte (rc $rc)"
check "json $tmp/r8.json 'p[\"variable_shards\"] == 12 and p[\"per_ps\"][0][\"floats\"] == p[\"per_ps\"][1][\"floats\"] and $every_ps_exact'" \
  "--ps-shards 2: 6 variables in 12 shards, the two ps hold the same number of floats"

# ---- P1/P2: kill -9 of worker 1, restarted (a new incarnation rejoins and
# gets work), then kill -9 of worker 0: the job finishes on the restarted
# worker; steps slowed to >= 8 ms by a test hook so the job outlasts the faults ----
export STRATA_PS_TEST_STEP_DELAY_MS=$delay
tf() { echo "{$cl, \"task\": {\"type\": \"${1%:*}\", \"index\": ${1#*:}}}"; }
read -r p0 p1 p2 p3 < <(ports)
cl="\"cluster\": {\"chief\": [\"127.0.0.1:$p0\"], \"worker\": [\"127.0.0.1:$p1\", \"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}"
TF_CONFIG="$(tf ps:0)" timeout 90 "$cli" server --insecure --job-timeout 30 2> /dev/null &
sp=$!
TF_CONFIG="$(tf worker:0)" "$cli" server --insecure --job-timeout 30 2> /dev/null &
w0=$!
TF_CONFIG="$(tf worker:1)" "$cli" server --insecure --job-timeout 30 2> /dev/null &
w1=$!
: > "$tmp/l5"
TF_CONFIG="$(tf chief:0)" timeout 90 "$cli" train --strategy parameter_server --insecure --model mlp \
  --train-examples 24000 --batch-size 32 --heartbeat-interval $hb --coordinator-timeout 15 --report "$tmp/r5.json" > /dev/null 2> "$tmp/l5" &
chief=$!
for _ in $(seq 1 400); do grep -q 'parameter_server job' "$tmp/l5" && break; sleep 0.05; done
sleep 0.3
{ kill -9 $w1; wait $w1; } 2>/dev/null
for _ in $(seq 1 200); do grep -q 'worker:1 lost' "$tmp/l5" && break; sleep 0.05; done
TF_CONFIG="$(tf worker:1)" "$cli" server --insecure --job-timeout 30 2> /dev/null &
w1=$!
for _ in $(seq 1 800); do grep -q 'worker:1 rejoined' "$tmp/l5" && break; sleep 0.05; done
sleep 0.3
{ kill -9 $w0; wait $w0; } 2>/dev/null
wait $chief
rc=$?
check "[ $rc = 0 ] && grep -q 'worker:1 rejoined' $tmp/l5 && grep -q 'worker:0 lost' $tmp/l5" \
  "kill -9 worker 1, restart it (rejoins), kill -9 worker 0: the job finishes (rc $rc)"
[ $rc = 0 ] || cat "$tmp/l5"
check "json $tmp/r5.json '$every_ps_exact and $every_epoch and p[\"workers_lost\"] >= 2 and p[\"workers_rejoined\"] >= 1'" \
  "after two losses and a rejoin: applied == scheduled, each example once"
wait $sp $w1 2>/dev/null
unset STRATA_PS_TEST_STEP_DELAY_MS
exit $fail
