#!/usr/bin/env bash
# MultiWorkerMirroredStrategy launched the TensorFlow way (issue 30): one
# process per worker, each with only its TF_CONFIG, no mpirun; the Gloo
# transport joins them (rendezvous at worker 0's address). On loopback:
#  - 2 workers (mlp and cnn, 2048 examples, 1 epoch) give the bytes of one
#    process with 2 mirrored replicas and of `mpirun -np 2`; only worker 0
#    (the chief) writes --save;
#  - strata launch --workers 2 -- train ... gives the same bytes (--ps refused);
#  - a chief task is worker 0: {"chief": [a], "worker": [b]} gives the same bytes;
#  - a worker that never starts: worker 0 exits 3 after --collective-timeout
#    (3 s; 20 s with loading), naming worker 1 and its address;
#  - kill -9 of worker 1 once a backup exists: worker 0 exits 3 within the
#    collective timeout + 5 s, naming worker 1; rerunning both with the same
#    --backup-dir ends with the bytes of an uninterrupted run;
#  - two jobs' chiefs on one --backup-dir: the second exits 2 naming the first;
#  - malformed TF_CONFIGs: exit 2 naming the field (parameter servers listed,
#    task index out of range, bad JSON, an evaluator's task, a bad address),
#    worker 0's address taken on its host, and the pipeline (mpirun only).
# Skips (77) when Strata was built without the Gloo transport (libgloo-dev).
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
data=/usr/share/datasets/fashion-mnist
[ -e $data/train-images-idx3-ubyte.gz ] || { echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77; }
tmp=$(mktemp -d); pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
common=(--train-examples 2048 --epochs 1 --batch-size 128 --quiet --seed 3)
mw=(--strategy multi_worker_mirrored)
# tfc ROLES TYPE INDEX: a TF_CONFIG; ROLES is the cluster's JSON body
tfc() { printf '{"cluster": {%s}, "task": {"type": "%s", "index": %s}}' "$1" "$2" "$3"; }

# a build without Gloo says so (exit 2) when TF_CONFIG names two workers
a=127.0.0.1:$(port); b=127.0.0.1:$(port)
cl="\"worker\": [\"$a\", \"$b\"]"
TF_CONFIG=$(tfc "$cl" worker 0) timeout 20 "$cli" train "${common[@]}" --model mlp "${mw[@]}" --collective-timeout 1 \
  >/dev/null 2>"$tmp/probe.err"
if grep -q "not built" "$tmp/probe.err"; then
  echo "SKIP: this build has no Gloo transport ($(cat "$tmp/probe.err"))"; exit 77
fi

# job NAME CL MODEL EXTRA...: the two tasks of CL (worker 0 and 1, or chief 0
# and worker 0 when CL has a chief) in the background; waits; rc in $tmp/NAME.rcI
job() {
  local name=$1 cl=$2 model=$3; shift 3
  local t0=worker i0=0 t1=worker i1=1
  [[ $cl == *chief* ]] && { t0=chief; i1=0; }
  TF_CONFIG=$(tfc "$cl" $t0 $i0) timeout 300 "$cli" train "${common[@]}" --model "$model" "${mw[@]}" \
    --save "$tmp/$name.0.st" "$@" >"$tmp/$name.out0" 2>"$tmp/$name.err0" &
  local p0=$!
  TF_CONFIG=$(tfc "$cl" $t1 $i1) timeout 300 "$cli" train "${common[@]}" --model "$model" "${mw[@]}" \
    --save "$tmp/$name.1.st" "$@" >"$tmp/$name.out1" 2>"$tmp/$name.err1" &
  local p1=$!
  wait $p0; echo $? >"$tmp/$name.rc0"; wait $p1; echo $? >"$tmp/$name.rc1"
}
for model in mlp cnn; do
  a=127.0.0.1:$(port); b=127.0.0.1:$(port)
  job $model "\"worker\": [\"$a\", \"$b\"]" $model
  "$cli" train "${common[@]}" --model $model --strategy mirrored --replicas 2 --save "$tmp/$model.one.st" >/dev/null
  check "$model: 2 TF_CONFIG workers exit 0 (rc $(cat $tmp/$model.rc0) $(cat $tmp/$model.rc1))" \
    "[ \$(cat $tmp/$model.rc0) = 0 ] && [ \$(cat $tmp/$model.rc1) = 0 ]"
  check "$model: the chief's --save is one process's 2 mirrored replicas, bytes" "cmp -s $tmp/$model.0.st $tmp/$model.one.st"
  check "$model: only the chief writes --save" "[ ! -e $tmp/$model.1.st ]"
  if command -v mpirun >/dev/null; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
      LSAN_OPTIONS="suppressions=$src/tests/lsan-mpi.supp:fast_unwind_on_malloc=0" \
      mpirun -np 2 "$cli" train "${common[@]}" --model $model "${mw[@]}" --save "$tmp/$model.mpi.st" >/dev/null 2>&1
    check "$model: the same bytes as mpirun -np 2" "cmp -s $tmp/$model.0.st $tmp/$model.mpi.st"
  fi
