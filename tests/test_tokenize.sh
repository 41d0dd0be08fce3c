#!/usr/bin/env bash
# `strata tokenize` end to end (issue 31 part 3), byte-level:
#  - text (plain and .gz, two files) -> shards -> read back through the token
#    dataset (--decode) gives the original bytes; the validation shard holds
#    the first --val-fraction of the tokens, --shard-tokens splits the rest;
#    the files are llm.c's format (header magic 20240520, version 1, count);
#  - --check counts the windows of seq_len + 1 tokens;
#  - exit codes: 0 ok; 2 for bad input or usage naming the file (and for a
#    malformed shard the byte offset and the value), with nothing written;
#    4 when an output cannot be written (ulimit -f), naming it.
# GPT-2's BPE: test_tokenize_bpe.sh.
set -u
cli=${STRATA_CLI:?set by CTest}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
# expect RC NEEDLE... -- CMD...: CMD exits RC and its stderr holds every NEEDLE
expect() {
  local rc=$1 needles=() ; shift
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done; shift
  "$@" >"$tmp/out" 2>"$tmp/err"; local got=$?
  local ok=1
  [ $got -eq "$rc" ] || ok=0
  for n in "${needles[@]}"; do grep -qF -- "$n" "$tmp/err" || ok=0; done
  if [ $ok -eq 1 ]; then echo "ok - exit $rc: ${needles[*]}"; else
    echo "not ok - expected exit $rc with '${needles[*]}', got $got: $(cat "$tmp/err")"; fail=1; fi
}

# two inputs: ~3000 bytes of text with every byte value, and a gzip'd one
python3 - "$tmp" <<'EOF'
import gzip, sys, random
d = sys.argv[1]
random.seed(1)
a = bytes(range(256)) + b"".join(b"line %d: the quick brown fox\n" % i for i in range(100))
open(d + "/a.txt", "wb").write(a)
b = "Ünïcödé and plain words, repeated. ".encode() * 40
open(d + "/b.raw", "wb").write(b)
gzip.open(d + "/b.txt.gz", "wb").write(b)
EOF
cat "$tmp/a.txt" "$tmp/b.raw" >"$tmp/all.raw"
total=$(stat -c %s "$tmp/all.raw")
mkdir "$tmp/s"
"$cli" tokenize "$tmp/a.txt" "$tmp/b.txt.gz" -o "$tmp/s/t" --val-fraction 0.25 --shard-tokens 1000 >"$tmp/tok.out"
check "tokenize: exit 0" "[ $? -eq 0 ]"
val=$(( (total + 3) / 4 ))
check "summary line names the counts ($total tokens, $val validation)" \
  "grep -q '^$total tokens from 2 files (byte-level, vocab 256): $val validation, $((total - val)) training' $tmp/tok.out"
nval=$(ls "$tmp"/s/t_val_*.bin | wc -l); ntrain=$(ls "$tmp"/s/t_train_*.bin | wc -l)
check "shards of at most 1000 tokens: $nval val, $ntrain train" \
  "[ $nval -eq $(( (val + 999) / 1000 )) ] && [ $ntrain -eq $(( (total - val + 999) / 1000 )) ]"
check "llm.c's header: magic 20240520, version 1, the count" \
  "[ \"\$(od -An -td4 -N12 $tmp/s/t_train_000000.bin | tr -s ' ')\" = ' 20240520 1 1000' ] && [ \$(stat -c %s $tmp/s/t_train_000000.bin) -eq 3024 ]"
"$cli" tokenize --decode "$tmp"/s/t_val_*.bin "$tmp"/s/t_train_*.bin >"$tmp/back.raw"
check "round trip: shards read back through the dataset give the original bytes" \
  "cmp -s $tmp/back.raw $tmp/all.raw"
"$cli" tokenize --decode "$tmp/s/t_val_000000.bin" >"$tmp/val.raw"
check "the validation shard is the first tokens" "cmp -s $tmp/val.raw <(head -c 1000 $tmp/all.raw)"
"$cli" tokenize --check "$tmp"/s/t_train_*.bin --seq-len 10 --vocab 256 >"$tmp/check.out"
w=0; for f in "$tmp"/s/t_train_*.bin; do n=$(( ($(stat -c %s "$f") - 1024) / 2 )); w=$(( w + (n - 1) / 10 )); done
check "--check: $ntrain files, $((total - val)) tokens, $w windows of 10 + 1" \
  "grep -q '^$ntrain files, $((total - val)) tokens, $w windows of 10 + 1 tokens' $tmp/check.out"
