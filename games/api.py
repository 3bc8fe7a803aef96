"""The registry's game API: what every game, native or adapted from TextArena, provides.

A game is a synchronous, I/O-free state machine for N seats that take turns. It never
sleeps, prints (prints are swallowed anyway) or reads a clock, so tests drive it directly.
The ``GameSession`` in ``games.session`` wraps a game with the limits; the async turn
coordination lives in ``arena``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum

from games.legal import parse_move

GAME = -1
"""Sender id of messages from the game itself."""


class MessageKind(StrEnum):
    """What a message is, so renderers can pick what to show."""

    PROMPT = "prompt"
    """The rules and the seat's role, sent once at the start."""
    ACTION = "action"
    """A seat's raw move text."""
    DESCRIPTION = "description"
    """The game describing a move."""
    BOARD = "board"
    """The current state of the game as this seat may see it."""
    INFO = "info"
    """Other game messages."""
    ADMIN = "admin"
    """Invalid moves, wins and losses."""


@dataclass(frozen=True)
class GameMessage:
    """One message of a game's transcript."""

    sender: int
    """The seat that wrote it, or ``GAME``."""
    text: str
    kind: MessageKind
    to: int | None = None
    """The only seat that receives it, or None when every seat does (public)."""

    @property
    def public(self) -> bool:
        """True when every seat received it."""
        return self.to is None


@dataclass(frozen=True)
class MoveResult:
    """What applying one move did."""

    valid: bool
    reason: str | None = None
    """Why the move was invalid (None when valid)."""


@dataclass(frozen=True)
class GameSpec:
    """A catalogue entry: a game id and what it needs."""

    game_id: str
    min_players: int
    max_players: int
    source: str
    """``native`` or ``textarena``."""
    available: bool
    reason: str | None = None
    """Why the game is unavailable here, or a caveat."""
    hidden_information: bool = False
    """True when seats receive private messages (cards, roles)."""
    legal_moves: bool = False
    """True when the random bot can read the legal moves."""
    description: str = ""
    player_counts: tuple[int, ...] = field(default=())
    """The supported player counts, when not every count in [min, max] is."""

    def supports(self, num_players: int) -> bool:
        """Whether the game can be played by ``num_players`` seats."""
        if self.player_counts:
            return num_players in self.player_counts
        return self.min_players <= num_players <= self.max_players

    @property
    def players_text(self) -> str:
        """The player counts for a table: ``2``, ``2-4`` or ``2,4``."""
        if self.player_counts:
            return ",".join(str(n) for n in self.player_counts)
        if self.min_players == self.max_players:
            return str(self.min_players)
        return f"{self.min_players}-{self.max_players}"


class Game(ABC):
    """A turn-based text game for N seats.

    Lifecycle: ``reset()`` once, then ``step()`` with the text of ``current_player()``
    until ``is_done()``; read ``rewards()`` at the end. Messages accumulate and are
    collected with ``drain_messages()``.

    Invalid moves: after ``set_invalid_move_allowance(n)``, a seat may make ``n`` invalid
    moves in a row and retry; the next one loses it the game under the game's own rules
    (``n = 0``: the first invalid move forfeits).
    """

    @abstractmethod
    def reset(self, num_players: int, seed: int) -> None:
        """Start a game; raise ValueError when ``num_players`` is not supported."""

    @abstractmethod
    def current_player(self) -> int:
        """The seat that must move next."""

    @abstractmethod
    def step(self, action: str) -> MoveResult:
        """Apply ``action`` for the current player."""

    @abstractmethod
    def is_done(self) -> bool:
        """True once the game is over."""

    @abstractmethod
    def rewards(self) -> dict[int, float]:
        """The final reward of each seat; valid once ``is_done()``."""

    @abstractmethod
    def drain_messages(self) -> list[GameMessage]:
        """Messages produced since the last call, in order."""

    @abstractmethod
    def set_invalid_move_allowance(self, allowance: int) -> None:
        """How many invalid moves in a row a seat may retry before it loses."""

    def legal_moves(self, seat: int) -> list[str] | None:
        """The moves ``seat`` may make now, or None when the game cannot list them."""
        return None

    def public_state(self) -> str | None:
        """The state as any spectator may see it during play (no hidden information)."""
        return None

    def full_state(self) -> str | None:
        """The all-seeing state (hidden information included), for after the match."""
        return self.public_state()

    def forfeited(self) -> set[int]:
        """Seats that lost by exceeding the invalid-move allowance."""
        return set()

    def parse_move(self, action: str, legal_moves: list[str] | None) -> str | None:
        """The move this game reads from ``action`` (given the moves it listed before it),
        as spectators of a live match may see it; None when there is none. The default
        (``games.legal.parse_move``): the listed move found first, else the first bracketed
        token. A game whose moves are not bracketed overrides it."""
        return parse_move(action, legal_moves)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; the default does nothing."""
