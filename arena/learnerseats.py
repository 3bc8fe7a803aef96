"""The learner seats of a match: where the coordinator's driver asks them and their envs
answer.

A learner seat (driven by a ``PlayerEnv``) is not called like a seat agent: the driver
puts the seat's turn in its inbox and waits for the answer the env hands in
(``GameCoordinator.submit``). A seat must join (wait for its first turn) within the join
timeout once the game needs it, or it never will (``NeverJoined``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arena.clock import Clock

if TYPE_CHECKING:
    from arena.seats import SeatTurn
    from games.turnrecord import TurnRecord


class NeverJoined(Exception):
    """A learner seat did not join within the join timeout (nobody drives its env)."""

    def __init__(self, seat: int) -> None:
        super().__init__(seat)
        self.seat = seat


def _join_expired(joined: asyncio.Future[None], seat: int) -> None:
    """The join timeout's timer: the seat that has not joined by now never will."""
    if not joined.done():
        joined.set_exception(NeverJoined(seat))


class Inbox:
    """A learner seat's next turn. A seat is asked again only after it answered, so at
    most one turn is ever waiting; once closed (the match is over) every wait returns
    None at once. A turn stays in the inbox until a waiter takes it (a waiter cancelled
    after being woken loses nothing); with several waiters, one takes it."""

    __slots__ = ("_closed", "_turn", "_waiters")

    def __init__(self) -> None:
        self._turn: SeatTurn | None = None
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    def put(self, turn: SeatTurn) -> None:
        self._turn = turn
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def discard(self) -> None:
        """Drop the waiting turn: the seat has answered it (without taking it here)."""
        self._turn = None

    async def get(self) -> SeatTurn | None:
        while self._turn is None and not self._closed:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                self._waiters.remove(waiter)
        turn, self._turn = self._turn, None
        return turn


@dataclass
class Submission:
    """A seat's answer to its turn, and the future of the move as the game applied it."""

    text: str
    tokens: tuple[int, ...] | None
    logprobs: tuple[float, ...] | None
    applied: asyncio.Future[TurnRecord]


class LearnerSeats:
    """The inboxes, pending answers and joins of a match's learner ``seats``."""

    def __init__(self, seats: Sequence[int]) -> None:
        self.seats = list(seats)
        self._inbox: dict[int, Inbox] = {}
        self._pending: dict[int, asyncio.Future[Submission]] = {}
        self._applied: set[asyncio.Future[TurnRecord]] = set()
        self._joined: dict[int, asyncio.Future[None]] = {}
        """Per learner seat, done once it joined (waited for its first turn)."""
        self._closed = False

    def inbox(self, seat: int) -> Inbox:
        """``seat``'s inbox (closed once the match is over). Raises ValueError for a seat
        that is not a learner seat."""
        inbox = self._inbox.get(seat)
        if inbox is None:
            if seat not in self.seats:
                raise ValueError(f"seat {seat} is not a learner seat of this match")
            inbox = self._inbox[seat] = Inbox()
            if self._closed:
                inbox.close()
        return inbox

    def join_future(self, seat: int) -> asyncio.Future[None]:
        """Done once ``seat`` joined (or failed with ``NeverJoined``)."""
        joined = self._joined.get(seat)
        if joined is None:
            joined = self._joined[seat] = asyncio.get_running_loop().create_future()
        return joined

    def join(self, seat: int) -> None:
        """``seat`` has joined: its env waits for its turns."""
        joined = self.join_future(seat)
        if not joined.done():
            joined.set_result(None)

    async def wait_joined(self, seat: int, due: float, clock: Clock) -> None:
        """Wait until ``seat`` joins; raises NeverJoined when ``clock`` reaches ``due``
        first."""
        joined = self.join_future(seat)
        if joined.done():
            return
        timer = clock.call_at(due, lambda: _join_expired(joined, seat))
        try:
            await joined  # raises NeverJoined when the timer comes first
        finally:
            timer.cancel()

    def ask(self, seat: int, turn: SeatTurn) -> asyncio.Future[Submission]:
        """Give ``seat`` its turn; the future of its answer (``hand_in``)."""
        answer: asyncio.Future[Submission] = asyncio.get_running_loop().create_future()
        self._pending[seat] = answer
        self.inbox(seat).put(turn)
        return answer

    def hand_in(
        self,
        seat: int,
        text: str,
        tokens: Sequence[int] | None,
        logprobs: Sequence[float] | None,
    ) -> asyncio.Future[TurnRecord] | None:
        """Answer ``seat``'s turn; the future of the move as applied (``forget`` it once
        read), or None when no turn of this seat waits for an answer."""
        answer = self._pending.pop(seat, None)
        if answer is None or answer.done():
            return None
        self.inbox(seat).discard()  # the turn answered, if its waiter never took it
        applied: asyncio.Future[TurnRecord] = asyncio.get_running_loop().create_future()
        self._applied.add(applied)
        answer.set_result(
            Submission(
                text=text,
                tokens=tuple(tokens) if tokens is not None else None,
                logprobs=tuple(logprobs) if logprobs is not None else None,
                applied=applied,
            )
        )
        return applied

    def forget(self, applied: asyncio.Future[TurnRecord]) -> None:
        """The seat has read (or given up on) ``applied``: the end need not cancel it."""
        self._applied.discard(applied)

    def cancel_answers(self) -> None:
        """The match is over: cancel every answer still awaited and every move not applied."""
        for answer in self._pending.values():
            if not answer.done():
                answer.cancel()
        self._pending.clear()
        for applied in self._applied:
            if not applied.done():
                applied.cancel()

    def close(self) -> None:
        """The match is over: every wait for a turn returns None, now and later."""
        self._closed = True
        for seat in self.seats:
            self.inbox(seat).close()
