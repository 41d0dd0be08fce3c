#!/usr/bin/env bash
# The generated NULL-argument test (test_null_args, scripts/gen_null_test.py,
# issue 34) can fail, and covers a new function the day it lands:
#  - test_null_args_planted is the same program linked with a copy of
#    src/data/dataset_transform.c whose st_dataset_map lost its argument
#    check: it must fail, naming st_dataset_map(out NULL) and the signal (in a
#    sanitizer build, which reports the NULL access and goes on, its failed check);
#    the real build passes the same cases;
#  - a function planted in a copy of the headers appears in the generated
#    cases for each pointer argument, refused unless its comment says
#    "may be NULL".
set -u
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
build=${STRATA_CLI:+$(dirname "$STRATA_CLI")}
build=${build:-$src/build}
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
[ -x "$build/test_null_args_planted" ] || { echo "SKIP: $build/test_null_args_planted not built"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok - $1"; }
bad() { echo "not ok - $1"; fail=1; }

timeout 120 "$build/test_null_args" st_dataset_map >"$tmp/real" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "real library: st_dataset_map's cases pass ($(tail -1 "$tmp/real"))" \
  || bad "real library: exit $rc: $(cat "$tmp/real")"
timeout 120 "$build/test_null_args_planted" st_dataset_map >"$tmp/planted" 2>&1
rc=$?
# (a sanitizer build reports the NULL access and goes on: the case then fails
# its check instead of being killed)
if [ $rc -eq 1 ] && grep -Eq "^not ok [0-9]* - st_dataset_map\(out NULL\): (killed by signal|check failed)" "$tmp/planted"; then
  ok "check removed: exit 1, $(grep '^not ok' "$tmp/planted" | head -1)"
else
  bad "check removed: exit $rc, output: $(cat "$tmp/planted")"
fi

cp -r "$src/include/strata" "$tmp/h"
cat >"$tmp/h/planted.h" <<'H'
/* A planted header. */
#include "strata/base.h"
/* Parse name into *out. */
st_status st_planted_parse(const char *name, int *out);
/* A count of things (hint may be NULL). */
st_status st_planted_count(const int *things, const char *hint, size_t *out);
H
python3 "$src/scripts/gen_null_test.py" --headers "$tmp/h" --list >"$tmp/list" 2>&1
want="st_planted_parse name refused
st_planted_parse out refused
st_planted_count things refused
st_planted_count hint skipped (may be NULL; a stand-in input beside it)
st_planted_count out refused"
if [ "$(grep '^st_planted' "$tmp/list")" = "$want" ]; then
  ok "a planted function is covered: $(grep -c '^st_planted' "$tmp/list") cases"
else
  bad "planted function: $(grep '^st_planted' "$tmp/list")"
fi
exit $fail
