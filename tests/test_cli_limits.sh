#!/usr/bin/env bash
# The replica limit through the CLI (issue 12): 65, 70 and 1,000 --devices
# entries and --replicas 65 each exit 2 with a message naming the limit (64,
# ST_MAX_REPLICAS), no signal (exit < 128), and write nothing.
set -u
cli=${STRATA_CLI:?set by CTest}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
/usr/bin/python3 "${STRATA_SOURCE_DIR:?set by CTest}/tests/mkidx.py" "$tmp/good"

# expect NAME PATTERN -- command...: exit 2, stderr matching PATTERN, no output.
expect() {
  local name=$1 pattern=$2; shift 3
  "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  if [ $rc -eq 2 ] && grep -qE -- "$pattern" "$tmp/stderr" && [ ! -e "$tmp/out.safetensors" ]; then
    echo "ok - $name"
  else
    echo "not ok - $name (exit $rc, want 2$([ $rc -ge 128 ] && echo ', a signal'); stderr:)"
    sed 's/^/    /' "$tmp/stderr"; fail=1
  fi
}
devices() { /usr/bin/python3 -c "import sys; print(','.join('cpu:%d' % i for i in range(int(sys.argv[1]))))" "$1"; }
T=("$cli" train --model mlp --data "$tmp/good" --save "$tmp/out.safetensors" --quiet)
for n in 65 70 1000; do
  for strategy in mirrored central_storage; do
    expect "$n devices, $strategy" "$n devices given, at most 64 \(ST_MAX_REPLICAS\)" -- \
      "${T[@]}" --strategy "$strategy" --devices "$(devices "$n")"
  done
done
expect "--replicas 65" "--replicas: '65' is not an integer in \[1, 64\]" -- \
  "${T[@]}" --strategy mirrored --replicas 65
exit $fail
