#!/usr/bin/env bash
# The acceptance run of issue 13: `strata launch --workers 2 --ps 2 -- train
# --model cnn --epochs 3 --batch-size 128` (CURVE on, the default): test
# accuracy >= 0.86 and the report shows every step applied exactly once on
# each ps and each example once per epoch. Slow (about 1.5-2.5 min on 2
# cores: 1407 cnn steps): Release builds only; it skips (77) under the
# sanitizers and in other build types, saying why.
if [ "${STRATA_SANITIZED:-0}" = 1 ]; then
  echo "SKIP: sanitizer build: the 3-epoch cnn run takes too long there (Release only)"; exit 77
fi
if [ "${STRATA_BUILD_TYPE:-}" != Release ]; then
  echo "SKIP: build type '${STRATA_BUILD_TYPE:-unset}': the 3-epoch cnn run is for Release builds"; exit 77
fi
. "$(dirname "$0")/ps_common.bash"
t0=$SECONDS
timeout 500 "$cli" launch --workers 2 --ps 2 -- train --model cnn --epochs 3 --batch-size 128 \
  --report "$tmp/r.json" > "$tmp/out" 2> "$tmp/err"
rc=$?
check "[ $rc = 0 ]" "launch 2 workers + 2 ps, cnn, 3 epochs: exit 0 (rc $rc, $((SECONDS - t0)) s)"
[ $rc = 0 ] || tail -20 "$tmp/err"
acc=$(python3 -c "import json; print(json.load(open('$tmp/r.json'))['test_accuracy'])" 2>/dev/null)
check "python3 -c 'import sys; sys.exit(0 if float(\"${acc:-0}\") >= 0.86 else 1)'" "test accuracy ${acc:-?} >= 0.86"
check "json $tmp/r.json '$every_ps_exact and $every_epoch and p[\"workers\"] == 2 and p[\"ps\"] == 2'" \
  "every step applied exactly once on each ps, each example once per epoch"
exit $fail
