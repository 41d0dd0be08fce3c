#!/usr/bin/env bash
# Include direction (DESIGN.md section 1): a file of src/<folder>/ includes only
# its own folder and the folders below it; a public header include/strata/X.h
# likewise by its layer (train.h holds the model's API: layer model). An
# #include "strata/X.h" counts as X's layer. Order, bottom to top:
#   base < backend < nn, data (siblings) < distribute < ps < model < io < train
# The top layer, tools/ (the CLI) and python/src (the extension), is a client
# of the public library: it includes public headers ("strata/X.h") and headers
# of its own folder ("cli.h", "ext.h"), nothing from src/ except the files of
# the allowlist below (each with its reason).
# Usage: scripts/check_includes.sh [ROOT] (default: this repository). Prints
# FILE:LINE: folder A includes folder B (upward|sideways) per violation, or
# FILE:LINE: top layer includes private header H, exit 1.
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
declare -A rank=([base]=0 [backend]=1 [nn]=2 [data]=2 [distribute]=3 [ps]=4 [model]=5 [io]=6 [train]=7 [top]=8)
declare -A pub=([base]=base [version]=base [backend]=backend [nn]=nn [data]=data [distribute]=distribute [train]=model [ps]=train [strata]=top)
bad=0
while IFS=: read -r file line text; do
  rel=${file#"$root"/}
  if [[ $rel == src/* ]]; then from=${rel#src/}; from=${from%%/*}; else from=${pub[$(basename "$rel" .h)]}; fi
  [[ $text =~ \"([a-z_]+)/([a-z_0-9]+) ]] || continue
  to=${BASH_REMATCH[1]}
  [[ $to == strata ]] && to=${pub[${BASH_REMATCH[2]}]:-top}
  if [[ -z ${rank[$from]} || -z ${rank[$to]} ]]; then
    echo "$rel:$line: folder ${from:-?} or $to is not in the layer order of $0"; bad=1
  elif [[ $to != "$from" && ${rank[$to]} -ge ${rank[$from]} ]]; then
    [[ ${rank[$to]} -gt ${rank[$from]} ]] && how=upward || how=sideways
    echo "$rel:$line: folder $from includes folder $to ($how)"; bad=1
  fi
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/' "$root/src" "$root/include/strata" | sort -t: -k1,1 -k2,2n)

# The top layer. Files allowed private headers, with the reason:
declare -A allow=(
  # launch and keygen build a cluster, its TF_CONFIG per task and CURVE keys:
  # the parameter server has no public cluster API yet (issue 27 item 1)
  [tools/ps_launch.c]=1
  # the chief's --backup-dir is removed only after --save/--report are written
  # (st__checkpoint_remove_all; fit's own backup removal is not public)
  [tools/ps_coord.c]=1
  # the run's locks on --backup-dir/--checkpoint-dir and the removal of its
  # outputs' stale temp files (st__dir_lock, st__clean_stale_temps)
  [tools/cmd_train.c]=1
  # the library's parameter-server test hooks (ps/test_hooks.h) are a private
  # test API: the CLI sets them from STRATA_PS_TEST_* so that shell tests can
  # inject faults; the library itself reads no test variable
  [tools/ps_test_hooks.c]=1
  # --model gpt's training data as one stream across its --eval-every
  # stretches: a dataset node (data/dataset_impl.h; fit starts each epoch's
  # pass anew and no public transform skips per epoch)
  [tools/cmd_train_gpt.c]=1
)
srcdirs=" $(cd "$root/src" 2>/dev/null && ls -d */ | tr -d / | tr '\n' ' ') "
while IFS=: read -r file line text; do
  rel=${file#"$root"/}
  dir=$(dirname "$file")
  if [[ $text =~ \"([^\"]+)\" ]]; then
    h=${BASH_REMATCH[1]}
    [[ $h == strata/* ]] && continue
    [[ $h != */* && -f $dir/$h ]] && continue
  elif [[ $text =~ \<([a-z_]+)/([^\>]+)\> ]]; then
    [[ $srcdirs == *" ${BASH_REMATCH[1]} "* ]] || continue
    h=${BASH_REMATCH[1]}/${BASH_REMATCH[2]}
  else
    continue
  fi
  [[ -n ${allow[$rel]} ]] && continue
  echo "$rel:$line: top layer includes private header $h (public strata/*.h or its own folder's headers only; allowlist in $0)"
  bad=1
done < <(for d in tools python/src; do [[ -d $root/$d ]] && grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "$root/$d" --include='*.c' --include='*.h'; done | sort -t: -k1,1 -k2,2n)
exit $bad
