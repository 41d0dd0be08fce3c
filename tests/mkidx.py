#!/usr/bin/env python3
"""Write a small MNIST-style IDX set (64 train, 32 test, gzip) for the tests:
    mkidx.py DIR [CASE]
CASE other-seed writes other (valid) examples; any other CASE breaks one
file on purpose: bad-magic, truncated, count-mismatch, huge-dims,
bigger-than-file, labels-out-of-range."""
import gzip, os, random, struct, sys
d = sys.argv[1]; opts = sys.argv[2:]
os.makedirs(d, exist_ok=True)
random.seed(2 if "other-seed" in opts else 1)  # other-seed: a different valid set
def idx(path, dims, payload, magic=None, gz=True):
    head = (magic if magic is not None else struct.pack(">BBBB", 0, 0, 8, len(dims)))
    head += b"".join(struct.pack(">I", x) for x in dims)
    data = head + payload
    (gzip.open if gz else open)(path, "wb").write(data)
def images(n): return bytes(random.randrange(256) for _ in range(n * 784))
def labels(n, top=10): return bytes(random.randrange(top) for _ in range(n))
ntr, nte = 64, 32
idx(f"{d}/train-images-idx3-ubyte.gz", [ntr, 28, 28], images(ntr))
idx(f"{d}/train-labels-idx1-ubyte.gz", [ntr], labels(ntr))
idx(f"{d}/t10k-images-idx3-ubyte.gz", [nte, 28, 28], images(nte))
idx(f"{d}/t10k-labels-idx1-ubyte.gz", [nte], labels(nte))
o = opts[0] if opts else ""
if o == "bad-magic":
    idx(f"{d}/train-images-idx3-ubyte.gz", [ntr, 28, 28], images(ntr), magic=b"\x12\x34\x08\x03")
elif o == "truncated":
    idx(f"{d}/train-images-idx3-ubyte.gz", [ntr, 28, 28], images(ntr)[:-100])
elif o == "count-mismatch":
    idx(f"{d}/train-labels-idx1-ubyte.gz", [ntr - 1], labels(ntr - 1))
elif o == "huge-dims":
    idx(f"{d}/train-images-idx3-ubyte.gz", [2**31, 2**31, 28], b"")
elif o == "bigger-than-file":
    idx(f"{d}/train-images-idx3-ubyte.gz", [100000, 28, 28], images(2), gz=False)
elif o == "labels-out-of-range":
    idx(f"{d}/train-labels-idx1-ubyte.gz", [ntr], bytes([3] * (ntr - 1) + [12]))
