#!/usr/bin/env bash
# Issue 29 D2 (and D10, D20's --keys/--insecure): a forged JOB at an
# insecure server's port (reliability-3.md). Before the fix the JOB's
# batch = 2^62 + 1 passed (only >= 1 was checked): the worker's batch
# buffer wrapped to a few KB and a RUN of 1000 examples was gathered past
# it (SIGSEGV, also in a Python tf.distribute.Server without keys, which ran
# insecure with no warning). Now every JOB field is bounded like the
# command line's options before anything is sized from it:
#  - CLI worker (--insecure): the forged JOB is answered ERROR naming the
#    field, the server exits 3 as for any JOB it refuses (no signal); likewise total_steps 2^40,
#    steps_per_execution 0, heartbeat_interval inf, val_split 5;
#  - Python Server without keys: a RuntimeWarning says it runs insecure, and
#    the forged JOB ends join() with an error, the interpreter alive;
#  - strata server --keys DIR --insecure: exit 2 (the contradiction), and
#    a .secret key of mode 0644, a .pub of 0666 and a key directory of 0777
#    (server and keygen) are refused (D20), 700/644/600 accepted;
#  - strata train --heartbeat-interval 10 --coordinator-timeout 5 (D10): exit 2
#    at once instead of servers that take the live chief for lost.
. "$(dirname "$0")/ps_common.bash"
src=${STRATA_SOURCE_DIR:?set by CTest}
read -r p1 p2 p3 p4 <<< "$(ports)"
export TF_CONFIG="{\"cluster\": {\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}"
# forged JOB FIELD=VALUE...: a CLI worker, the forge, the worker's exit code in rc
forged() {
  timeout 60 "$cli" server --insecure --job-timeout 20 > /dev/null 2> "$tmp/srv" &
  local pid=$!
  for _ in $(seq 100); do ss -ltn 2>/dev/null | grep -q ":$p2 " && break; sleep 0.05; done
  sleep 0.2
  PYTHONPATH="$src/tests" timeout 30 python3 "$src/tests/ps_forge.py" "127.0.0.1:$p2" fashion-mnist "$@" > "$tmp/forge" 2>&1
  wait $pid; rc=$?
}
forged
check "[ $rc = 3 ] && grep -q 'JOB answered ERROR: JOB: batch 4611686018427387905 out of range \[1, 1048576\]' $tmp/forge" \
  "CLI worker, forged JOB with batch 2^62+1 then a RUN: refused, exit 3 (a job the server refuses, ERRORS.md), no signal (rc $rc; $(head -c 200 "$tmp/forge"))"
check "grep -q 'worker:0: JOB: batch 4611686018427387905 out of range' $tmp/srv" "the worker logs the refusal"
for f in total_steps=1099511627776 steps_per_execution=0 heartbeat_interval=inf val_split=0x1.4p+2 \
         coordinator_timeout=0x1p-1; do
  forged batch=32 "$f"
  check "[ $rc = 3 ] && grep -q 'JOB answered ERROR: JOB: ${f%%=*}' $tmp/forge" \
    "forged JOB with $f: refused naming the field, exit 3 (rc $rc; $(head -c 200 "$tmp/forge"))"
done

# the Python Server without keys, as the README shows it
pkg=$(dirname "$cli")/python
py=/usr/bin/python3; [ -x "$py" ] || py=python3 # the interpreter the extension was built for
if [ "${STRATA_SANITIZED:-0}" != 1 ] && ls "$pkg"/strata/_strata*.so > /dev/null 2>&1 && "$py" -c "import numpy" 2>/dev/null; then
  "$py" -c "import numpy as np; np.savez('$tmp/evil.npz', x=np.zeros((100,28,28),'uint8'), y=np.zeros(100,'uint8'))"
  PYTHONPATH=$pkg timeout 60 "$py" -c "
import strata as tf
try:
    tf.distribute.Server(tf.train.ClusterSpec({'chief': ['127.0.0.1:$p1'], 'worker': ['127.0.0.1:$p2'], 'ps': ['127.0.0.1:$p3']}),
                         job_name='worker', task_index=0, protocol='grpc', job_timeout=20).join()
