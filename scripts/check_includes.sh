#!/usr/bin/env bash
# Include direction (DESIGN.md section 1): a file of src/<folder>/ includes only
# its own folder and the folders below it; a public header include/strata/X.h
# likewise by its layer (train.h holds the model's API: layer model). An
# #include "strata/X.h" counts as X's layer. Order, bottom to top:
#   base < backend < nn, data (siblings) < distribute < ps < model < io < train
# Usage: scripts/check_includes.sh [ROOT] (default: this repository). Prints
# FILE:LINE: folder A includes folder B (upward|sideways) per violation, exit 1.
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
exit $bad
