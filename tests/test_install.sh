#!/usr/bin/env bash
# Installed like a C library (issue 19): `cmake --install` into a temporary
# prefix puts every file in its place; from there examples/train_cnn.c is built
# outside the tree twice, with `pkg-config --cflags --libs strata` and with a
# 5-line CMake project using find_package(Strata) + Strata::strata, both linked
# to the installed libstrata.so.0 and run for a short training on a small IDX
# set. The prefix is then copied elsewhere and the original removed with
# `make uninstall`'s script (exactly the files install_manifest.txt lists, an
# unlisted file stays): the copied CLI runs (--help, --version, a tiny train)
# with neither the build tree's files nor the first prefix in use; the shared
# library's soname is libstrata.so.0 and `nm -D` shows no st__ internal; the
# man page lists every option of every command's --help.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
build=$(cd "$(dirname "$cli")" && pwd)
if [ "${STRATA_SANITIZED:-0}" = 1 ]; then
  echo "SKIP: sanitizer build: no shared library is built there, nothing to install"; exit 77
fi
if [ ! -e "$build/libstrata.so" ]; then
  echo "SKIP: $build/libstrata.so not built"; exit 77
fi
for tool in cc cmake pkg-config nm readelf ldd /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done

ver=$("$cli" --version | awk '{ print $2 }') # the project() version, e.g. 0.1.0
tmp=$(mktemp -d)
# cmake --install (re)writes build/install_manifest.txt: keep the user's.
manifest=$build/install_manifest.txt
[ -e "$manifest" ] && cp -p "$manifest" "$tmp/manifest.saved"
cleanup() {
  if [ -e "$tmp/manifest.saved" ]; then cp -p "$tmp/manifest.saved" "$manifest"; else rm -f "$manifest"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; return 1; fi; }

# ---- install, the files, uninstall ----
p=$tmp/p
cmake --install "$build" --prefix "$p" >"$tmp/install.log" 2>&1
check "cmake --install exits 0" "[ $? -eq 0 ]" || cat "$tmp/install.log"
for f in bin/strata lib/libstrata.a lib/libstrata.so lib/libstrata.so.0 lib/libstrata.so.$ver \
    include/strata/strata.h include/strata/version.h include/strata/base.h \
    lib/pkgconfig/strata.pc lib/cmake/Strata/StrataConfig.cmake \
    lib/cmake/Strata/StrataConfigVersion.cmake lib/cmake/Strata/StrataTargets.cmake \
    share/man/man1/strata.1 share/doc/strata/README.md share/doc/strata/ERRORS.md; do
  check "installed $f" "[ -e '$p/$f' ]"
done
# ---- the shared library, and programs built against it ----
lib=$p/lib/libstrata.so.0
check "soname is libstrata.so.0" "readelf -d '$lib' | grep -q 'SONAME.*\[libstrata.so.0\]'"
check "nm -D shows no st__ internal" "! nm -D '$lib' | grep -q ' st__'"
check "nm -D exports st_version and st_model_fit" \
  "nm -D --defined-only '$lib' | grep -q ' st_version\$' && nm -D --defined-only '$lib' | grep -q ' st_model_fit\$'"
/usr/bin/python3 "$src/tests/mkidx.py" "$tmp/data"

export PKG_CONFIG_PATH=$p/lib/pkgconfig
check "pkg-config --modversion is $ver" "[ \"\$(pkg-config --modversion strata)\" = $ver ]"
check "pkg-config --cflags names the prefix" "[ \"\$(pkg-config --cflags strata | tr -d ' ')\" = '-I$p/include' ]"
cc -O2 -o "$tmp/cnn_pc" "$src/examples/train_cnn.c" $(pkg-config --cflags --libs strata) \
  -Wl,-rpath,"$p/lib" 2>"$tmp/cc.err"
