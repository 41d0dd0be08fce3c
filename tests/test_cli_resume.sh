#!/usr/bin/env bash
# BackupAndRestore through the CLI: a run killed with kill -9 at a random
# moment and started again with the same command finishes with the weights of
# an uninterrupted run (bytes), and the backup is gone afterwards. The kill
# times come from a seeded RNG (seed printed). Also: a backup from another
# model is refused with exit 2, naming the tensor.
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
# a checkpoint of the mlp (ModelCheckpoint, same format) cannot resume the cnn
"$cli" train --model mlp --train-examples 640 --epochs 1 --quiet --checkpoint-dir "$tmp/mlpckpt" >/dev/null 2>&1
check "ModelCheckpoint wrote a checkpoint" "[ -e $tmp/mlpckpt/latest ]"
"$cli" train --model cnn --train-examples 640 --epochs 1 --quiet --backup-dir "$tmp/mlpckpt" >/dev/null 2>"$tmp/mm.err"
rc=$?
cat "$tmp/mm.err"
check "resuming another model's checkpoint exits 2 naming the tensor" "[ $rc -eq 2 ] && grep -q \"tensor\" $tmp/mm.err"
exit $fail
