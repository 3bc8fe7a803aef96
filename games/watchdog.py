"""Interrupt a synchronous call that runs past its deadline, without a thread hop per call.

Game code is synchronous and runs on the event loop's thread. Running every step in a worker
thread would cost a thread hop per move and, worse, leave a looping game burning a core
forever after its timeout. Instead, a single daemon watchdog thread per calling thread
waits for the current deadline and, when it passes, raises ``StepTimeout`` inside the
calling thread (``PyThreadState_SetAsyncExc``). Pure-Python loops stop at the next bytecode;
a long C call (a regex on a huge string) stops when it returns, which is why the session
also caps action length.

The cost per guarded call is two uncontended lock round trips: the watchdog is only woken
when it would otherwise sleep past the new deadline.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Literal

REFIRE_SECONDS = 0.5
"""How often the timeout is raised again while guarded code keeps swallowing it."""


class StepTimeout(Exception):
    """A guarded call ran past its deadline and was interrupted."""


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = [ctypes.c_ulong, ctypes.py_object]
_set_async_exc.restype = ctypes.c_int


class _Watchdog:
    """Watches the deadline of the one guarded call running on one thread."""

    def __init__(self, target_tid: int) -> None:
        self._tid = target_tid
        self._cond = threading.Condition(threading.Lock())
        self._generation = 0
        self._deadline: float | None = None
        self._wake_at: float | None = None
        """When the watchdog will wake by itself next; None while it waits for work."""
        self._fired_generation = -1
        thread = threading.Thread(
            target=self._run, name=f"arena-watchdog-{target_tid}", daemon=True
        )
        thread.start()

    def arm(self, seconds: float) -> int:
        with self._cond:
            self._generation += 1
            self._deadline = time.monotonic() + seconds
            # Wake the watchdog only when it would otherwise sleep past this deadline.
            if self._wake_at is None or self._deadline < self._wake_at:
                self._cond.notify()
            return self._generation

    def disarm(self, generation: int) -> bool:
        """Clear the deadline; return True when the watchdog fired for this call."""
        with self._cond:
            self._deadline = None
            fired = self._fired_generation == generation
            if fired:
                # The exception may still be pending (not yet raised): clear it so it
                # cannot surface later in unrelated code.
                _set_async_exc(self._tid, ctypes.py_object())
            return fired

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._wake_at = None
                    self._cond.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._wake_at = self._deadline
                    self._cond.wait(remaining)
                    continue
                self._fired_generation = self._generation
                self._deadline = time.monotonic() + REFIRE_SECONDS
                _set_async_exc(self._tid, ctypes.py_object(StepTimeout))


_local = threading.local()


def _watchdog() -> _Watchdog:
    dog = getattr(_local, "dog", None)
    if dog is None:
        dog = _Watchdog(threading.get_ident())
        _local.dog = dog
    return dog


def _disarm(dog: _Watchdog, generation: int) -> bool:
    # The pending exception can surface while we are on our way into disarm(); retry
    # until disarm has run under its lock, after which nothing fires for this call.
    while True:
        try:
            return dog.disarm(generation)
        except StepTimeout:
            continue


class deadline:
    """Run the body with a wall-time limit; raise ``StepTimeout`` when it is exceeded.

    ``None`` means no limit. Not reentrant: guard one call at a time per thread. If the
    guarded code swallows the exception, it is raised again every ``REFIRE_SECONDS``.
    """

    __slots__ = ("_dog", "_generation", "seconds")

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._dog: _Watchdog | None = None
        self._generation = 0

    def __enter__(self) -> None:
        if self.seconds is not None:
            self._dog = _watchdog()
            self._generation = self._dog.arm(self.seconds)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]:
        if self._dog is None:
            return False
        fired = _disarm(self._dog, self._generation)
        if fired or exc_type is StepTimeout:
            raise StepTimeout(f"call exceeded its {self.seconds:g} s limit")
        return False
