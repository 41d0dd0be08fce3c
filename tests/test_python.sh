#!/usr/bin/env bash
# The Python package strata (issue 14): python/tests/ with pytest against
# build/python (the extension and the package the build puts there). Skips
# (77, saying why) in sanitizer builds (the extension is not built there),
# and when numpy, pytest or the built package is missing.
set -u
src=${STRATA_SOURCE_DIR:?set by CTest}
cli=${STRATA_CLI:?set by CTest}
if [ "${STRATA_SANITIZED:-0}" = 1 ]; then echo "SKIP: sanitizer build: the Python extension is not built"; exit 77; fi
py=/usr/bin/python3; [ -x "$py" ] || py=$(command -v python3 || true)
if [ -z "$py" ]; then echo "SKIP: no python3"; exit 77; fi
for m in numpy pytest; do
  if ! "$py" -c "import $m" 2>/dev/null; then echo "SKIP: $py has no $m (apt-get install python3-$m)"; exit 77; fi
done
pkg=$(dirname "$cli")/python
if ! ls "$pkg"/strata/_strata*.so >/dev/null 2>&1; then
  echo "SKIP: $pkg/strata/_strata*.so not built (python3-dev missing at configure time?)"; exit 77
fi
cd "$src/python/tests" && PYTHONPATH="$pkg" PYTHONDONTWRITEBYTECODE=1 exec "$py" -m pytest -q -p no:cacheprovider .
