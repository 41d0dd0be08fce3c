#!/usr/bin/env bash
# strata train --model gpt end to end: the small default config trains on the
# generated corpus and the loss falls; --save-llmc writes an llm.c checkpoint
# that --init-from reads back (a run from it starts where the first ended);
# --save-hf's safetensors (Hugging Face names) read back by --init-from the
# same; --text trains on a file's bytes; a run killed with -9 resumes from
# --backup-dir to the uninterrupted run's bytes, and its --log-every 1 steps
# (the first after the resume, inside a stretch, too) log the uninterrupted
# run's losses; bad flags exit 2 naming the flag.
set -u
cli=${STRATA_CLI:?set by CTest}
src=${STRATA_SOURCE_DIR:?set by CTest}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi; }
first_loss() { sed -n 's/^step [0-9]*: loss \([0-9.]*\).*/\1/p' "$1" | head -1; }
last_loss() { sed -n 's/^step [0-9]*: loss \([0-9.]*\).*/\1/p' "$1" | tail -1; }

small="--gpt-layers 2 --gpt-heads 2 --gpt-width 32 --seq-len 32"
"$cli" train --model gpt $small --steps 60 --eval-every 20 --batch-size 8 --lr 3e-3 \
  --warmup-steps 5 --clip-norm 1 --save-llmc "$tmp/a.bin" --save-hf "$tmp/a.safetensors" \
  >"$tmp/a.out" 2>"$tmp/a.err"
check "gpt trains (exit 0)" "[ $? -eq 0 ]"
cat "$tmp/a.out" "$tmp/a.err"
a0=$(first_loss "$tmp/a.out"); a1=$(last_loss "$tmp/a.out")
check "the loss falls ($a0 -> $a1) below ln(256) - 1" "awk 'BEGIN{exit !($a1 < $a0 && $a1 < 4.55)}'"
check "--save-llmc wrote the llm.c header" \
  "[ \"\$(od -An -tx4 -N8 $tmp/a.bin | tr -s ' ')\" = ' 0134d7c6 00000003' ]"
"$cli" train --model gpt $small --steps 20 --eval-every 20 --batch-size 8 --lr 1e-4 \
  --init-from "$tmp/a.bin" >"$tmp/b.out" 2>&1
check "--init-from exits 0" "[ $? -eq 0 ]"
b0=$(first_loss "$tmp/b.out")
"$cli" train --model gpt $small --steps 20 --eval-every 20 --batch-size 8 --lr 1e-4 \
  --init-from "$tmp/a.safetensors" >"$tmp/h.out" 2>&1
check "--init-from FILE.safetensors (Hugging Face names) trains as the llm.c file does" \
  "[ \"\$(grep ^step $tmp/h.out | sed 's/ - [0-9]* ms.*//')\" = \"\$(grep ^step $tmp/b.out | sed 's/ - [0-9]* ms.*//')\" ]"
check "--init-from starts where the first run ended ($b0 < $a0)" "awk 'BEGIN{exit !($b0 < $a0 - 0.3)}'"
head -c 20000 "$0" >"$tmp/text.txt"; cat "$tmp/text.txt" "$tmp/text.txt" "$tmp/text.txt" >"$tmp/t3.txt"
"$cli" train --model gpt $small --text "$tmp/t3.txt" --steps 20 --eval-every 10 --quiet >"$tmp/c.out" 2>&1
check "--text trains (exit 0)" "[ $? -eq 0 ]"
"$cli" tokenize "$tmp/t3.txt" -o "$tmp/sh" --val-fraction 0.1 >/dev/null 2>&1
"$cli" train --model gpt $small --data "$tmp/sh_*.bin" --steps 10 --eval-every 5 >"$tmp/d.out" 2>&1
check "--data token shards train (exit 0, a validation loss)" \
  "[ $? -eq 0 ] && grep -q 'val_loss' $tmp/d.out && grep -q '^trained 10 steps' $tmp/d.out"
"$cli" train --model gpt $small --data "$tmp/sh_*.bin" --steps 6 --eval-every 3 --log-every 1 \
  --no-shuffle --report "$tmp/st.json" >"$tmp/st.out" 2>&1
check "--log-every 1: each step's own loss, their mean the stretch's loss" "python3 -c \"
import json, sys
r = json.load(open('$tmp/st.json')); s = r['steps']; h = r['history']
ok = [k for k, _ in s] == [1, 2, 3, 4, 5, 6] and abs(sum(v for _, v in s[:3]) / 3 - h[0]['loss']) < 1e-4 \\
     and abs(sum(v for _, v in s[3:]) / 3 - h[1]['loss']) < 1e-4
sys.exit(0 if ok else 1)\""
# --no-shuffle across --eval-every stretches: step k reads batch k of the
# stream (tokens [k B T + b T, ...]), not the stretch's k-th batch again.
# With lr 1e-12 (the weights stay, to rounding) step k's own loss is the
# first step's of a run on the shard cut to start at token k B T.
python3 - "$tmp/sh_train_000000.bin" "$tmp/off" 128 <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read(); h = list(struct.unpack("<256i", d[:1024]))
w = 2 if h[1] == 1 else 4
for k in (0, 3, 5):
    t = d[1024 + k * int(sys.argv[3]) * w:]; h[2] = len(t) // w
    open(f"{sys.argv[2]}{k}_train_000000.bin", "wb").write(struct.pack("<256i", *h) + t)
