"""A match's move clock, and the driver's other wake-up (a forfeit).

The coordinator's driver task waits for one seat (or one simultaneous round) at a time.
Two things may have to wake it from that wait: the move clock running out, and
``GameCoordinator.forfeit`` (a seat's player left while another seat thinks). Both wake it
by cancelling the task; ``take_back`` then says which of them did, and takes their cancel
requests back, so that what is left is someone else's (``abort()``, the task's owner).
"""

from __future__ import annotations

import asyncio
import time

from arena.clock import Clock, TimerHandle

_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution
"""asyncio runs a timer up to this early (``Clock.call_at``); the move clock counts it as
on time."""


class MoveClock:
    """The move clock of one match's driver task (see the module's docstring). Nothing
    runs until ``attach`` gives it the clock and the task."""

    __slots__ = ("_clock", "_task", "deadline", "fired", "forfeit_woke", "timer")

    def __init__(self) -> None:
        self._clock: Clock | None = None
        self._task: asyncio.Task[None] | None = None
        self.timer: TimerHandle | None = None
        """The clock's one timer (see ``start``); None once it lapsed or the match ended."""
        self.deadline: float | None = None
        """When the seat being asked runs out of time (clock time); None between turns."""
        self.fired = False
        """The move clock cancelled the driver (it ran out)."""
        self.forfeit_woke = False
        """``wake`` cancelled the driver (a forfeit)."""

    def attach(self, clock: Clock, task: asyncio.Task[None]) -> None:
        """Keep time with ``clock``, waking ``task`` (the match's driver)."""
        self._clock = clock
        self._task = task

    def start(self, seconds: float) -> None:
        """Start the clock for the seat about to be asked. One timer per match, re-armed
        lazily: starting a turn's clock is a float store (``asyncio.timeout`` per move cost
        more than the rest of the driver's bookkeeping). When the timer finds the turn's
        deadline passed it cancels the driver, which reads it as a timeout (``take_back``);
        a timer that fires early re-arms for the current deadline, one that fires between
        turns lapses."""
        clock = self._clock
        assert clock is not None, "attach the clock first"
        self.deadline = deadline = clock.time() + seconds
        timer = self.timer
        if timer is not None and timer.when() > deadline:  # a shorter limit than before
            timer.cancel()
            timer = None
        if timer is None:
            self.timer = clock.call_at(deadline, self._check)

    def wake(self) -> None:
        """Wake the driver (once) for a forfeit, while it waits for a seat."""
        task = self._task
        if not self.forfeit_woke and task is not None and not task.done():
            self.forfeit_woke = True
            task.cancel()  # the driver reads it with take_back

    def take_back(self) -> tuple[bool, bool]:
        """Whether the move clock and ``wake`` cancelled the driver since the seat was
        asked; their cancel requests are taken back, so what is left is someone else's.
        Also when the seat answered all the same: its code absorbed the cancellation
        (``asyncio.wait_for`` can, when what it waits for ends at the same time), and a
        request left over would make the next cancellation look like someone else's
        (``asyncio.timeout`` did the same)."""
        timed_out, woke = self.fired, self.forfeit_woke
        self.fired = self.forfeit_woke = False
        task = self._task
        for _ in range(timed_out + woke):
            if task is not None and task.cancelling() > 0:
                task.uncancel()
        return timed_out, woke

    def stop(self) -> None:
        """The turn is over: the clock stops, and any wake-up left is taken back."""
        self.deadline = None
        self.take_back()

    def close(self) -> None:
        """The match is over: nothing is left scheduled."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.deadline = None

    def _check(self) -> None:
        self.timer = None
        deadline = self.deadline
        task = self._task
        if deadline is None or task is None or task.done():
            return
        clock = self._clock
        assert clock is not None
        if clock.time() + _CLOCK_RESOLUTION < deadline:  # a timer may fire that much early
            self.timer = clock.call_at(deadline, self._check)
            return
        self.deadline = None
        self.fired = True
        task.cancel()
