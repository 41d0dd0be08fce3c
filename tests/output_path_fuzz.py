#!/usr/bin/env python3
"""Scripted fuzz of `strata train` output-path combinations (issue 17):
    output_path_fuzz.py STRATA CASES SEED
Each case builds a fresh directory holding inputs (an IDX set), regular
files, symlinks (to files, to inputs, to special files, to directories),
a FIFO, a character device (when root), directories and nested ones, then
gives --save/--report/--csv/--plot/--checkpoint-dir/--backup-dir/--log-dir
random paths from that pool (same file twice, through links, nested dirs,
special files, inputs). Invariants, whatever the exit code:
  - no signal, no hang (10 s), exit 0, 2 or 4;
  - the inputs are unchanged;
  - every entry that existed before and is not named as an output (and is
    not inside an output directory) is unchanged: type, link target, bytes;
  - special files stay special, symlinks stay symlinks;
  - exit 2: nothing at all changed (exit 4: only outputs may have);
  - exit 0: each file output is a regular file with content, no two file
    outputs (after resolving links) are the same file, no temp left.
Prints one line per failure and a summary; exit 1 on any failure."""
import hashlib, os, random, shutil, stat, subprocess, sys, tempfile

STRATA, CASES, SEED = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SRC = os.path.dirname(os.path.abspath(__file__))
ROOT = os.geteuid() == 0
FILE_OPTS = ["--save", "--report", "--csv", "--plot"]
DIR_OPTS = ["--checkpoint-dir", "--backup-dir", "--log-dir"]
IDX = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
       "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]


def build(d):
    """The pool of paths a case can use (relative to d)."""
    shutil.copytree(f"{BASE}/data", f"{d}/data")
    for name in ("a", "b"):
        open(f"{d}/{name}", "w").write(name * 100)
    os.mkdir(f"{d}/dir")
    os.mkdir(f"{d}/dir/sub")
    open(f"{d}/dir/keep", "w").write("keep")
    os.symlink("a", f"{d}/link_a")
    os.symlink("data/" + IDX[0], f"{d}/link_input")
    os.symlink("dir", f"{d}/link_dir")
    os.symlink("nowhere", f"{d}/dangling")
    os.mkfifo(f"{d}/fifo")
    os.symlink("fifo", f"{d}/link_fifo")
    if ROOT:
        os.mknod(f"{d}/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.symlink("null", f"{d}/link_null")
    pool = ["a", "b", "./a", "dir/../a", "link_a", "link_input", "data/" + IDX[0],
            "data/" + IDX[3], "dir", "dir/sub", "dir/keep", "dir/new", "link_dir",
            "link_dir/new", "dangling", "fifo", "link_fifo", "new1", "new2", "./new1",
            "dir/sub/new", "data", "data/new", "new1/x"]
    if ROOT:
        pool += ["null", "link_null"]
    return pool


def snapshot(d):
    """Every entry under d, not following links: type, link target, bytes."""
    snap = {}
    for top, dirs, files in os.walk(d):
        for name in dirs + files:
            p = os.path.join(top, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, d)
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                snap[rel] = ("file", hashlib.sha256(open(p, "rb").read()).hexdigest())
            else:
                snap[rel] = (stat.S_IFMT(st.st_mode), "")
    return snap


def under(rel, outs, d):
    """rel is an output, or inside an output directory (links resolved)."""
    real = os.path.realpath(os.path.join(d, rel))
    for opt, p in outs:
        rp = os.path.realpath(os.path.join(d, p))
        if real == rp or os.path.normpath(os.path.join(d, rel)) == os.path.normpath(os.path.join(d, p)):
            return True
        if opt in DIR_OPTS and (real.startswith(rp + "/")):
            return True
    return False


def one_case(rng, n):
    d = tempfile.mkdtemp(prefix="fz", dir=BASE)
    pool = build(d)
    outs = []
    for opt in FILE_OPTS + DIR_OPTS:
        if rng.random() < 0.45:
            outs.append((opt, rng.choice(pool)))
    if not outs:
        outs.append((rng.choice(FILE_OPTS), rng.choice(pool)))
    args = [STRATA, "train", "--model", "mlp", "--data", "data", "--quiet", "--epochs", "1"]
    for opt, p in outs:
        args += [opt, p]
        if opt == "--checkpoint-dir":
            args += ["--monitor", "loss"]
    before = snapshot(d)
    try:
        r = subprocess.run(args, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=10)
        rc, err = r.returncode, r.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, err = "hang", ""
    after = snapshot(d)
    bad = []
    if rc not in (0, 2, 4):
        bad.append(f"exit {rc}")
    named = {os.path.normpath(p) for o, p in outs}
    backups = {os.path.normpath(p) for o, p in outs if o == "--backup-dir"}
    for rel, what in before.items():
        now = after.get(rel)
        if rel.startswith("data/") and now != what:
            bad.append(f"input {rel} changed")
        elif rc == 0 and rel in backups and now is None and not any(
                k.startswith(rel + "/") for k in before):
            pass  # an empty --backup-dir: deleted when training completes, as documented
        elif rc == 0 and rel in named and what[0] == "link" and now and now[0] == "file":
            pass  # the output path was a link: replaced by the new file, its target untouched
        elif what[0] != "file" and now != what and not (what[0] == stat.S_IFDIR and now):
            bad.append(f"{rel} ({what[0]}) changed to {now}")
        elif rc == 2 and now != what:
            bad.append(f"exit {rc} but {rel} changed")
        elif after.get(rel) != what and not under(rel, outs, d):
            bad.append(f"{rel} changed though not an output")
    if rc == 2 and set(after) != set(before):
        bad.append(f"exit 2 but new entries {sorted(set(after) - set(before))}")
    if rc == 0:
        files = [os.path.realpath(os.path.join(d, p)) for o, p in outs if o in FILE_OPTS]
        if len(set(files)) != len(files):
            bad.append("two file outputs share a file")
        for f in files:
            if not os.path.isfile(f) or os.path.getsize(f) == 0:
                bad.append(f"output {f} missing or empty")
    temps = [k for k in after if ".tmp." in k or "st-tmp" in k or ".tmp-ckpt-" in k]
    if rc != "hang" and temps:
        bad.append(f"temps left {temps}")
    if bad:
        print(f"case {n}: {' '.join(args[2:])} -> exit {rc}: {'; '.join(bad)}\n    {err.strip()[:300]}")
    shutil.rmtree(d, ignore_errors=True)
    return not bad


BASE = tempfile.mkdtemp(prefix="strata_pathfuzz_")
try:
    subprocess.run([sys.executable, f"{SRC}/mkidx.py", f"{BASE}/data"], check=True)
    rng = random.Random(SEED)
    fails = sum(not one_case(rng, n) for n in range(CASES))
    print(f"{CASES} cases, {fails} with a violation (seed {SEED})")
finally:
    shutil.rmtree(BASE, ignore_errors=True)
sys.exit(1 if fails else 0)
