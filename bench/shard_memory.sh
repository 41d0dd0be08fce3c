#!/usr/bin/env bash
# Optimizer-state memory per replica with and without --shard-optimizer:
# peak RSS (GNU time's %M) of each worker training a ~20M-parameter MLP built
# from a Keras JSON (784 -> Dense 4096 relu -> Dense 4096 relu -> Dense 10
# softmax: 20,037,642 parameters, 80 MB of weights; Adam's m and v are 160 MB)
# with Adam, for mpirun -np 2 multi_worker_mirrored (one process per worker:
# RSS per worker) and mirrored x2 (both replicas in one process: RSS of the
# process). Also checks that the sharded run saves the same weight bytes.
#   bench/shard_memory.sh [build/strata]
# Trains 6 steps on a tiny IDX set; about 10 s per run on 2 cores. Prints a
# markdown table.
set -u
cli=${1:-build/strata}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
src=$(dirname "$0")/../tests/keras/mlp_keras3.json
python3 - "$src" "$tmp/mlp20m.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
dense = [l for l in m["config"]["layers"] if l["class_name"] == "Dense"]
for l in dense[:-1]:
    l["config"]["units"] = 4096
json.dump(m, open(sys.argv[2], "w"))
PY
# a small IDX set (64 train, 32 test examples: tests/mkidx.py) so the data
# take no memory to speak of: the peak is the model's
python3 "$(dirname "$0")/../tests/mkidx.py" "$tmp/data"
common=(train --model "$tmp/mlp20m.json" --data "$tmp/data" --optimizer adam --epochs 3
        --batch-size 32 --quiet)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rss() { # rss NAME CMD...: peak RSS in MiB of each process, one per line, into $tmp/NAME.rss
  local name=$1; shift
  "$@" >"$tmp/$name.out" 2>&1 || { echo "FAILED: $*" >&2; tail -5 "$tmp/$name.out" >&2; return 1; }
  grep '^maxrss_kib' "$tmp/$name.out" | awk '{printf "%.0f\n", $2 / 1024}' >"$tmp/$name.rss"
}
T=(/usr/bin/time -f "maxrss_kib %M")
echo "| strategy | --shard-optimizer | peak RSS per worker (MiB) | weights |"
echo "|---|---|---|---|"
for strat in mpi mirrored; do
  for shard in no yes; do
    flag=(); [ $shard = yes ] && flag=(--shard-optimizer)
    if [ $strat = mpi ]; then
      command -v mpirun >/dev/null || { echo "| multi_worker_mirrored (mpirun -np 2) | skipped: no mpirun | | |"; continue; }
      rss "$strat-$shard" mpirun --oversubscribe -np 2 "${T[@]}" "$cli" "${common[@]}" \
        --strategy multi_worker_mirrored "${flag[@]}" --save "$tmp/$strat-$shard.st" || continue
      label="multi_worker_mirrored (mpirun -np 2)"
    else
      rss "$strat-$shard" "${T[@]}" "$cli" "${common[@]}" --strategy mirrored --replicas 2 \
        "${flag[@]}" --save "$tmp/$strat-$shard.st" || continue
      label="mirrored x2 (one process)"
    fi
    same=""
    [ $shard = yes ] && { cmp -s "$tmp/$strat-no.st" "$tmp/$strat-yes.st" && same="same bytes" || same="DIFFERENT"; }
    echo "| $label | $shard | $(paste -sd/ "$tmp/$strat-$shard.rss") | $same |"
  done
done
