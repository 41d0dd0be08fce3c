#!/usr/bin/env python3
"""Independent reader for TensorBoard event files (standard library only).

Usage: tb_decode.py LOG_DIR

Walks LOG_DIR for files whose name contains "tfevents", parses the TFRecord
frames (uint64 LE length, uint32 LE masked CRC-32C of the length, data,
uint32 LE masked CRC-32C of the data), checks both CRCs with its own bitwise
CRC-32C, decodes each Event protobuf by hand and prints one JSON line per
scalar: {"run", "step", "tag", "value", "wall_time"}; and for the file_version
record {"run", "file_version"}. "run" is the file's directory relative to
LOG_DIR ("train", "validation"). Exits 1 with a message on stderr on any CRC,
framing or protobuf error, 2 on usage errors.
"""
import json
import math
import os
import struct
import sys


class DecodeError(Exception):
    pass


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_varint(buf, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than 10 bytes")


def fields(buf):
    """Yield (field number, wire type, value) for each field of a message."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        num, wire = key >> 3, key & 7
        if num == 0:
            raise DecodeError("field number 0")
        if wire == 0:
            val, pos = read_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise DecodeError("truncated 64-bit field %d" % num)
            val, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise DecodeError("length-delimited field %d overruns message" % num)
            val, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise DecodeError("truncated 32-bit field %d" % num)
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise DecodeError("unsupported wire type %d (field %d)" % (wire, num))
        yield num, wire, val


def expect_wire(num, wire, want, what):
    if wire != want:
        raise DecodeError("%s (field %d) has wire type %d, expected %d" % (what, num, wire, want))


def decode_value(buf):
    tag, value = None, None
    for num, wire, val in fields(buf):
        if num == 1:
            expect_wire(num, wire, 2, "Value.tag")
            tag = val.decode("utf-8")
        elif num == 2:
            expect_wire(num, wire, 5, "Value.simple_value")
            value = struct.unpack("<f", val)[0]
    if tag is None or value is None:
        raise DecodeError("Summary.Value without tag or simple_value")
    return tag, value


def decode_event(buf):
    ev = {"wall_time": 0.0, "step": 0, "values": []}
    for num, wire, val in fields(buf):
        if num == 1:
            expect_wire(num, wire, 1, "Event.wall_time")
            ev["wall_time"] = struct.unpack("<d", val)[0]
        elif num == 2:
            expect_wire(num, wire, 0, "Event.step")
            ev["step"] = val - (1 << 64) if val >= 1 << 63 else val
        elif num == 3:
            expect_wire(num, wire, 2, "Event.file_version")
            ev["file_version"] = val.decode("utf-8")
        elif num == 5:
            expect_wire(num, wire, 2, "Event.summary")
            for snum, swire, sval in fields(val):
                if snum == 1:
                    expect_wire(snum, swire, 2, "Summary.value")
                    ev["values"].append(decode_value(sval))
    return ev


def records(data):
    """Yield the data of each TFRecord frame, checking both CRCs."""
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise DecodeError("offset %d: truncated frame header" % pos)
        head = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if hcrc != masked_crc(head):
            raise DecodeError("offset %d: length CRC mismatch" % pos)
        start = pos + 12
        if start + length + 4 > len(data):
            raise DecodeError("offset %d: truncated frame data" % pos)
        body = data[start:start + length]
        (dcrc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if dcrc != masked_crc(body):
            raise DecodeError("offset %d: data CRC mismatch" % pos)
        yield body
        pos = start + length + 4


def jnum(v):
    # JSON has no NaN/Inf; print them as strings.
    return v if math.isfinite(v) else str(v)


def decode_file(path, run, out):
    with open(path, "rb") as f:
        data = f.read()
    first = True
    for body in records(data):
        ev = decode_event(body)
        if first and "file_version" not in ev:
            raise DecodeError("first record is not a file_version Event")
        first = False
        if "file_version" in ev:
            out.append({"run": run, "file_version": ev["file_version"]})
        for tag, value in ev["values"]:
            out.append({"run": run, "step": ev["step"], "tag": tag,
                        "value": jnum(value), "wall_time": ev["wall_time"]})
    if first:
        raise DecodeError("no records")


def main(argv):
    if len(argv) != 2:
        print("usage: tb_decode.py LOG_DIR", file=sys.stderr)
        return 2
    root = argv[1]
    out = []
    nfiles = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if "tfevents" not in name:
                continue
            path = os.path.join(dirpath, name)
            run = os.path.relpath(dirpath, root).replace(os.sep, "/")
            try:
                decode_file(path, run, out)
            except (DecodeError, UnicodeDecodeError) as e:
                print("%s: %s" % (path, e), file=sys.stderr)
                return 1
            nfiles += 1
    if nfiles == 0:
        print("%s: no event files" % root, file=sys.stderr)
        return 1
    for rec in out:
        print(json.dumps(rec, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
