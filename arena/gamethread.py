"""Running game code off the event loop: a game thread, and the coordinator's fast path.

A game step may take up to ``SessionLimits.step_timeout_s`` (5 s; a reset 30 s), and while
game code runs on the event loop nothing else on that loop moves: no other match, no web
client. So code that serves people (the web server's browser matches) runs every call into
a game on a ``GameThread``. The session's guard still applies there: the time limits (the
watchdog is per thread), prints swallowed, the private ``random`` state, and no step after
the end.

Self-play keeps cheap games on the loop (a thread hop per move would cost more than the
move): ``call_game`` runs a call inline when ``GAME_LOCK`` is free at once, and on the game
thread when another thread is in game code (the loop never waits for the lock). A match
whose inline call took longer than ``INLINE_LIMIT_S`` runs the rest of its calls on the
game thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from games.stdoutguard import GAME_LOCK

T = TypeVar("T")

INLINE_LIMIT_S = 0.02
"""An inline game call that takes longer moves the rest of its match to the game thread."""


class GameThread:
    """One worker thread for game calls (one is enough: game code holds ``GAME_LOCK``, so
    calls never run in parallel anyway; the point is to keep them off the loop)."""

    def __init__(self, name: str = "arena-game") -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the game thread.

        Cancellation waits for a call in progress to end before it propagates (the call is
        bounded by the session's time limits): nothing may touch the game meanwhile.
        Raises what ``fn`` raises, RuntimeError once ``shutdown`` was called.
        """
        future = asyncio.get_running_loop().run_in_executor(self._executor, fn)
        cancelled = False
        while True:
            try:
                result = await asyncio.shield(future)
            except asyncio.CancelledError:
                if future.done():
                    raise
                cancelled = True
                continue
            if cancelled:
                raise asyncio.CancelledError
            return result

    def submit(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on the game thread without waiting (releasing a finished game)."""
        try:
            self._executor.submit(fn)
        except RuntimeError:  # shut down: run it here
            fn()

    def shutdown(self) -> None:
        """Stop the thread once the calls already queued are done."""
        self._executor.shutdown(wait=False)


_shared: GameThread | None = None
_shared_lock = threading.Lock()


def shared_game_thread() -> GameThread:
    """The process's game thread for calls that cannot run inline."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = GameThread("arena-game-shared")
        return _shared


class Later:
    """The type of ``LATER``."""

    __slots__ = ()


LATER = Later()
"""``GameCaller.now`` could not run the call inline."""


class GameCaller:
    """How one match calls its game: always on ``thread``, or inline when it is cheap and
    safe (``thread`` None)."""

    __slots__ = ("offload", "thread")

    def __init__(self, thread: GameThread | None) -> None:
        self.thread = thread
        self.offload = thread is not None
        """True once every call goes to a game thread."""

    async def __call__(self, fn: Callable[[], T]) -> T:
        """``fn()``, inline or on a game thread (see the module's docstring)."""
        result = self.now(fn)
        if isinstance(result, Later):
            return await (self.thread or shared_game_thread()).run(fn)
        return result

    def now(self, fn: Callable[[], T]) -> T | Later:
        """``fn()`` inline when this match may run it inline now (``GAME_LOCK`` free at
        once), else ``LATER``: then await the caller instead. Saves a coroutine per call on
        the hot path."""
        if self.offload or not GAME_LOCK.acquire(blocking=False):
            return LATER
        try:
            started = time.perf_counter()
            result = fn()
        finally:
            GAME_LOCK.release()
        if time.perf_counter() - started > INLINE_LIMIT_S:
            self.offload = True
        return result

    def release(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` (a game's release) without waiting for it."""
        if self.thread is not None:
            self.thread.submit(fn)
        elif GAME_LOCK.acquire(blocking=False):
            try:
                fn()
            finally:
                GAME_LOCK.release()
        else:
            shared_game_thread().submit(fn)
