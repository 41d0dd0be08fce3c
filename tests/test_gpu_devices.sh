#!/usr/bin/env bash
# GPU device requests through the CLI on a machine without a usable GPU
# (issue 16): every check of the CUDA module loader (src/backend/cuda_load.c)
# answers exit 2 with a message naming what is missing, in order: module not
# built / not found, no driver (libcuda.so.1), no device (cudaGetDeviceCount),
# index out of range (N of the count, logical GPUs included). The checks after
# the driver use a stand-in module and an empty libcuda.so.1 (tests/fake_cuda/,
# built into build/fake_cuda/); this build's real module is also loaded past
# the empty libcuda.so.1, to show that it links, opens and hands over a complete
# backend table. Also: --logical-gpus parsing, TensorFlow's
# device spellings, and mirrored's default devices staying CPU without a GPU.
# On a machine with an NVIDIA driver the rows that assume none are skipped.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
bin=$(dirname "$cli")
fake=$bin/fake_cuda
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
[ -f "$fake/libstrata_fake_cuda.so" ] && [ -f "$fake/libcuda.so.1" ] ||
  { echo "skip: the stand-in CUDA module was not built ($fake)"; exit 77; }
python3 "$src/tests/mkidx.py" "$tmp/good" || { echo "not ok - mkidx"; exit 1; }
have_driver=0 # libcuda.so.1 loadable as the loader would try it
python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null && have_driver=1

# row NAME EXIT PATTERN [ENV=VALUE ...] -- strata train arguments...
row() {
  local name=$1 want=$2 pattern=$3; shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$cli" train --model mlp --data "$tmp/good" --quiet "$@" \
    >"$tmp/out" 2>"$tmp/err"
  local rc=$? problems=""
  [ "$rc" -eq "$want" ] || problems+=" exit $rc, want $want;"
  grep -qE -- "$pattern" "$tmp/err" || problems+=" stderr lacks /$pattern/;"
  if [ -z "$problems" ]; then echo "ok - $name"
  else echo "not ok - $name:$problems"; sed 's/^/    /' "$tmp/err"; fail=1; fi
}
F=(STRATA_CUDA_MODULE="$fake/libstrata_fake_cuda.so" LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
M=(--strategy mirrored --devices)

# The first two checks with this build's own module (or its absence).
if [ $have_driver = 1 ]; then
  echo "ok - # skip module/driver rows: this machine has an NVIDIA driver"
elif [ -f "$bin/libstrata_cuda.so" ]; then
  row "module built, no driver" 2 "device 'gpu:0': no NVIDIA driver: libcuda.so.1 cannot be loaded" -- "${M[@]}" gpu:0
  row "logical GPUs without a driver" 2 "logical_gpus 2 needs a GPU: no NVIDIA driver" -- "${M[@]}" cpu:0 --logical-gpus 2
  # The real module past an empty libcuda.so.1: it loads (its CUDA libraries
  # resolve, its entry point runs) and cudart's device query fails cleanly.
  row "the real module loads; cudaGetDeviceCount answers" 2 \
    "device 'gpu:0': no usable CUDA device: cudaGetDeviceCount failed: .*\(cuda[A-Za-z]+\)" \
    "LD_LIBRARY_PATH=$fake" -- "${M[@]}" gpu:0
  # ... and st_backend_get("cuda") returns its complete table (the conformance
  # test gets past it to the device count, then skips).
  LD_LIBRARY_PATH=$fake "$bin/test_cuda_backend" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 77 ] && grep -q "SKIP: no usable GPU: no usable CUDA device: cudaGetDeviceCount failed" "$tmp/err"; then
    echo "ok - the real module's backend table loads (test_cuda_backend skips at the device count)"
  else
    echo "not ok - test_cuda_backend with the real module (exit $rc)"; sed 's/^/    /' "$tmp/err"; fail=1
  fi
else
  row "module not built" 2 "device 'gpu:0': this build of Strata has no CUDA backend" -- "${M[@]}" gpu:0
  row "logical GPUs without a module" 2 "logical_gpus 2 needs a GPU: this build of Strata has no CUDA backend" -- "${M[@]}" cpu:0 --logical-gpus 2
fi
# A module path that does not exist (past the driver check: the empty libcuda).
row "module file missing" 2 "the CUDA backend module $tmp/none.so cannot be loaded" \
  STRATA_CUDA_MODULE="$tmp/none.so" "LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" -- "${M[@]}" gpu:0
