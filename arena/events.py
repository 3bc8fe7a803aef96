"""Match events and the in-process event bus.

The coordinator publishes what happens (a match starts, a turn is played, a simultaneous
round progresses, a move is invalid, a match ends or is aborted); the storage recorder and
the web hub subscribe.
Publishing never blocks and never raises: each subscriber has a bounded queue, and a
subscriber that falls ``max_queue`` events behind is dropped and told so
(``SubscriberDropped``), so a slow subscriber can never slow a game.

Back-pressure. A subscriber that must not lose events (the recorder: nothing acknowledged
may be lost) subscribes with ``pressure``: once that many of its events are queued, the
bus is ``congested`` and the coordinators wait (``wait_for_room``, bounded in time) before
their next move, until it has worked its queue down to half. Games slow down to what the
database can store instead of losing matches. Other subscribers (the web hub) never slow a
game: they are dropped when they fall behind.

The bus belongs to one event loop thread: publish and consume from that thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from arena.text import encodable
from games.api import GAME, GameMessage
from games.session import TurnRecord

_now = time.time


@dataclass(frozen=True)
class MatchStarted:
    """A match began."""

    match_id: str
    game_id: str
    seed: int
    num_players: int
    players: tuple[str, ...]
    """Who plays each seat: a policy name ("learner", "random", "optimal", ...)."""
    group_id: str | None = None
    run_id: str | None = None
    public_state: str | None = None
    """What spectators may see at the start."""
    time: float = field(default_factory=time.time)
    board: dict[str, Any] | None = None
    """The public board at the start (``games.api.PublicBoard.as_dict()``), or None when
    the game has none."""
    full_board: dict[str, Any] | None = None
    """The all-seeing board at the start (hidden cards face up), only when it differs
    from ``board``: show it only after the match."""
    rated: bool = True
    """False for a casual match: stored, never rated (live or when ratings are rebuilt)."""
    messages: tuple[GameMessage, ...] | None = None
    """The messages the game sent as it started, to each seat and to everyone, in order
    (what storage keeps; a seat's first observation is built from them); None when the
    publisher did not give them."""


_UNSET: Any = object()


@dataclass(frozen=True)
class Turn(TurnRecord):
    """One move of a match as every layer after the game knows it: the session's record
    (``games.session.TurnRecord``: its fields come first) and what the coordinator adds
    (the sampled tokens, the timing, the views after the move). ``TurnPlayed`` carries
    these fields, storage returns stored turns as this type (``storage.StoredTurn``) and
    the web keeps live and stored turns as it (``web.protocol.TurnData``): a field added
    to ``TurnRecord`` (or here) reaches every layer; storage keeps the fields its block
    columns name (``storage.turnlog.TURN_COLUMNS``)."""

    done: bool = False
    """True when the game ended with this move (a stored turn: the last one of a match
    that ended by its game)."""
    messages: tuple[GameMessage, ...] | None = None  # type: ignore[assignment]
    """The messages the game sent because of this move, to each seat and to everyone, in
    order (what storage keeps); None when the publisher gave only ``observation``."""
    tokens: tuple[int, ...] | None = None
    """Sampled token ids, when a model played."""
    logprobs: tuple[float, ...] | None = None
    """The sampler's logprobs of those tokens."""
    elapsed_s: float = 0.0
    """Time the seat took to answer."""
    time: float = 0.0
    """When the move was applied (seconds since the epoch)."""
    public_state: str | None = None
    """What spectators may see after this move."""
    observation: str | None = None
    """What the seat was shown since its previous move (private messages included: show
    it to others only after the match); None where it is not known."""
    board: dict[str, Any] | None = None
    """The public board after this move (``games.api.PublicBoard.as_dict()``), or None
    when the game has none (or it failed: spectators then get the text view)."""
    full_board: dict[str, Any] | None = None
    """The all-seeing board after this move (hidden cards face up), only when it differs
    from ``board``: show it only after the match."""
    legal_moves: tuple[str, ...] | None = None
    """The moves the game listed for this turn (None: none, or not known)."""


TURN_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Turn))
"""The fields of ``Turn``, in order (what ``TurnPlayed`` carries)."""

