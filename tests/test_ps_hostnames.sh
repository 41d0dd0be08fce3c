#!/usr/bin/env bash
# Issue 29 D8: a cluster spec that names hosts (TF_CONFIG as Kubernetes or a
# laptop writes it: localhost, DNS names) could not be served: zmq_bind
# takes IP addresses or interface names only ("cannot listen on
# localhost:29131 (worker:0): No such device"). Now the task's host is
# resolved for the bind:
#  - a whole job (chief, worker, ps) whose TF_CONFIG says `localhost`
#    trains, exit 0;
#  - a host that does not resolve is named with the resolver's message
#    (an interface name such as eth0 is no longer bound as an interface:
#    the peers would resolve it as a host name).
. "$(dirname "$0")/ps_common.bash"
read -r p1 p2 p3 p4 <<< "$(ports)"
cluster="{\"chief\": [\"localhost:$p1\"], \"worker\": [\"localhost:$p2\"], \"ps\": [\"LOCALHOST:$p3\"]}"
tf() { echo "{\"cluster\": $cluster, \"task\": {\"type\": \"$1\", \"index\": 0}}"; }
TF_CONFIG=$(tf worker) timeout 120 "$cli" server --insecure --job-timeout 60 > /dev/null 2> "$tmp/w" &
w=$!
TF_CONFIG=$(tf ps) timeout 120 "$cli" server --insecure --job-timeout 60 > /dev/null 2> "$tmp/p" &
p=$!
TF_CONFIG=$(tf chief) timeout 120 "$cli" train --strategy parameter_server --insecure --model mlp \
  --train-examples 512 --batch-size 64 --epochs 1 --quiet > "$tmp/c.out" 2> "$tmp/c"
rc=$?
wait $w; wr=$?
wait $p; pr=$?
check "[ $rc = 0 ] && [ $wr = 0 ] && [ $pr = 0 ]" \
  "a job whose TF_CONFIG names localhost/LOCALHOST trains: chief $rc, worker $wr, ps $pr ($(grep -hv warning "$tmp/c" "$tmp/w" "$tmp/p" | head -3))"
cluster="{\"chief\": [\"127.0.0.1:$p1\"], \"worker\": [\"no-such-host.invalid:$p2\"], \"ps\": [\"127.0.0.1:$p3\"]}"
TF_CONFIG=$(tf worker) timeout 20 "$cli" server --insecure --job-timeout 1 > /dev/null 2> "$tmp/n"
rc=$?
check "[ $rc = 2 ] && grep -q \"cannot listen on no-such-host.invalid:$p2 (worker:0): cannot resolve host 'no-such-host.invalid'\" $tmp/n" \
  "a host that does not resolve: exit 2 naming it (rc $rc: $(grep -v warning "$tmp/n"))"
exit $fail
