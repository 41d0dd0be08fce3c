#!/usr/bin/env python3
"""Broken inputs for tests/test_bad_inputs.sh, made at run time:
    mkbad.py GOOD_DIR OUT_DIR CASE     a copy of the MNIST-style set GOOD_DIR
                                       (from mkidx.py) with one file broken as
                                       CASE says (IDX cases)
    mkbad.py - OUT_FILE CASE           a Keras JSON model config (json-* cases)
    mkbad.py WEIGHTS OUT_FILE CASE     a damaged copy of a safetensors file:
        st-flip:POS:BIT      bit BIT of byte POS flipped
        st-cut:N             the first N bytes only
        st-header-len        the 8-byte header length forged to 2^62
        st-offsets           the first tensor's data_offsets end forged to 2^40
    mkbad.py WEIGHTS - st-header-positions
                                       print the byte positions of the header
                                       outside __metadata__ (the bytes a reader
                                       must check; metadata is informational)
Prints nothing else; exits 1 on an unknown CASE."""
import gzip, os, shutil, struct, sys

good, out, case = sys.argv[1], sys.argv[2], sys.argv[3]
TRI, TRL = "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"
TEI, TEL = "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"


def header(dims, code=0x08, rank=None):
    h = struct.pack(">BBBB", 0, 0, code, len(dims) if rank is None else rank)
    return h + b"".join(struct.pack(">I", d) for d in dims)


def write(name, data, gz=True):
    """Replace OUT_DIR/name (the .gz name); gz=False writes it plain, without
    the .gz suffix, and removes the .gz twin (the loader prefers plain)."""
    path = os.path.join(out, name)
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        os.remove(path)
        with open(path[:-3], "wb") as f:
            f.write(data)


def read(name):
    with gzip.open(os.path.join(good, name), "rb") as f:
        return f.read()


def f32_images(name, poison=None):
    """The u8 images of `name` as float32 IDX (type 0x0D), each value exactly
    what the u8 pipeline computes, (float)b * (1.0f/255.0f): the product of a
    float32 and an 8-bit integer is exact in double, so rounding it once to
    float32 gives the C result. poison = (element, value) overwrites one."""
    raw = read(name)
    dims = struct.unpack(">III", raw[4:16])
    scale = struct.unpack(">f", struct.pack(">f", 1.0 / 255.0))[0]
    vals = [b * scale for b in raw[16:]]
    if poison:
        vals[poison[0]] = poison[1]
    return header(dims, code=0x0D) + struct.pack(">%df" % len(vals), *vals)


def keras(case):
    layer = lambda cls, cfg: {"class_name": cls, "config": cfg}
    if case == "json-invalid":  # truncated in the middle of the layer list
        return '{"class_name": "Sequential", "config": {"name": "s", "layers": [\n  {"class_name": "Flatten",\n'
    if case == "json-unknown-layer":
        import json
        return json.dumps(layer("Sequential", {"name": "s", "layers": [
            layer("Flatten", {"name": "flatten", "batch_input_shape": [None, 28, 28, 1]}),
            layer("FancyAttention", {"name": "fancy", "units": 10})]}))
    if case == "json-deep":  # 100000 nested arrays inside a layer config
        n = 100000
        return ('{"class_name": "Sequential", "config": {"name": "s", "layers": [{"class_name": '
                '"Dense", "config": {"name": "d", "units": ' + "[" * n + "]" * n + '}}]}}')
    if case == "json-not-sequential":
        return '{"class_name": "Graph", "config": {"name": "m", "layers": []}}'
    return None


