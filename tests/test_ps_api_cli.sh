#!/usr/bin/env bash
# The C API trains what the CLI trains (issue 13 item 2): examples/ps_cluster.c
# runs a parameter-server job through st_ps_train and st_ps_server_run (chief,
# 1 worker, 2 ps as threads of one process); `strata launch --workers 1 --ps 2
# -- train` runs the same job as separate processes. One worker makes the
# order of the updates fixed: the saved weights must be the same bytes.
if [ "${STRATA_SANITIZED:-0}" = 1 ]; then
  # the example carries no ThreadSanitizer suppressions for libzmq (the CLI
  # and tests/test_ps_api.c do; the latter runs the same threads there)
  echo "SKIP: sanitizer build: the C API's cluster in threads is tested by test_ps_api there"; exit 77
fi
. "$(dirname "$0")/ps_common.bash"
example="$(dirname "$cli")/example_ps_cluster"
args=(--model mlp --train-examples 1024 --batch-size 64 --seed 3 --epochs 2)
timeout 120 "$example" "$data" 1 2 1024 64 3 2 "$tmp/api.safetensors" > "$tmp/o1" 2> "$tmp/e1"
rc=$?
check "[ $rc = 0 ] && grep -q 'exactly_once: true, ps:0 applied 32 updates' $tmp/o1" "C API job: exit 0, exactly once (rc $rc)"
timeout 120 "$cli" launch --workers 1 --ps 2 -- train "${args[@]}" --save "$tmp/cli.safetensors" > "$tmp/o2" 2> "$tmp/e2"
rc=$?
check "[ $rc = 0 ]" "strata launch: exit 0 (rc $rc)"
check "cmp -s $tmp/api.safetensors $tmp/cli.safetensors" "the same weight bytes through the C API and the CLI"
[ $fail = 0 ] || { tail -5 "$tmp/e1" "$tmp/e2"; exit 1; }
echo "PASS"
