#!/usr/bin/env bash
# Bad input through the CLI: every case exits 2 with a message naming what is
# wrong and where, and writes nothing (--save/--report files stay absent).
set -u
cli=${STRATA_CLI:?set by CTest}
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0

# mkidx DIR [options]: a small valid MNIST-style set, then a python tweak.
mkidx() {
  local dir=$1; shift
  mkdir -p "$dir"
  $py - "$dir" "$@" <<'PY'
import gzip, random, struct, sys
d = sys.argv[1]; opts = sys.argv[2:]
random.seed(1)
def idx(path, dims, payload, magic=None, gz=True):
    head = (magic if magic is not None else struct.pack(">BBBB", 0, 0, 8, len(dims)))
    head += b"".join(struct.pack(">I", x) for x in dims)
    data = head + payload
    (gzip.open if gz else open)(path, "wb").write(data)
def images(n): return bytes(random.randrange(256) for _ in range(n * 784))
def labels(n, top=10): return bytes(random.randrange(top) for _ in range(n))
ntr, nte = 64, 32
idx(f"{d}/train-images-idx3-ubyte.gz", [ntr, 28, 28], images(ntr))
idx(f"{d}/train-labels-idx1-ubyte.gz", [ntr], labels(ntr))
idx(f"{d}/t10k-images-idx3-ubyte.gz", [nte, 28, 28], images(nte))
idx(f"{d}/t10k-labels-idx1-ubyte.gz", [nte], labels(nte))
o = opts[0] if opts else ""
if o == "bad-magic":
    idx(f"{d}/train-images-idx3-ubyte.gz", [ntr, 28, 28], images(ntr), magic=b"\x12\x34\x08\x03")
elif o == "truncated":
    idx(f"{d}/train-images-idx3-ubyte.gz", [ntr, 28, 28], images(ntr)[:-100])
elif o == "count-mismatch":
    idx(f"{d}/train-labels-idx1-ubyte.gz", [ntr - 1], labels(ntr - 1))
elif o == "huge-dims":
    idx(f"{d}/train-images-idx3-ubyte.gz", [2**31, 2**31, 28], b"")
elif o == "bigger-than-file":
    idx(f"{d}/train-images-idx3-ubyte.gz", [100000, 28, 28], images(2), gz=False)
elif o == "labels-out-of-range":
    idx(f"{d}/train-labels-idx1-ubyte.gz", [ntr], bytes([3] * (ntr - 1) + [12]))
PY
}

# expect NAME EXIT PATTERN -- command...: exit code and a stderr pattern.
expect() {
  local name=$1 code=$2 pattern=$3; shift 4
  rm -f "$tmp/out.safetensors" "$tmp/out.json"
  "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  if [ $rc -eq "$code" ] && grep -qE -- "$pattern" "$tmp/stderr" \
     && [ ! -e "$tmp/out.safetensors" ] && [ ! -e "$tmp/out.json" ]; then
    echo "ok - $name"
  else
    echo "not ok - $name (exit $rc, want $code; stderr:)"; sed 's/^/    /' "$tmp/stderr"; fail=1
  fi
}
out=(--save "$tmp/out.safetensors" --report "$tmp/out.json" --quiet)
T=("$cli" train --model mlp)

expect "unknown flag" 2 "unknown option '--frobnicate'" -- "${T[@]}" --frobnicate 3 "${out[@]}"
expect "missing value" 2 "needs a value" -- "${T[@]}" "${out[@]}" --epochs
expect "non-numeric epochs" 2 "--epochs: 'abc'" -- "${T[@]}" --epochs abc "${out[@]}"
expect "unknown model" 2 "unknown model 'resnet'" -- "$cli" train --model resnet "${out[@]}"
expect "unknown optimizer" 2 "optimizer" -- "${T[@]}" --optimizer adamax "${out[@]}"
expect "unknown command" 2 "unknown command" -- "$cli" fly
expect "missing data dir" 2 "$tmp/nowhere" -- "${T[@]}" --data "$tmp/nowhere" "${out[@]}"
for case in bad-magic truncated count-mismatch huge-dims bigger-than-file labels-out-of-range; do
  mkidx "$tmp/$case" "$case"
done
expect "wrong magic names file and offset" 2 "train-images-idx3-ubyte.gz.*offset" -- "${T[@]}" --data "$tmp/bad-magic" "${out[@]}"
expect "truncated payload" 2 "train-images-idx3-ubyte.gz.*(truncated|short|ends)" -- "${T[@]}" --data "$tmp/truncated" "${out[@]}"
expect "image/label count mismatch" 2 "train-labels.*(64|63)" -- "${T[@]}" --data "$tmp/count-mismatch" "${out[@]}"
expect "dimension product overflow" 2 "train-images-idx3-ubyte.gz" -- "${T[@]}" --data "$tmp/huge-dims" "${out[@]}"
expect "header larger than the file" 2 "train-images-idx3-ubyte.gz" -- "${T[@]}" --data "$tmp/bigger-than-file" "${out[@]}"
expect "label out of range" 2 "label 12 .*10 classes" -- "${T[@]}" --data "$tmp/labels-out-of-range" "${out[@]}"
mkidx "$tmp/good"
mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
if [ "$(id -u)" != 0 ]; then
  expect "read-only output dir" 2 "not writable" -- "${T[@]}" --data "$tmp/good" --save "$tmp/ro/w.safetensors"
fi
expect "output dir missing" 2 "not writable" -- "${T[@]}" --data "$tmp/good" --save "$tmp/nodir/w.safetensors"
# weights files: wrong model, corrupted
"$cli" train --model mlp --data "$tmp/good" --epochs 1 --save "$tmp/mlp.safetensors" --quiet >/dev/null 2>&1 \
  || { echo "not ok - training on the small set"; fail=1; }
expect "weights of another model" 2 "mlp.safetensors.*(tensor|missing)" -- "$cli" evaluate --model cnn --weights "$tmp/mlp.safetensors" --data "$tmp/good"
head -c 100 "$tmp/mlp.safetensors" >"$tmp/cut.safetensors"
expect "truncated weights file" 2 "cut.safetensors" -- "$cli" evaluate --model mlp --weights "$tmp/cut.safetensors" --data "$tmp/good"
expect "evaluate without --weights" 2 "required" -- "$cli" evaluate --model mlp
exit $fail
