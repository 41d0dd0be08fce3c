#!/usr/bin/env bash
# GPT-2 124M under the pipeline (issue 31, "Scale"), printed as the markdown
# table of docs/BENCHMARKS.md: peak RSS (GNU time's maximum resident set) of
# one device (every core, then --threads 1) against each process of
# `mpirun -np 2 ... --strategy pipeline` (the default cut, GPipe and 1F1B
# with 2 and 4 micro-batches), AdamW, B=4, T=64, 3 steps (one validation
# pass of 8 batches at the end), on the demo corpus (or the generated text).
# The weights are not saved (a --save-llmc gathers the whole model on every
# process: see BENCHMARKS.md). usage: bench/gpt_pipeline_memory.sh
# [build/strata] [STEPS]   (~15 minutes on a loaded 2-core machine)
set -u
cli=$(readlink -f "${1:-build/strata}"); steps=${2:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
G=(train --model gpt --gpt-preset gpt2-124m --seq-len 64 --batch-size 4 --steps "$steps" --eval-every "$steps")
rss() { sed -n 's/.*Maximum resident set size (kbytes): //p' "$1" | awk '{printf "%.2f", $1 / 1048576}'; }
mss() { sed -n 's/.* - \([0-9]*\) ms\/step$/\1/p' "$1" | tail -1; }
echo "| GPT-2 124M, AdamW, B=4, T=64 | peak RSS per process (GiB) | ms/step (last stretch) | loss after $steps steps |"
echo "|---|---|---|---|"
for t in 0 1; do
  extra=(); [ $t = 1 ] && extra=(--threads 1)
  /usr/bin/time -v -o od.time "$cli" "${G[@]}" "${extra[@]}" >od.out 2>od.err || { cat od.err; continue; }
  echo "| one device$([ $t = 1 ] && echo ', --threads 1' || echo ', every core') | $(rss od.time) | $(mss od.out) | $(sed -n 's/^step [0-9]*: loss \([0-9.]*\).*/\1/p' od.out) |"
done
for pp in "--micro-batches 2" "--micro-batches 2 --pipeline-schedule 1f1b" "--micro-batches 4 --pipeline-schedule 1f1b"; do
  rm -f pp.time.*
  # shellcheck disable=SC2086
  mpirun -np 2 sh -c '/usr/bin/time -v -o pp.time.$OMPI_COMM_WORLD_RANK "$@"' sh "$cli" "${G[@]}" \
    --strategy pipeline $pp >pp.out 2>pp.err || { tail -5 pp.err; continue; }
  echo "| pipeline, 2 processes, $pp | $(rss pp.time.0) / $(rss pp.time.1) | $(mss pp.out) | $(sed -n 's/^step [0-9]*: loss \([0-9.]*\).*/\1/p' pp.out) |"
done