except Exception as e:
    print('join raised', type(e).__name__, e)
" > "$tmp/py.out" 2> "$tmp/py.err" &
  pid=$!
  for _ in $(seq 200); do ss -ltn 2>/dev/null | grep -q ":$p2 " && break; sleep 0.05; done
  sleep 0.2
  PYTHONPATH="$src/tests" timeout 30 python3 "$src/tests/ps_forge.py" "127.0.0.1:$p2" "npz:$tmp/evil.npz" > "$tmp/forge" 2>&1
  wait $pid; rc=$?
  check "[ $rc = 0 ] && grep -q 'join raised .*batch 4611686018427387905 out of range' $tmp/py.out" \
    "Python Server, forged JOB: join() raises, the interpreter lives (rc $rc; $(cat "$tmp/py.out"))"
  check "grep -q 'RuntimeWarning: Server: no keys_dir and no \$STRATA_KEYS: running insecure' $tmp/py.err" \
    "Python Server without keys warns that it runs insecure"
else
  echo "skipped: the Python part (no built extension or numpy)"
fi

"$cli" server --keys "$tmp/keys" --insecure --job-timeout 1 > /dev/null 2> "$tmp/ki"; rc=$?
check "[ $rc = 2 ] && grep -q 'contradict' $tmp/ki" "strata server --keys DIR --insecure: exit 2 (rc $rc: $(cat "$tmp/ki"))"
chmod 644 "$tmp/keys/worker-0.secret"
"$cli" server --keys "$tmp/keys" --job-timeout 1 > /dev/null 2> "$tmp/km"; rc=$?
check "[ $rc = 2 ] && grep -q 'worker-0.secret: mode 0644: readable or writable by others' $tmp/km" \
  "D20: a .secret key readable by others is refused (rc $rc: $(cat "$tmp/km"))"
chmod 600 "$tmp/keys/worker-0.secret"; chmod 666 "$tmp/keys/ps-0.pub"
"$cli" server --keys "$tmp/keys" --job-timeout 1 > /dev/null 2> "$tmp/km"; rc=$?
check "[ $rc = 2 ] && grep -q 'ps-0.pub: mode 0666: writable by others than its owner (chmod 644 .*ps-0.pub)' $tmp/km" \
  "D20: a .pub key writable by others is refused (rc $rc: $(cat "$tmp/km"))"
chmod 644 "$tmp/keys/ps-0.pub"; chmod 777 "$tmp/keys"
"$cli" server --keys "$tmp/keys" --job-timeout 1 > /dev/null 2> "$tmp/km"; rc=$?
check "[ $rc = 2 ] && grep -q 'key directory .*keys: mode 0777: writable by others than its owner, who could replace the cluster.s keys (chmod 700 .*keys)' $tmp/km" \
  "D20: a key directory writable by others is refused (rc $rc: $(cat "$tmp/km"))"
"$cli" keygen "$tmp/keys" --cluster "$tmp/k.json" > /dev/null 2> "$tmp/km"; rc=$?
check "[ $rc = 2 ] && grep -q 'mode 0777' $tmp/km" "D20: keygen into it too (rc $rc: $(cat "$tmp/km"))"
chmod 700 "$tmp/keys"
"$cli" server --keys "$tmp/keys" --job-timeout 1 > /dev/null 2> "$tmp/km"; rc=$?
check "! grep -q 'mode 0' $tmp/km" "D20: mode 700 with 644 public and 600 secret keys is accepted (rc $rc: $(cat "$tmp/km"))"
unset TF_CONFIG
timeout 60 "$cli" train --strategy parameter_server --model mlp --heartbeat-interval 10 --coordinator-timeout 5 \
  > /dev/null 2> "$tmp/hb"; rc=$?
check "[ $rc = 2 ] && grep -q 'coordinator-timeout 5 is shorter than 2 x --heartbeat-interval' $tmp/hb" \
  "--heartbeat-interval 10 --coordinator-timeout 5: exit 2 at once (rc $rc: $(cat "$tmp/hb"))"
exit $fail
