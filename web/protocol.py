"""The live protocol's messages, built and parsed without I/O (see ``docs/protocol.md``).

Every frame is one JSON object with a ``type``. Clients send requests (``subscribe``,
``unsubscribe``, ``move``, ``start_match``, ``ping``), each with an optional ``id`` that
the answer carries back as ``ref``. The server sends ``hello`` on connect, snapshots,
numbered match events, lobby updates, metrics rows, acknowledgements and errors.

What a spectator may see is decided here, in one place:

* while a match is live, a turn shows who moved, whether the move was valid, the public
  state after it and the move itself only when the game's moves are public and the game
  showed this one to every seat; never the seat's observation (its private view), its
  token ids, or the match's seed (which would let anyone replay the deal); a simultaneous
  round shows who has moved, never what, until it is over;
* once the match has ended, everything is shown: the seed, every seat's observations,
  every move and reason, and the all-seeing final state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from arena.events import Turn
from arena.text import encodable
from games.registry import UnknownGame
from games.registry import moves_are_public as games_moves_are_public

PROTOCOL_VERSION = 1
"""Bumped when a message changes incompatibly."""

MAX_ID_CHARS = 128
"""Longest match id, run name, token or request id a client may send."""

AGENT_PROTOCOL_VERSION = 1
"""The agent protocol's version (``auth``'s ``agent_protocol``, in ``hello``): bumped when an
agent message changes incompatibly."""

AGENT_REQUEST_TYPES = ("auth", "seek", "cancel_seek", "resign")
"""Requests of the agent protocol (``web.agents.agentdesk``); ``move`` is shared with browsers."""
REQUEST_TYPES = ("subscribe", "unsubscribe", "move", "start_match", "ping", *AGENT_REQUEST_TYPES)
STREAMS = ("lobby", "match", "run")


class ProtocolError(Exception):
    """A request the server refuses; ``code`` is the error's machine-readable name, ``ref``
    the request's id when it is known before the request is parsed whole."""

    def __init__(self, code: str, message: str, ref: str | int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.ref = ref


def dumps(message: Mapping[str, Any]) -> str:
    """``message`` as one compact JSON text frame, always encodable as UTF-8 whatever a
    client or a model put in it (lone surrogates become U+FFFD: ``arena.text.encodable``).

    Raises ValueError for non-finite floats (browsers cannot parse them) and TypeError
    for values JSON cannot hold.
    """
    return encodable(
        json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    )


def error(code: str, message: str, ref: Any = None) -> dict[str, Any]:
    """An ``error`` message."""
    out: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if ref is not None:
        out["ref"] = ref
    return out


@dataclass(frozen=True)
class ClientRequest:
    """One parsed client request."""

    type: str
    id: str | int | None
    """The client's request id, echoed as ``ref`` in the answer."""
    data: dict[str, Any] = field(default_factory=dict)

    def text(self, key: str, *, required: bool = True, max_chars: int = MAX_ID_CHARS) -> str:
        """Field ``key`` as a non-empty string of at most ``max_chars`` characters ("" when
        absent and not required). Raises ProtocolError ``bad_message``."""
        value = self.data.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or not value:
            raise ProtocolError("bad_message", f"{self.type}: {key!r} must be a non-empty string")
        if len(value) > max_chars:
            raise ProtocolError(
                "bad_message", f"{self.type}: {key!r} is longer than {max_chars} characters"
            )
        return value

    def integer(self, key: str, default: int | None = None) -> int | None:
        """Field ``key`` as an int (``default`` when absent). Raises ProtocolError."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > 2**53:
            raise ProtocolError("bad_message", f"{self.type}: {key!r} must be an integer")
        return value


def parse_request(frame: str | bytes) -> ClientRequest:
    """Parse one client frame.

    Raises ProtocolError: ``bad_frame`` for binary frames, ``bad_json`` for text that is
    not a JSON object, ``unknown_type`` for a type the server does not know.
    """
    if isinstance(frame, bytes | bytearray | memoryview):
        raise ProtocolError("bad_frame", "send JSON text frames, not binary ones")
    try:
        data = json.loads(frame)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError("bad_json", f"a frame must be one JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError("bad_json", "a frame must be one JSON object")
    ref = data.get("id")
    if not valid_id(ref):
        raise ProtocolError(
            "bad_message",
            f"'id' must be a string of 1 to {MAX_ID_CHARS} characters or an integer "
            f"(|id| <= 2^53), not {json.dumps(ref)[:40]}",
        )
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in REQUEST_TYPES:
        raise ProtocolError(
            "unknown_type",
            f"unknown message type {str(kind)[:40]!r}; the server knows: "
            + ", ".join(REQUEST_TYPES),
            ref,
        )
    return ClientRequest(type=kind, id=ref, data=data)


def valid_id(ref: Any) -> bool:
    """Whether ``ref`` may be a request's ``id``: absent (None), a string of 1 to
    ``MAX_ID_CHARS`` characters, or an integer of at most 2^53 in size (exact in every
    client's JSON)."""
    if ref is None:
        return True
    if isinstance(ref, bool):
        return False
    if isinstance(ref, int):
        return abs(ref) <= 2**53
    return isinstance(ref, str) and 0 < len(ref) <= MAX_ID_CHARS


def request_id(frame: str | bytes) -> str | int | None:
    """The ``id`` of a frame if it has a valid one (for answering a request that is not
    read: ``rate_limited``), else None. Never raises."""
    if not isinstance(frame, str):
        return None
    try:
        data = json.loads(frame)
    except (ValueError, RecursionError):
        return None
    ref = data.get("id") if isinstance(data, dict) else None
    return ref if ref is not None and valid_id(ref) else None


def moves_are_public(game_id: str) -> bool:
    """Whether spectators may see the moves of ``game_id`` while it is live, as its game
    declares (``games.moves_are_public``: games without hidden information, and those whose
    moves every seat receives, like Kuhn poker's bets). A game unknown here (a match stored
    by a process with a plugin this server lacks) keeps its moves hidden."""
    try:
        return games_moves_are_public(game_id)
    except UnknownGame:
        return False


MovesArePublic = Callable[[str], bool]


def public_turn(turn: Turn, moves_public: bool) -> dict[str, Any]:
    """What a spectator sees of ``turn`` while the match is live: the parsed move (never the
    seat's text around it, which can name a hidden card) when the game's moves are public
    and the game did not show this one to single seats only."""
    moves_public = moves_public and not turn.private
    out = {
        "index": turn.index,
        "seat": turn.seat,
        "valid": turn.valid,
        "action": turn.move if moves_public else None,
        "reason": turn.reason if moves_public else None,
        "truncated": turn.truncated,
        "elapsed_s": round(turn.elapsed_s, 4),
        "time": turn.time,
        "public_state": turn.public_state,
        "board": turn.board,
        "hidden": not moves_public,
    }
    if turn.round is not None:
        out["round"] = turn.round
    return out


def seat_turn(turn: Turn) -> dict[str, Any]:
    """What the seat that played ``turn`` sees of it: its own text, always."""
    return {
        **public_turn(turn, True),
        "action": turn.action,
        "move": turn.move,
        "reason": turn.reason,
        "hidden": False,
    }


def full_turn(turn: Turn) -> dict[str, Any]:
    """Everything about ``turn``: for after the match (``action`` is the seat's text,
    ``full_board`` the all-seeing board when it differs from ``board``)."""
    return {**seat_turn(turn), "observation": turn.observation, "full_board": turn.full_board}


@dataclass
class MatchInfo:
    """A match's header: who plays what."""

    match_id: str
    game_id: str
    seed: int
    num_players: int
    players: tuple[str, ...]
    run_id: str | None
    group_id: str | None
    started_at: float
    start_state: str | None
    """What spectators could see at the start."""
    human_seats: tuple[int, ...] = ()
    """Seats played by people in a browser."""
    start_board: dict[str, Any] | None = None
    """The public board at the start, or None."""
    start_full_board: dict[str, Any] | None = None
    """The all-seeing board at the start when it differs from ``start_board``: for after
    the match."""

    def public(self) -> dict[str, Any]:
        """The header as spectators see it while live (no seed, no all-seeing board)."""
        return {
            "id": self.match_id,
            "game_id": self.game_id,
            "num_players": self.num_players,
            "players": list(self.players),
            "run_id": self.run_id,
            "group_id": self.group_id,
            "started_at": self.started_at,
            "start_state": self.start_state,
            "start_board": self.start_board,
            "human_seats": list(self.human_seats),
        }

    def full(self) -> dict[str, Any]:
        """The header with the seed and the all-seeing start board, for after the match."""
        return {**self.public(), "seed": self.seed, "start_full_board": self.start_full_board}


def finite(value: Any) -> Any:
    """``value`` with NaN and infinities (which JSON cannot carry) made None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
