"""The match events: what the coordinator publishes on the bus (``arena.eventbus``) as a
match is played (a match starts, a turn is played, a simultaneous round progresses, a move
is invalid, a match ends or is aborted) and what ``matchmaking.live`` adds (ratings
changed); the storage recorder and the web hub subscribe.

``Turn`` is the one turn record every layer after the game knows; ``TurnPlayed`` carries
it as published, cheap to build and making its costly forms only when asked.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arena.eventformat import board_json, format_messages
from games.api import GameMessage
from games.turnrecord import TurnRecord

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
    (``games.turnrecord.TurnRecord``: its fields come first) and what the coordinator
    adds (the sampled tokens, the timing, the views after the move). ``TurnPlayed``
    carries these fields, storage returns stored turns as this type and the web keeps live
    and stored turns as it: a field added to ``TurnRecord`` (or here) reaches every layer;
    storage keeps the fields its block columns name (``storage.turnlog.TURN_COLUMNS``)."""

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
