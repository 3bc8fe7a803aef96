"""A match's move clock, and the driver's other wake-up (a forfeit).

The coordinator's driver task waits for one seat (or one simultaneous round) at a time.
Two things may have to wake it from that wait: the move clock running out, and
``GameCoordinator.forfeit`` (a seat's player left while another seat thinks). Both wake it
by cancelling the task; ``take_back`` then says which of them did, and takes their cancel
requests back, so that what is left is someone else's (``abort()``, the task's owner).

A seat that waits for its turn at something it shares beyond its match (a served model's
request slots, ``matchmaking.served``) waits inside ``off_clock()``: the move clock stops
meanwhile, so a queue made by other matches never times a seat out. What a seat does once
its turn comes (its request, its pauses between tries) runs on the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

from arena.clock import Clock, TimerHandle

_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution
"""asyncio runs a timer up to this early (``Clock.call_at``); the move clock counts it as
on time."""


class MoveClock:
    """The move clock of one match's driver task (see the module's docstring). Nothing
    runs until ``attach`` gives it the clock and the task."""

    __slots__ = (
        "_clock",
        "_left",
        "_paused",
        "_task",
        "_turn",
        "deadline",
        "fired",
        "forfeit_woke",
        "timer",
    )

    def __init__(self) -> None:
        self._clock: Clock | None = None
        self._task: asyncio.Task[None] | None = None
        self._turn = 0
        """Counts the turns started and ended: a pause that outlives its turn (a seat task
        cancelled with its round) must not touch the next turn's clock."""
        self._paused = 0
        """Seats of the turn waiting off the clock now (``off_clock``)."""
        self._left: float | None = None
        """The time the turn had left when its clock was paused."""
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

    def bind(self) -> None:
        """Make ``off_clock()`` pause this clock in the running task (the match's driver)
        and in the tasks it starts (a simultaneous round's seats)."""
        _RUNNING.set(self)

    def start(self, seconds: float) -> None:
        """Start the clock for the seat about to be asked. One timer per match, re-armed
        lazily: starting a turn's clock is a float store (``asyncio.timeout`` per move cost
        more than the rest of the driver's bookkeeping). When the timer finds the turn's
        deadline passed it cancels the driver, which reads it as a timeout (``take_back``);
        a timer that fires early re-arms for the current deadline, one that fires between
        turns lapses."""
        self._turn += 1
        self._paused = 0
        self._left = None
        self._arm(seconds)

    def pause(self) -> int:
        """A seat of the turn waits off the clock (``off_clock``): the clock stops until
        every such seat has resumed. Returns the turn's number, for ``resume``."""
        self._paused += 1
        if self._paused == 1 and self.deadline is not None:
            assert self._clock is not None
            self._left = self.deadline - self._clock.time()
            self.deadline = None  # the timer, if it fires meanwhile, lapses
        return self._turn

    def resume(self, turn: int) -> None:
        """The wait that ``pause`` returned ``turn`` for is over: the clock runs on with the
        time it had left once no seat waits (nothing when that turn is over)."""
        if turn != self._turn or self._paused == 0:
            return
        self._paused -= 1
        if self._paused == 0 and self._left is not None:
            left, self._left = self._left, None
            self._arm(left)

    def _arm(self, seconds: float) -> None:
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
        self._turn += 1
        self._paused = 0
        self._left = None
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


_RUNNING: ContextVar[MoveClock | None] = ContextVar("arena_move_clock", default=None)
"""The move clock of the match whose driver runs this task (``MoveClock.bind``)."""


@contextlib.contextmanager
def off_clock() -> Iterator[None]:
    """Wait here, in a seat agent's ``act``, for a turn at something shared beyond the
    match (a served model's request slot): the match's move clock stops until the block
    ends, then runs on with the time the seat had left. In a simultaneous round the round's
    one clock stops for every seat while any of them waits. Outside a match it does
    nothing. The wait is no longer bounded by the move clock: what is waited for must end
    on its own (another match's request, bounded by its own time limit)."""
    clock = _RUNNING.get()
    if clock is None:
        yield
        return
    turn = clock.pause()
    try:
        yield
    finally:
        clock.resume(turn)
