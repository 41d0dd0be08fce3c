#!/usr/bin/env bash
# Issue 29 D13: the chief never logged (nor reported) connections its ZAP
# handler refused at its own port, where the servers log theirs. A second
# cluster whose ps address is this chief's port, given this chief's public
# key as that ps's key (so the CURVE handshake reaches ZAP) but its own
# client keys, connects: the chief now logs "chief:0: refused N
# connection(s) whose CURVE key is not in the cluster's allow-list" (one
# line, no blank line after it).
. "$(dirname "$0")/ps_common.bash"
read -r p1 p2 p3 p4 <<< "$(ports)"
read -r q1 q2 _ _ <<< "$(ports)"
a="{\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"127.0.0.1:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}"
b="{\"chief\": [\"127.0.0.1:$p4\"], \"worker\": [\"127.0.0.1:$q1\"], \"ps\": [\"127.0.0.1:$p1\"]}"
echo "$a" > "$tmp/a.json"; echo "$b" > "$tmp/b.json"
"$cli" keygen "$tmp/ka" --cluster "$tmp/a.json" > /dev/null && "$cli" keygen "$tmp/kb" --cluster "$tmp/b.json" > /dev/null || exit 1
cp "$tmp/ka/chief-0.pub" "$tmp/kb/ps-0.pub"
TF_CONFIG="{\"cluster\": $a, \"task\": {\"type\": \"chief\", \"index\": 0}}" timeout 60 "$cli" train \
  --strategy parameter_server --keys "$tmp/ka" --model mlp --heartbeat-interval 0.2 --quiet > /dev/null 2> "$tmp/ca" &
ca=$!
for _ in $(seq 200); do ss -ltn 2>/dev/null | grep -q ":$p1 " && break; sleep 0.05; done
TF_CONFIG="{\"cluster\": $b, \"task\": {\"type\": \"chief\", \"index\": 0}}" timeout 60 "$cli" train \
  --strategy parameter_server --keys "$tmp/kb" --model mlp --quiet > /dev/null 2> "$tmp/cb" &
cb=$!
for _ in $(seq 200); do grep -q 'chief:0: refused' "$tmp/ca" && break; sleep 0.05; done
kill -TERM $ca $cb 2>/dev/null; wait $ca $cb 2>/dev/null
check "grep -q \"chief:0: refused [0-9]* connection(s) whose CURVE key is not in the cluster's allow-list\" $tmp/ca" \
  "the chief logs the connections it refused ($(grep refused "$tmp/ca" | head -1))"
check "! grep -q '^\$' $tmp/ca" "no blank line in its log"
exit $fail
