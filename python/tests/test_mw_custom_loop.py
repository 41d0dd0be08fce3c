"""strategy.run and strategy.reduce under MultiWorkerMirroredStrategy
(issue 14): two processes launched with mpirun -np 2 run a custom loop of
strategy.run(train_on_batch) over experimental_distribute_dataset and end
with fit's weights bytes (worker 0 and worker 1 alike, Dropout and
BatchNormalization included); strategy.reduce(SUM|MEAN, axis) across the
workers equals NumPy's on the gathered values (mw_custom_loop.py)."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest


def _mpirun(mode, outdir):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("mpirun not installed (openmpi-bin)")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mw_custom_loop.py")
    r = subprocess.run([mpirun, "--oversubscribe", "--allow-run-as-root", "-np", "2", "-x", "PYTHONPATH",
                        "-x", "STRATA_MW_OUT=" + outdir, sys.executable, worker, mode],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0 and "not built" in r.stderr + r.stdout:
        pytest.skip("this build has no MPI transport")
    assert r.returncode == 0, r.stderr[-4000:]
    lines = {}
    for rank in range(2):
        with open(os.path.join(outdir, "%s-rank%d" % (mode, rank))) as f:
            lines[rank] = dict(l.split(" ", 1) for l in f.read().splitlines())
    return lines


def test_custom_loop_across_workers_gives_fit_weights_bytes():
    outdir = tempfile.mkdtemp()
    try:
        fit = _mpirun("fit", outdir)
        loop = _mpirun("loop", outdir)
    finally:
        shutil.rmtree(outdir)
    # each worker's share of the global batches (64 -> 32 / 32, 45 -> 22 / 23)
    assert loop[0]["sizes"] == str([32] * 4 + [22] + [32] * 4 + [22])
    assert loop[1]["sizes"] == str([32] * 4 + [23] + [32] * 4 + [23])
    assert fit[0]["weights"] == fit[1]["weights"]
    assert loop[0]["weights"] == loop[1]["weights"]
    assert loop[0]["weights"] == fit[0]["weights"]  # exactly fit's arithmetic
    for rank in range(2):
        for name in ("sum", "mean", "sum0", "mean0", "int"):
            assert loop[rank][name].startswith("same "), (rank, name, loop[rank][name])


def test_gradient_tape_loop_across_workers():
    """The GradientTape step of the custom-training tutorial on 2 workers:
    the same weights bytes on both, fit's within float rounding (the loss's
    gradient is NumPy's float64, fit's the engine's float32)."""
    import numpy as np
    outdir = tempfile.mkdtemp()
    try:
        fit = _mpirun("fit", outdir)
        tape = _mpirun("tape", outdir)
    finally:
        shutil.rmtree(outdir)
    assert tape[0]["weights"] == tape[1]["weights"]
    assert tape[0]["eager"] == tape[1]["eager"] == "refused True"
    got = np.frombuffer(bytes.fromhex(tape[0]["weights"]), dtype=np.float32)
    want = np.frombuffer(bytes.fromhex(fit[0]["weights"]), dtype=np.float32)
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)

