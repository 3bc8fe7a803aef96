"""The coordinator's simultaneous rounds (``games.api.SimultaneousGame``).

Every seat of the round is asked at once, each sees only its own prompt and answers under
its own clock; once every move is in, the session applies them together. While the round
is open spectators are told who has moved (``RoundProgress``), never what; the round's
``TurnPlayed`` events are published once the round is over (a seat may retry an invalid
move first). A seat that forfeits or times out ends the match as it would in a game
played in turns.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from arena.clock import Clock
from arena.gamethread import GameCaller, Later
from arena.learnerseats import NeverJoined, Submission
from arena.moveclock import MoveClock
from arena.publisher import MatchPublisher
from arena.seats import SeatForfeit, SeatTurn
from games.session import GameSession
from games.sessionerrors import GameError, RoundError
from games.turnrecord import TurnRecord


def _retrieve(task: asyncio.Task[object]) -> None:
    """Take a finished seat task's exception, so an unneeded one is never logged."""
    if not task.cancelled():
        task.exception()


class SimultaneousRounds:
    """The rounds of a ``GameCoordinator`` (a mixin of it: it asks the seats, keeps the
    clock and publishes as the coordinator does for a move in turn)."""

    session: GameSession
    move_timeout_s: float | None
    _time: Clock
    _game: GameCaller
    _events: MatchPublisher
    _move_clock: MoveClock
    _asking: bool
    _round_turns: list[tuple[TurnRecord, SeatTurn, Submission, float]]

    if TYPE_CHECKING:  # (the coordinator's own: see there)

        async def _turn_for(
            self, seat: int, index: int | None = None, movers: tuple[int, ...] = ()
        ) -> SeatTurn: ...

        async def _ask(self, seat: int, turn: SeatTurn) -> Submission: ...

        def _woken_by(self) -> Literal["clock", "forfeit"] | None: ...

        def _seat_forfeited(self, seat: int, exc: SeatForfeit) -> None: ...

        def _never_joined(self, seat: int) -> str: ...

        def _timed_out(self, seat: int) -> str: ...

    async def _play_round(self) -> str | None:
        """One step of a simultaneous round: ask every seat of ``movers()`` at once, each
        under its own clock, and apply their moves together. Returns why the match must be
        aborted, or None (``self._forfeit`` is set when a seat forfeited)."""
        movers = self.session.movers()
        base = len(self.session.turns)
        number = self.session.rounds + (1 if self.session.round_over else 0)
        turns = {}
        for i, seat in enumerate(movers):
            turns[seat] = await self._turn_for(seat, base + i, movers)
        self._events.progress(number, movers, ())
        loop = asyncio.get_running_loop()
        started = self._time.time()
        asks = {seat: loop.create_task(self._ask(seat, turns[seat])) for seat in movers}
        seat_of = {task: seat for seat, task in asks.items()}
        for task in asks.values():
            task.add_done_callback(_retrieve)
        submissions: dict[int, Submission] = {}
        elapsed: dict[int, float] = {}
        waiting = set(asks.values())
        self._asking = True
        if self.move_timeout_s is not None:
            # The seats are asked at the same moment: one deadline is each seat's own clock.
            self._move_clock.start(self.move_timeout_s)
        try:
            while waiting:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: seat_of[t]):
                    seat = seat_of[task]
                    failure = task.exception()
                    if isinstance(failure, SeatForfeit):
                        self._seat_forfeited(seat, failure)
                        return None
                    if isinstance(failure, NeverJoined):
                        return self._never_joined(seat)
                    if failure is not None:
                        raise failure
                    submissions[seat] = task.result()
                    elapsed[seat] = self._time.time() - started
                    self._events.progress(number, movers, tuple(sorted(submissions)))
        except asyncio.CancelledError:
            woken_by = self._woken_by()
            if woken_by is None or (woken_by == "clock" and not waiting):
                raise
            if woken_by == "forfeit":
                return None  # forfeit() woke us: the match ends decided
            return self._timed_out(min(seat_of[t] for t in waiting))
        finally:
            self._asking = False
            self._move_clock.stop()
            for ask in asks.values():
                if not ask.done():
                    ask.cancel()
        return await self._apply_round(number, turns, submissions, elapsed)

    async def _apply_round(
        self,
        number: int,
        turns: Mapping[int, SeatTurn],
        submissions: Mapping[int, Submission],
        elapsed: Mapping[int, float],
    ) -> str | None:
        """Apply a simultaneous round's moves together (and publish the round once it is
        over); why the match must be aborted, or None."""
        actions = {seat: submission.text for seat, submission in submissions.items()}
        try:
            step = functools.partial(self.session.step_round, actions)
            applied = self._game.now(step)
            records = await self._game(step) if isinstance(applied, Later) else applied
        except GameError as exc:
            for submission in submissions.values():
                submission.applied.cancel()
            return str(exc)
        except (TypeError, RoundError) as exc:
            return f"round {number}: {exc}"
        for record in records:
            submissions[record.seat].applied.set_result(record)
            self._round_turns.append(
                (record, turns[record.seat], submissions[record.seat], elapsed[record.seat])
            )
        if self.session.round_over or self.session.done:
            held, self._round_turns = self._round_turns, []
            if self._events.listened:
                views = await self._game(self.session.views)
                for record, turn, submission, took in held:
                    self._events.turn(
                        record, turn, submission.tokens, submission.logprobs, took, views
                    )
        return None
