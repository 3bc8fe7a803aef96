"""Games: the registry, the TextArena adapter, one module per game, bots, plugins and the
conformance kit.

``games`` knows nothing of RL: a game is text in, text out, with rewards at the end.
"""

from games.api import (
    GAME,
    Game,
    GameKit,
    GameMessage,
    GameSpec,
    MessageKind,
    MoveResult,
    PublicBoard,
    SimultaneousGame,
)
from games.limits import InvalidMovePolicy, SessionLimits
from games.registration import register_game
from games.registry import (
    GameUnavailable,
    UnknownGame,
    catalogue,
    check_players,
    compact_view,
    game_kit,
    get_spec,
    make,
    moves_are_public,
)
from games.session import GameSession, Status
from games.sessionerrors import GameError, GameOver, NotYourTurn
from games.turnrecord import TurnRecord

__all__ = [
    "GAME",
    "Game",
    "GameError",
    "GameKit",
    "GameMessage",
    "GameOver",
    "GameSession",
    "GameSpec",
    "GameUnavailable",
    "InvalidMovePolicy",
    "MessageKind",
    "MoveResult",
    "NotYourTurn",
    "PublicBoard",
    "SessionLimits",
    "SimultaneousGame",
    "Status",
    "TurnRecord",
    "UnknownGame",
    "catalogue",
    "check_players",
    "compact_view",
    "game_kit",
    "get_spec",
    "make",
    "moves_are_public",
    "register_game",
]
