#!/usr/bin/env bash
# scripts/check_complete.py: the real tree has every layer kind, strategy and
# backend in every place it must be; copies of the tree with a deliberately
# incomplete addition (a layer kind with only its file, a strategy with only
# its enum value and name, a backend with only its registry row) fail, exit 1,
# naming each missing place; the same backend added everywhere passes.
set -u
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
check=$src/scripts/check_complete.py
command -v python3 >/dev/null || { echo "skip: python3 not installed"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok - $1"; }
bad() { echo "not ok - $1"; fail=1; }

out=$(python3 "$check" "$src" 2>&1)
[ $? -eq 0 ] && ok "real tree: $out" || bad "real tree: $out"

fresh() { # a copy of what the check reads
  rm -rf "$tmp/t" && mkdir -p "$tmp/t/tests" "$tmp/t/python/strata"
  cp -r "$src/src" "$src/include" "$src/tools" "$src/docs" "$src/README.md" "$tmp/t/"
  cp "$src"/tests/test_*.c "$tmp/t/tests/"
  cp -r "$src/python/strata/keras" "$src/python/strata/distribute" "$tmp/t/python/strata/"
}
expect() { # expect NAME WANT...: the check fails on $tmp/t and names each WANT
  local name=$1; shift
  out=$(python3 "$check" "$tmp/t" 2>&1); rc=$?
  local miss=""
  for w in "$@"; do grep -qF -- "$w" <<<"$out" || miss="$miss [$w]"; done
  if [ $rc -eq 1 ] && [ -z "$miss" ] && [ "$(grep -c '^MISSING' <<<"$out")" -eq $# ]; then
    ok "$name: exit 1, $# missing places named"
  else
    bad "$name: exit $rc, not named:$miss; output: $out"
  fi
}

# A layer kind with its file only.
fresh
cat > "$tmp/t/src/nn/layer_fake.c" <<'C'
/* A planted layer kind. */
#include "nn/layer.h"
static const st_layer_vtable fake_vtable = {
    .class_name = "FakeLayer",
    .base_name = "fake_layer",
};
st_status st_fake_layer(int units, st_layer **out) {
  return st__layer_new(&fake_vtable, &units, sizeof units, NULL, out);
}
C
expect "layer kind with its file only" \
  "layer FakeLayer (src/nn/layer_fake.c): no row {\"FakeLayer\", ...} in the Keras importer" \
  "constructor st_fake_layer not declared in include/strata/nn.h" \
  "constructor st_fake_layer not in docs/API.md" \
  "layer FakeLayer (src/nn/layer_fake.c): no gradient check in tests/test_gradcheck*.c" \
  "no Python class FakeLayer in python/strata/keras/layers.py" \
  "layer FakeLayer (src/nn/layer_fake.c): not in the README's 'layers' row"

# A strategy with its enum value and name only.
fresh
sed -i 's/^\(  *\)ST_STRATEGY_COUNT/\1ST_STRATEGY_FAKE_SYNC,\n&/' "$tmp/t/include/strata/distribute.h"
f=$(grep -l 'kind_names\[\] *= *{' "$tmp"/t/src/distribute/*.c | head -1)
python3 - "$f" <<'PY'
import re, sys
p = sys.argv[1]; s = open(p).read()
s = re.sub(r'(kind_names\[\]\s*=\s*\{[^}]*?)(\s*\})', r'\1, "fake_sync"\2', s, count=1)
open(p, "w").write(s)
PY
expect "strategy with its enum value and name only" \
  "strategy fake_sync (ST_STRATEGY_FAKE_SYNC): used by no C test" \
  "strategy fake_sync (ST_STRATEGY_FAKE_SYNC): not in the CLI" \
  "strategy fake_sync (ST_STRATEGY_FAKE_SYNC): not in the README's 'strategies' row" \
  "no Python class FakeSyncStrategy in python/strata/distribute/"

# A backend with its registry row only; then the same backend in every place.
fresh
sed -i 's/^\( *\){"reference", get_reference},/&\n\1{"fakebe", get_reference},/' "$tmp/t/src/backend/backend.c"
expect "backend with its registry row only" \
  "backend fakebe: not compared with the reference in tests/test_kernels.c" \
  "backend fakebe: not in the README's 'backends' row"
sed -i 's/k_backends\[\] = {/&"fakebe", /' "$tmp/t/tests/test_kernels.c"
sed -i 's/^| backends | /&`fakebe` (planted), /' "$tmp/t/README.md"
out=$(python3 "$check" "$tmp/t" 2>&1)
[ $? -eq 0 ] && ok "backend in every place: passes" || bad "backend in every place: $out"
exit $fail
