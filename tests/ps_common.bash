# Shared by tests/test_ps_*.sh (sourced; not a test itself: CTest runs
# tests/*.sh only): skips (77) when Strata was built without ZeroMQ or
# Fashion-MNIST is missing; a temp dir $tmp, check/json helpers, free ports.
set -u
cli=${STRATA_CLI:?set by CTest}
data=/usr/share/datasets/fashion-mnist
if [ ! -e $data/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Heartbeats every 0.5 s (a worker is lost after 1.5 s of silence): shorter
# intervals give false losses on a loaded 2-core machine (ctest -j2, sanitizers).
hb=0.5
delay=8 # ms per step in the rejoin run: the job must outlast a restart
# Free loopback ports for servers started by hand: below the ephemeral range
# (32768-60999 on Linux), so that no outgoing connection takes one meanwhile.
ports() { python3 -c "
import random, socket
out = []
while len(out) < 4:
    p = random.randint(20000, 32000)
    s = socket.socket()
    try:
        s.bind(('127.0.0.1', p)); out.append(p)
    except OSError:
        pass
    s.close()
print(*out)"; }
echo '{"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}' > "$tmp/k.json"
if ! "$cli" keygen "$tmp/keys" --cluster "$tmp/k.json" > "$tmp/k.out" 2>&1; then
  if grep -q "no ZeroMQ" "$tmp/k.out"; then
    echo "SKIP: this build of Strata has no ZeroMQ (apt-get install libzmq3-dev, rebuild)"; exit 77
  fi
  cat "$tmp/k.out"; echo "FAIL: strata keygen"; exit 1
fi
fail=0
check() { if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi; }
# json FILE EXPR: a Python expression over the report r
json() { python3 -c "import json,sys; r=json.load(open('$1')); p=r['parameter_server']; sys.exit(0 if ($2) else 1)"; }
every_ps_exact='all(x["updates_applied"] == p["steps_scheduled"] for x in p["per_ps"]) and p["exactly_once"]'
every_epoch='all(n == r["train_examples"] for n in p["train_examples_per_epoch"])'
