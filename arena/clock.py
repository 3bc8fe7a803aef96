"""The clock a coordinator keeps time with: given, not read, so tests drive time.

A ``Clock`` is the part of an asyncio event loop that keeps time: ``time()`` (monotonic
seconds) and ``call_at(when, callback)`` (a timer, cancellable). The running loop is one
as it is, and the default everywhere: production code pays nothing for the seam.
``ManualClock`` is the one tests give: its time moves only when ``advance`` is called,
which fires the timers that fall due, in order. A test then says "ten seconds pass" and
checks what the timers did, instead of sleeping ten seconds and hoping the machine was
idle enough for the verdict to mean something.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    """A timer a ``Clock`` armed (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None:
        """Stop the timer: its callback will not run (nothing when it already ran)."""
        ...

    def when(self) -> float:
        """The clock time the timer is due at."""
        ...


class Clock(Protocol):
    """Monotonic time and timers: what an event loop offers (``asyncio.AbstractEventLoop``
    is one, unchanged), or a ``ManualClock`` in tests."""

    def time(self) -> float:
        """Now, in monotonic seconds (only differences mean anything)."""
        ...

    def call_at(self, when: float, callback: Callable[[], object], /) -> TimerHandle:
        """Run ``callback`` once the clock reaches ``when``; the handle cancels it. Like
        asyncio's, a timer may run a little early (within the clock's resolution): a
        callback that must not act early checks ``time()`` itself."""
        ...


def loop_clock() -> Clock:
    """The running event loop, as a clock (the default; raises RuntimeError outside one)."""
    return asyncio.get_running_loop()


class ManualTimer:
    """A timer of a ``ManualClock``."""

    __slots__ = ("_callback", "_cancelled", "_clock", "_when")

    def __init__(self, clock: ManualClock, when: float, callback: Callable[[], object]) -> None:
        self._clock = clock
        self._when = when
        self._callback = callback
        self._cancelled = False

    def when(self) -> float:
        """The clock time the timer is due at."""
        return self._when

    def cancel(self) -> None:
        """Stop the timer (nothing once it ran or was cancelled)."""
        if not self._cancelled:
            self._cancelled = True
            self._clock._live -= 1

    def cancelled(self) -> bool:
        """True once cancelled (a timer that ran is not cancelled)."""
        return self._cancelled

    def _run(self) -> None:
        self._cancelled = True  # ran: cancelling it now does nothing
        self._clock._live -= 1
        self._callback()


class ManualClock:
    """A clock whose time moves only when told (``advance``): for tests.

    ``advance(seconds)`` moves time forward and runs every timer that falls due on the
    way, in order of due time (timers due at the same time in the order they were armed),
    the clock reading each timer's due time while its callback runs, as if the time had
    passed for real. A timer armed by a callback runs within the same ``advance`` when it
    falls due before its end. A timer armed at or before the current time runs at the
    next ``advance`` (``advance(0)`` runs just those). Callbacks run synchronously inside
    ``advance``: what they schedule on the event loop (a task woken, cancelled) happens
    when the caller next awaits.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, ManualTimer]] = []
        self._order = itertools.count()
        self._live = 0

    def time(self) -> float:
        """The clock's time: ``start`` plus every ``advance`` so far."""
        return self._now

    def call_at(self, when: float, callback: Callable[[], object], /) -> ManualTimer:
        """Run ``callback`` when ``advance`` reaches ``when``."""
        timer = ManualTimer(self, when, callback)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        self._live += 1
        return timer

    def call_later(self, delay: float, callback: Callable[[], object], /) -> ManualTimer:
        """Run ``callback`` ``delay`` seconds from now."""
        return self.call_at(self._now + delay, callback)

    @property
    def pending(self) -> int:
        """How many timers are armed (neither run nor cancelled)."""
        return self._live

    def next_due(self) -> float | None:
        """When the earliest armed timer is due; None when none is armed."""
        while self._timers and self._timers[0][2].cancelled():
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance(self, seconds: float) -> None:
        """Move time ``seconds`` forward, running the timers that fall due, in order.
        Raises ValueError for a negative ``seconds``: time does not go back."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds})")
        end = self._now + seconds
        while (due := self.next_due()) is not None and due <= end:
            _when, _order, timer = heapq.heappop(self._timers)
            self._now = max(self._now, due)
            timer._run()
        self._now = end

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has advanced ``seconds`` (``asyncio.sleep`` on this clock)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not waiter.done():
                waiter.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await waiter
        finally:
            timer.cancel()
