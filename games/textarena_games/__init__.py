"""What arena knows about particular TextArena games: one small module per game.

Each module exposes ``EXTRAS``, a ``games.textarena_game.TextArenaExtras`` (legal moves
from the game state, public board, hidden-card redraw, compact view, bots). The adapter
(``games.textarena_game``) stays generic; the registry hands each game its extras from
``EXTRAS_BY_ID`` below. A game id absent here gets none (``NO_EXTRAS``).
"""

from __future__ import annotations

from games.textarena_game import TextArenaExtras
from games.textarena_games import (
    connect_four,
    free_text,
    high_society,
    indian_poker,
    kuhn_poker,
    pure_strategy,
    tic_tac_toe,
)

_INDIAN_POKER = ("", "-short", "-medium", "-long", "-extreme")
_KUHN_POKER = ("", "-short", "-medium", "-long", "-extreme")

EXTRAS_BY_ID: dict[str, TextArenaExtras] = {
    "TicTacToe-v0": tic_tac_toe.EXTRAS,
    "ConnectFour-v0": connect_four.EXTRAS,
    "ConnectFour-v0-large": connect_four.LARGE_EXTRAS,
    "ConnectFour-v0-blind": connect_four.BLIND_EXTRAS,
    "GameOfPureStrategy-v0": pure_strategy.EXTRAS,
    "HighSociety-v0": high_society.EXTRAS,
    **{f"IndianPoker-v0{suffix}": indian_poker.EXTRAS for suffix in _INDIAN_POKER},
    **{f"KuhnPoker-v0{suffix}": kuhn_poker.EXTRAS for suffix in _KUHN_POKER},
    **{game_id: free_text.EXTRAS for game_id in free_text.GAME_IDS},
}
"""Game id -> its module's extras."""

__all__ = ["EXTRAS_BY_ID"]
