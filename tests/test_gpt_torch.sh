#!/usr/bin/env bash
# GPT-2 against PyTorch (issue 31): tests/gpt_probe.c writes a small GPT's
# initial weights (llm.c checkpoint, GPT-2's initialisation), one batch, the
# gradients of its loss and the weights after 10 AdamW steps (torch's form,
# weight decay 0.1; a second run with clipping to norm 0.5), for 2 layers, 2
# heads, width 64, T 16, vocab 64, batch 4; tests/gpt_torch_check.py runs
# gpt2_torch.py's model on the same weights and batch in float64 and checks
# the loss, all 16 gradient tensors and each step's loss within 1e-4 relative
# (max error over a tensor / its max magnitude), the final weights within 1e-3.
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
exit $fail
