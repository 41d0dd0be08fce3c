#!/usr/bin/env bash
# A whole cluster under garbage (issue 13; RELIABILITY.md N1, N2): while
# `strata launch --workers 2 --ps 2 --insecure` trains, tests/ps_garbage.py
# sends every server port (the chief's, each worker's, each ps's) raw bytes
# with no handshake, Strata frames that are garbage, short, truncated, of an
# unknown type or of another job, and a frame over ZMQ_MAXMSGSIZE. No process
# crashes, every task counts and logs the frames it dropped and names the
# client libzmq dropped for the oversized frame (watch_zmq.c), and the job
# finishes with applied == scheduled on every ps and each example once per
# epoch. --insecure: the NULL mechanism lets a test client reach the frame
# parser (with CURVE, tests/test_ps_transport.c shows an unknown key never
# gets that far).
. "$(dirname "$0")/ps_common.bash"
# steps of >= 25 ms: the job (3 x 63 steps on 2 workers) outlasts the garbage
export STRATA_PS_TEST_STEP_DELAY_MS=25
timeout 120 "$cli" launch --workers 2 --ps 2 --insecure -- train --model mlp --epochs 3 \
  --train-examples 2000 --batch-size 32 --heartbeat-interval $hb --report "$tmp/r.json" \
  > /dev/null 2> "$tmp/l" &
launch=$!
for _ in $(seq 1 600); do grep -q 'parameter_server job' "$tmp/l" && break; sleep 0.05; done
ports=$(sed -n 's/.* on \(127\.0\.0\.1:[0-9]*\), pid .*/\1/p' "$tmp/l")
python3 "$(dirname "$0")/ps_garbage.py" 3 $ports > "$tmp/g" 2>&1
grc=$?
wait $launch
rc=$?
n=$(echo $ports | wc -w)
check "[ $grc = 0 ] && [ $n = 5 ] && grep -q 'delivered 75 frames' $tmp/g" "garbage sent to the $n ports: $(cat "$tmp/g")"
check "[ $rc = 0 ]" "the job finishes under garbage (rc $rc)"
[ $rc = 0 ] || grep -v insecure "$tmp/l"
check "json $tmp/r.json '$every_ps_exact and $every_epoch'" "applied == scheduled on every ps, each example once per epoch"
check "json $tmp/r.json 'all(x[\"frames_dropped\"] >= 15 for x in p[\"per_ps\"]) and p[\"chief_frames_dropped\"] >= 15'" \
  "each ps and the chief counted the 15 bad frames (report)"
for t in ps:0 ps:1 worker:0 worker:1 chief:0; do
    check "grep -q '$t: [0-9]* frames dropped (.*bad magic' $tmp/l" "$t logged its drops: $(grep -o "$t: [0-9]* frames dropped.*" "$tmp/l")"
    check "grep -q '$t: dropped a connection from 127.0.0.1:[0-9]*: it sent a frame over the' $tmp/l" \
      "$t named a sender of an oversized frame ($(grep -c "$t: dropped a connection" "$tmp/l") lines)"
done
exit $fail
