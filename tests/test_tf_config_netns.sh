#!/usr/bin/env bash
# multi_worker_mirrored launched from TF_CONFIG over a real (virtual) network
# (issue 30): three "hosts" are network namespaces joined by a bridge
# (tests/netns_common.bash); on each one worker process is started with only
# its TF_CONFIG (the three hosts' addresses), pinned to one core: no mpirun,
# no daemons, the job is ours.
#  - the three train the mlp to the bytes of one process with 3 mirrored
#    replicas (the same global batch, split and summation order);
#  - host 2's link is cut once a backup exists: both surviving workers exit 3
#    within --collective-timeout + 5 s, and nothing else waits;
#  - with the link back, the same three commands resume from the backup to
#    the bytes of the uninterrupted run.
# Skips (77) when not root, without ip/taskset/the dataset, when this build
# has no Gloo transport, when namespaces or veths cannot be made
# (containers), and under the sanitizer builds (test_tf_config.sh covers the
# same code there). Cleans up every namespace, veth, bridge and process.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
data=/usr/share/datasets/fashion-mnist
skip() { echo "SKIP: $*"; exit 77; }
[ "${STRATA_SANITIZED:-0}" = 1 ] && skip "sanitizer build (the network test runs in the Release suite)"
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
for t in ip taskset nproc; do command -v $t >/dev/null || skip "$t not found"; done
[ -e $data/train-images-idx3-ubyte.gz ] || skip "$data missing (apt-get install dataset-fashion-mnist)"
probe=$(TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 1}}' \
  timeout 20 "$cli" train --strategy multi_worker_mirrored --model mlp --train-examples 64 --quiet \
  --collective-timeout 1 2>&1 >/dev/null)
grep -q "not built" <<<"$probe" && skip "this build has no Gloo transport ($probe)"
. "$src/tests/netns_common.bash"
echo "# hosts ${hosts[*]} in namespaces strata-$id-{0,1,2}, bridge $br"
netns_small_data "$tmp/fm"

fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
args=(train --model mlp --data "$tmp/fm" --optimizer adam --epochs 2 --batch-size 96 --seed 5 --quiet
      --strategy multi_worker_mirrored)
cl=$(printf '"%s:2345",' "${hosts[@]}"); cl="\"worker\": [${cl%,}]"
# job NAME ARGS...: one worker per host in the background; each writes its
# exit code, end time and stderr as $tmp/NAME.{rc,t,err}.I
job() {
  local name=$1; shift
  for i in 0 1 2; do
    TF_CONFIG="{\"cluster\": {$cl}, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
      ip netns exec strata-$id-$i taskset -c $((i % $(nproc))) \
      sh -c '"$@" 2>"$0.err.'$i'"; rc=$?; date +%s.%N >"$0.t.'$i'"; echo $rc >"$0.rc.'$i'"' \
      "$tmp/$name" timeout 120 "$cli" "${args[@]}" "$@" >/dev/null &
  done
}
since() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }

# 1. three hosts = one process with 3 replicas
t0=$(date +%s.%N)
job net --save "$tmp/net.st"; wait
echo "# 3 hosts: exits $(cat $tmp/net.rc.0) $(cat $tmp/net.rc.1) $(cat $tmp/net.rc.2) ($(since "$t0") s)"
check "3 TF_CONFIG hosts over TCP on the veths: exit 0, weights written" \
  "[ \"\$(cat $tmp/net.rc.0 $tmp/net.rc.1 $tmp/net.rc.2)\" = \"\$(printf '0\n0\n0')\" ] && [ -s $tmp/net.st ]"
"$cli" "${args[@]:0:14}" --strategy mirrored --replicas 3 --save "$tmp/mirrored3.st" >/dev/null 2>&1
check "... the bytes of one process with 3 mirrored replicas" "cmp -s $tmp/net.st $tmp/mirrored3.st"

# 2. cut host 2's link once a backup exists
bk=$tmp/backup ct=3
job cut --backup-dir "$bk" --backup-every 10 --collective-timeout $ct --save "$tmp/cut.st"
for _ in $(seq 600); do [ -e "$bk/latest" ] && break; sleep 0.05; done
tcut=$(date +%s.%N)
ip -n strata-$id-2 link set sn${id}p2 down
for r in 0 1; do
  for _ in $(seq 400); do [ -e "$tmp/cut.rc.$r" ] && break; sleep 0.05; done
done
for r in 0 1 2; do
  echo "# worker $r: exit $(cat "$tmp/cut.rc.$r" 2>/dev/null) after $(awk -v c="$tcut" '{printf "%.1f", $1 - c}' "$tmp/cut.t.$r" 2>/dev/null) s: $(cat "$tmp/cut.err.$r" 2>/dev/null)"
done
check "the cut came mid-training (a backup exists, no weights written)" "[ -e $bk/latest ] && [ ! -e $tmp/cut.st ]"
for r in 0 1; do
  check "surviving worker $r exits 3 within --collective-timeout + 5 s" \
    "[ \"\$(cat $tmp/cut.rc.$r 2>/dev/null)\" = 3 ] &&
     awk -v c=$tcut -v b=$((ct + 5)) '{exit !(\$1 - c <= b)}' $tmp/cut.t.$r"
done

# 3. the link back (the cut worker gone), the same commands
for p in $(ip netns pids strata-$id-2); do kill -9 "$p" 2>/dev/null; done
wait
ip -n strata-$id-2 link set sn${id}p2 up
job resumed --backup-dir "$bk" --backup-every 10 --save "$tmp/resumed.st"; wait
check "rerun with --backup-dir: exit 0, the bytes of the uninterrupted run, backup removed" \
  "[ \"\$(cat $tmp/resumed.rc.0)\" = 0 ] && cmp -s $tmp/net.st $tmp/resumed.st && [ ! -e $bk/latest ]"
[ $fail -ne 0 ] && tail -n 5 "$tmp"/*.err.* 2>/dev/null
exit $fail
