#!/usr/bin/env python3
"""Helper of tests/test_ps_launch_refused.sh (not a test itself; issue 29 D9):
runs `CLI launch ARGS...`, and as soon as launch prints ps:0's address binds
and listens on that port itself, so that the ps cannot (the race a second
launch or another program wins in real life). Prints `grabbed 1|0`, the
launch's exit code and seconds, and launch's stderr."""
import re
import socket
import subprocess
import sys
import time

t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
grabbed, held, lines = 0, None, []
for line in p.stderr:
    lines.append(line)
    m = re.search(r"ps:0 on 127\.0\.0\.1:(\d+), pid", line)
    if m and held is None:
        held = socket.socket()
        try:
            held.bind(("127.0.0.1", int(m.group(1))))
            held.listen(1)
            grabbed = 1
        except OSError:
            pass
rc = p.wait()
print(f"grabbed {grabbed} rc {rc} seconds {time.monotonic() - t0:.1f}")
sys.stdout.write("".join(lines))
