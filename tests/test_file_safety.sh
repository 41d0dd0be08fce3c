#!/usr/bin/env bash
# The files a run touches (issue 17): removal never follows a planted link
# nor deletes what Strata did not create; SIGXFSZ and stdout write errors give
# exit 4; special files as inputs or outputs are refused (exit 2, no hang);
# clashing paths are refused before training; a second run on a locked
# backup/checkpoint directory fails at once; numbering past 1,024 checkpoints,
# 255-byte names, numeric ranges. Runs in a temp dir; root-only cases
# (mknod, chown) and the unprivileged one (setpriv) are skipped where they
# cannot run.
set -u
cli=${STRATA_CLI:?set by CTest}
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
cd "$tmp" || exit 1
$py "${STRATA_SOURCE_DIR:?set by CTest}/tests/mkidx.py" good
T=("$cli" train --model mlp --data good --quiet)

ok() { echo "ok - $1"; }
bad() { echo "not ok - $1"; sed 's/^/    /' stderr 2>/dev/null; fail=1; }
# expect NAME EXIT PATTERN -- command...: exit code (under a 10 s timeout, so
# a hang fails instead of blocking) and a stderr pattern.
expect() {
  local name=$1 code=$2 pattern=$3; shift 4
  timeout 10 "$@" >stdout 2>stderr
  local rc=$?
  if [ $rc -eq "$code" ] && { [ -z "$pattern" ] || grep -qE -- "$pattern" stderr; }; then ok "$name"; else bad "$name (exit $rc, want $code)"; fi
}
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

# ---- 1. removal through a planted link ---------------------------------------
mkdir -m777 ck; mkdir v; touch v/a v/b; ln -s "$PWD/v" ck/.tmp-ckpt-planted
mkdir ck/.tmp-ckpt-foreign; touch ck/.tmp-ckpt-foreign/state.json
mkdir ck/.tmp-ckpt-000009-0000000000000000; touch ck/.tmp-ckpt-000009-0000000000000000/state.json
foreign=0
if [ "$(id -u)" = 0 ] && chown -R nobody ck/.tmp-ckpt-foreign 2>/dev/null; then foreign=1; fi
expect "planted .tmp-ckpt-* symlink in --checkpoint-dir: the run succeeds" 0 "" -- \
  "${T[@]}" --checkpoint-dir ck --monitor loss
check "... the link's target keeps its files" "[ -e v/a ] && [ -e v/b ]"
check "... our own stale temp dir is pruned" "[ ! -e ck/.tmp-ckpt-000009-0000000000000000 ]"
if [ $foreign = 1 ]; then
  check "... a temp dir owned by another user is left alone" "[ -e ck/.tmp-ckpt-foreign/state.json ]"
else
  echo "ok - # SKIP another user's temp dir (not root)"
fi
check "... no lock file left after the run" "[ ! -e ck/.lock ]"
mkdir bk; ln -s "$PWD/v" bk/.tmp-ckpt-planted; ln -s "$PWD/v" bk/ckpt-000001
expect "planted links in --backup-dir (deleted when done): the run succeeds" 0 "" -- \
  "${T[@]}" --backup-dir bk
check "... the links' target keeps its files" "[ -e v/a ] && [ -e v/b ]"

# ---- 2. resource limits and stdout -------------------------------------------
( ulimit -f 100; exec "${T[@]}" --save big.st ) >stdout 2>stderr; rc=$?
check "ulimit -f 100 with --save: exit 4 (not SIGXFSZ), 'File too large', no temp left" \
  "[ $rc -eq 4 ] && grep -q 'big.st.*File too large' stderr && [ -z \"\$(ls -A | grep big.st)\" ]"
"${T[@]}" --save w.st >/dev/null 2>&1 || bad "training for the weights below"
if [ -w /dev/full ]; then
  expect "evaluate > /dev/full: exit 4" 4 "cannot write the results to stdout" -- \
    sh -c 'exec "$@" >/dev/full' sh "$cli" evaluate --model mlp --weights w.st --data good
