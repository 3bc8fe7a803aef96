"""What a remote agent's code is handed and answers with: the match a seat plays
(``MatchInfo``), the turn it must answer (``AgentTurn``), how its match ended
(``MatchResult``), the policy that plays a seat (``SeatPolicy``, made by a
``PolicyFactory``) and the server's refusals (``AgentError``). No I/O: the connection is
``web.agents.agentclient.AgentClient``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from arena.seats import SeatTurn
from games.api import GameMessage


class AgentError(Exception):
    """The server refused something; ``code`` is its error code (``unauthorized``,
    ``bad_game``, ``too_many_matches``...), the message says what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class MatchInfo:
    """A match one of the agent's seats plays (``paired`` or ``resumed``)."""

    match_id: str
    game_id: str
    seat: int
    players: tuple[str, ...]
    """Who plays each seat (``agent:NAME``, ``human``, ``random``, ``checkpoint:RUN@STEP``)."""
    num_players: int
    rated: bool
    move_timeout_s: float
    """Seconds per move; past it the seat loses on time."""

    @classmethod
    def from_message(cls, m: dict[str, Any]) -> MatchInfo:
        """From a ``paired`` message or an entry of ``resumed``."""
        return cls(
            match_id=str(m["match"]),
            game_id=str(m["game_id"]),
            seat=int(m["seat"]),
            players=tuple(m.get("players") or ()),
            num_players=int(m.get("num_players") or len(m.get("players") or ()) or 2),
            rated=bool(m.get("rated")),
            move_timeout_s=float(m.get("move_timeout_s") or 0.0),
        )


@dataclass(frozen=True)
class AgentTurn:
    """A turn one of the agent's seats must answer (``your_turn``)."""

    match_id: str
    seat: int
    turn_index: int
    """The match's move number this move will have."""
    messages: tuple[GameMessage, ...]
    """Everything this seat has been shown, in order (its private messages included)."""
    new_from: int
    """Where in ``messages`` the messages since its previous move begin."""
    prompt: str
    """The new messages as one text (``[GAME] ...`` lines)."""
    legal_moves: list[str] | None
    deadline: float
    """Unix time by which the move must reach the server."""
    movers: tuple[int, ...] = ()
    """In a simultaneous round, every seat asked at once (``your_turn``'s ``movers``);
    empty for a move in turn."""

    @property
    def seat_turn(self) -> SeatTurn:
        """The same turn as the server's own seat agents get it."""
        return SeatTurn(
            seat=self.seat,
            messages=self.messages,
            new_from=self.new_from,
            legal_moves=self.legal_moves,
            turn_index=self.turn_index,
            movers=self.movers,
        )


@dataclass(frozen=True)
class MatchResult:
    """How one of the agent's matches ended (``match_ended``)."""

    match_id: str
    seat: int
    status: str
    """``finished``, ``truncated`` or ``aborted`` (a match that ended while the client was
    disconnected: as the server replays it on reconnecting); ``unknown`` when the server
    could not tell (it restarted and the match is not in its database)."""
    result: str
    """``win``, ``loss``, ``draw`` or ``aborted``; ``unknown`` as for ``status``."""
    reward: float | None
    rewards: tuple[float, ...] | None
    reason: str
    rated: bool
    forfeited: tuple[int, ...] = ()


class SeatPolicy(Protocol):
    """Plays one seat of one match."""

    async def act(self, turn: AgentTurn) -> str:
        """The move for ``turn``, as text."""
        ...


PolicyFactory = Callable[[MatchInfo], SeatPolicy]
"""``(match) -> the policy for the agent's seat in it``."""