_LAZY = ("observation", "board", "full_board")
"""``Turn`` fields that ``TurnPlayed`` makes only when asked (see its docstring)."""
_PLAIN = tuple(name for name in TURN_FIELDS if name not in _LAZY)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Turn)}
_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(TurnRecord))


class TurnPlayed:
    """A seat moved (valid or not): a ``Turn`` of match ``match_id``, as published.

    Built once per move and cheap: the coordinator hands over what it has (the session's
    record, the messages the seat was shown, the boards as JSON text) and the other forms
    are made only when a subscriber asks for them: ``observation`` is rendered from
    ``seen``, ``board`` and ``full_board`` are decoded from their text (and the other way
    round for events built with the values themselves). Every ``Turn`` field is an
    attribute (slots, keyword arguments, equality and pickling follow ``TURN_FIELDS``);
    ``turn()`` gives the plain record. Treat it as immutable; it pickles (workers send
    their events to the trainer).
    """

    __slots__ = (
        "_board",
        "_board_text",
        "_full_board",
        "_full_board_text",
        "_observation",
        "match_id",
        "seen",
        *_PLAIN,
    )

    match_id: str
    index: int
    """0-based move number in the match, invalid moves included."""
    seat: int
    action: str
    """The text the game received: the seat's free text (show it to others only after the
    match; spectators of a live match see ``move``)."""
    valid: bool
    reason: str | None
    truncated: bool
    done: bool
    tokens: tuple[int, ...] | None
    logprobs: tuple[float, ...] | None
    elapsed_s: float
    public_state: str | None
    time: float
    move: str | None
    messages: tuple[GameMessage, ...] | None
    seen: Sequence[GameMessage] | None
    """The messages this seat was shown since its previous move, in order."""
    legal_moves: Sequence[str] | None
    round: int | None
    """A simultaneous round's moves are published together once the round is over."""
    private: bool
    """Live spectators never see a private move, whatever the game was registered with."""

    def __init__(
        self,
        match_id: str,
        index: int,
        seat: int,
        observation: str | None = None,
        action: str = "",
        valid: bool = True,
        reason: str | None = None,
        truncated: bool = False,
        tokens: tuple[int, ...] | None = None,
        logprobs: tuple[float, ...] | None = None,
        elapsed_s: float = 0.0,
        public_state: str | None = None,
        time: float | None = None,
        move: str | None = None,
        board: dict[str, Any] | None = _UNSET,
        full_board: dict[str, Any] | None = _UNSET,
        *,
        seen: Sequence[GameMessage] | None = None,
        board_text: str | None = _UNSET,
        full_board_text: str | None = _UNSET,
        **fields: Any,
    ) -> None:
        """The positional arguments are the common ones; every other ``Turn`` field is a
        keyword (``messages``, ``legal_moves``, ``round``, ``private``, ...). Raises
        TypeError for a keyword that is not one."""
        unknown = set(fields) - set(_PLAIN)
        if unknown:
            raise TypeError(f"TurnPlayed got unknown fields: {', '.join(sorted(unknown))}")
        fields.update(
            index=index,
            seat=seat,
            action=action,
            valid=valid,
            reason=reason,
            truncated=truncated,
            tokens=tokens,
            logprobs=logprobs,
            elapsed_s=elapsed_s,
            public_state=public_state,
            time=_now() if time is None else time,
            move=move,
        )
        self.match_id = match_id
        self.seen = seen
        for name in _PLAIN:
            setattr(self, name, fields[name] if name in fields else _DEFAULTS[name])
        self._observation = observation
        self._board = board
        self._full_board = full_board
        self._board_text = None if board is _UNSET and board_text is _UNSET else board_text
        self._full_board_text = (
            None if full_board is _UNSET and full_board_text is _UNSET else full_board_text
        )

    @classmethod
    def of(cls, match_id: str, record: TurnRecord, **more: Any) -> TurnPlayed:
        """The event of ``record`` (every one of its fields), with ``more`` (the other
        ``Turn`` fields, ``seen``, ``board_text``, ...)."""
        values = {name: getattr(record, name) for name in _RECORD_FIELDS}
        values.update(more)
        index, seat = values.pop("index"), values.pop("seat")
        return cls(match_id, index, seat, **values)

    def turn(self) -> Turn:
        """The move as a plain ``Turn`` (the observation rendered, the boards decoded)."""
        values = {name: getattr(self, name) for name in TURN_FIELDS}
        legal = values["legal_moves"]
        values["legal_moves"] = None if legal is None else tuple(legal)
        return Turn(**values)

    @property
    def observation(self) -> str:
        """The text this seat was shown since its previous move (private messages
        included: show it to others only after the match); ``format_messages(seen)``."""
        if self._observation is None:
            self._observation = format_messages(self.seen or ())
        return self._observation

    @property
    def board(self) -> dict[str, Any] | None:
        """The public board after this move (``Turn.board``)."""
        if self._board is _UNSET:
            text = self._board_text
            self._board = None if text is None or text is _UNSET else json.loads(text)
        return self._board

    @property
    def full_board(self) -> dict[str, Any] | None:
        """The all-seeing board after this move (``Turn.full_board``): only after the
        match."""
        if self._full_board is _UNSET:
            text = self._full_board_text
            self._full_board = None if text is None or text is _UNSET else json.loads(text)
        return self._full_board

    @property
    def board_text(self) -> str | None:
        """``board`` as compact JSON text (None when there is none)."""
        if self._board_text is _UNSET:
            self._board_text = board_json(self._board)
        return self._board_text

    @property
    def full_board_text(self) -> str | None:
        """``full_board`` as compact JSON text (None when there is none)."""
        if self._full_board_text is _UNSET:
            self._full_board_text = board_json(self._full_board)
        return self._full_board_text

    def _fields(self) -> tuple[Any, ...]:
        return (self.match_id, *(getattr(self, name) for name in TURN_FIELDS))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TurnPlayed):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"TurnPlayed(match_id={self.match_id!r}, index={self.index}, seat={self.seat}, "
            f"action={self.action!r}, valid={self.valid}, move={self.move!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        values = {name: getattr(self, name) for name in _PLAIN}
        values.update(
            observation=self._observation,
            seen=self.seen,
            board_text=self.board_text,
            full_board_text=self.full_board_text,
        )
        return (_turn_played, (self.match_id, values))