if case.startswith("st-"):
    import json, re
    b = bytearray(open(good, "rb").read())
    n = struct.unpack("<Q", b[:8])[0]
    if case == "st-header-positions":
        head = b[8:8 + n].decode()
        m = re.search(r'"__metadata__":\{[^}]*\},?', head)
        skip = range(8 + m.start(), 8 + m.end()) if m else range(0)
        print(" ".join(str(p) for p in range(8 + n) if p not in skip))
        sys.exit(0)
    if case.startswith("st-flip:"):
        _, pos, bit = case.split(":")
        b[int(pos)] ^= 1 << int(bit)
    elif case.startswith("st-cut:"):
        b = b[:int(case.split(":")[1])]
    elif case == "st-header-len":
        b[:8] = struct.pack("<Q", 1 << 62)
    elif case == "st-offsets":  # a well-formed header whose first tensor claims 1 TiB
        h = json.loads(b[8:8 + n])
        first = next(k for k in h if k != "__metadata__")
        h[first]["data_offsets"][1] = 1 << 40
        new = json.dumps(h, separators=(",", ":")).encode()
        new += b" " * (-len(new) % 8)
        b = bytearray(struct.pack("<Q", len(new))) + new + b[8 + n:]
    else:
        sys.exit("mkbad.py: unknown case " + case)
    open(out, "wb").write(b)
    sys.exit(0)

if good == "-":
    text = keras(case)
    if text is None:
        sys.exit("mkbad.py: unknown case " + case)
    open(out, "w").write(text)
    sys.exit(0)

shutil.rmtree(out, ignore_errors=True)
shutil.copytree(good, out)
img = read(TRI)
pay = img[16:]
n = struct.unpack(">I", img[4:8])[0]
if case == "bad-dtype":  # type code 0x09 does not exist
    write(TRI, header([n, 28, 28], code=0x09) + pay)
elif case == "rank-0":
    write(TRI, header([], rank=0) + pay)
elif case == "rank-255":
    write(TRI, header([], rank=255) + pay)
elif case == "longer-plain":  # 10 bytes more than the header says, plain file
    write(TRI, img + b"\0" * 10, gz=False)
elif case == "longer-gz":
    write(TRI, img + b"\0" * 10)
elif case == "shorter-plain":  # 100 bytes fewer than the header says, plain file
    write(TRI, img[:-100], gz=False)
elif case == "overflow-labels":  # dims product overflows size_t: labels of rank 4
    write(TRL, header([0xFFFFFFFF] * 4) + b"\0" * 64)
elif case == "forged-gz":  # 4 GiB claimed, 4 KiB of payload, gzip (size unknown until inflated)
    write(TRI, header([4, 32768, 32768]) + b"\x07" * 4096)
elif case == "forged-plain":  # the same claim in a plain file
    write(TRI, header([4, 32768, 32768]) + b"\x07" * 4096, gz=False)
elif case == "forged-labels":  # 2^32-1 labels claimed, 64 present
    write(TRL, header([0xFFFFFFFF]) + b"\x01" * 64)
elif case == "test-count-mismatch":  # t10k: 32 images, 31 labels
    write(TEL, header([31]) + read(TEL)[8:8 + 31])
elif case == "i32-images":  # a valid IDX file, but not a type images can have
    write(TRI, header([n, 28, 28], code=0x0C) + b"\0\0\0\1" * (n * 784))
elif case == "f32":  # float32 images equal to what the u8 pipeline feeds the model
    write(TRI, f32_images(TRI))
    write(TEI, f32_images(TEI))
elif case == "f32-nan-train":  # NaN at element 1000 of the training images
    write(TRI, f32_images(TRI, (1000, float("nan"))))
    write(TEI, f32_images(TEI))
elif case == "f32-inf-test":  # +Inf at element 5 of the test images
    write(TRI, f32_images(TRI))
    write(TEI, f32_images(TEI, (5, float("inf"))))
elif case == "small-images":  # 20x20 images for the 28x28 models
    for name in (TRI, TEI):
        k = struct.unpack(">I", read(name)[4:8])[0]
        write(name, header([k, 20, 20]) + bytes((i * 7) % 256 for i in range(k * 400)))
elif case == "test-labels-out-of-range":  # label 10 in the test set of a 10-class model
    lab = read(TEL)
    write(TEL, lab[:8] + lab[8:-1] + bytes([10]))
elif case == "missing-test-labels":
    os.remove(os.path.join(out, TEL))
else:
    sys.exit("mkbad.py: unknown case " + case)
