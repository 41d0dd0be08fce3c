#!/usr/bin/env bash
# scripts/check_includes.sh: the real tree passes; copies of it with one
# upward include planted (nn/ including model/, a public header including a
# higher one) and one sideways (data/ including nn/) fail, exit 1, naming the
# file and line. The top layer too: a private header planted in tools/ (by
# folder, by a relative path, by a name not in tools/, in <>) and in
# python/src fails, naming the file.
set -u
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
check=$src/scripts/check_includes.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok - $1"; }
bad() { echo "not ok - $1"; fail=1; }

out=$(bash "$check" "$src" 2>&1)
[ $? -eq 0 ] && [ -z "$out" ] && ok "real tree passes" || bad "real tree: $out"

# plant LINE at the top of FILE (relative) in a fresh copy; expect exit 1 and WANT
plant() {
  local name=$1 file=$2 line=$3 want=$4
  rm -rf "$tmp/t" && mkdir -p "$tmp/t/python" && cp -r "$src/src" "$src/include" "$src/tools" "$tmp/t/"
  cp -r "$src/python/src" "$tmp/t/python/"
  printf '%s\n' "$line" | cat - "$tmp/t/$file" >"$tmp/x" && mv "$tmp/x" "$tmp/t/$file"
  out=$(bash "$check" "$tmp/t" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -qF "$want" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ]; then
    ok "$name: exit 1, '$want'"
  else
    bad "$name: exit $rc, output: $out"
  fi
}
plant "nn includes model" src/nn/net.c '#include "model/model.h"' \
  "src/nn/net.c:1: folder nn includes folder model (upward)"
plant "distribute includes strata/train.h" src/distribute/strategy.c '#include "strata/train.h"' \
  "src/distribute/strategy.c:1: folder distribute includes folder model (upward)"
plant "base includes backend" src/base/sysinfo.h '#  include "backend/cpu.h"' \
  "src/base/sysinfo.h:1: folder base includes folder backend (upward)"
plant "data includes nn" src/data/tensor.c '#include "nn/layer.h"' \
  "src/data/tensor.c:1: folder data includes folder nn (sideways)"
plant "public nn.h includes train.h" include/strata/nn.h '#include "strata/train.h"' \
  "include/strata/nn.h:1: folder nn includes folder model (upward)"
plant "unknown folder" src/model/model.c '#include "gui/window.h"' \
  "src/model/model.c:1: folder model or gui is not in the layer order"
top="top layer includes private header"
plant "tools includes base/" tools/main.c '#include "base/fileio.h"' \
  "tools/main.c:1: $top base/fileio.h"
plant "tools includes by a relative path" tools/cli.h '#include "../src/io/checkpoint.h"' \
  "tools/cli.h:1: $top ../src/io/checkpoint.h"
plant "tools includes a header not in tools/" tools/main.c '#include "fileio.h"' \
  "tools/main.c:1: $top fileio.h"
plant "tools includes <model/...>" tools/main.c '#include <model/model.h>' \
  "tools/main.c:1: $top model/model.h"
py=$(cd "$src" && ls python/src/*.c | head -n 1) # the extension's files (split by concern)
plant "python/src includes nn/" "$py" '#include "nn/net.h"' "$py:1: $top nn/net.h"
plant "python/src includes distribute/" "$py" '#  include "distribute/strategy.h"' \
  "$py:1: $top distribute/strategy.h"
exit $fail