fi

# ---- 3. special files as inputs and outputs ----------------------------------
mkfifo fifo
mkdir fdata; cp good/* fdata/; rm fdata/t10k-labels-idx1-ubyte.gz; mkfifo fdata/t10k-labels-idx1-ubyte
expect "a FIFO as an IDX file: exit 2, no hang" 2 "t10k-labels-idx1-ubyte: not a regular file" -- \
  "$cli" train --model mlp --data fdata --quiet
expect "a FIFO as evaluate --weights: exit 2, no hang" 2 "fifo: not a regular file" -- \
  "$cli" evaluate --model mlp --weights fifo --data good
expect "a FIFO as plot's report: exit 2, no hang" 2 "fifo: not a regular file" -- \
  "$cli" plot fifo -o p.svg
expect "a FIFO as --csv: refused before training" 2 "--csv fifo: exists and is a FIFO" -- \
  "${T[@]}" --csv fifo
if [ "$(id -u)" = 0 ] && mknod null c 1 3 2>/dev/null; then
  ln -s null lnull
  expect "a device node as --save: exit 2" 2 "--save null: exists and is a character device" -- \
    "${T[@]}" --save null
  check "... it is still a character device" "[ -c null ]"
  expect "a symlink to a device node as --report: exit 2" 2 "--report lnull: exists and is a character device" -- \
    "${T[@]}" --report lnull
  check "... the link and the node are as they were" "[ -L lnull ] && [ -c null ]"
else
  echo "ok - # SKIP device node outputs (mknod needs root)"
fi
touch plainfile
expect "a regular file as --checkpoint-dir: exit 2" 2 "--checkpoint-dir plainfile: exists and is not a directory|not a directory" -- \
  "${T[@]}" --checkpoint-dir plainfile

# ---- 4. clashing paths -------------------------------------------------------
cp -a good data2; sum=$(sha256sum data2/* | sha256sum)
expect "--save over a --data file: exit 2 naming both" 2 \
  "--save data2/train-images-idx3-ubyte.gz and --data data2/train-images-idx3-ubyte.gz are the same file" -- \
  "$cli" train --model mlp --data data2 --quiet --save data2/train-images-idx3-ubyte.gz
check "... the dataset is unchanged" "[ \"\$(sha256sum data2/* | sha256sum)\" = \"$sum\" ]"
expect "--save o --report ./o: exit 2 naming both" 2 "--save o and --report ./o are the same file" -- \
  "${T[@]}" --save o --report ./o
check "... nothing written" "[ ! -e o ]"
ln -s w.st wlink
expect "--csv and --plot through a link to the same file: exit 2" 2 "are the same file" -- \
  "${T[@]}" --csv w.st --plot wlink
expect "--backup-dir X --checkpoint-dir X: exit 2" 2 "--backup-dir X and --checkpoint-dir X are the same directory" -- \
  "${T[@]}" --backup-dir X --checkpoint-dir X
mkdir Y
expect "--checkpoint-dir nested in --backup-dir: exit 2" 2 "--backup-dir Y and --checkpoint-dir Y/c are nested" -- \
  "${T[@]}" --backup-dir Y --checkpoint-dir Y/c
check "... nothing created" "[ ! -e X ] && [ -z \"\$(ls -A Y)\" ]"
expect "--plot and --checkpoint-dir the same new path: exit 2" 2 "--plot Z and --checkpoint-dir Z are the same path" -- \
  "${T[@]}" --plot Z --checkpoint-dir Z --monitor loss
expect "--plot inside --backup-dir: exit 2" 2 "--plot Y/p.svg is inside --backup-dir Y, which is deleted" -- \
  "${T[@]}" --plot Y/p.svg --backup-dir Y

# ---- 5. a lock on backup/checkpoint directories ------------------------------
mkdir busy
$py -c 'import fcntl, os, sys, time
f = open("busy/.lock", "w"); fcntl.flock(f, fcntl.LOCK_EX); f.write("%d\n" % os.getpid()); f.flush()
open("held", "w").close(); time.sleep(20)' &
holder=$!
for _ in $(seq 100); do [ -e held ] && break; sleep 0.1; done
expect "a second run on a locked --backup-dir fails at once: exit 2 naming the pid" 2 \
  "busy is in use by pid $holder" -- "${T[@]}" --backup-dir busy
expect "... and on a locked --checkpoint-dir" 2 "busy is in use by pid $holder" -- \
  "${T[@]}" --checkpoint-dir busy
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# ---- 6. numbering, long names, ranges ----------------------------------------
mkdir many; (cd many && seq -f 'ckpt-%06g' 1 1100 | xargs mkdir)
expect "--keep 0 with 1,100 checkpoints already there: exit 0" 0 "" -- \
  "${T[@]}" --checkpoint-dir many --keep 0 --monitor loss
check "... the new one is ckpt-001101" "[ -d many/ckpt-001101 ] && grep -q ckpt-001101 many/latest"
long=$(printf 'w%.0s' $(seq 255))
expect "--save to a 255-byte name: exit 0" 0 "" -- "${T[@]}" --save "$long"
check "... written, no temp left" "[ -s $long ] && [ -z \"\$(ls -A | grep -E 'st-tmp|\\.tmp\\.')\" ]"
expect "--log-every 4294967297: exit 2" 2 "--log-every: '4294967297' is not an integer" -- \
  "${T[@]}" --log-dir tb --log-every 4294967297
expect "plot -o '': exit 2 with a message" 2 "-o: the output file name is empty" -- "$cli" plot r.json -o ""

# ---- a long --model path keeps the SVG title whole (valid XML) -------------------
long=$(printf 'd%.0s' $(seq 1 120)); mkdir -p "$long/$long/$long/$long"
mpath="$long/$long/$long/$long/model_with_a_long_name_é.json"
cp "$STRATA_SOURCE_DIR/tests/keras/mlp_keras2.json" "$mpath"
expect "a ${#mpath}-byte --model path with --plot: exit 0" 0 "" -- \
  "$cli" train --model "$mpath" --data good --quiet --plot long.svg
check "... the SVG parses as XML and its title holds the whole path" \
  "$py -c 'import sys,xml.etree.ElementTree as E; t=E.parse(\"long.svg\").getroot().find(\"{http://www.w3.org/2000/svg}title\"); sys.exit(0 if t is not None and sys.argv[1] in t.text else 1)' \"\$mpath\""

# ---- temp files left by a kill -9: cleaned only when exactly ours -----------
stale=w.st.tmp.4194303.0123456789abcdef
echo stale >"$stale"; touch -d '1 hour ago' "$stale"
echo precious >victim; ln -s "$PWD/victim" w.st.tmp.4194302.fedcba9876543210
echo other >w.st.tmp.4194303.0123456789abcdeg; touch -d '1 hour ago' w.st.tmp.4194303.0123456789abcdeg
expect "--save after a killed run left its temp file: exit 0" 0 "" -- "${T[@]}" --save w.st
check "... the dead run's temp file is removed" "[ ! -e $stale ]"
check "... a link of that pattern and a near-miss name are left, the link's target intact" \
  "[ -L w.st.tmp.4194302.fedcba9876543210 ] && [ -e w.st.tmp.4194303.0123456789abcdeg ] && [ \"\$(cat victim)\" = precious ]"

# ---- permission denied is reported as such (an unprivileged user) -------------
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  chmod 755 "$tmp"; cp -a good perm; chmod 600 perm/train-images-idx3-ubyte.gz
  expect "an unreadable IDX file: 'Permission denied', not 'not found'" 2 \
    "train-images-idx3-ubyte.gz: cannot open: Permission denied" -- \
    setpriv --reuid=nobody --regid=nogroup --clear-groups "$cli" train --model mlp --data perm --quiet
else
  echo "ok - # SKIP permission denied (needs root and setpriv)"
fi
exit $fail
