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

No deadlock: if any seat raises, is cancelled or times out, or the game fails, the match
ends as aborted and every coroutine waiting on it wakes at once.

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
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from arena.clock import Clock, TimerHandle
from arena.events import (
    EventBus,
    InvalidMove,
    MatchAborted,
    MatchEnded,
    MatchStarted,
    RoundProgress,
    TurnPlayed,
)
from arena.gamethread import GameCaller, GameThread, Later
from games.api import GameMessage
from games.bots import Bot, BotView, check_bot, make_bot
from games.session import (
    GameError,
    GameSession,
    Outcome,
    RoundError,
    SpectatorViews,
    Status,
    TurnRecord,
)

_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution
"""asyncio runs a timer up to this early (``Clock.call_at``); the move clock counts it as
on time."""

_NO_VIEWS = SpectatorViews(None, None, None)
"""What a match announced before its first view was read shows (it ended at once)."""


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


@dataclass(frozen=True)
class SeatTurn:
    """What a seat is given when it must move."""

    seat: int
    messages: Sequence[GameMessage]
    """Every message this seat has received, in order (only its own, never another's)."""
    new_from: int
    """Index in ``messages`` where the messages since its previous move begin."""
    legal_moves: list[str] | None
    """The moves the game lists now, when it lists them."""
    turn_index: int
    """The match's move number this turn will have."""
    movers: tuple[int, ...] = ()
    """In a simultaneous round, every seat asked at once (this one included); empty for a
    move in turn."""


class SeatAgent(Protocol):
    """Plays a seat the learner does not: a bot, a past checkpoint, a person."""

    name: str

    async def act(self, turn: SeatTurn) -> str:
        """The move for ``turn``, as text."""
        ...


class AgentSpec(Protocol):
    """Plain, picklable description of who plays a seat the learner does not (a bot, a
    checkpoint, ...); ``build`` makes the live agent for one match."""

    @property
    def name(self) -> str:
        """What matches record for this seat."""
        ...

    def check(self, game_id: str) -> None:
        """Raise ValueError when this player cannot play ``game_id``."""
        ...

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        """The agent for ``seat`` of one match (``seed`` seeds its randomness)."""
        ...


@dataclass(frozen=True)
class BotSpec:
    """A bot by name (``games.bots``), as a seat."""

    bot: str

    @property
    def name(self) -> str:
        """The bot's name."""
        return self.bot

    def check(self, game_id: str) -> None:
        """Raise UnknownBot when the bot cannot play ``game_id``."""
        from games.registry import get_spec

        check_bot(self.bot, get_spec(game_id))

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        """A fresh bot for ``seat``."""
        return BotAgent(make_bot(self.bot, seed=seed), game_id)


def agent_spec(player: str | AgentSpec) -> AgentSpec:
    """A bot name as a ``BotSpec``; specs pass through."""
    return BotSpec(player) if isinstance(player, str) else player


class BotAgent:
    """A ``games.bots.Bot`` as a seat agent."""

    def __init__(self, bot: Bot, game_id: str) -> None:
        self.bot = bot
        self.name = bot.name
        self._game_id = game_id

    async def act(self, turn: SeatTurn) -> str:
        """Ask the bot (synchronously: bots are cheap)."""
        view = BotView(
            game_id=self._game_id,
            seat=turn.seat,
            messages=turn.messages,
            legal_moves=turn.legal_moves,
        )
        return self.bot.act(view)


def _retrieve(task: asyncio.Task[object]) -> None:
    """Take a finished seat task's exception, so an unneeded one is never logged."""
    if not task.cancelled():
        task.exception()


class MatchAbortedError(Exception):
    """Raised to a learner seat that submits to a match that has been aborted."""


class SeatForfeit(Exception):
    """Raised by a seat agent's ``act`` to forfeit its seat (it lost on time, its player
    left or resigned): the match ends decided (``finished``), that seat losing
    (``GameSession.forfeit``), never aborted. The message says why."""


