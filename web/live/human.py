"""A seat played by a person in a browser.

``HumanSeat`` is a ``SeatAgent``: the coordinator asks it for a move, and ``act()`` waits
until the browser that holds the seat's token sends one (the hub calls ``submit``).

Time limit. The coordinator aborts a whole match when a seat passes its ``move_timeout_s``,
which would void a match a person simply walked away from. So a human seat keeps its own,
shorter deadline: when ``timeout_s`` passes, ``act()`` answers ``FORFEIT_MOVE``, a move no
game accepts, and the game's invalid-move rule makes that seat lose (under the default
``forfeit`` policy at once; under ``retry``, every later turn of a seat that timed out is
answered ``FORFEIT_MOVE`` at once, so it loses after its allowance). The match is then
``finished``, with the timed-out seat losing, never hung and never aborted. Run its
coordinator with a ``move_timeout_s`` longer than the seat's ``timeout_s``.

Time is given: the deadline's timer runs on ``clock`` (``arena.clock``; the running event
loop by default) and the Unix time the browser is shown comes from ``wall_clock``, so
tests say when the deadline passes instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from arena.clock import Clock
from arena.identity import PolicyKind
from arena.seats import SeatTurn

FORFEIT_MOVE = "[forfeit: no move before the deadline]"
"""What a human seat answers at its deadline: not a legal move in any game that lists its
legal moves (the only games offered against bots)."""


class SeatNotWaiting(Exception):
    """A move was sent for a seat that is not waiting for one (not its turn, or over)."""


HUMAN_PLAYER = PolicyKind.HUMAN.value
"""What matches record for a person's seat in the browser (one shared, anonymous
identity)."""


def _expire(future: asyncio.Future[str]) -> None:
    """The deadline's timer: the move did not come in time."""
    if not future.done():
        future.set_exception(TimeoutError())


class HumanSeat:
    """A seat whose moves come from a browser.

    ``on_prompt(turn, deadline)`` is called (synchronously) each time the seat must move,
    with the Unix time at which it forfeits; the hub shows the turn to the seat's browser.
    ``clock``: what the deadline's timer runs on (None: the running loop); ``wall_clock``:
    Unix time, for the deadline shown.
    """

    def __init__(
        self,
        seat: int,
        *,
        timeout_s: float,
        on_prompt: Callable[[SeatTurn, float], None] | None = None,
        name: str = HUMAN_PLAYER,
        forfeit_move: str = FORFEIT_MOVE,
        clock: Clock | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.seat = seat
        self.name = name
        self.timeout_s = timeout_s
        self.on_prompt = on_prompt
        self.forfeit_move = forfeit_move
        self.clock = clock
        self.wall_clock = wall_clock
        self.timed_out = False
        """True once the seat let a deadline pass; it forfeits every later turn at once."""
        self.turn: SeatTurn | None = None
        """The turn being waited for, if any."""
        self.deadline: float | None = None
        """Unix time at which the turn being waited for forfeits."""
        self._future: asyncio.Future[str] | None = None

    @property
    def waiting(self) -> bool:
        """True while ``act()`` waits for the browser's move."""
        return self._future is not None and not self._future.done()

    async def act(self, turn: SeatTurn) -> str:
        """Wait for the browser's move; ``forfeit_move`` once ``timeout_s`` has passed."""
        if self.timed_out:
            return self.on_timeout()
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._future = future
        self.turn = turn
        self.deadline = deadline = self.wall_clock() + self.timeout_s
        clock = self.clock or asyncio.get_running_loop()
        timer = clock.call_at(clock.time() + self.timeout_s, functools.partial(_expire, future))
        try:
            if self.on_prompt is not None:
                self.on_prompt(turn, deadline)
            return await future
        except TimeoutError:
            self.timed_out = True
            return self.on_timeout()
        finally:
            timer.cancel()
            self._future = None
            self.turn = None
            self.deadline = None

    def on_timeout(self) -> str:
        """What a turn whose deadline passed answers: ``forfeit_move`` (a subclass may
        raise ``arena.coordinator.SeatForfeit`` instead)."""
        return self.forfeit_move

    def submit(self, text: str) -> int:
        """Hand the browser's move to the waiting ``act()``; returns the turn index.

        Raises SeatNotWaiting when the seat is not waiting for a move.
        """
        future, turn = self._future, self.turn
        if future is None or future.done() or turn is None:
            raise SeatNotWaiting(f"seat {self.seat} is not waiting for a move")
        future.set_result(text)
        return turn.turn_index
