"""The errors a guarded game (``games.session.GameSession``) raises, and how a game's own
failure is told: the exception and the line of the game that raised it."""

from __future__ import annotations

import os
import traceback


class SessionError(Exception):
    """Base of the errors a session raises."""


class GameError(SessionError):
    """The game itself failed (raised or ran past its time limit); the match is void."""


class NotYourTurn(SessionError):
    """A seat tried to move out of turn."""


class GameOver(SessionError):
    """A move was submitted after the game ended."""


class RoundError(SessionError):
    """The moves given for a simultaneous round are not those of the seats to move."""


_GUARD_FILES = frozenset(
    os.path.join(os.path.dirname(__file__), name)
    for name in ("session.py", "sessionviews.py", "boardjson.py")
)
"""The guard's own modules: what is raised there (a view that returned no board, a board
JSON cannot hold) is the guard's verdict on what the game returned, not a line of the
game."""


def game_line(exc: BaseException) -> str:
    """Where ``exc`` was raised, as ``file.py:LINE`` (the innermost frame of its
    traceback), or "" when it carries none: the line a game's author needs to fix."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or frames[-1].filename in _GUARD_FILES:
        return ""  # raised by the guard itself (a wrong return type), not by the game
    frame = frames[-1]
    return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"


def failure_text(exc: BaseException) -> str:
    """``KeyError: 7 (game.py:88)``: the exception and the game's line that raised it."""
    where = game_line(exc)
    return f"{type(exc).__name__}: {exc}" + (f" ({where})" if where else "")
