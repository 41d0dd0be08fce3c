#!/usr/bin/env bash
# Issue 29 D13: the chief never logged (nor reported) connections its ZAP
# handler refused at its own port, where the servers log theirs. A second
# cluster whose ps address is this chief's port, given this chief's public
# key as that ps's key (so the CURVE handshake reaches ZAP) but its own
# client keys, connects: the chief now logs "chief:0: refused a connection
# from 127.0.0.1: its CURVE key is not in the cluster's allow-list" (no blank
# line after it). A third cluster with its own keys only (so it expects
# another server key: the handshake fails before ZAP, which libzmq reported
# nowhere) is logged too: "...: its CURVE handshake did not decrypt ...".
. "$(dirname "$0")/ps_common.bash"
read -r p1 p2 p3 p4 <<< "$(ports)"
read -r q1 q2 q3 q4 <<< "$(ports)"
a="{\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}"
b="{\"chief\": [\"127.0.0.1:$p4\"], \"worker\": [\"127.0.0.1:$q1\"], \"ps\": [\"127.0.0.1:$p1\"]}"
c="{\"chief\": [\"127.0.0.1:$q3\"], \"worker\": [\"127.0.0.1:$q4\"], \"ps\": [\"127.0.0.1:$p1\"]}"
echo "$a" > "$tmp/a.json"; echo "$b" > "$tmp/b.json"; echo "$c" > "$tmp/c.json"
"$cli" keygen "$tmp/ka" --cluster "$tmp/a.json" > /dev/null && "$cli" keygen "$tmp/kb" --cluster "$tmp/b.json" > /dev/null &&
  "$cli" keygen "$tmp/kc" --cluster "$tmp/c.json" > /dev/null || exit 1
cp "$tmp/ka/chief-0.pub" "$tmp/kb/ps-0.pub"
TF_CONFIG="{\"cluster\": $a, \"task\": {\"type\": \"chief\", \"index\": 0}}" timeout 60 "$cli" train \
  --strategy parameter_server --keys "$tmp/ka" --model mlp --heartbeat-interval 0.2 --quiet > /dev/null 2> "$tmp/ca" &
ca=$!
for _ in $(seq 200); do ss -ltn 2>/dev/null | grep -q ":$p1 " && break; sleep 0.05; done
TF_CONFIG="{\"cluster\": $b, \"task\": {\"type\": \"chief\", \"index\": 0}}" timeout 60 "$cli" train \
  --strategy parameter_server --keys "$tmp/kb" --model mlp --quiet > /dev/null 2> "$tmp/cb" &
cb=$!
TF_CONFIG="{\"cluster\": $c, \"task\": {\"type\": \"chief\", \"index\": 0}}" timeout 60 "$cli" train \
  --strategy parameter_server --keys "$tmp/kc" --model mlp --quiet > /dev/null 2> "$tmp/cc" &
cc=$!
for _ in $(seq 200); do grep -q 'allow-list' "$tmp/ca" && grep -q 'did not decrypt' "$tmp/ca" && break; sleep 0.05; done
kill -TERM $ca $cb $cc 2>/dev/null; wait $ca $cb $cc 2>/dev/null
check "grep -q \"chief:0: refused a connection from 127.0.0.1: its CURVE key is not in the cluster's allow-list\" $tmp/ca" \
  "the chief logs the connection its ZAP handler refused ($(grep allow-list "$tmp/ca" | head -1))"
check "grep -q \"chief:0: refused a connection from \\(127.0.0.1:[0-9]*\\|an unknown address (gone at once)\\): its CURVE handshake did not decrypt (a wrong server key\" $tmp/ca" \
  "and the one whose handshake failed before ZAP ($(grep decrypt "$tmp/ca" | head -1))"
check "! grep -q '^\$' $tmp/ca" "no blank line in its log"
exit $fail