check "train_cnn.c builds with pkg-config" "[ $? -eq 0 ]" || cat "$tmp/cc.err"
check "the pkg-config build links the installed libstrata.so.0" \
  "ldd '$tmp/cnn_pc' | grep -q '$p/lib/libstrata.so.0'"
"$tmp/cnn_pc" "$tmp/data" 1 >"$tmp/pc.out" 2>"$tmp/pc.err"
check "the pkg-config build trains and evaluates" \
  "[ $? -eq 0 ] && grep -q '^test_loss: .* test_accuracy: ' '$tmp/pc.out'" || cat "$tmp/pc.out" "$tmp/pc.err"

mkdir "$tmp/proj"
cp "$src/examples/train_cnn.c" "$tmp/proj/"
cat >"$tmp/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(use_strata C)
find_package(Strata REQUIRED)
add_executable(train_cnn train_cnn.c)
target_link_libraries(train_cnn Strata::strata)
CMAKE
{ cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$tmp/proj/build"; } >"$tmp/proj.log" 2>&1
check "train_cnn.c builds with find_package(Strata)" "[ $? -eq 0 ]" || cat "$tmp/proj.log"
check "the CMake build links the installed libstrata.so.0" \
  "ldd '$tmp/proj/build/train_cnn' | grep -q '$p/lib/libstrata.so.0'"
"$tmp/proj/build/train_cnn" "$tmp/data" 1 >"$tmp/cm.out" 2>"$tmp/cm.err"
check "the CMake build trains and evaluates" \
  "[ $? -eq 0 ] && grep -q '^test_loss: .* test_accuracy: ' '$tmp/cm.out'" || cat "$tmp/cm.out" "$tmp/cm.err"
check "both builds print the same test figures" \
  "[ \"\$(grep -o '^test_loss: [0-9.]* - test_accuracy: [0-9.]*' '$tmp/pc.out')\" = \
     \"\$(grep -o '^test_loss: [0-9.]* - test_accuracy: [0-9.]*' '$tmp/cm.out')\" ]"

# ---- a copy of the prefix; the original uninstalled ----
cp "$manifest" "$tmp/manifest"
check "install_manifest.txt lists the installed files" \
  "[ \$(grep -c '' '$tmp/manifest') -eq \$(find '$p' -type f -o -type l | wc -l) ]"
cp -a "$p" "$tmp/q"
touch "$p/share/not-installed"
cmake -DMANIFEST="$tmp/manifest" -P "$src/cmake/uninstall.cmake" >/dev/null
check "uninstall removes every listed file" "[ \$(find '$p' -type f -o -type l | wc -l) -eq 1 ]"
check "uninstall leaves an unlisted file" "[ -e '$p/share/not-installed' ]"
rm -rf "$p"
q=$tmp/q

# ---- the installed CLI and its man page ----
(cd "$tmp" && "$q/bin/strata" --help >"$tmp/help.out")
check "installed strata --help runs" "[ $? -eq 0 ] && grep -q '^usage: strata COMMAND' '$tmp/help.out'"
check "installed strata --version is $ver" "[ \"\$('$q/bin/strata' --version)\" = 'strata $ver' ]"
(cd "$tmp" && "$q/bin/strata" train --model mlp --data "$tmp/data" --epochs 1 --quiet \
  --save "$tmp/w.safetensors" >"$tmp/train.out" 2>&1)
check "installed strata trains" "[ $? -eq 0 ] && [ -s '$tmp/w.safetensors' ]" || cat "$tmp/train.out"
man=$(sed 's/\\-/-/g' "$q/share/man/man1/strata.1")
for cmd in train evaluate summary plot; do
  check "man page has a section for $cmd" "grep -q '^\.SS $cmd\$' <<<\"\$man\""
  for opt in $("$q/bin/strata" $cmd --help | grep -oE '^  -[-a-z]+'); do
    grep -qe "^\.B $opt\b" <<<"$man" || { echo "not ok - man page lacks $cmd $opt"; fail=1; }
  done
done
exit $fail
