"""The async game coordinator: one per game, the only code that touches the game.

Seats never talk to each other. A learner seat (driven by a ``PlayerEnv``) waits for its
turn with ``wait_turn`` and answers with ``submit``; the other seats are ``SeatAgent``s
(bots now; checkpoints and humans later) that the coordinator asks itself. One driver task
walks the game in turn order, enforces the per-move timeout and publishes events.

Simultaneous rounds (``games.api.SimultaneousGame``): every seat of the round is asked at
once, each sees only its own prompt and answers under its own clock; the driver collects
every move, then the session applies them together. While the round is open spectators are
told who has moved (``RoundProgress``), never what; the round's ``TurnPlayed`` events are
published once the round is over. A seat that forfeits (``SeatForfeit``) or times out ends
the match as it would in a game played in turns.

Its parts, each in its own module: who plays a seat (``arena.seats``), the learner seats'
inboxes and joins (``arena.learnerseats``), the move clock (``arena.moveclock``), the
simultaneous rounds (``arena.rounds``) and the events a match publishes
(``arena.publisher``).

No deadlock: if any seat raises, is cancelled or times out, or the game fails, the match
ends as aborted and every coroutine waiting on it wakes at once.

A seat agent that waits for its turn at something shared beyond its match (a served
model's request slots) waits inside ``arena.moveclock.off_clock()``: the move clock stops
meanwhile, so a queue of other matches' requests never times it out.

Time is given: the move clock, the join timeout and each turn's ``elapsed_s`` read the
coordinator's ``clock`` (``arena.clock``), by default the running event loop itself;
tests give a ``ManualClock`` and say when time passes.

Game calls go through ``arena.gamethread``: with a ``game_thread`` every one runs there,
off the event loop (the web server's matches); without, cheap calls run inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from arena.clock import Clock, TimerHandle
from arena.eventbus import EventBus
from arena.gamethread import GameCaller, GameThread, Later
from arena.learnerseats import LearnerSeats, NeverJoined, Submission
from arena.moveclock import MoveClock
from arena.publisher import MatchPublisher
from arena.rounds import SimultaneousRounds
from arena.seats import (
    SeatAgent,
    SeatForfeit,
    SeatTurn,
)
from games.session import GameSession, Outcome, Status
from games.sessionerrors import GameError
from games.turnrecord import TurnRecord

__all__ = [
    "BACKPRESSURE_WAIT_S",
    "GameCoordinator",
    "MatchAbortedError",
]


class _NotStarted:
    """The clock of a coordinator whose driver has not started: nothing reads it."""

    def time(self) -> float:
        raise RuntimeError("the coordinator has not started: its clock is not chosen yet")

    def call_at(self, when: float, callback: Callable[[], object], /) -> TimerHandle:
        raise RuntimeError("the coordinator has not started: its clock is not chosen yet")


_NOT_STARTED = _NotStarted()

BACKPRESSURE_WAIT_S = 60.0
"""Longest a match waits, before a move, for a congested back-pressure subscriber (the
recorder) to catch up (``EventBus.wait_for_room``); then it plays on."""


class MatchAbortedError(Exception):
    """Raised to a learner seat that submits to a match that has been aborted."""


class GameCoordinator(SimultaneousRounds):
    """Runs one game for its seats.

    ``agents`` maps the seats that are not learner seats to their agents; every other seat
    is a learner seat and must be driven through ``wait_turn``/``submit``.
    The session's limits (``games.limits.SessionLimits``) hold the match's clocks:
    ``move_timeout_s`` bounds how long any seat may take to answer, ``join_timeout_s`` how
    long a learner seat may take to join once its game needs it (None: no limit).
    ``game_thread``: run every call into the game there, never on the event loop.
    ``clock``: what the move clock, the join timeout and turn times read (``arena.clock``);
    None, the running event loop's own time and timers.
    """

    def __init__(
        self,
        session: GameSession,
        agents: Mapping[int, SeatAgent] | None = None,
        *,
        bus: EventBus | None = None,
        match_id: str | None = None,
        players: Sequence[str] | None = None,
        group_id: str | None = None,
        run_id: str | None = None,
        game_thread: GameThread | None = None,
        rated: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.session = session
        self.agents = dict(agents or {})
        for seat in self.agents:
            if not 0 <= seat < session.num_players:
                raise ValueError(f"agent for seat {seat}; the game has {session.num_players}")
        self.learner_seats = [s for s in range(session.num_players) if s not in self.agents]
        self.bus = bus
        self.match_id = match_id or uuid.uuid4().hex
        self.move_timeout_s = session.limits.move_timeout_s
        self.join_timeout_s = session.limits.join_timeout_s
        self.players = (
            tuple(players)
            if players
            else tuple(
                self.agents[s].name if s in self.agents else "learner"
                for s in range(session.num_players)
            )
        )
        self.group_id = group_id
        self.run_id = run_id
        self.rated = rated
        """False: a casual match (``MatchStarted.rated``)."""
        self._learners = LearnerSeats(self.learner_seats)
        self._events = MatchPublisher(
            bus, session, self.match_id, self.players, group_id=group_id, run_id=run_id,
            rated=rated,
        )  # fmt: skip
        self._seen = [0] * session.num_players
        self.clock = clock
        """The clock given; None: the running loop's (``_time`` is the one in use)."""
        self._time: Clock = clock if clock is not None else _NOT_STARTED
        """The clock in use: ``clock``, else the loop that ``start`` runs the driver on."""
        self._started_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._aborting: str | None = None
        self._finished = asyncio.Event()
        self._forfeit: tuple[int, str] | None = None
        self._asking = False
        self._game = GameCaller(game_thread)
        self._move_clock = MoveClock()
        """The move clock, and the forfeit's wake-up of the driver (``arena.moveclock``)."""
        self._round_turns: list[tuple[TurnRecord, SeatTurn, Submission, float]] = []
        """Moves of the open simultaneous round, applied but not published yet (a seat
        retries an invalid move): they are published together once the round is over."""

    # -- public API ----------------------------------------------------------------------
    @property
    def outcome(self) -> Outcome | None:
        """How the match ended, once it has."""
        return self.session.outcome

    @property
    def done(self) -> bool:
        """True once the match is over (finished, truncated or aborted)."""
        return self._finished.is_set()

    def start(self) -> None:
        """Start the driver task (idempotent). Called by the first ``wait_turn``."""
        if self._task is None and not self._finished.is_set():
            loop = asyncio.get_running_loop()
            if self.clock is None:
                self._time = loop
            self._started_at = self._time.time()
            self._task = loop.create_task(self._drive(), name=f"arena-match-{self.match_id[:8]}")
            self._move_clock.attach(self._time, self._task)

    async def wait_turn(self, seat: int) -> SeatTurn | None:
        """Wait until ``seat`` must move; None once the match is over for it."""
        inbox = self._learners.inbox(seat)
        self._learners.join(seat)
        self.start()
        return await inbox.get()

    async def submit(
        self,
        seat: int,
        text: str,
        tokens: Sequence[int] | None = None,
        logprobs: Sequence[float] | None = None,
    ) -> TurnRecord:
        """Answer the turn ``seat`` was given; returns the move as the game applied it.

        Raises MatchAbortedError when the match was aborted, RuntimeError when it is not
        this seat's turn.
        """
        applied = self._hand_in(seat, text, tokens, logprobs)
        try:
            return await applied
        except asyncio.CancelledError:
            task = asyncio.current_task()
            being_cancelled = task is not None and task.cancelling() > 0
            if self._finished.is_set() and not being_cancelled:
                raise MatchAbortedError(self._end_reason()) from None
            raise
        finally:
            self._learners.forget(applied)

    async def submit_and_wait(
        self,
        seat: int,
        text: str,
        tokens: Sequence[int] | None = None,
        logprobs: Sequence[float] | None = None,
    ) -> tuple[TurnRecord, SeatTurn | None]:
        """``submit`` then ``wait_turn`` in one wait: the move as the game applied it, and
        the seat's next turn (None once the match is over for it). The seat's task wakes
        once, when it must move again or the match ends, not also when its move is applied
        (what ``PlayerEnv.step`` needs; a wake-up is a good part of a move's cost).

        Raises MatchAbortedError when the match was aborted before the move was applied,
        RuntimeError when it is not this seat's turn.
        """
        applied = self._hand_in(seat, text, tokens, logprobs)
        try:
            turn = await self._learners.inbox(seat).get()
        finally:
            self._learners.forget(applied)
        if not applied.done() or applied.cancelled():
            raise MatchAbortedError(self._end_reason())
        return applied.result(), turn

    def _hand_in(
        self,
        seat: int,
        text: str,
        tokens: Sequence[int] | None,
        logprobs: Sequence[float] | None,
    ) -> asyncio.Future[TurnRecord]:
        """Give the driver ``seat``'s answer; the future of the move as applied."""
        applied = self._learners.hand_in(seat, text, tokens, logprobs)
        if applied is None:
            if self._aborting is not None or self.session.done:
                raise MatchAbortedError(self._end_reason())
            raise RuntimeError(f"seat {seat} submitted a move, but it is not its turn")
        return applied

    def abort(self, reason: str) -> None:
        """End the match as aborted (if it is not over) and wake every waiter now."""
        if self._finished.is_set() or self._aborting is not None:
            return
        self._aborting = reason
        if self._task is not None and not self._task.done():
            self._task.cancel()
        else:
            self._close(aborted_reason=reason)

    def forfeit(self, seat: int, reason: str) -> None:
        """End the match now as decided: ``seat`` loses (``GameSession.forfeit``; the
        others share its loss), even while another seat is thinking. For a seat whose
        player left or resigned; a seat agent that must forfeit its own turn raises
        ``SeatForfeit`` instead. Does nothing once the match is over or aborting. Raises
        ValueError for a seat the game does not have."""
        if not 0 <= seat < self.session.num_players:
            raise ValueError(f"seat {seat}; the game has {self.session.num_players}")
        if self._finished.is_set() or self._aborting is not None or self.session.done:
            return
        if self._forfeit is None:
            self._forfeit = (seat, reason)
        if self._asking:
            self._move_clock.wake()  # wakes the driver from the seat it waits for (see _drive)

    async def wait_done(self) -> Outcome:
        """Start the match if needed and wait for its end."""
        self.start()
        await self._finished.wait()
        assert self.session.outcome is not None
        return self.session.outcome

    @property
    def stopped(self) -> bool:
        """True once the match is over and its driver task has ended (or never started):
        ``close()`` has nothing left to wait for."""
        task = self._task
        return self._finished.is_set() and (task is None or task.done())

    async def close(self, reason: str = "closed") -> None:
        """Abort the match if it is not over, and wait until its driver task has ended."""
        self.abort(reason)
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(BaseException):
                await asyncio.shield(task)

    # -- internals -----------------------------------------------------------------------
    def _end_reason(self) -> str:
        outcome = self.session.outcome
        if self._aborting is not None:
            return f"match {self.match_id[:8]} aborted: {self._aborting}"
        if outcome is not None:
            return f"match {self.match_id[:8]} is over ({outcome.status.value})"
        return f"match {self.match_id[:8]} is over"

    async def _turn_for(
        self, seat: int, index: int | None = None, movers: tuple[int, ...] = ()
    ) -> SeatTurn:
        messages = self.session.seat_messages(seat)
        read = functools.partial(self.session.legal_moves, seat)
        moves = self._game.now(read)  # inline when it may, without a coroutine
        turn = SeatTurn(
            seat=seat,
            messages=messages,
            new_from=self._seen[seat],
            legal_moves=await self._game(read) if isinstance(moves, Later) else moves,
            turn_index=len(self.session.turns) if index is None else index,
            movers=movers,
        )
        self._seen[seat] = len(messages)
        return turn

    async def _ask(self, seat: int, turn: SeatTurn) -> Submission:
        agent = self.agents.get(seat)
        if agent is not None:
            text = await agent.act(turn)
            if not isinstance(text, str):
                raise TypeError(f"seat {seat} ({agent.name}) answered {type(text).__name__}")
            loop = asyncio.get_running_loop()
            return Submission(text=text, tokens=None, logprobs=None, applied=loop.create_future())
        answer = self._learners.ask(seat, turn)
        if self.join_timeout_s is not None and not self._learners.join_future(seat).done():
            due = self._started_at + self.join_timeout_s
            await self._learners.wait_joined(seat, due, self._time)  # raises NeverJoined
        return await answer

    def _woken_by(self) -> Literal["clock", "forfeit"] | None:
        """After the driver was cancelled while asking: who woke it, the move clock (the
        seat ran out of time) or ``forfeit()`` (the match ends decided); None when someone
        else cancelled it (``abort()``, the task's owner), who wins: the caller re-raises."""
        timed_out, woke = self._move_clock.take_back()
        task = asyncio.current_task()
        if task is None or self._aborting is not None or task.cancelling() > 0:
            return None
        if woke and self._forfeit is not None:
            return "forfeit"
        return "clock" if timed_out else None

    def _seat_forfeited(self, seat: int, exc: SeatForfeit) -> None:
        if self._forfeit is None:
            self._forfeit = (seat, str(exc) or f"seat {seat} forfeited")

    def _never_joined(self, seat: int) -> str:
        return (
            f"seat {seat} ({self.players[seat]}) never joined within "
            f"{self.join_timeout_s:g} s: no driver is playing its env"
        )

    def _timed_out(self, seat: int) -> str:
        return f"seat {seat} ({self.players[seat]}) timed out after {self.move_timeout_s:g} s"

    async def _drive(self) -> None:
        aborted: str | None = None
        full_state: str | None = None
        events = self._events
        self._move_clock.bind()  # a seat waiting inside off_clock() stops it
        try:
            events.announce(await self._game(self.session.views) if events.listened else None)
            while not self.session.done:
                if self.bus is not None and self.bus.congested:  # the recorder is behind
                    await self.bus.wait_for_room(BACKPRESSURE_WAIT_S)
                if self._forfeit is not None:
                    break
                if self.session.simultaneous:
                    aborted = await self._play_round()
                    if aborted is not None or self._forfeit is not None:
                        break
                    continue
                seat = self.session.current_player()
                turn = await self._turn_for(seat)
                if self._forfeit is not None:  # forfeit() came while the turn was read
                    break
                started = self._time.time()
                self._asking = True
                if self.move_timeout_s is not None:
                    self._move_clock.start(self.move_timeout_s)
                try:
                    submission = await self._ask(seat, turn)
                except asyncio.CancelledError:
                    woken_by = self._woken_by()  # forfeit: the match ends decided, below
                    if woken_by is None:
                        raise
                    aborted = self._timed_out(seat) if woken_by == "clock" else None
                    break
                except SeatForfeit as exc:
                    self._seat_forfeited(seat, exc)
                    break
                except NeverJoined:
                    aborted = self._never_joined(seat)
                    break
                finally:
                    self._asking = False
                    self._move_clock.stop()  # no wake-up left when the except above ran
                elapsed = self._time.time() - started
                try:
                    step = functools.partial(self.session.step, seat, submission.text)
                    applied = self._game.now(step)
                    record = await self._game(step) if isinstance(applied, Later) else applied
                except GameError as exc:
                    aborted = str(exc)
                    submission.applied.cancel()
                    break
                except TypeError as exc:
                    aborted = f"seat {seat} ({self.players[seat]}): {exc}"
                    break
                submission.applied.set_result(record)
                if events.listened:
                    views = self._game.now(self.session.views)  # inline, without a coroutine
                    if isinstance(views, Later):
                        views = await self._game(self.session.views)
                    events.turn(
                        record, turn, submission.tokens, submission.logprobs, elapsed, views
                    )
            if aborted is None and self._forfeit is not None:
                self.session.forfeit(*self._forfeit)  # nothing when the game ended first
            outcome = self.session.outcome
            ended = aborted is None and outcome is not None and outcome.status is not Status.ABORTED
            if ended and events.listened:
                full_state = await self._game(self.session.full_state)
        except asyncio.CancelledError:
            if self._aborting is None:
                self._aborting = "cancelled"
                self._close(aborted_reason="cancelled")
                raise
            aborted = self._aborting
        except Exception as exc:  # a seat agent or the game failed: void the match
            aborted = f"{type(exc).__name__}: {exc}"
        self._close(aborted_reason=aborted, full_state=full_state)

    def _close(self, aborted_reason: str | None, full_state: str | None = None) -> None:
        if self._finished.is_set():
            return
        if aborted_reason is not None:
            self.session.abort(aborted_reason)
        outcome = self.session.outcome
        if outcome is None:  # stopped without an outcome: treat as aborted
            self.session.abort(aborted_reason or "stopped")
            outcome = self.session.outcome
        assert outcome is not None
        self._learners.cancel_answers()
        self._finished.set()
        self._move_clock.close()
        self._learners.close()
        self._events.end(outcome, full_state)
        self._game.release(self.session.close)