h=$(python3 -c 'import sys, math, collections
b = open(sys.argv[1], "rb").read(); n = len(b)
print("%.4f nats a token (%d distinct" % (-sum(v / n * math.log(v / n) for v in collections.Counter(b).values()), len(set(b))))' "$tmp/all.raw")
"$cli" tokenize --check "$tmp"/s/t_*.bin >"$tmp/check.out"
check "--check: the unigram entropy, as Python computes it ($h)" "grep -qF 'unigram entropy $h' $tmp/check.out"
"$cli" tokenize "$tmp/a.txt" -o "$tmp/s/u" --val-fraction 0 --uint32 >/dev/null
check "--uint32: magic 20240801, version 7, 4 bytes a token; --val-fraction 0: no val shard" \
  "[ \"\$(od -An -td4 -N8 $tmp/s/u_train_000000.bin | tr -s ' ')\" = ' 20240801 7' ] && [ \$(stat -c %s $tmp/s/u_train_000000.bin) -eq \$((1024 + 4 * \$(stat -c %s $tmp/a.txt))) ] && ! ls $tmp/s/u_val_* 2>/dev/null"
check "--decode of a uint32 shard" "cmp -s <($cli tokenize --decode $tmp/s/u_train_000000.bin) $tmp/a.txt"

# the demo corpus (Debian's jargon-text, `make demo-gpt`), when installed
corpus=/usr/share/doc/jargon-text/jargon.txt.gz
if [ -f $corpus ]; then
  "$cli" tokenize $corpus -o "$tmp/s/jargon" >/dev/null
  check "the demo corpus: 1681817 tokens, 168182 validation; round trip" \
    "[ \$(stat -c %s $tmp/s/jargon_val_000000.bin) -eq \$((1024 + 2 * 168182)) ] && cmp -s <($cli tokenize --decode $tmp/s/jargon_val_000000.bin $tmp/s/jargon_train_000000.bin) <(zcat $corpus)"
else
  echo "ok - # skip the demo corpus: $corpus not installed (apt-get install jargon-text)"
fi

# usage and bad input: exit 2 naming what is wrong, nothing written
mkdir "$tmp/none"
expect 2 "no input files" -- "$cli" tokenize -o "$tmp/none/x"
expect 2 "$tmp/missing.txt" "No such file" -- "$cli" tokenize "$tmp/missing.txt" -o "$tmp/none/x"
expect 2 "--bpe-vocab and --bpe-encoder go together" -- "$cli" tokenize "$tmp/a.txt" -o "$tmp/none/x" --bpe-vocab "$tmp/a.txt"
expect 2 "not writable" -- "$cli" tokenize "$tmp/a.txt" -o "$tmp/nodir/x"
expect 2 "--val-fraction" -- "$cli" tokenize "$tmp/a.txt" -o "$tmp/none/x" --val-fraction 0.9
printf 'x' >"$tmp/one.txt"
expect 2 "too few for a training shard" -- "$cli" tokenize "$tmp/one.txt" -o "$tmp/none/x"
head -c $(( $(stat -c %s "$tmp/b.txt.gz") / 2 )) "$tmp/b.txt.gz" >"$tmp/cut.gz"
expect 2 "$tmp/cut.gz" -- "$cli" tokenize "$tmp/cut.gz" -o "$tmp/none/x"
printf '{"a": 0}' >"$tmp/enc.json"; printf '#version: 0.2\na b\n' >"$tmp/vocab.bpe"
expect 2 "$tmp/enc.json" "no token for the byte 0x00" -- "$cli" tokenize "$tmp/a.txt" -o "$tmp/none/x" --bpe-vocab "$tmp/vocab.bpe" --bpe-encoder "$tmp/enc.json"
check "nothing written by the refused runs" "[ -z \"\$(ls $tmp/none)\" ]"

# malformed shards: --check exits 2 naming the file, the offset and the value
good=$tmp/s/t_train_000000.bin
bad() { cp "$good" "$tmp/$1"; python3 -c "$2" "$tmp/$1"; }
bad magic.bin 'import sys; f=open(sys.argv[1],"r+b"); f.write((7).to_bytes(4,"little"))'
expect 2 "$tmp/magic.bin" "offset 0" "magic 7" -- "$cli" tokenize --check "$tmp/magic.bin"
bad version.bin 'import sys; f=open(sys.argv[1],"r+b"); f.seek(4); f.write((3).to_bytes(4,"little"))'
expect 2 "$tmp/version.bin" "offset 4" "version 3" -- "$cli" tokenize --check "$tmp/version.bin"
bad truncated.bin 'import sys,os; os.truncate(sys.argv[1], 2000)'
expect 2 "$tmp/truncated.bin" "offset 8" "token count 1000 needs 2000 bytes" -- "$cli" tokenize --check "$tmp/truncated.bin"
bad header.bin 'import sys,os; os.truncate(sys.argv[1], 10)'
expect 2 "$tmp/header.bin" "10 bytes" "1024-byte header" -- "$cli" tokenize --check "$tmp/header.bin"
bad count.bin 'import sys; f=open(sys.argv[1],"r+b"); f.seek(8); f.write((5000).to_bytes(4,"little"))'
expect 2 "$tmp/count.bin" "offset 8" "token count 5000" -- "$cli" tokenize --check "$tmp/count.bin"
bad vocab.bin 'import sys; f=open(sys.argv[1],"r+b"); f.seek(1024+2*17); f.write((300).to_bytes(2,"little"))'
expect 2 "$tmp/vocab.bin" "offset 1058" "token 300" "vocabulary size 256" -- "$cli" tokenize --check "$tmp/vocab.bin" --vocab 256
expect 2 "$good" "1000 tokens, fewer than seq_len + 1 = 1001" -- "$cli" tokenize --check "$good" --seq-len 1000
expect 2 "$tmp/nope.bin" -- "$cli" tokenize --check "$tmp/nope.bin"

# an output that cannot be written: exit 4 naming it, no temp file left
if [ "${STRATA_SANITIZED:-0}" = 1 ]; then echo "ok - # skip ulimit -f under a sanitizer"; else
  (ulimit -f 2; "$cli" tokenize "$tmp/a.txt" "$tmp/b.txt.gz" -o "$tmp/none/big" --val-fraction 0 >/dev/null 2>"$tmp/err"; echo $? >"$tmp/rc")
  check "a write past ulimit -f: exit 4 naming the file, nothing left" \
    "[ \$(cat $tmp/rc) -eq 4 ] && grep -q 'big_train_000000.bin' $tmp/err && [ -z \"\$(ls $tmp/none)\" ]"
fi
exit $fail
