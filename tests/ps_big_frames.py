#!/usr/bin/env python3
"""Oversized frames at a parameter-server port run --insecure (helper of
tests/test_ps_frame_memory.sh; not a test itself; RELIABILITY.md N1).

usage: ps_big_frames.py HOST:PORT MIB [FLOOD]

Each on a fresh ZMTP 3.0 connection of the NULL mechanism: a frame header
announcing 2^63 - 1 bytes, one announcing 1 GiB (both over ZMQ_MAXMSGSIZE:
libzmq must disconnect before allocating), then a frame of MIB MiB actually
sent (under the limit: received, then dropped by Strata's frame check as bad
magic), then FLOOD (default 0) more connections announcing 2^63 - 1 bytes.
Prints 'announced PORT' per oversized announcement and 'sent N MiB from
PORT' (PORT: the client's local port), and exits 0 when every connection
was made."""
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ps_garbage import connect, handshake  # noqa: E402


def announce(addr, size):
    s = connect(addr)
    handshake(s)
    print(f"announced {s.getsockname()[1]}", flush=True)
    try:
        s.sendall(b"\x02" + struct.pack(">Q", size) + b"\x00" * 64)
        time.sleep(0.2)
    except OSError:
        pass  # disconnected: what N1 asks
    s.close()


def main():
    addr, mib = sys.argv[1], int(sys.argv[2])
    flood = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    announce(addr, (1 << 63) - 1)
    announce(addr, 1 << 30)
    s = connect(addr)
    handshake(s)
    body = b"\xab" * (mib << 20)  # bad magic
    s.settimeout(60)
    s.sendall(b"\x02" + struct.pack(">Q", len(body)) + body)
    time.sleep(1.0)  # the server reads it before we close
    port = s.getsockname()[1]
    s.close()
    print(f"sent {mib} MiB from {port}", flush=True)
    for _ in range(flood):
        announce(addr, (1 << 63) - 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
