"""Run a command, passing its output through, and say it is still working whenever it has
been silent for a while (``pip`` prints nothing while it unpacks a large wheel).

    python3 tools/heartbeat.py [--every SECONDS] -- COMMAND [ARG ...]

Exits with the command's exit code. Standard library only: it runs before the virtual
environment exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

DEFAULT_EVERY_S = 8.0
"""Silence, in seconds, after which a line says the command is still running."""


def main(argv: list[str]) -> int:
    every = DEFAULT_EVERY_S
    if argv[:1] == ["--every"]:
        every, argv = float(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: heartbeat.py [--every SECONDS] -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    start = time.monotonic()
    last = [start]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    done = threading.Event()

    def beat() -> None:
        while not done.wait(1.0):
            now = time.monotonic()
            if now - last[0] >= every:
                print(f"   ... still working ({now - start:.0f} s)", flush=True)
                last[0] = now

    threading.Thread(target=beat, daemon=True).start()
    out = sys.stdout.buffer
    while chunk := os.read(process.stdout.fileno(), 65536):
        last[0] = time.monotonic()
        out.write(chunk)
        out.flush()
    code = process.wait()
    done.set()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