PY
L=(--model gpt $small --no-shuffle --batch-size 4 --lr 1e-12 --quiet)
"$cli" train "${L[@]}" --data "$tmp/off0_*.bin" --steps 6 --eval-every 2 --csv "$tmp/s.csv" >/dev/null 2>&1
ok=$?
for k in 0 3 5; do
  "$cli" train "${L[@]}" --data "$tmp/off${k}_*.bin" --steps 1 --csv "$tmp/o$k.csv" >/dev/null 2>&1 || ok=1
done
check "--no-shuffle, 3 stretches of 2 steps: steps 1, 4 and 6 read batches 0, 3 and 5 (--csv)" \
  "[ $ok -eq 0 ] && python3 -c \"
import sys
r = lambda f: {int(a): float(b) for a, b in (l.split(',') for l in open(f).read().split()[1:])}
s = r('$tmp/s.csv'); o = {k: r(f'$tmp/o{k}.csv')[1] for k in (0, 3, 5)}
print('steps', s, 'cut runs', o)
ok = sorted(s) == list(range(1, 7)) and all(abs(s[k + 1] - o[k]) <= 1e-5 * o[k] for k in o)
sys.exit(0 if ok and abs(s[4] - o[0]) > 1e-3 else 1)\""

# --backup-dir: killed with -9 after its first backup, started again: it
# resumes there (its first steps not run again) to an uninterrupted run's bytes.
B=(--model gpt $small --text "$tmp/t3.txt" --steps 300 --eval-every 100 --batch-size 4)
"$cli" train "${B[@]}" --quiet --log-every 1 --report "$tmp/whole.json" --save "$tmp/whole.st" >/dev/null 2>&1
"$cli" train "${B[@]}" --quiet --backup-dir "$tmp/bk" --backup-every 3 --save "$tmp/res.st" >/dev/null 2>&1 &
pid=$!
for i in $(seq 500); do [ -e "$tmp/bk/latest" ] && break; sleep 0.01; done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
check "the killed run left a backup" "[ -e $tmp/bk/latest ]"
"$cli" train "${B[@]}" --backup-dir "$tmp/bk" --backup-every 3 --log-every 1 --save "$tmp/res.st" \
  --report "$tmp/res.json" >"$tmp/res.out" 2>&1
check "resumed after kill -9 (exit 0, its first steps not run again)" \
  "[ $? -eq 0 ] && ! grep -q '^step 1: step_loss' $tmp/res.out && grep -q '^step 300: step_loss' $tmp/res.out"
check "resumed = uninterrupted, byte for byte" "cmp -s $tmp/whole.st $tmp/res.st"
# --log-every after a resume in the middle of a stretch: each step's own loss,
# the first one too, is the uninterrupted run's (the report's "steps")
check "--log-every 1 after the resume: every step's loss = the uninterrupted run's" \
  "python3 $src/tests/cmp_step_logs.py $tmp/whole.json $tmp/res.json 100"
check "the backup is removed once training completes" "[ ! -e $tmp/bk/latest ]"

bad() { # $1 what, $2 needle, rest: the arguments
  local what=$1 needle=$2; shift 2
  "$cli" train --model gpt "$@" >"$tmp/bad.out" 2>&1; local rc=$?
  check "$what: exit 2 naming $needle (got $rc)" "[ $rc -eq 2 ] && grep -q -- '$needle' $tmp/bad.out"
}
bad "heads not dividing the width" "--gpt-heads" --gpt-heads 3
bad "zero layers" "--gpt-layers" --gpt-layers 0
bad "unknown preset" "--gpt-preset" --gpt-preset gpt5
bad "unknown option" "--bogus" --bogus 1
bad "negative clip" "--clip-norm" --clip-norm -1
bad "warmup beyond the steps" "--warmup-steps" --steps 10 --warmup-steps 10
bad "steps not whole stretches" "--steps 12 is not a multiple of --eval-every 5" --steps 12 --eval-every 5
bad "missing --text" "--text" --text "$tmp/none.txt"
bad "--text with a small vocabulary" "--vocab" --text "$tmp/t3.txt" --vocab 100
bad "checkpoint of another width" "field C (width" --gpt-layers 2 --gpt-heads 2 --seq-len 32 --gpt-width 64 --init-from "$tmp/a.bin" --steps 1
bad "strategy not supported" "--strategy" --strategy central_storage
bad "--data that is not token shards" "strata tokenize" --data "$tmp/t3.txt"
bad "--data and --text" "two corpora" --data "$tmp/sh_*.bin" --text "$tmp/t3.txt"
bad "--data shards that do not exist" "none_" --data "$tmp/none_*.bin"
exit $fail