DEFAULT_JOIN_TIMEOUT_S = 10.0
"""How long a learner seat may take to join (call ``wait_turn`` for the first time) once its
game needs it. Every driver starts all envs of a group together, so a seat that has not
joined by then never will (for example the unused seats of a group that a retry strategy
built only to take one env from): the match is aborted instead of waiting for it."""


class _NeverJoined(Exception):
    def __init__(self, seat: int) -> None:
        super().__init__(seat)
        self.seat = seat


def _join_expired(joined: asyncio.Future[None], seat: int) -> None:
    """The join timeout's timer: the seat that has not joined by now never will."""
    if not joined.done():
        joined.set_exception(_NeverJoined(seat))


class _Inbox:
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
class _Submission:
    text: str
    tokens: tuple[int, ...] | None
    logprobs: tuple[float, ...] | None
    applied: asyncio.Future[TurnRecord]


class GameCoordinator:
    """Runs one game for its seats.

    ``agents`` maps the seats that are not learner seats to their agents; every other seat
    is a learner seat and must be driven through ``wait_turn``/``submit``.
    ``move_timeout_s`` bounds how long any seat may take to answer (None: no limit).
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
        move_timeout_s: float | None = 120.0,
        join_timeout_s: float | None = DEFAULT_JOIN_TIMEOUT_S,
        players: Sequence[str] | None = None,
        group_id: str | None = None,
        run_id: str | None = None,
        game_thread: GameThread | None = None,
        rated: bool = True,
        clock: Clock | None = None,
    ) -> None:
        if move_timeout_s is not None and move_timeout_s <= 0:
            raise ValueError("move_timeout_s must be positive (or None)")
        if join_timeout_s is not None and join_timeout_s <= 0:
            raise ValueError("join_timeout_s must be positive (or None)")
        self.session = session
        self.agents = dict(agents or {})
        for seat in self.agents:
            if not 0 <= seat < session.num_players:
                raise ValueError(f"agent for seat {seat}; the game has {session.num_players}")
        self.learner_seats = [s for s in range(session.num_players) if s not in self.agents]
        self.bus = bus
        self.match_id = match_id or uuid.uuid4().hex
        self.move_timeout_s = move_timeout_s
        self.join_timeout_s = join_timeout_s
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
        self._inbox: dict[int, _Inbox] = {}
        self._pending: dict[int, asyncio.Future[_Submission]] = {}
        self._applied: set[asyncio.Future[TurnRecord]] = set()
        self._seen = [0] * session.num_players
        self._joined: dict[int, asyncio.Future[None]] = {}
        """Per learner seat, done once it joined (called ``wait_turn``)."""
        self.clock = clock
        """The clock given; None: the running loop's (``_time`` is the one in use)."""
        self._time: Clock = clock if clock is not None else _NOT_STARTED
        """The clock in use: ``clock``, else the loop that ``start`` runs the driver on."""
        self._started_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._aborting: str | None = None
        self._finished = asyncio.Event()
        self._announced = False
        self._forfeit: tuple[int, str] | None = None
        self._asking = False
        self._game = GameCaller(game_thread)
        self._clock_timer: TimerHandle | None = None
        """The move clock's one timer (see ``_start_clock``)."""
        self._clock_deadline: float | None = None
        """When the seat being asked runs out of time (clock time); None between turns."""
        self._clock_fired = False
        """The move clock cancelled the driver (it ran out)."""
        self._forfeit_woke = False
        """``forfeit()`` cancelled the driver to wake it."""
        self._round_turns: list[tuple[TurnRecord, SeatTurn, _Submission, float]] = []
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

    async def wait_turn(self, seat: int) -> SeatTurn | None:
        """Wait until ``seat`` must move; None once the match is over for it."""
        inbox = self._seat_inbox(seat)
        joined = self._join_future(seat)
        if not joined.done():
            joined.set_result(None)
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
            self._applied.discard(applied)

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
            turn = await self._seat_inbox(seat).get()
        finally:
            self._applied.discard(applied)
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
        future = self._pending.pop(seat, None)
        if future is None or future.done():
            if self._aborting is not None or self.session.done:
                raise MatchAbortedError(self._end_reason())
            raise RuntimeError(f"seat {seat} submitted a move, but it is not its turn")
        self._seat_inbox(seat).discard()  # the turn answered, if its waiter never took it
        applied: asyncio.Future[TurnRecord] = asyncio.get_running_loop().create_future()
        self._applied.add(applied)
        future.set_result(
            _Submission(
                text=text,
                tokens=tuple(tokens) if tokens is not None else None,
                logprobs=tuple(logprobs) if logprobs is not None else None,
                applied=applied,
            )
        )
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
        if (
            self._asking
            and not self._forfeit_woke
            and self._task is not None
            and not self._task.done()
        ):
            self._forfeit_woke = True
            self._task.cancel()  # wakes the driver from the seat it waits for (see _drive)

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
    def _join_future(self, seat: int) -> asyncio.Future[None]:
        joined = self._joined.get(seat)
        if joined is None:
            joined = self._joined[seat] = asyncio.get_running_loop().create_future()
        return joined

    def _seat_inbox(self, seat: int) -> _Inbox:
        inbox = self._inbox.get(seat)
        if inbox is None:
            if seat not in self.learner_seats:
                raise ValueError(f"seat {seat} is not a learner seat of this match")
            inbox = self._inbox[seat] = _Inbox()
            if self._finished.is_set():
                inbox.close()
        return inbox

    def _start_clock(self, seconds: float) -> None:
        """Start the move clock for the seat about to be asked. One timer per match,
        re-armed lazily: starting a turn's clock is a float store (``asyncio.timeout`` per
        move cost more than the rest of the driver's bookkeeping). When the timer finds
        the turn's deadline passed it cancels the driver, which ``_drive`` reads as a
        timeout; a timer that fires early re-arms for the current deadline, one that fires
        between turns lapses."""
        clock = self._time
        self._clock_deadline = deadline = clock.time() + seconds
        timer = self._clock_timer
        if timer is not None and timer.when() > deadline:  # a shorter limit than before
            timer.cancel()
            timer = None
        if timer is None:
            self._clock_timer = clock.call_at(deadline, self._check_clock)

    def _take_back_wake_ups(self) -> tuple[bool, bool]:
        """Whether the move clock and ``forfeit()`` cancelled the driver since the seat was
        asked; their cancel requests are taken back, so what is left is someone else's.
        Also when the seat answered all the same: its code absorbed the cancellation
        (``asyncio.wait_for`` can, when what it waits for ends at the same time), and a
        request left over would make the next cancellation look like someone else's
        (``asyncio.timeout`` did the same)."""
        timed_out, woke = self._clock_fired, self._forfeit_woke
        self._clock_fired = self._forfeit_woke = False
        task = self._task
        for _ in range(timed_out + woke):
            if task is not None and task.cancelling() > 0:
                task.uncancel()
        return timed_out, woke

    def _check_clock(self) -> None:
        self._clock_timer = None
        deadline = self._clock_deadline
        task = self._task
        if deadline is None or task is None or task.done():
            return
        clock = self._time
        if clock.time() + _CLOCK_RESOLUTION < deadline:  # a timer may fire that much early
            self._clock_timer = clock.call_at(deadline, self._check_clock)
            return
        self._clock_deadline = None
        self._clock_fired = True
        task.cancel()

    def _end_reason(self) -> str:
        outcome = self.session.outcome
        if self._aborting is not None:
            return f"match {self.match_id[:8]} aborted: {self._aborting}"
        if outcome is not None:
            return f"match {self.match_id[:8]} is over ({outcome.status.value})"
        return f"match {self.match_id[:8]} is over"

    def _publish(self, event: object) -> None:
        if self.bus is not None:
            self.bus.publish(event)  # type: ignore[arg-type]

    @property
    def _listened(self) -> bool:
        return self.bus is not None and self.bus.has_subscribers

    def _announce(self, views: SpectatorViews | None) -> None:
        if self._announced:
            return
        self._announced = True
        if self._listened:
            views = views or _NO_VIEWS
            self._publish(
                MatchStarted(
                    match_id=self.match_id,
                    game_id=self.session.game_id,
                    seed=self.session.seed,
                    num_players=self.session.num_players,
                    players=self.players,
                    group_id=self.group_id,
                    run_id=self.run_id,
                    public_state=views.public_state,
                    board=views.board,
                    full_board=views.full_board,
                    rated=self.rated,
                    messages=self.session.start_messages,
                )
            )

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

    async def _ask(self, seat: int, turn: SeatTurn) -> _Submission:
        agent = self.agents.get(seat)
        if agent is not None:
            text = await agent.act(turn)
            if not isinstance(text, str):
                raise TypeError(f"seat {seat} ({agent.name}) answered {type(text).__name__}")
            loop = asyncio.get_running_loop()
            return _Submission(text=text, tokens=None, logprobs=None, applied=loop.create_future())
        future: asyncio.Future[_Submission] = asyncio.get_running_loop().create_future()
        self._pending[seat] = future
        self._seat_inbox(seat).put(turn)
        joined = self._join_future(seat)
        if not joined.done() and self.join_timeout_s is not None:
            due = self._started_at + self.join_timeout_s
            timer = self._time.call_at(due, functools.partial(_join_expired, joined, seat))
            try:
                await joined  # raises _NeverJoined when the timer comes first
            finally:
                timer.cancel()
        return await future

    async def _drive(self) -> None:
        aborted: str | None = None
        full_state: str | None = None
        try:
            self._announce(await self._game(self.session.views) if self._listened else None)
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
                    self._start_clock(self.move_timeout_s)
                try:
                    submission = await self._ask(seat, turn)
                except asyncio.CancelledError:
                    # Who cancelled: the move clock, forfeit(), or someone else (abort(),
                    # the task's owner), which wins.
                    timed_out, woke = self._take_back_wake_ups()
                    task = asyncio.current_task()
                    if task is None or self._aborting is not None or task.cancelling() > 0:
                        raise
                    if woke and self._forfeit is not None:
                        break  # forfeit() woke us: the match ends decided, below
                    if not timed_out:
                        raise
                    who = f"seat {seat} ({self.players[seat]})"
                    aborted = f"{who} timed out after {self.move_timeout_s:g} s"
                    break
                except SeatForfeit as exc:
                    if self._forfeit is None:
                        self._forfeit = (seat, str(exc) or f"seat {seat} forfeited")
                    break
                except _NeverJoined:
                    aborted = (
                        f"seat {seat} ({self.players[seat]}) never joined within "
                        f"{self.join_timeout_s:g} s: no driver is playing its env"
                    )
                    break
                finally:
                    self._asking = False
                    self._clock_deadline = None
                    self._take_back_wake_ups()  # none left when the except above ran
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
                if self._listened:
                    views = self._game.now(self.session.views)  # inline, without a coroutine
                    if isinstance(views, Later):
                        views = await self._game(self.session.views)
                    self._report_turn(record, turn, submission, elapsed, views)
            if aborted is None and self._forfeit is not None:
                self.session.forfeit(*self._forfeit)  # nothing when the game ended first
            outcome = self.session.outcome
            ended = aborted is None and outcome is not None and outcome.status is not Status.ABORTED
            if ended and self._listened:
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
        self._progress(number, movers, ())
        loop = asyncio.get_running_loop()
        started = self._time.time()
        asks = {seat: loop.create_task(self._ask(seat, turns[seat])) for seat in movers}
        seat_of = {task: seat for seat, task in asks.items()}
        for task in asks.values():
            task.add_done_callback(_retrieve)
        submissions: dict[int, _Submission] = {}
        elapsed: dict[int, float] = {}
        waiting = set(asks.values())
        self._asking = True
        if self.move_timeout_s is not None:
            # The seats are asked at the same moment: one deadline is each seat's own clock.
            self._start_clock(self.move_timeout_s)
        try:
            while waiting:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: seat_of[t]):
                    seat = seat_of[task]
                    failure = task.exception()
                    if isinstance(failure, SeatForfeit):
                        if self._forfeit is None:
                            self._forfeit = (seat, str(failure) or f"seat {seat} forfeited")
                        return None
                    if isinstance(failure, _NeverJoined):
                        return (
                            f"seat {seat} ({self.players[seat]}) never joined within "
                            f"{self.join_timeout_s:g} s: no driver is playing its env"
                        )
                    if failure is not None:
                        raise failure
                    submissions[seat] = task.result()
                    elapsed[seat] = self._time.time() - started
                    self._progress(number, movers, tuple(sorted(submissions)))
        except asyncio.CancelledError:
            # Who cancelled: the move clock, forfeit(), or someone else, who wins.
            timed_out, woke = self._take_back_wake_ups()
            driver = asyncio.current_task()
            if driver is None or self._aborting is not None or driver.cancelling() > 0:
                raise
            if woke and self._forfeit is not None:
                return None  # forfeit() woke us: the match ends decided
            if not timed_out or not waiting:
                raise
            late = min(seat_of[t] for t in waiting)
            return f"seat {late} ({self.players[late]}) timed out after {self.move_timeout_s:g} s"
        finally:
            self._asking = False
            self._clock_deadline = None
            self._take_back_wake_ups()
            for ask in asks.values():
                if not ask.done():
                    ask.cancel()
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
            if self._listened:
                views = await self._game(self.session.views)
                for record, turn, submission, took in held:
                    self._report_turn(record, turn, submission, took, views)
        return None

    def _progress(self, number: int, movers: tuple[int, ...], moved: tuple[int, ...]) -> None:
        if self._listened:
            self._publish(RoundProgress(self.match_id, number, movers, moved))

    def _report_turn(
        self,
        record: TurnRecord,
        turn: SeatTurn,
        submission: _Submission,
        elapsed: float,
        views: SpectatorViews,
    ) -> None:
        # The payload as the coordinator has it: the observation is rendered, and the
        # boards decoded, only if a subscriber asks (arena.events.TurnPlayed).
        self._publish(
            TurnPlayed.of(
                self.match_id,
                record,
                tokens=submission.tokens,
                logprobs=submission.logprobs,
                elapsed_s=elapsed,
                public_state=views.public_state,
                seen=turn.messages[turn.new_from :],
                legal_moves=turn.legal_moves,
                board_text=views.board_text,
                full_board_text=views.full_board_text,
            )
        )
        if not record.valid:
            self._publish(
                InvalidMove(
                    match_id=self.match_id,
                    index=record.index,
                    seat=record.seat,
                    action=record.action,
                    reason=record.reason,
                )
            )

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
        for future in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
        for applied in self._applied:
            if not applied.done():
                applied.cancel()
        self._finished.set()
        if self._clock_timer is not None:
            self._clock_timer.cancel()
            self._clock_timer = None
        self._clock_deadline = None
        for seat in self.learner_seats:
            self._seat_inbox(seat).close()
        if self._listened:
            if not self._announced:
                self._announce(None)
            if outcome.status is Status.ABORTED:
                self._publish(
                    MatchAborted(
                        match_id=self.match_id,
                        reason=outcome.reason,
                        num_turns=len(self.session.turns),
                    )
                )
            else:
                self._publish(
                    MatchEnded(
                        match_id=self.match_id,
                        status=outcome.status.value,
                        rewards=tuple(outcome.rewards[s] for s in range(self.session.num_players)),
                        invalid_moves=tuple(self.session.invalid_moves),
                        forfeited=tuple(sorted(outcome.forfeited)),
                        reason=outcome.reason,
                        num_turns=len(self.session.turns),
                        full_state=full_state,
                    )
                )
        self._game.release(self.session.close)
