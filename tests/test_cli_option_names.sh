#!/usr/bin/env bash
# The CLI's option tables (tools/*.c) against the names its code looks up:
# every name passed to cli_get or GIVEN, or listed in a static name array of
# the file, is a row of that file's tables (CLI_OPT_*("--name", ...) or the
# file's shorthand for it, STR("--name", ...)). At run
# time such a lookup aborts (cli_get); this finds a misspelling on paths no
# test runs. A copy of tools/ with GIVEN("--epoch") planted fails, naming it.
set -u
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
if ! command -v python3 >/dev/null; then echo "SKIP: python3 is not installed"; exit 77; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # DIR: the tools folder; prints FILE: NAME per lookup not in a table
  python3 - "$1" <<'PY'
import os, re, sys
d = sys.argv[1]
bad = 0
for f in sorted(os.listdir(d)):
    if not f.endswith(".c"):
        continue
    s = open(os.path.join(d, f)).read()
    rows = set(re.findall(r'^\s*[A-Z_]+\(\s*"(-[^"]*)"', s, re.M))  # table rows: MACRO("--name", ...
    used = re.findall(r'\bGIVEN\(\s*"([^"]+)"\)', s)
    used += re.findall(r'\bcli_get\([^;]*?,\s*"([^"]+)"\)', s)
    for arr in re.findall(r'static const char \*const \w+\[\] = \{(.*?)\};', s, re.S):
        used += re.findall(r'"(-[^"]*)"', arr)
    for name in used:
        if name not in rows:
            print(f"tools/{f}: option {name} is looked up but not in the file's option table")
            bad = 1
    if used and not rows:
        print(f"tools/{f}: looks up options but has no table")
sys.exit(bad)
PY
}
out=$(check "$src/tools" 2>&1)
[ $? -eq 0 ] && [ -z "$out" ] && echo "ok - every looked-up option name is in its table" \
  || { echo "not ok - $out"; fail=1; }
n=$(grep -c 'GIVEN("\|cli_get(' "$src/tools/cmd_train.c")
[ "$n" -gt 5 ] && echo "ok - cmd_train.c has $n lookups to check" || { echo "not ok - only $n lookups found"; fail=1; }
cp -r "$src/tools" "$tmp/tools"
sed -i 's/GIVEN("--keep")/GIVEN("--kep")/' "$tmp/tools/cmd_train.c"
out=$(check "$tmp/tools" 2>&1)
if [ $? -ne 0 ] && grep -qF "tools/cmd_train.c: option --kep is looked up" <<<"$out"; then
  echo "ok - a planted misspelling fails: $out"
else
  echo "not ok - planted --kep: $out"; fail=1
fi
exit $fail
