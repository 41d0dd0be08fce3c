#!/usr/bin/env bash
# MPI detection at configure time (issue 20 item 1): an MPI that is found but
# broken never fails the configure.
#  - a fake Open MPI `mpicc` (and `mpiexec`) first in PATH, as on a machine with
#    openmpi-bin but no libopenmpi-dev: `mpicc -showme:compile` names
#    -I/nonexistent/openmpi/include. Configuring the real project exits 0,
#    prints "MPI found but unusable: include directory /nonexistent/...", and
#    the generated build compiles mpi_none.c, not mpi.c. The same with the fake
#    wrapper given as -DMPI_C_COMPILER;
#  - a wrapper whose headers exist but whose library does not link: the same,
#    with the reason;
#  - a normal configure here (the real OpenMPI, when its headers are
#    installed) enables the MPI transport (mpi.c).
# Configure only (about 1-2 s each), into temporary build folders.
# Skips (77) when cmake is missing.
set -u
src=${STRATA_SOURCE_DIR:?set by CTest}
if ! command -v cmake >/dev/null; then
  echo "SKIP: cmake not found"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# fake_wrapper DIR INCDIR LIB: an Open MPI style mpicc answering -showme:*.
fake_wrapper() {
  mkdir -p "$1"
  cat > "$1/mpicc" <<EOW
#!/bin/sh
case "\$1" in
  -showme:compile|--showme:compile) echo "-I$2" ;;
  -showme:link|--showme:link) echo "-L/nonexistent/openmpi/lib -l$3" ;;
  -showme:incdirs|--showme:incdirs) echo "$2" ;;
  -showme:libdirs|--showme:libdirs) echo "/nonexistent/openmpi/lib" ;;
  -showme:libs|--showme:libs) echo "$3" ;;
  -showme:version|--showme:version) echo "mpicc: Open MPI 4.1.4 (Language: C)" ;;
  -showme|--showme) echo "cc -I$2 -L/nonexistent/openmpi/lib -l$3" ;;
  *) exec cc "\$@" ;;
esac
EOW
  printf '#!/bin/sh\necho "fake mpiexec" >&2\nexit 1\n' > "$1/mpiexec"
  chmod +x "$1/mpicc" "$1/mpiexec"
}

# configure NAME [cmake args...]: configure into $tmp/NAME; output in $tmp/NAME.log.
configure() {
  local name=$1; shift
  cmake -S "$src" -B "$tmp/$name" -DCMAKE_BUILD_TYPE=Release "$@" > "$tmp/$name.log" 2>&1
}

# uses_mpi_none NAME: the generated build compiles mpi_none.c and not mpi.c.
uses_mpi_none() {
  local mk="$tmp/$1/CMakeFiles/strata.dir/build.make"
  grep -q 'collective/mpi/mpi_none\.c' "$mk" && ! grep -q 'collective/mpi/mpi\.c' "$mk"
}

# expect_unusable NAME REASON-REGEX
expect_unusable() {
  local name=$1 want=$2
  grep -Eq "MPI found but unusable: $want.*multi_worker_mirrored will report 'not built'. Install libopenmpi-dev" "$tmp/$name.log" \
    || bad "$name: no 'MPI found but unusable: $want' message"
  uses_mpi_none "$name" || bad "$name: the build does not use mpi_none.c"
}

fake_wrapper "$tmp/nodev" /nonexistent/openmpi/include mpi
if PATH="$tmp/nodev:$PATH" configure path; then
  expect_unusable path 'include directory /nonexistent/openmpi/include \(from [^)]*/nodev/mpicc\) does not exist'
else
  bad "configure with a broken mpicc first in PATH failed"; cat "$tmp/path.log"
fi
if configure pinned -DMPI_C_COMPILER="$tmp/nodev/mpicc"; then
  expect_unusable pinned 'include directory /nonexistent/openmpi/include'
else
  bad "configure with -DMPI_C_COMPILER=<broken mpicc> failed"; cat "$tmp/pinned.log"
fi
# Headers that exist (an empty folder with a stub mpi.h) but no library.
mkdir -p "$tmp/inc" && echo 'int MPI_Init(int *, char ***); int MPI_Finalize(void);' > "$tmp/inc/mpi.h"
fake_wrapper "$tmp/nolib" "$tmp/inc" strata_no_such_mpi
if configure nolib -DMPI_C_COMPILER="$tmp/nolib/mpicc"; then
  expect_unusable nolib '.*nolib/mpicc'
else
  bad "configure with an mpicc whose library is missing failed"; cat "$tmp/nolib.log"
fi

# The real MPI, when its headers are installed, is found and used.
real_inc=$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')
if [ -n "$real_inc" ] && [ -f "$real_inc/mpi.h" ]; then
  if configure real; then
    grep -q 'Strata: MPI transport enabled' "$tmp/real.log" || bad "real MPI: transport not enabled"
    grep -q 'collective/mpi/mpi\.c' "$tmp/real/CMakeFiles/strata.dir/build.make" || bad "real MPI: mpi.c not built"
  else
    bad "configure with the real MPI failed"; cat "$tmp/real.log"
  fi
else
  echo "note: no real MPI headers here (libopenmpi-dev), normal-configure check not run"
fi
[ $fail -eq 0 ] && echo "OK: broken MPI installs configure without MPI, saying why; the real one is used"
exit $fail
