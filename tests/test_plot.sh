#!/usr/bin/env bash
# `strata plot`: report JSON files written by hand (3 epochs with validation, 1
# epoch without, awkward values) become SVGs that parse as XML with the
# expected curves, labels and ticks; bad reports exit 2 and write nothing.
set -u
cli=${STRATA_CLI:?set by CTest}
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok - $1"; }
bad() { echo "not ok - $1"; fail=1; }

cat >"$tmp/three.json" <<'EOF'
{"model": "cnn", "strategy": "one_device", "replicas": 1, "epochs": 3,
 "history": [
  {"epoch": 1, "loss": 0.61, "accuracy": 0.78, "val_loss": 0.45, "val_accuracy": 0.84, "lr": 0.001, "seconds": 2.5, "steps": 100},
  {"epoch": 2, "loss": 0.40, "accuracy": 0.86, "val_loss": 0.38, "val_accuracy": 0.87, "lr": 0.001, "seconds": 2.4, "steps": 100},
  {"epoch": 3, "loss": 0.33, "accuracy": 0.88, "val_loss": 0.35, "val_accuracy": 0.875, "lr": 0.001, "seconds": 2.4, "steps": 100}]}
EOF
cat >"$tmp/one.json" <<'EOF'
{"model": "mlp", "strategy": "mirrored", "history": [
  {"epoch": 1, "loss": 0.7, "accuracy": 0.75, "lr": 0.01, "seconds": 1.0, "steps": 10}]}
EOF
# A NaN loss (stored as null), a constant accuracy and many epochs.
$py - "$tmp/odd.json" <<'EOF'
import json, sys
h = [{"epoch": e + 1, "loss": (None if e == 7 else 2.0 / (e + 1)), "accuracy": 0.5}
     for e in range(25)]
json.dump({"model": "a<b", "strategy": "\"q\" & 'r'", "history": h}, open(sys.argv[1], "w"))
EOF

# check SVG NLINES [EXTRA_TEXT...]: XML with the svg namespace, NLINES curves,
# panel names, legend entries, numeric tick labels on both axes.
check() {
  $py - "$@" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
path, want = sys.argv[1], int(sys.argv[2])
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(path).getroot()
assert root.tag == ns + "svg", root.tag
curves = root.findall(".//%spolyline" % ns) + root.findall(".//%spath" % ns)
assert len(curves) == want, "%d curves, want %d" % (len(curves), want)
texts = ["".join(t.itertext()).strip() for t in root.iter(ns + "text")]
need = ["Loss", "Accuracy", "train", "epoch"] + (["validation"] if want == 4 else [])
need += sys.argv[3:]
for word in need:
    assert word in texts, "no text %r in %r" % (word, texts)
if want == 2:
    assert "validation" not in texts, "validation legend without validation data"
num = re.compile(r"^-?\d+(\.\d+)?$")
yt = [t for t in root.iter(ns + "text") if t.get("class") == "ytick"]
xt = [t for t in root.iter(ns + "text") if t.get("class") == "xtick"]
assert len(yt) >= 4 and all(num.match(t.text) for t in yt), [t.text for t in yt]
assert len(xt) >= 1 and all(num.match(t.text) for t in xt), [t.text for t in xt]
for c in curves:
    pts = c.get("points", "").split()
    assert pts and all(len(p.split(",")) == 2 for p in pts), pts
    for p in pts:
        for v in p.split(","):
            f = float(v)
            assert 0 <= f <= 1000, f
EOF
}

run_ok() { # NAME SVG NLINES [TEXT...] -- command...
  local name=$1 svg=$2 n=$3; shift 3
  local extra=(); while [ "$1" != -- ]; do extra+=("$1"); shift; done; shift
  rm -f "$svg"
  if "$@" >"$tmp/stdout" 2>"$tmp/stderr" && [ -s "$svg" ] && check "$svg" "$n" "${extra[@]}"; then
    ok "$name"
  else
    bad "$name"; sed 's/^/    /' "$tmp/stderr"
  fi
}
run_ok "3 epochs with validation" "$tmp/three.svg" 4 "cnn — one_device" 1 2 3 -- \
  "$cli" plot "$tmp/three.json" -o "$tmp/three.svg"
