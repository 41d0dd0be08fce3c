#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (built by `make fuzz` into BUILD_DIR)
# for SECONDS each, JOBS at a time (default 2), each on a fresh copy of its seed
# corpus plus its regression inputs (BUILD_DIR/fuzz-work/<target>, so the
# committed corpus is never flooded). Crashing, leaking or timing-out inputs are
# saved as BUILD_DIR/crashes/<target>-{crash,leak,timeout,oom}-<sha1>; logs go
# to BUILD_DIR/fuzz-logs/<target>.log. Exit 1 if any target failed.
#   usage: tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]   (default: all)
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
secs=$2
shift 2
src=$(cd "$(dirname "$0")" && pwd)
jobs=${FUZZ_JOBS:-2}
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in "$src"/*_fuzz.c; do targets+=("$(basename "$f" .c)"); done
fi
work=$build/fuzz-work
logs=$build/fuzz-logs
crashes=$build/crashes
mkdir -p "$work" "$logs" "$crashes"

run_one() {
  local t=$1 dir=$work/$1 log=$logs/$1.log
  rm -rf "$dir" && mkdir -p "$dir"
  for d in "$src/corpus/$t" "$src/regressions/$t"; do
    [ -d "$d" ] && find "$d" -maxdepth 1 -type f -exec cp {} "$dir/" \;
  done
  local before after start end rc execs dict=()
  before=$(find "$dir" -type f | wc -l)
  [ -f "$src/$t.dict" ] && dict=(-dict="$src/$t.dict")
  start=$(date +%s)
  "$build/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "${dict[@]}" -artifact_prefix="$crashes/$t-" "$dir" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  after=$(find "$dir" -type f | wc -l)
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  printf '%-18s rc=%d  %4ds  %10s execs  corpus %d -> %d files\n' "$t" "$rc" \
    "$((end - start))" "${execs:-?}" "$before" "$after" | tee "$logs/$t.summary"
  if [ "$rc" -ne 0 ]; then
    echo "---- $t FAILED (log: $log; inputs: $crashes/$t-*) ----"
    grep -E "ERROR|SUMMARY|Test unit written|runtime error" "$log" | head -20
  fi
  return "$rc"
}

echo "fuzzing ${targets[*]}: ${secs}s each, $jobs at a time"
pids=()
names=()
for t in "${targets[@]}"; do
  if [ ! -x "$build/$t" ]; then
    echo "$build/$t: not built" >&2
    exit 2
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_one "$t" &
  pids+=($!)
  names+=("$t")
done
failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed+=("${names[$i]}")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing FAILED: ${failed[*]} (inputs under $crashes/)"
  exit 1
fi
echo "fuzzing passed: no crash, leak or timeout"
