#!/usr/bin/env bash
# The shape DESIGN.md asks of src/ (issue 27): no file over 800 lines, no
# function over 80, no circle of files calling each other in src/distribute or
# src/ps (from nm on this build's objects); scripts/code_stats.py --check
# prints the longest of each and names what is over. Then a planted
# 81-line function in a copy of the tree is named.
set -u
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cli=${STRATA_CLI:-$src/build/strata}
build=$(dirname "$cli")
command -v python3 >/dev/null || { echo "skip: python3 not installed"; exit 77; }
command -v nm >/dev/null || { echo "skip: nm (binutils) not installed"; exit 77; }
fail=0
out=$(python3 "$src/scripts/code_stats.py" --root "$src" --build "$build" --check 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 0 ] && grep -q "circles of files in src/distribute: 0" <<<"$out"; then
  echo "ok - src/ within the limits, no circle"
else
  echo "not ok - code_stats --check exit $rc"; fail=1
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/t" && cp -r "$src/src" "$tmp/t/"
{ echo "static int planted_long(int x) {"; for i in $(seq 79); do echo "  x += $i;"; done; echo "  return x;"; echo "}"; } \
  >> "$tmp/t/src/base/util.c"
out=$(python3 "$src/scripts/code_stats.py" --root "$tmp/t" --build "$build" --check 2>&1)
if [ $? -eq 1 ] && grep -q "OVER: function planted_long at src/base/util.c:[0-9]* has 82 lines" <<<"$out"; then
  echo "ok - a planted 82-line function is named"
else
  echo "not ok - planted function not named: $out"; fail=1
fi
exit $fail