done

# strata launch starts the workers itself (TF_CONFIG each, free loopback ports)
timeout 300 "$cli" launch --workers 2 -- train "${common[@]}" --model mlp "${mw[@]}" \
  --save "$tmp/launch.st" >/dev/null 2>"$tmp/launch.err"
rc=$?
check "strata launch --workers 2 -- train ... multi_worker_mirrored: exit 0, the same bytes (rc $rc)" \
  "[ $rc = 0 ] && cmp -s $tmp/launch.st $tmp/mlp.one.st && grep -q 'worker:1 on 127.0.0.1:' $tmp/launch.err"
timeout 30 "$cli" launch --workers 2 --ps 1 -- train --model mlp "${mw[@]}" >/dev/null 2>"$tmp/launchps.err"
rc=$?
check "... with --ps: exit 2 (rc $rc)" "[ $rc = 2 ] && grep -q -- '--ps is for --strategy parameter_server' $tmp/launchps.err"

a=127.0.0.1:$(port); b=127.0.0.1:$(port)
job chief "\"chief\": [\"$a\"], \"worker\": [\"$b\"]" mlp
check "a chief task and a worker: exit 0, the same bytes (chief = worker 0)" \
  "[ \$(cat $tmp/chief.rc0) = 0 ] && [ \$(cat $tmp/chief.rc1) = 0 ] && cmp -s $tmp/chief.0.st $tmp/mlp.one.st"

# a worker that never starts
a=127.0.0.1:$(port); b=127.0.0.1:$(port)
start=$SECONDS
TF_CONFIG=$(tfc "\"worker\": [\"$a\", \"$b\"]" worker 0) timeout 60 "$cli" train "${common[@]}" --model mlp "${mw[@]}" \
  --collective-timeout 3 >/dev/null 2>"$tmp/never.err"
rc=$? took=$((SECONDS - start))
# (the bound: the 3 s timeout + loading the data and building the model,
# which take seconds on a loaded 2-core machine; without the timeout the wait
# would be --collective-timeout's default, 300 s)
check "worker 1 never starts: worker 0 exits 3 in ${took}s (<= 20) naming worker 1 ($b)" \
  "[ $rc = 3 ] && [ $took -le 20 ] && grep -qF 'worker 1 ($b) did not join within 3 s' $tmp/never.err"
[ $rc = 3 ] || cat "$tmp/never.err"

# kill -9 of worker 1 once a backup exists; the rerun resumes to the bytes
# of an uninterrupted run
long=(--model mlp --optimizer adam --train-examples 12800 --epochs 3 --batch-size 64 --seed 4 --quiet)
a=127.0.0.1:$(port); b=127.0.0.1:$(port)
cl="\"worker\": [\"$a\", \"$b\"]"
pair() { # pair NAME ARGS...: both workers of $cl, worker 1 exec'ed (its pid in $p1)
  local name=$1; shift
  TF_CONFIG=$(tfc "$cl" worker 0) timeout 120 "$cli" train "${long[@]}" "${mw[@]}" "$@" \
    >/dev/null 2>"$tmp/$name.err0" &
  p0=$!; pids+=($p0)
  (TF_CONFIG=$(tfc "$cl" worker 1) exec "$cli" train "${long[@]}" "${mw[@]}" "$@" \
    >/dev/null 2>"$tmp/$name.err1") &
  p1=$!; pids+=($p1) # the strata process itself (exec), not a wrapper
}
pair ref --save "$tmp/ref.st"
wait $p0 $p1
bk=$tmp/backup
pair kill --backup-dir "$bk" --backup-every 25 --collective-timeout 5
for _ in $(seq 300); do [ -e "$bk/latest" ] && break; sleep 0.1; done
check "a backup was written before the kill" "[ -e $bk/latest ]"
kill -9 $p1; start=$SECONDS
wait $p0; rc=$? took=$((SECONDS - start))
check "kill -9 of worker 1: worker 0 exits 3 in ${took}s (<= 10) naming worker 1" \
  "[ $rc = 3 ] && [ $took -le 10 ] && grep -q 'worker 1' $tmp/kill.err0"