def _turn_played(match_id: str, values: dict[str, Any]) -> TurnPlayed:
    index, seat = values.pop("index"), values.pop("seat")
    return TurnPlayed(match_id, index, seat, **values)


@dataclass(frozen=True)
class RoundProgress:
    """A simultaneous round is being played: who is asked, who has moved (never what).
    Published when the round starts and as each seat's move arrives; the moves themselves
    come as ``TurnPlayed`` once the round is over."""

    match_id: str
    round: int
    """The round, 1-based (``games.session.GameSession.rounds`` once it is applied)."""
    movers: tuple[int, ...]
    """The seats asked in this round."""
    moved: tuple[int, ...] = ()
    """The seats whose move has arrived."""
    time: float = field(default_factory=time.time)


_BOARD_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def board_json(board: dict[str, Any] | None) -> str | None:
    """A board as the compact JSON text events and storage carry (None stays None); a
    lone surrogate in it becomes U+FFFD (``arena.text.encodable``)."""
    if board is None:
        return None
    try:
        return orjson.dumps(board).decode()
    except TypeError:  # a lone surrogate, a key that is not text, a very large integer
        return encodable(_BOARD_JSON.encode(board))


def format_messages(messages: Sequence[GameMessage]) -> str:
    """Messages as one text, each line tagged with its sender (TextArena's style): what a
    seat is shown, and what ``TurnPlayed.observation`` holds."""
    parts = []
    for m in messages:
        sender = "GAME" if m.sender == GAME else f"Player {m.sender}"
        parts.append(f"[{sender}] {m.text}")
    return "\n".join(parts)


