#!/usr/bin/env python3
"""Connections that fail the CURVE handshake at each port of a running
parameter-server cluster (helper of tests/test_ps_handshake_refusals.sh; not a
test itself). usage: ps_handshakes.py HOST:PORT...

Per port, each on a fresh TCP connection: a ZMTP 3.0 greeting of the NULL
mechanism (a client without keys), the same sent 0.5 s after connecting
(null-slow: the server has read the client's address by then), an HTTP
request (not ZeroMQ), and a connection closed without a byte. Prints one line
per attempt: '<kind> <host:port> <the client's local port>'."""
import socket
import sys
import time

NULL_GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\0" * 16 + b"\0" + b"\0" * 31
ATTEMPTS = [("null", NULL_GREETING), ("null-slow", NULL_GREETING),
            ("http", b"GET / HTTP/1.1\r\nHost: ps\r\n\r\n"), ("empty", b"")]


def attempt(addr, kind, payload):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=2)
    local = s.getsockname()[1]
    if kind == "null-slow":
        time.sleep(0.5)
    try:
        s.sendall(payload)
        s.settimeout(2)
        while payload and s.recv(4096):  # until the server closes it
            pass
    except OSError:
        pass
    s.close()
    time.sleep(0.1)
    return local


for addr in sys.argv[1:]:
    for kind, payload in ATTEMPTS:
        print(kind, addr, attempt(addr, kind, payload), flush=True)
