#!/usr/bin/env bash
# Issue 29 D15/D16: strata launch and interruptions (reliability-3.md).
#  - kill -9 of launch left /tmp/strata-keys-XXXXXX with every task's
#    .secret: now removed as soon as launch is gone (TMPDIR points the key
#    directory into this test's temp dir);
#  - SIGHUP (terminal closed) was not forwarded: the tasks ran on
#    unsupervised and the keys stayed; now it stops them like SIGTERM;
#  - tasks showed up as "exe" in ps/top: now "strata";
#  - a chief stopped while it waits for a JOB answer said "ps:0 did not
#    answer JOB within 120 s" (a timeout that never happened): now "stopped
#    on request while waiting ...", exit 5.
. "$(dirname "$0")/ps_common.bash"
export TMPDIR=$tmp STRATA_PS_TEST_STEP_DELAY_MS=20
keys() { ls -d "$tmp"/strata-keys-* 2>/dev/null | wc -l; }
job=(launch --workers 1 --ps 1 -- train --model mlp --train-examples 4000 --epochs 50 --batch-size 32 --quiet)
started() { for _ in $(seq 400); do grep -q 'chief:0 on' "$1" && [ "$(keys)" = 1 ] && return 0; sleep 0.05; done; return 1; }

"$cli" "${job[@]}" > /dev/null 2> "$tmp/l1" &
launch=$!
started "$tmp/l1"; st=$?
sleep 1
names=$(ps -o comm= --ppid $launch | sort -u | tr '\n' ' ')
kids=$(ps -o pid= --ppid $launch)
kill -9 $launch; wait $launch 2>/dev/null
for _ in $(seq 100); do [ "$(keys)" = 0 ] && break; sleep 0.05; done
check "[ $st = 0 ] && [ \"$(keys)\" = 0 ]" "kill -9 of launch: the key directory is removed ($(keys) left)"
check "echo '$names' | grep -qw strata && ! echo '$names' | grep -qw exe" "the tasks are named strata, not exe ($names)"
for k in $kids; do kill -TERM "$k" 2>/dev/null; done; sleep 0.5 # the killed launch's tasks (they end on their own too)

"$cli" "${job[@]}" > /dev/null 2> "$tmp/l2" &
launch=$!
started "$tmp/l2"; st=$?
sleep 1
kill -HUP $launch
for _ in $(seq 200); do kill -0 $launch 2>/dev/null || break; sleep 0.05; done
alive=$(kill -0 $launch 2>/dev/null && echo yes || echo no)
wait $launch; rc=$?
check "[ $st = 0 ] && [ $alive = no ] && [ \"$(keys)\" = 0 ]" \
  "SIGHUP: forwarded, launch ends within 10 s (exit $rc) and removes the keys ($(keys) left)"
check "! grep -q 'did not answer .* within' $tmp/l2" "... and no task reports a timeout for the interruption"

read -r p1 p2 p3 p4 <<< "$(ports)"
TF_CONFIG="{\"cluster\": {\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}" \
  "$cli" train --strategy parameter_server --insecure --model mlp --quiet > /dev/null 2> "$tmp/c" &
chief=$!
# stop it once it waits for answers (listening: its signal handlers are set; slow under ASan)
for _ in $(seq 400); do ss -ltn 2>/dev/null | grep -q ":$p1 " && break; sleep 0.05; done
sleep 1
kill -TERM $chief; wait $chief; rc=$?
check "[ $rc = 5 ] && grep -q 'stopped on request while waiting for ps:0' $tmp/c && ! grep -q 'within 120 s' $tmp/c" \
  "a chief stopped while waiting for JOB answers: exit 5, 'stopped on request' (rc $rc: $(grep -v warning "$tmp/c"))"
exit $fail
