#!/usr/bin/env python3
"""A forged chief at an insecure server's port (helper of
tests/test_ps_forged_job.sh; not a test itself; issue 29 D2).

usage: ps_forge.py HOST:PORT DATA [FIELD=VALUE...]

Over a raw ZMTP 3.0 DEALER (NULL mechanism: the server runs insecure), sends
a JOB claiming to come from chief:0 with batch = 2^62 + 1 (or the fields
given, e.g. total_steps=0), prints the type of the reply, then a RUN whose
one step lists 1000 example indices (each < 100). Before the fix the JOB was
accepted (the worker's batch buffer wrapped to a few KB) and the RUN was
gathered past it (SIGSEGV). Exits 0 once the frames are sent."""
import struct
import sys
import time

from ps_garbage import connect, handshake, recv_n, zmtp_frame

JOB_ID = 0x1122334455667788
TYPES = {2: "JOB_OK", 13: "ERROR"}


def header(t, n, closure=0):
    return struct.pack("<IHHQHHIQQQQQ", 0x53505453, 1, t, JOB_ID, 0, 0, 1, 1, closure, 0, 0, n)


def recv_frame(s):
    flags = recv_n(s, 1)[0]
    size = struct.unpack(">Q", recv_n(s, 8))[0] if flags & 0x02 else recv_n(s, 1)[0]
    return recv_n(s, size)


def job_text(data, fields):
    h = lambda x: float(x).hex()
    f = {"job_id": str(JOB_ID), "model": "mlp", "data": data, "seed": "0", "batch": str((1 << 62) + 1),
         "train_examples": "2000", "total_steps": "10", "steps_per_execution": "1", "val_split": h(0),
         "heartbeat_interval": h(1), "coordinator_timeout": h(30), "max_staleness": "-1", "ps_shards": "0",
         "ps_min_shard_bytes": "0",
         "opt": f"0 0 {h(0.01)} 0 {h(0)} 0 {h(0)} {h(0)} 0 {h(0.9)} {h(0.999)} {h(1e-7)} {h(0.9)} {h(0)}"}
    for kv in fields:
        k, v = kv.split("=", 1)
        f[k] = v
    return "".join(f"{k}={v}\n" for k, v in f.items()).encode()


def main():
    addr, data, fields = sys.argv[1], sys.argv[2], sys.argv[3:]
    s = connect(addr)
    s.settimeout(20)
    handshake(s)
    text = job_text(data, fields)
    s.sendall(zmtp_frame(header(1, len(text)) + text))
    reply = recv_frame(s)
    t = struct.unpack("<H", reply[6:8])[0] if len(reply) >= 8 else -1
    print(f"JOB answered {TYPES.get(t, t)}: {reply[64:].decode(errors='replace')}")
    n = 1000
    run = struct.pack("<QQQ", 1, 0, n) + b"".join(struct.pack("<Q", i % 100) for i in range(n))
    try:
        s.sendall(zmtp_frame(header(7, len(run), closure=1) + run))
        time.sleep(0.5)
    except OSError:
        pass
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
