#!/usr/bin/env bash
# RELIABILITY.md N1 (oversized frames to a parameter-server port): frames
# announcing 2^63 - 1 bytes and 1 GiB, then a 100 MiB frame actually sent, to
# a `strata server` run --insecure (the NULL mechanism lets a raw client reach
# the frame layer). Pass criterion: the server survives and keeps serving, the
# 100 MiB frame is dropped and counted (bad magic), and its peak RSS grows by
# less than 2 x the largest frame it accepts (ZMQ_MAXMSGSIZE: 256 MiB of
# payload + header): checked from /proc (VmHWM) and by running it under
# `ulimit -v` = a control run's address space + 2 x 256 MiB + 64 MiB, where an
# allocation driven by the announced sizes would fail (libzmq aborts).
# libzmq drops the senders of oversized frames without a word: the server
# logs one warning per dropped connection naming the client's address and
# port (watch_zmq.c), rate-limited: a flood of 12 more such connections adds
# lines up to 10 in the minute, not one each; the 100 MiB sender, which
# closes its connection itself, is not named.
. "$(dirname "$0")/ps_common.bash"
[ -r /proc/self/status ] || { echo "SKIP: no /proc"; exit 77; }
if [ "${STRATA_SANITIZED:-0}" = 1 ]; then
  echo "SKIP: a sanitizer build reserves terabytes of address space (ulimit -v is meaningless)"; exit 77
fi
read -r p1 p2 p3 _ <<< "$(ports)"
export TF_CONFIG="{\"cluster\": {\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}"
kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
listening() { for _ in $(seq 200); do ss -ltn 2>/dev/null | grep -q ":$p3 " && return 0; sleep 0.05; done; return 1; }
# control: the server's address space once it listens
"$cli" server --insecure --job-timeout 30 > /dev/null 2> "$tmp/c.err" &
pid=$!
listening; sleep 0.3
vm=$(kb $pid VmPeak)
kill -TERM $pid; wait $pid 2>/dev/null
max=$((256 * 1024 + 1)) # kB: ZMQ_MAXMSGSIZE (256 MiB + the 64-byte header)
limit=$((vm + 2 * max + 65536))
(ulimit -v $limit; exec "$cli" server --insecure --job-timeout 30) > /dev/null 2> "$tmp/s.err" &
pid=$!
listening
sleep 0.3
before=$(kb $pid VmHWM)
python3 "$(dirname "$0")/ps_big_frames.py" "127.0.0.1:$p3" 100 12 > "$tmp/f" 2>&1
frc=$?
sleep 0.5
alive=0; kill -0 $pid 2>/dev/null && alive=1
after=$(kb $pid VmHWM)
kill -TERM $pid; wait $pid; rc=$?
check "[ $frc = 0 ]" "frames of 2^63-1 and 1 GiB announced, 100 MiB sent ($(tr '\n' ' ' < "$tmp/f"))"
check "[ $alive = 1 ]" "the server survives them under ulimit -v $((limit / 1024)) MiB (control VmPeak $((vm / 1024)) MiB; rc $rc; $(tail -2 "$tmp/s.err" | tr '\n' ' '))"
check "[ -n '$after' ] && [ \$(( ${after:-0} - ${before:-0} )) -lt $((2 * max)) ]" \
  "peak RSS grew by $(( (${after:-0} - ${before:-0}) / 1024 )) MiB (< 2 x 256 MiB)"
check "grep -q 'ps:0: [0-9]* frames dropped (.*bad magic' $tmp/s.err" \
  "the 100 MiB frame is dropped and counted ($(grep -o 'ps:0: [0-9]* frames dropped.*' "$tmp/s.err"))"
check "! grep -qiE 'sanitizer|assert|abort' $tmp/s.err" "no abort"
drop="ps:0: dropped a connection from 127.0.0.1:%s: it sent a frame over the 268435520-byte limit"
for port in $(awk '$1 == "announced" {print $2}' "$tmp/f" | head -2); do
  check "grep -q \"$(printf "$drop" "$port")\" $tmp/s.err" "the sender of an oversized frame (port $port) is named"
done
big=$(awk '$1 == "sent" {print $5}' "$tmp/f")
check "[ -n '$big' ] && ! grep -q \"$(printf "$drop" "$big")\" $tmp/s.err" \
  "the 100 MiB sender (port $big), which closed its connection itself, is not named"
lines=$(grep -c 'ps:0: dropped a connection from' "$tmp/s.err")
check "[ $lines = 10 ] && grep -q 'dropped a connection.*(more in the next minute are only counted)' $tmp/s.err" \
  "14 oversized senders, $lines lines: 10 a minute at most ($(grep -c announced "$tmp/f") announced)"
exit $fail
