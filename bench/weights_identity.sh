#!/usr/bin/env bash
# Do two builds train the same bytes? 1-epoch weights (batch 128, seed 0, the
# default data) of mlp and cnn under one_device, mirrored x2, central_storage x2,
# 2 MPI workers, the pipeline (2 stages in one process, and 2 MPI processes)
# and the parameter-server job (strata launch, 1 worker, 1 ps, --max-staleness 0,
# so that its steps are applied in a fixed order), from each CLI, compared with
# cmp. For refactors that must not change arithmetic: build the old commit
# elsewhere, then
#   bench/weights_identity.sh OLD/build/strata build/strata
# Prints one line per run ("same" or "DIFFERENT"); exit 1 if any differ.
# Takes several minutes on 2 cores; the MPI runs are skipped without mpirun.
# WEIGHTS_IDENTITY_ONLY=REGEX runs only the configurations whose
# "MODEL NAME" matches (e.g. 'mlp ps|cnn pipe').
set -u
[ $# -eq 2 ] || { echo "usage: $0 OLD_STRATA NEW_STRATA" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common=(--epochs 1 --batch-size 128 --quiet)
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
only=${WEIGHTS_IDENTITY_ONLY:-.}
bad=0
run() { # run SIDE CLI MODEL NAME ARGS...: train, save $tmp/SIDE-MODEL-NAME.st
  local side=$1 cli=$2 model=$3 name=$4; shift 4
  local out="$tmp/$side-$model-$name.st"
  case $name in
    mpi) "${mpi[@]}" "$cli" train --model "$model" "${common[@]}" --strategy multi_worker_mirrored \
           --save "$out" >/dev/null ;;
    pipe_mpi) "${mpi[@]}" "$cli" train --model "$model" "${common[@]}" --strategy pipeline \
           --micro-batches 4 --save "$out" >/dev/null ;;
    ps) timeout 600 "$cli" launch --workers 1 --ps 1 --insecure -- train --model "$model" \
          "${common[@]}" --max-staleness 0 --save "$out" >/dev/null 2>&1 ;;
    *) "$cli" train --model "$model" "${common[@]}" "$@" --save "$out" >/dev/null ;;
  esac
}
for model in mlp cnn; do
  for cfg in "one" "mirrored --strategy mirrored --replicas 2" \
             "central_storage --strategy central_storage --replicas 2" "mpi" \
             "pipe --strategy pipeline --devices cpu:0,cpu:1 --micro-batches 4" "pipe_mpi" "ps"; do
    read -r name args <<<"$cfg"
    [[ "$model $name" =~ $only ]] || continue
    if [[ $name == mpi || $name == pipe_mpi ]] && ! command -v mpirun >/dev/null; then echo "skip $model $name (no mpirun)"; continue; fi
    # shellcheck disable=SC2086
    run old "$1" "$model" "$name" $args && run new "$2" "$model" "$name" $args || { echo "FAILED $model $name"; bad=1; continue; }
    if cmp -s "$tmp/old-$model-$name.st" "$tmp/new-$model-$name.st"; then echo "same $model $name"
    else echo "DIFFERENT $model $name"; bad=1; fi
  done
done
exit $bad
