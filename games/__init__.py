"""Games: the registry, the TextArena adapter, native games and bots.

``games`` knows nothing of RL: a game is text in, text out, with rewards at the end.
"""

from games.api import GAME, Game, GameMessage, GameSpec, MessageKind, MoveResult
from games.registry import (
    GameUnavailable,
    UnknownGame,
    catalogue,
    check_players,
    get_spec,
    make,
    register_game,
)
from games.session import (
    GameError,
    GameOver,
    GameSession,
    InvalidMovePolicy,
    NotYourTurn,
    SessionLimits,
    Status,
    TurnRecord,
)

__all__ = [
    "GAME",
    "Game",
    "GameError",
    "GameMessage",
    "GameOver",
    "GameSession",
    "GameSpec",
    "GameUnavailable",
    "InvalidMovePolicy",
    "MessageKind",
    "MoveResult",
    "NotYourTurn",
    "SessionLimits",
    "Status",
    "TurnRecord",
    "UnknownGame",
    "catalogue",
    "check_players",
    "get_spec",
    "make",
    "register_game",
]