[ $rc = 3 ] || cat "$tmp/kill.err0"
wait $p1 2>/dev/null
pair resume --backup-dir "$bk" --backup-every 25 --save "$tmp/resumed.st"
wait $p0; rc0=$?; wait $p1; rc1=$?
check "the rerun completes (rc $rc0 $rc1)" "[ $rc0 = 0 ] && [ $rc1 = 0 ]"
check "resumed weights = uninterrupted weights (bytes)" "cmp -s $tmp/ref.st $tmp/resumed.st"

# malformed TF_CONFIGs: exit 2 naming the field
bad() { # bad NAME TF_CONFIG WANT
  TF_CONFIG=$2 timeout 20 "$cli" train "${common[@]}" --model mlp "${mw[@]}" >/dev/null 2>"$tmp/bad.err"
  local rc=$?
  printf '%s\n' "$3" >"$tmp/want"
  check "$1: exit 2 naming: $3 (rc $rc)" "[ $rc = 2 ] && grep -qF -f $tmp/want $tmp/bad.err"
  [ $rc = 2 ] || cat "$tmp/bad.err"
}
bad "parameter servers listed" "$(tfc "\"worker\": [\"$a\", \"$b\"], \"ps\": [\"127.0.0.1:9\"]" worker 0)" \
  "TF_CONFIG: cluster.ps: parameter servers belong to --strategy parameter_server"
bad "task index out of range" "$(tfc "\"worker\": [\"$a\", \"$b\"]" worker 2)" "TF_CONFIG: task.index: 2 out of range"
bad "bad JSON" '{"cluster": {"worker": [' "TF_CONFIG: line 1"
bad "an evaluator's task" "$(tfc "\"worker\": [\"$a\", \"$b\"], \"evaluator\": [\"127.0.0.1:9\"]" evaluator 0)" \
  "TF_CONFIG: task.type: 'evaluator' does not train"
bad "a bad address" "$(tfc "\"worker\": [\"$a\", \"no-port\"]" worker 0)" "TF_CONFIG: cluster.worker[1]: address 'no-port'"
TF_CONFIG=$(tfc "\"worker\": [\"$a\", \"$b\"]" worker 0) timeout 20 "$cli" train "${common[@]}" --model mlp \
  --strategy pipeline --devices cpu:0,cpu:1 >/dev/null 2>"$tmp/pipe.err"
rc=$?
check "the pipeline under a 2-worker TF_CONFIG: exit 2, saying it needs mpirun (rc $rc)" \
  "[ $rc = 2 ] && grep -q 'runs under an MPI launcher only' $tmp/pipe.err"

# two jobs' chiefs on one --backup-dir: the second is refused, naming the first
a=127.0.0.1:$(port); b=127.0.0.1:$(port); cl="\"worker\": [\"$a\", \"$b\"]"
keep=("${long[@]}"); long=(--model mlp --optimizer adam --epochs 50 --batch-size 64 --seed 4 --quiet)
pair lockA --backup-dir "$tmp/shared"
long=("${keep[@]}")
for _ in $(seq 300); do [ -e "$tmp/shared/.lock" ] && break; sleep 0.1; done
a=127.0.0.1:$(port); b=127.0.0.1:$(port); cl="\"worker\": [\"$a\", \"$b\"]"
pair lockB --backup-dir "$tmp/shared" --collective-timeout 5
wait $p0; rc=$?
check "a second job's chief on the same --backup-dir exits 2 naming the first (rc $rc)" \
  "[ $rc = 2 ] && grep -q 'is in use by pid [0-9]*, the chief of a 2-worker job' $tmp/lockB.err0"
[ $rc = 2 ] || cat "$tmp/lockB.err0"
kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null

# worker 0's address taken on its host: exit 2 naming it
a=127.0.0.1:$(port); b=127.0.0.1:$(port)
python3 -c 'import socket, sys, time; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(60)' \
  "${a#*:}" & holder=$!; pids+=($holder)
sleep 0.5
bad "worker 0's address in use" "$(tfc "\"worker\": [\"$a\", \"$b\"]" worker 0)" \
  "rendezvous store: cannot serve at $a: Address already in use"
kill $holder 2>/dev/null
exit $fail
