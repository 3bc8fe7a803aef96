"""The record of one move as the session applied it (``TurnRecord``): the one turn record
that every later layer extends (``arena.events.Turn``)."""

from __future__ import annotations

from dataclasses import dataclass

from games.api import GameMessage


@dataclass(frozen=True)
class TurnRecord:
    """One move as the session applied it."""

    index: int
    """0-based count of moves applied in this game (invalid ones included)."""
    seat: int
    action: str
    """The text the game received (cut to ``max_action_chars``)."""
    truncated: bool
    """True when the submitted action was longer than the cap."""
    valid: bool
    reason: str | None
    """Why the move was invalid."""
    done: bool
    """True when the game ended with this move."""
    move: str | None = None
    """The move the game read from ``action`` (``Game.parse_move``): what spectators of a
    live match may see; None when none could be read."""
    messages: tuple[GameMessage, ...] = ()
    """The messages the game sent because of this move, public and private, in order
    (those to a seat the game does not have are dropped). A simultaneous round's messages
    are all on its last record: the game sent them once the round's moves were applied."""
    private: bool = False
    """True when the game showed this move to some seats only (its echo of the move, a
    ``MessageKind.ACTION`` message from the seat, went to single seats, never to all):
    spectators of the live match never see it, whatever the game was registered with."""
    round: int | None = None
    """The simultaneous round (1-based) this move was made in, None for a move in turn
    (``SimultaneousGame``): the moves of a round are applied together, in seat order."""