@dataclass(frozen=True)
class InvalidMove:
    """A seat's move was refused by the game (also reported as a ``TurnPlayed``)."""

    match_id: str
    index: int
    seat: int
    action: str
    reason: str | None
    time: float = field(default_factory=time.time)


@dataclass(frozen=True)
class MatchEnded:
    """A match ended by the game's rules (``finished``) or at the move cap (``truncated``)."""

    match_id: str
    status: str
    rewards: tuple[float, ...]
    """Final reward per seat."""
    invalid_moves: tuple[int, ...]
    """Invalid moves per seat."""
    forfeited: tuple[int, ...] = ()
    """Seats that lost by invalid moves."""
    reason: str = ""
    num_turns: int = 0
    full_state: str | None = None
    """The all-seeing final state (hidden information included)."""
    time: float = field(default_factory=time.time)


@dataclass(frozen=True)
class MatchAborted:
    """A match was voided: a seat failed, timed out or was cancelled, or the game failed."""

    match_id: str
    reason: str
    num_turns: int = 0
    time: float = field(default_factory=time.time)


@dataclass(frozen=True)
class RatingsChanged:
    """A rated match changed some ratings (published by ``matchmaking.live``)."""

    game_id: str
    match_id: str
    ratings: tuple[tuple[str, float, float, float], ...]
    """(policy key, mu, sigma, ordinal) of each rated seat after the match, then of every
    other policy whose rating the match moved."""
    time: float = field(default_factory=time.time)
    games: tuple[int, ...] = ()
    """The rated matches of each policy in ``ratings``, in its order (empty: not known)."""


MatchEvent = (
    MatchStarted
    | TurnPlayed
    | RoundProgress
    | InvalidMove
    | MatchEnded
    | MatchAborted
    | RatingsChanged
)
"""Everything the bus carries."""


class SubscriberDropped(Exception):
    """This subscriber fell too far behind and was disconnected from the bus."""


class Subscription:
    """A subscriber's bounded queue. Iterate it with ``async for``.

    ``pressure``: queued events at which the bus becomes congested (None: never; see the
    module's docstring).
    """

    def __init__(
        self, bus: EventBus, max_queue: int, name: str, pressure: int | None = None
    ) -> None:
        self._bus = bus
        self.max_queue = max_queue
        self.name = name
        self.pressure = pressure
        self._queue: deque[MatchEvent] = deque()
        self._wakeup = asyncio.Event()
        self.dropped = False
        """True once the bus dropped this subscriber for falling behind."""
        self.closed = False
        self.pressing = False
        """True while this subscriber holds the bus congested."""

    def _offer(self, event: MatchEvent) -> bool:
        if len(self._queue) >= self.max_queue:
            self.dropped = True
            self._release()
            self._wakeup.set()
            return False
        self._queue.append(event)
        if self.pressure is not None and not self.pressing and len(self._queue) >= self.pressure:
            self.pressing = True
            self._bus._press()
        self._wakeup.set()
        return True

    def _taken(self) -> None:
        if self.pressing and len(self._queue) * 2 <= (self.pressure or 0):
            self._release()

    def _release(self) -> None:
        if self.pressing:
            self.pressing = False
            self._bus._unpress()

    def pending(self) -> int:
        """Events queued and not yet consumed."""
        return len(self._queue)

    def get_nowait(self) -> MatchEvent | None:
        """The next queued event, or None when the queue is empty."""
        if not self._queue:
            return None
        event = self._queue.popleft()
        if self.pressing:
            self._taken()
        return event

    async def get(self) -> MatchEvent:
        """The next event. Raises SubscriberDropped (after the queued events are consumed)
        when the bus dropped this subscriber, StopAsyncIteration once it is closed."""
        while not self._queue:
            if self.dropped:
                raise SubscriberDropped(
                    f"subscriber {self.name or id(self)} fell {self.max_queue} events behind "
                    "and was dropped"
                )
            if self.closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        event = self._queue.popleft()
        if self.pressing:
            self._taken()
        return event

    def close(self) -> None:
        """Unsubscribe; a consumer waiting in ``get`` stops after the queued events."""
        self.closed = True
        self._release()
        self._bus._remove(self)
        self._wakeup.set()

    def __aiter__(self) -> AsyncIterator[MatchEvent]:
        return self

    async def __anext__(self) -> MatchEvent:
        return await self.get()


