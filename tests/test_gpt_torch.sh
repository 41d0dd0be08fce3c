#!/usr/bin/env bash
# GPT-2 against PyTorch (issue 31): tests/gpt_probe.c writes a small GPT's
# initial weights (llm.c checkpoint, GPT-2's initialisation), one batch, its
# logits, the gradients of its loss and the weights after 10 AdamW steps (torch's form,
# weight decay 0.1; a second run with clipping to norm 0.5), for 2 layers, 2
# heads, width 64, T 16, vocab 64, batch 4; tests/gpt_torch_check.py runs
# gpt2_torch.py's model on the same weights and batch in float64 and checks
# the logits, the loss, all 16 gradient tensors and each step's loss within 1e-4 relative
# (max error over a tensor / its max magnitude), the final weights within 1e-3;
# then strata train itself from the probe's weights on an llm.c token shard
# (--no-shuffle, --log-every 1, --csv) against the twin on llm.c's batches
# (tests/gpt_torch_steps.py): each step's loss within 1e-4.
# Skips (77) without python3-torch.
set -u
cli=${STRATA_CLI:?set by CTest}
probe=$(dirname "$cli")/gpt_probe
src=${STRATA_SOURCE_DIR:?set by CTest}
py=/usr/bin/python3; [ -x $py ] || py=python3
if ! $py -c "import torch, numpy" 2>/dev/null; then
  echo "SKIP: PyTorch is not installed for $py (apt-get install python3-torch)"; exit 77
fi
[ -x "$probe" ] || { echo "not ok - $probe missing (built with the tests)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
for clip in 0 0.5; do
  d=$tmp/clip$clip; mkdir -p $d
  "$probe" 2 2 64 16 64 4 10 1e-3 0.1 $clip $d >$d/probe.txt || { echo "not ok - gpt_probe (clip $clip)"; fail=1; continue; }
  if $py "$src/tests/gpt_torch_check.py" $d 10 1e-3 0.1 $clip; then echo "ok - PyTorch agrees (clip $clip)"
  else echo "not ok - PyTorch disagrees (clip $clip)"; fail=1; fi
done
# Step by step through the CLI: the probe's initial weights, an llm.c token
# shard read without shuffling (batch k = tokens [k B T + b T, ... + T]),
# --log-every 1 --csv: each of 12 steps' own loss = the twin's (1e-4).
d=$tmp/clip0
$py - "$tmp/tok_train_000000.bin" <<'PY'
import sys, numpy as np
t = np.random.default_rng(5).integers(0, 64, 12 * 4 * 16 + 1 + 100).astype(np.uint16)
h = np.zeros(256, np.int32); h[:3] = [20240520, 1, t.size]
open(sys.argv[1], "wb").write(h.tobytes() + t.tobytes())
PY
"$cli" train --model gpt --gpt-layers 2 --gpt-heads 2 --gpt-width 64 --seq-len 16 --vocab 64 \
  --init-from $d/init.bin --data "$tmp/tok_*.bin" --no-shuffle --batch-size 4 --lr 1e-3 \
  --weight-decay 0.1 --steps 12 --eval-every 4 --log-every 1 --csv $tmp/steps.csv --quiet >$tmp/steps.out 2>&1
if [ $? -eq 0 ] && $py "$src/tests/gpt_torch_steps.py" $d/init.bin $tmp/tok_train_000000.bin $tmp/steps.csv 4 1e-3 0.1; then
  echo "ok - strata train --no-shuffle --log-every 1: each step's loss = PyTorch's on llm.c's batches"
else cat $tmp/steps.out; echo "not ok - the CLI's steps against PyTorch"; fail=1; fi
exit $fail