# The stand-in module: another interface number, device count 0, an error, 1 GPU.
row "a module of another interface" 2 "module built for interface 999, this Strata has [0-9]+" \
  "${F[@]}" STRATA_FAKE_ABI=999 -- "${M[@]}" gpu:0
row "no device" 2 "device 'gpu:0': no CUDA device: cudaGetDeviceCount found 0 devices" \
  "${F[@]}" STRATA_FAKE_GPUS=0 -- "${M[@]}" gpu:0
row "cudaGetDeviceCount fails" 2 "cudaGetDeviceCount failed: fake failure" \
  "${F[@]}" STRATA_FAKE_GPUS=fail -- "${M[@]}" gpu:0
row "index out of range" 2 "device 'gpu:3': GPU index 3 out of range: this machine has 1 GPU, gpu:0 to gpu:0" \
  "${F[@]}" STRATA_FAKE_GPUS=1 -- "${M[@]}" gpu:0,gpu:3
row "index out of range with logical GPUs" 2 \
  "device 'gpu:4': GPU index 4 out of range: this machine has 2 GPUs split into 2 logical GPUs each \(4 in all\), gpu:0 to gpu:3" \
  "${F[@]}" STRATA_FAKE_GPUS=2 -- "${M[@]}" gpu:4 --logical-gpus 2
# GPUs that exist reach the backend table (the stand-in module has none).
row "a GPU that exists: the module's table is asked for" 2 "backend 'cuda': the loaded CUDA module has no complete backend table" \
  "${F[@]}" STRATA_FAKE_GPUS=1 -- "${M[@]}" gpu:0,gpu:1 --logical-gpus 2
row "TensorFlow spelling /device:GPU:0" 2 "backend 'cuda': the loaded CUDA module has no complete backend table" \
  "${F[@]}" STRATA_FAKE_GPUS=1 -- --strategy central_storage --devices /device:GPU:0
row "mirrored without devices takes the GPUs (as TF)" 2 "backend 'cuda': the loaded CUDA module has no complete backend table" \
  "${F[@]}" STRATA_FAKE_GPUS=2 -- --strategy mirrored
row "CPUs and GPUs mixed" 2 "devices 'cpu:0,gpu:0': CPU and GPU devices mixed" \
  "${F[@]}" STRATA_FAKE_GPUS=1 -- "${M[@]}" cpu:0,gpu:0
row "the pipeline does not run on GPUs" 2 "strategy pipeline does not run on GPUs" \
  "${F[@]}" STRATA_FAKE_GPUS=1 -- --strategy pipeline --devices gpu:0,gpu:1 --logical-gpus 2
row "one_device takes one device" 2 "one_device runs on one device" \
  -- --devices cpu:0,cpu:1
row "TensorFlow spelling /gpu:2" 2 "device '/gpu:2': GPU index 2 out of range" \
  "${F[@]}" STRATA_FAKE_GPUS=1 -- "${M[@]}" /gpu:2
# Bad requests, whatever the machine has.
row "malformed GPU index" 2 "device 'gpu:x': expected gpu:N, /gpu:N or /device:GPU:N" -- "${M[@]}" gpu:x
row "negative GPU index" 2 "device 'gpu:-1': expected gpu:N" -- "${M[@]}" gpu:-1
row "--logical-gpus 0" 2 "--logical-gpus: '0' is not" -- "${M[@]}" cpu:0 --logical-gpus 0
row "--logical-gpus not a number" 2 "--logical-gpus: 'two' is not" -- "${M[@]}" cpu:0 --logical-gpus two
# mirrored without --devices stays on the CPU here (one replica per core).
if [ $have_driver = 0 ]; then
  "$cli" train --model mlp --data "$tmp/good" --quiet --strategy mirrored --batch-size 8 \
    --report "$tmp/r.json" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 0 ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if 'gpu' not in json.dumps(r.get('devices', r.get('strategy', ''))).lower() else 1)" "$tmp/r.json"; then
    echo "ok - mirrored's default devices stay CPU without a GPU"
  else
    echo "not ok - mirrored default devices (exit $rc)"; sed 's/^/    /' "$tmp/err"; fail=1
  fi
fi
exit $fail
