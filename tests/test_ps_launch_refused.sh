#!/usr/bin/env bash
# Issue 29 D9: `strata launch` ignored a server that failed at start-up (its
# port taken by another process between launch's probe and its bind): the
# ps exited 2 at once, and the chief waited 120 s for its JOB_OK, exit 3.
# Now launch stops the job as soon as a server exits 2: exit 2 naming the
# task, within seconds. tests/ps_grab_port.py takes ps:0's port the moment
# launch prints it (a race it wins nearly always; retried).
. "$(dirname "$0")/ps_common.bash"
for try in 1 2 3 4 5; do
  timeout 150 python3 "$(dirname "$0")/ps_grab_port.py" "$cli" launch --workers 1 --ps 1 --insecure -- \
    train --model mlp --train-examples 512 --batch-size 64 --quiet > "$tmp/g" 2>&1
  head -1 "$tmp/g" | grep -q "^grabbed 1" && break
done
read -r _ grabbed _ rc _ secs <<< "$(head -1 "$tmp/g")"
check "[ \"$grabbed\" = 1 ]" "the helper took ps:0's port before the ps bound it (in $try tries)"
check "[ \"$rc\" = 2 ] && grep -q 'strata launch: ps:0 (pid [0-9]*) exited with 2 (its error is above): stopping the job' $tmp/g" \
  "launch: exit 2 naming ps:0 (rc $rc)"
check "grep -q 'cannot listen on 127.0.0.1:[0-9]* (ps:0): Address already in use' $tmp/g" "the ps's own error is shown"
check "python3 -c 'import sys; sys.exit(0 if float(\"$secs\") < 30 else 1)'" "... within seconds, not the chief's 120 s JOB wait (${secs}s)"
[ $fail = 0 ] || cat "$tmp/g"
exit $fail
