#!/usr/bin/env bash
# TensorBoard event files on a full disk (issue 17): when the first write of
# a run's event file fails, the run exits 4 naming the file and leaves no
# 0-byte event file, nor the run directory / --log-dir it created (a --log-dir
# that existed before stays). Two ways to make the first write fail: a file
# size limit of 0 (ulimit -f 0: EFBIG, always run) and a full 64 KiB tmpfs
# (needs mount: as root; skipped otherwise).
set -u
cli=${STRATA_CLI:?set by CTest}
src=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
[ -x $py ] || { echo "SKIP: $py missing"; exit 77; }
tmp=$(mktemp -d)
mnt=""
cleanup() { [ -n "$mnt" ] && umount "$mnt" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
$py "$src/tests/mkidx.py" "$tmp/a" || exit 1
train=(train --model mlp --data "$tmp/a" --quiet)
empty_events() { find "$1" -name 'events.out.tfevents.*' -size 0 2>/dev/null | wc -l; }

# file size limit 0: every write fails with EFBIG
# (stderr through a pipe: a file would be under the limit too)
limited() { (ulimit -f 0; exec "$cli" "${train[@]}" --log-dir "$1" 2>&1 >/dev/null) | cat >"$2"; rc=${PIPESTATUS[0]}; }
limited "$tmp/logs1" "$tmp/err1"
cat "$tmp/err1"
check "ulimit -f 0: exit 4 naming the event file" \
  "[ $rc -eq 4 ] && grep -q 'logs1/train/events.out.tfevents.*: write failed: File too large' $tmp/err1"
check "ulimit -f 0: no event file, run directory nor log dir left" "[ ! -e $tmp/logs1 ]"
mkdir "$tmp/logs2"
limited "$tmp/logs2" "$tmp/err2"
check "ulimit -f 0, existing --log-dir: exit 4, the directory kept and empty" \
  "[ $rc -eq 4 ] && [ -d $tmp/logs2 ] && [ -z \"\$(ls -A $tmp/logs2)\" ]"

# a full tmpfs
mkdir "$tmp/m"
if mount -t tmpfs -o size=64k tmpfs "$tmp/m" 2>/dev/null; then
  mnt="$tmp/m"
  dd if=/dev/zero of="$mnt/fill" bs=4k count=100 2>/dev/null # fills it (ENOSPC)
  "$cli" "${train[@]}" --log-dir "$mnt/logs" >/dev/null 2>"$tmp/err3"
  rc=$?
  cat "$tmp/err3"
  check "full disk: exit 4 naming the event file" \
    "[ $rc -eq 4 ] && grep -q 'logs/train/events.out.tfevents.*: write failed: No space left on device' $tmp/err3"
  check "full disk: no 0-byte event file left ($(empty_events "$mnt"))" \
    "[ $(empty_events "$mnt") -eq 0 ] && [ ! -e $mnt/logs ]"
  rm -f "$mnt/fill"
  "$cli" "${train[@]}" --log-dir "$mnt/logs" >/dev/null 2>&1
  check "after freeing space: exit 0, a non-empty event file" \
    "[ $? -eq 0 ] && [ -n \"\$(find $mnt/logs/train -name 'events.out.tfevents.*' -size +0)\" ]"
else
  echo "# skipped the full-tmpfs case: mount -t tmpfs is not permitted here"
fi
exit $fail
