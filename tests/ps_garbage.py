#!/usr/bin/env python3
"""Garbage at the ports of a running parameter-server cluster (helper of
tests/test_ps_garbage.sh; not a test itself).

usage: ps_garbage.py ROUNDS HOST:PORT...

Per port and round, each on a fresh TCP connection:
  - raw bytes with no ZMTP greeting (libzmq drops the connection);
  - a ZMTP 3.0 DEALER (NULL mechanism: the cluster runs --insecure) that
    sends Strata frames: random bytes (bad magic), 10 bytes (short), a
    header claiming 1000 payload bytes with 10 behind it (truncated), a
    header of an unknown type, a STOP of another job; the server must drop
    and count each one;
  - a ZMTP frame announcing 2^40 bytes (over ZMQ_MAXMSGSIZE: libzmq
    disconnects) followed by a few bytes only.
Prints how many frames it delivered. Exits 0 unless nothing connected."""
import os
import socket
import struct
import sys
import time

GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\0" * 16 + b"\0" + b"\0" * 31
READY_BODY = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"


def header(msg_type, job, payload_len, role=1, index=0):
    return struct.pack("<IHHQHHIQQQQQ", 0x53505453, 1, msg_type, job, role, index, 1, 1, 0, 0, 0,
                       payload_len)


def zmtp_frame(body):
    if len(body) < 256:
        return bytes([0x00, len(body)]) + body
    return b"\x02" + struct.pack(">Q", len(body)) + body


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=2)
    s.settimeout(2)
    return s


def recv_n(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def handshake(s):
    s.sendall(GREETING)
    recv_n(s, 64)
    s.sendall(bytes([0x04, len(READY_BODY)]) + READY_BODY)
    flags = recv_n(s, 1)[0]  # the server's READY
    size = struct.unpack(">Q", recv_n(s, 8))[0] if flags & 0x02 else recv_n(s, 1)[0]
    recv_n(s, size)


def one_round(addr):
    delivered = 0
    try:  # no greeting at all
        s = connect(addr)
        s.sendall(os.urandom(200))
        s.close()
    except OSError:
        pass
    try:  # Strata frames that must be dropped
        s = connect(addr)
        handshake(s)
        frames = [os.urandom(100), os.urandom(10), header(5, 1234, 1000) + os.urandom(10),
                  header(200, 1234, 0), header(12, int.from_bytes(os.urandom(8), "little") | 1, 0, role=0)]
        for f in frames:
            s.sendall(zmtp_frame(f))
            delivered += 1
        time.sleep(0.05)
        s.close()
    except OSError as e:
        print(f"{addr}: frames: {e!r}", file=sys.stderr)
    try:  # a frame over ZMQ_MAXMSGSIZE
        s = connect(addr)
        handshake(s)
        s.sendall(b"\x02" + struct.pack(">Q", 1 << 40) + os.urandom(64))
        time.sleep(0.05)
        s.close()
    except OSError:
        pass
    return delivered


def main():
    rounds, addrs = int(sys.argv[1]), sys.argv[2:]
    total = 0
    for _ in range(rounds):
        for a in addrs:
            total += one_round(a)
    print(f"delivered {total} frames to {len(addrs)} ports")
    return 0 if total else 1


if __name__ == "__main__":
    sys.exit(main())
