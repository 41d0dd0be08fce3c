#!/usr/bin/env bash
# strata generate (issue 31): text from a GPT trained by `strata train --model
# gpt --save-llmc`: the prompt comes first, the same seed gives the same text,
# --tokens bytes follow (byte tokens); a file that is not an llm.c checkpoint,
# a missing --init-from and half a BPE pair exit 2 naming what is wrong.
set -u
cli=${STRATA_CLI:?set by CTest}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
small="--gpt-layers 2 --gpt-heads 2 --gpt-width 32 --seq-len 16"
head -c 20000 "$0" >"$tmp/text.txt"
"$cli" train --model gpt $small --text "$tmp/text.txt" --steps 20 --eval-every 10 --quiet \
  --save-llmc "$tmp/m.bin" >/dev/null 2>&1
check "a small GPT trains and saves (exit 0)" "[ $? -eq 0 ] && [ -s $tmp/m.bin ]"
"$cli" generate --init-from "$tmp/m.bin" --prompt "strata " --tokens 24 --seed 3 >"$tmp/a.txt" 2>"$tmp/err"
check "generate exits 0" "[ $? -eq 0 ]"
check "the text starts with the prompt" "[ \"\$(head -c 7 $tmp/a.txt)\" = 'strata ' ]"
check "--tokens 24 bytes follow it (and a newline)" "[ \$(wc -c <$tmp/a.txt) -eq 32 ]"
"$cli" generate --init-from "$tmp/m.bin" --prompt "strata " --tokens 24 --seed 3 >"$tmp/b.txt" 2>&1
check "the same seed gives the same text" "cmp -s $tmp/a.txt $tmp/b.txt"
"$cli" generate --init-from "$tmp/m.bin" --tokens 40 --seed 3 --top-k 1 >"$tmp/g1.txt" 2>&1 &&
"$cli" generate --init-from "$tmp/m.bin" --tokens 40 --seed 9 --top-k 1 >"$tmp/g2.txt" 2>&1
check "--top-k 1 is greedy: any seed gives the same text" "cmp -s $tmp/g1.txt $tmp/g2.txt"
bad() { # $1 what, $2 needle, rest: the arguments
  local what=$1 needle=$2; shift 2
  "$cli" generate "$@" >"$tmp/bad.out" 2>&1; local rc=$?
  check "$what: exit 2 naming $needle (got $rc)" "[ $rc -eq 2 ] && grep -q -- '$needle' $tmp/bad.out"
}
bad "no --init-from" "--init-from MODEL.bin is required"
bad "a file that is not a checkpoint" "not an llm.c checkpoint" --init-from "$tmp/text.txt"
bad "a file that does not exist" "none.bin" --init-from "$tmp/none.bin"
bad "half a BPE pair" "go together" --init-from "$tmp/m.bin" --bpe-vocab "$tmp/text.txt"
bad "zero tokens" "--tokens" --init-from "$tmp/m.bin" --tokens 0
exit $fail