class EventBus:
    """Fan-out of match events to subscribers, without ever blocking the publisher."""

    DEFAULT_MAX_QUEUE = 10_000
    """Events a subscriber may fall behind before it is dropped."""

    def __init__(self) -> None:
        self._subscribers: list[Subscription] = []
        self.published = 0
        """Events published so far."""
        self._pressing = 0
        self._room: asyncio.Event | None = None
        self._room_loop: asyncio.AbstractEventLoop | None = None
        self.waits = 0
        """Times a publisher waited for a congested subscriber (back-pressure)."""

    def subscribe(
        self, max_queue: int = DEFAULT_MAX_QUEUE, name: str = "", pressure: int | None = None
    ) -> Subscription:
        """A new subscription that receives every event published from now on.

        ``pressure`` (at most ``max_queue``): with that many of its events queued, the bus
        is congested until it has taken half of them (see the module's docstring).
        """
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if pressure is not None and not 1 <= pressure <= max_queue:
            raise ValueError("pressure must be between 1 and max_queue")
        sub = Subscription(self, max_queue, name, pressure)
        self._subscribers.append(sub)
        return sub

    @property
    def congested(self) -> bool:
        """True while a back-pressure subscriber has ``pressure`` events or more queued."""
        return self._pressing > 0

    async def wait_for_room(self, timeout_s: float) -> bool:
        """Wait until the bus is not congested, at most ``timeout_s``; True when it is not.
        Publishers call it between moves, never while publishing."""
        if not self._pressing:
            return True
        self.waits += 1
        loop = asyncio.get_running_loop()
        if self._room is None or self._room_loop is not loop:
            # An event binds to the loop that first waits on it; the process's bus outlives
            # loops (one asyncio.run after another), so each loop gets its own.
            self._room, self._room_loop = asyncio.Event(), loop
        try:
            async with asyncio.timeout(timeout_s):
                await self._room.wait()
        except TimeoutError:
            return False
        return True

    def _press(self) -> None:
        self._pressing += 1
        if self._room is not None:
            self._room.clear()

    def _unpress(self) -> None:
        self._pressing -= 1
        if not self._pressing and self._room is not None:
            self._room.set()

    @property
    def has_subscribers(self) -> bool:
        """True when anyone listens (publishers may skip building costly fields if not)."""
        return bool(self._subscribers)

    def publish(self, event: MatchEvent) -> None:
        """Deliver ``event`` to every subscriber's queue; never blocks or raises."""
        self.published += 1
        dropped = [sub for sub in self._subscribers if not sub._offer(event)]
        for sub in dropped:
            self._remove(sub)

    def _remove(self, sub: Subscription) -> None:
        if sub in self._subscribers:
            self._subscribers.remove(sub)


_default_bus: EventBus | None = None


def default_bus() -> EventBus:
    """The process's shared bus, which envs built by ``make_envs()`` publish to."""
    global _default_bus
    if _default_bus is None:
        _default_bus = EventBus()
    return _default_bus
