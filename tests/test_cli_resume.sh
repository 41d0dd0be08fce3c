#!/usr/bin/env bash
# BackupAndRestore through the CLI: a run killed with kill -9 at a random
# moment and started again with the same command finishes with the weights of
# an uninterrupted run (bytes), and the backup is gone afterwards. The kill
# times come from a seeded RNG (seed printed). The same after SIGTERM, which
# stops at a step boundary and exits 5. Also: a backup from another model is
# refused with exit 2, naming the tensor.
set -u
cli=${STRATA_CLI:?set by CTest}
data=/usr/share/datasets/fashion-mnist
if [ ! -e $data/train-images-idx3-ubyte.gz ]; then
  echo "SKIP: $data missing (apt-get install dataset-fashion-mnist)"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
seed=${RESUME_SEED:-$RANDOM}
echo "kill-time seed: $seed"
RANDOM=$seed
args=(train --model mlp --train-examples 12000 --epochs 3 --batch-size 64 --seed 5 --quiet)
"$cli" "${args[@]}" --save "$tmp/ref.safetensors" >/dev/null 2>&1
check "uninterrupted run" "[ $? -eq 0 ]"
for trial in 1 2 3; do
  d="$tmp/backup$trial"
  delay=$(printf '0.%03d' $((200 + RANDOM % 600)))
  "$cli" "${args[@]}" --backup-dir "$d" --backup-every 20 --save "$tmp/w$trial.safetensors" >/dev/null 2>&1 &
  pid=$!
  sleep "$delay"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  state="no backup yet"
  [ -e "$d/latest" ] && state="backup at $(cut -d' ' -f1 "$d/latest")"
  echo "# trial $trial: killed after ${delay}s ($state)"
  "$cli" "${args[@]}" --backup-dir "$d" --backup-every 20 --save "$tmp/w$trial.safetensors" >/dev/null 2>"$tmp/err$trial"
  check "trial $trial: the rerun completes" "[ $? -eq 0 ]"
  check "trial $trial: weights identical to the uninterrupted run" "cmp -s $tmp/ref.safetensors $tmp/w$trial.safetensors"
  check "trial $trial: backup removed after completion" "[ ! -e $d/latest ]"
done
# Preemption (RELIABILITY S3): SIGTERM once training runs (the first backup
# exists) stops fit at the next step boundary, writes the backup there and
# exits 5 naming the step; the same command resumes to the uninterrupted
# run's weights. Without --backup-dir: exit 5, nothing saved.
for trial in 1 2; do
  d="$tmp/term$trial"
  "$cli" "${args[@]}" --backup-dir "$d" --backup-every $((7 * trial)) --save "$tmp/t$trial.safetensors" >/dev/null 2>"$tmp/term$trial.err" &
  pid=$!
  for _ in $(seq 600); do [ -e "$d/latest" ] && break; sleep 0.05; done
  kill -TERM $pid
  wait $pid
  rc=$?
  cat "$tmp/term$trial.err"
  check "SIGTERM $trial: exit 5 naming the step and the backup" \
    "[ $rc -eq 5 ] && grep -q 'stopped on request at epoch [0-9]* after step [0-9]*; the backup in $d holds this point' $tmp/term$trial.err"
  e=$(sed -n 's/.*at epoch \([0-9]*\) after step \([0-9]*\);.*/\1 \2/p' "$tmp/term$trial.err")
  check "SIGTERM $trial: the backup is at that step (epoch, step: $e)" "/usr/bin/python3 -c '
import json, sys
d = \"$d\"; st = json.load(open(d + \"/\" + open(d + \"/latest\").read().split()[0] + \"/state.json\"))
e, s = map(int, \"$e\".split())
sys.exit(not (st[\"epoch\"] == e - 1 and st[\"step_in_epoch\"] == s))'"
  "$cli" "${args[@]}" --backup-dir "$d" --backup-every $((7 * trial)) --save "$tmp/t$trial.safetensors" >/dev/null 2>&1
  check "SIGTERM $trial: the rerun completes with the uninterrupted run's weights" \
    "[ $? -eq 0 ] && cmp -s $tmp/ref.safetensors $tmp/t$trial.safetensors && [ ! -e $d/latest ]"
done
"$cli" train --model mlp --epochs 1000 --quiet >/dev/null 2>"$tmp/term.err" &
pid=$!
sleep 2
kill -TERM $pid
wait $pid
rc=$?
cat "$tmp/term.err"
check "SIGTERM without --backup-dir: exit 5, nothing saved" \
  "[ $rc -eq 5 ] && grep -q 'stopped on request at epoch [0-9]* after step [0-9]*; nothing saved' $tmp/term.err"

# a checkpoint of the mlp (ModelCheckpoint, same format) cannot resume the cnn
"$cli" train --model mlp --train-examples 640 --epochs 1 --quiet --checkpoint-dir "$tmp/mlpckpt" >/dev/null 2>&1
check "ModelCheckpoint wrote a checkpoint" "[ -e $tmp/mlpckpt/latest ]"
"$cli" train --model cnn --train-examples 640 --epochs 1 --quiet --backup-dir "$tmp/mlpckpt" >/dev/null 2>"$tmp/mm.err"
rc=$?
cat "$tmp/mm.err"
check "resuming another model's checkpoint exits 2 naming the tensor" "[ $rc -eq 2 ] && grep -q \"tensor\" $tmp/mm.err"
exit $fail
