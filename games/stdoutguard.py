"""Keeping a game's prints out of our output: the lock every call into game code holds, and
the ``sys.stdout`` that stands in while it runs.

A session may be called from any thread (the web server runs browser matches on a game
thread, off its event loop), but game code never runs on two threads at once: every
guarded call holds ``GAME_LOCK``, because ``sys.stdout``, which the guard swaps, is the
process's. While a guarded call runs, ``sys.stdout`` drops only what the calling thread
writes; other threads' output goes through.
"""

from __future__ import annotations

import threading
from typing import Any

GAME_LOCK = threading.RLock()
"""Held by every call into game code, on whatever thread: game code shares the process's
``sys.stdout`` (see the module's docstring). Callers on an event loop
take it with ``acquire(blocking=False)`` and hand the call to a game thread when it is busy
(``arena.gamethread``), so the loop never waits for it."""


class QuietStdout:
    """``sys.stdout`` during a guarded call: swallows the guarded thread's writes (a game's
    prints), passes every other thread's on to the stream it replaced (``target``)."""

    def __init__(self) -> None:
        self.target: Any = None
        self.owner = 0

    def write(self, text: str) -> int:
        if threading.get_ident() == self.owner:
            return len(text)
        return int(self.target.write(text))

    def flush(self) -> None:
        if threading.get_ident() != self.owner:
            self.target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


_quiet = threading.local()


def quiet_stdout() -> QuietStdout:
    """The calling thread's ``QuietStdout`` (made on its first guarded call); the guard sets
    its ``target`` to the ``sys.stdout`` it replaces."""
    quiet = getattr(_quiet, "stdout", None)
    if quiet is None:
        quiet = _quiet.stdout = QuietStdout()
        quiet.owner = threading.get_ident()
    return quiet
