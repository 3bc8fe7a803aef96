"""Interrupt a synchronous call that runs past its deadline, without a thread hop per call.

Game code is synchronous. Running every step in a fresh worker thread would cost a thread
hop per move and, worse, leave a looping game burning a core forever after its timeout.
Instead, one daemon watchdog thread per calling thread waits for the current deadline and,
when it passes, raises ``StepTimeout`` inside the calling thread
(``PyThreadState_SetAsyncExc``). Pure-Python loops stop at the next bytecode; a long C call
(a regex on a huge string) stops when it returns, which is why the session also caps action
length.

Why this is race-free. An asynchronous exception can surface at any bytecode of the
calling thread, including in the bookkeeping around the guarded call. So:

* the calling thread never holds a lock: it publishes its deadline with one attribute
  store and wakes the watchdog by releasing a raw lock (a C call), so an exception that
  surfaces there cannot leave a lock held (a held lock would deadlock the watchdog and the
  next call);
* the watchdog fires only for the deadline that is still published, and announces the fire
  first (``_firing``); leaving a call unpublishes the deadline, waits out a fire in
  progress, then clears any exception still pending, so nothing can surface later in
  unrelated code;
* leaving is restartable and runs in the guarded call's own frame (``call_with_deadline``
  is a function, not a context manager: a context manager's ``__exit__`` can be skipped by
  an exception raised as it is entered). An exception that surfaces while leaving restarts
  the leaving, and the call then reports ``StepTimeout``: its deadline did pass.

The cost per guarded call is a few attribute stores; the watchdog is only woken when it
would otherwise sleep past the new deadline (between calls it wakes by itself every
``IDLE_WAKE_SECONDS``, so back-to-back calls almost never wake it).
"""

from __future__ import annotations

import _thread
import ctypes
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

REFIRE_SECONDS = 0.5
"""How often the timeout is raised again while guarded code keeps swallowing it."""
IDLE_WAKE_SECONDS = 1.0
"""Between calls the watchdog wakes by itself this often, so that a new call (whose
deadline is later than that) need not wake it: calls cost a few attribute stores, not a
thread switch each."""


class StepTimeout(Exception):
    """A guarded call ran past its deadline and was interrupted."""


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = [ctypes.c_ulong, ctypes.py_object]
_set_async_exc.restype = ctypes.c_int


class _Watchdog:
    """Watches the deadline of the one guarded call running on one thread.

    Shared state is only ever written by single attribute stores (atomic under the GIL):
    ``_armed`` by the calling thread, ``_wake_at``, ``_firing`` and ``_fired`` by the
    watchdog thread.
    """

    def __init__(self, target_tid: int) -> None:
        self.tid = target_tid
        self._armed: tuple[int, float] | None = None
        """(generation, monotonic deadline) of the call in progress, None between calls."""
        self._generation = 0
        self._wake_at: float | None = None
        """When the watchdog wakes by itself next; None while it waits for work."""
        self._firing = 0
        """The generation the watchdog is firing for right now (0: none)."""
        self._fired = 0
        """The last generation the watchdog fired for."""
        self._wake = _thread.allocate_lock()
        self._wake.acquire()  # locked: the watchdog waits on it, callers release it
        thread = threading.Thread(
            target=self._run, name=f"arena-watchdog-{target_tid}", daemon=True
        )
        thread.start()

    def _poke(self) -> None:
        # Plain try/except, not contextlib.suppress: its __exit__ is Python code an
        # asynchronous timeout could skip.
        try:  # noqa: SIM105
            self._wake.release()
        except RuntimeError:  # already released: the watchdog will wake anyway
            pass

    def _run(self) -> None:
        last: tuple[int, float] | None = None
        next_fire = 0.0
        while True:
            self._wake_at = None  # published before reading _armed (see call)
            armed = self._armed
            if armed is None:
                # Idle: sleep a while rather than until poked. A call armed after _armed
                # was read sees either None here (and pokes) or a wake time earlier than its
                # own deadline (and lets the watchdog find it when it wakes).
                self._wake_at = time.monotonic() + IDLE_WAKE_SECONDS
                if self._armed is None:
                    self._wake.acquire(timeout=IDLE_WAKE_SECONDS)
                continue
            due = next_fire if armed is last else armed[1]
            remaining = due - time.monotonic()
            if remaining > 0:
                self._wake_at = due
                if self._armed is armed:  # still the same call once _wake_at is public
                    self._wake.acquire(timeout=remaining)
                continue
            generation = armed[0]
            self._firing = generation
            if self._armed is armed:  # the call has not started leaving
                _set_async_exc(self.tid, ctypes.py_object(StepTimeout))
                self._fired = generation
            self._firing = 0
            last, next_fire = armed, time.monotonic() + REFIRE_SECONDS

    def call(self, fn: Callable[[], T], seconds: float) -> T:
        """Run ``fn`` with a deadline ``seconds`` from now."""
        if self._armed is not None:
            raise RuntimeError("call_with_deadline is not reentrant on one thread")
        self._generation += 1
        generation = self._generation
        armed = (generation, time.monotonic() + seconds)
        self._armed = armed
        try:
            wake_at = self._wake_at  # read after _armed is public: see _run
            if wake_at is None or armed[1] < wake_at:
                self._poke()
            result = fn()
        finally:
            # Restartable: whatever surfaces here is this call's own timeout.
            while True:
                try:
                    self._armed = None
                    while self._firing == generation:
                        time.sleep(0)
                    if self._fired == generation:
                        _set_async_exc(self.tid, ctypes.py_object())  # clear a pending one
                    break
                except StepTimeout:
                    continue
        if self._fired == generation:
            raise StepTimeout(f"call exceeded its {seconds:g} s limit")
        return result


_local = threading.local()


def _watchdog() -> _Watchdog:
    dog = getattr(_local, "dog", None)
    if dog is None:
        dog = _Watchdog(threading.get_ident())
        _local.dog = dog
    return dog


def call_with_deadline(fn: Callable[[], T], seconds: float | None) -> T:
    """``fn()`` with a wall-time limit of ``seconds`` (None: no limit).

    Raises ``StepTimeout`` when the limit passes (also when ``fn`` returned just as it
    passed), RuntimeError when called again from inside ``fn`` (not reentrant), and
    whatever ``fn`` raises. If ``fn`` swallows the timeout, it is raised again every
    ``REFIRE_SECONDS``. Once this returns or raises, no timeout of this call can surface
    anywhere else.
    """
    if seconds is None:
        return fn()
    return _watchdog().call(fn, seconds)