run_ok "1 epoch without validation" "$tmp/one.svg" 2 "mlp — mirrored" 1 -- \
  "$cli" plot -o "$tmp/one.svg" "$tmp/one.json"
run_ok "NaN gap, constant series, escaped title" "$tmp/odd.svg" 2 "a<b — \"q\" & 'r'" -- \
  "$cli" plot "$tmp/odd.json" -o "$tmp/odd.svg"
run_ok "--title" "$tmp/t.svg" 4 "my <run> & co" -- \
  "$cli" plot "$tmp/three.json" --title "my <run> & co" -o "$tmp/t.svg"
if ls "$tmp"/*.tmp.* >/dev/null 2>&1; then bad "temp files left behind"; else ok "no temp files"; fi
if "$cli" plot --help | grep -q -- "-o FILE.svg"; then ok "--help"; else bad "--help"; fi
if "$cli" --help | grep -q "plot"; then ok "listed in strata --help"; else bad "top-level help"; fi

# Bad input: exit 2, a message naming the file, and no output file.
expect() { # NAME PATTERN REPORT [extra args...]
  local name=$1 pattern=$2 report=$3; shift 3
  rm -f "$tmp/out.svg"
  "$cli" plot "$report" -o "$tmp/out.svg" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  if [ $rc -eq 2 ] && grep -qE -- "$pattern" "$tmp/stderr" && [ ! -e "$tmp/out.svg" ] \
     && ! ls "$tmp"/out.svg.tmp.* >/dev/null 2>&1; then
    ok "$name"
  else
    bad "$name (exit $rc; stderr:)"; sed 's/^/    /' "$tmp/stderr"
  fi
}
printf '{"history": [{"loss": 1,' >"$tmp/trunc.json"
echo '{"model": "cnn"}' >"$tmp/nohist.json"
echo '{"history": {}}' >"$tmp/histobj.json"
echo '{"history": []}' >"$tmp/empty.json"
echo '[1, 2]' >"$tmp/array.json"
echo '{"history": [{"epoch": 1, "accuracy": 0.5}]}' >"$tmp/noloss.json"
echo '{"history": [{"epoch": 1, "loss": "low", "accuracy": 0.5}]}' >"$tmp/strloss.json"
echo '{"history": [{"epoch": 1, "loss": 1, "accuracy": 0.5}, 7]}' >"$tmp/notobj.json"
echo '{"history": [{"epoch": 0, "loss": 1, "accuracy": 0.5}]}' >"$tmp/epoch0.json"
expect "missing file" "$tmp/nowhere.json" "$tmp/nowhere.json"
expect "invalid JSON" "trunc.json.*not valid JSON" "$tmp/trunc.json"
expect "no history" "nohist.json.*history" "$tmp/nohist.json"
expect "history not an array" "histobj.json.*history" "$tmp/histobj.json"
expect "empty history" "empty.json.*nothing to plot" "$tmp/empty.json"
expect "top level not an object" "array.json.*history" "$tmp/array.json"
expect "entry without loss" "noloss.json.*history\[0\].*loss" "$tmp/noloss.json"
expect "non-numeric loss" "strloss.json.*history\[0\]\.loss" "$tmp/strloss.json"
expect "entry not an object" "notobj.json.*history\[1\]" "$tmp/notobj.json"
expect "epoch 0" "epoch0.json.*epoch" "$tmp/epoch0.json"
expect "unknown option" "unknown option '--frob'" "$tmp/three.json" --frob
expect "two reports" "unexpected argument" "$tmp/three.json" "$tmp/one.json"

rm -f "$tmp/out.svg"
"$cli" plot "$tmp/three.json" >/dev/null 2>"$tmp/stderr"
if [ $? -eq 2 ] && grep -q -- "-o" "$tmp/stderr"; then ok "missing -o"; else bad "missing -o"; fi
"$cli" plot "$tmp/three.json" -o "$tmp/nodir/x.svg" >/dev/null 2>"$tmp/stderr"
if [ $? -eq 2 ] && grep -q "not writable" "$tmp/stderr"; then ok "output dir missing"; else bad "output dir missing"; fi

exit $fail
