#!/usr/bin/env bash
# The C API reference (issue 21): every st_ function declared in
# include/strata/*.h has a doc comment (above it, above the run of
# declarations it belongs to, or on its line), and docs/API.md is what
# scripts/gen_api_doc.py generates from the headers. Also proves the check
# can fail: on a temp copy of the headers with one comment removed, and with
# a stale API.md.
set -u
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
if ! command -v python3 >/dev/null; then echo "SKIP: python3 is not installed"; exit 77; fi
gen="$src/scripts/gen_api_doc.py"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
if python3 "$gen" --check 2>"$tmp/err"; then echo "ok - headers documented, docs/API.md up to date"
else echo "not ok - API doc check:"; sed 's/^/    /' "$tmp/err"; fail=1; fi
# a copy with the comment of st_model_evaluate removed must fail, naming it
cp -r "$src/include/strata" "$tmp/h"
python3 - "$tmp/h/train.h" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
i = s.index("st_status st_model_evaluate(")
j = s.rindex("/*", 0, i)
assert s[j:i].rstrip().endswith("*/"), "the comment above st_model_evaluate"
open(p, "w").write(s[:j] + s[i:])
PY
python3 "$gen" --headers "$src/include/strata" --out "$tmp/API.md" 2>/dev/null
if python3 "$gen" --check --headers "$tmp/h" --out "$tmp/API.md" 2>"$tmp/err"; then
  echo "not ok - the check passed with st_model_evaluate undocumented"; fail=1
elif grep -q "train.h:[0-9]*: st_model_evaluate has no doc comment" "$tmp/err"; then
  echo "ok - an undocumented function fails the check: $(head -1 "$tmp/err" | sed 's|.*/||')"
else echo "not ok - wrong message:"; sed 's/^/    /' "$tmp/err"; fail=1; fi
# a stale API.md fails too
echo "stale" >>"$tmp/API.md"
if python3 "$gen" --check --out "$tmp/API.md" 2>"$tmp/err"; then
  echo "not ok - a stale API.md passed"; fail=1
elif grep -q "out of date" "$tmp/err"; then echo "ok - a stale API.md fails the check"
else echo "not ok - wrong message:"; sed 's/^/    /' "$tmp/err"; fail=1; fi
exit $fail
