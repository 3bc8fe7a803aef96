"""Kuhn poker's information sets and actions in TextArena's text: the information set a
seat is at, read from its messages, a solver action (``p``/``b``,
``games.textarena_games.kuhn_solver``) as TextArena's move text and back, and the moves
legal now, read from the game state."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from games.api import GAME, GameMessage
from games.textarena_games.kuhn_solver import ACTION_WORDS, TERMINAL

_CARD = re.compile(r"Your card is: '([JQK])'")
_MOVE = re.compile(r"Player (\d+), submitted move: '\[(check|bet|fold|call)\]'")
_TEXT_ACTION = re.compile(r"\[(check|bet|fold|call)\]", re.IGNORECASE)


def seat_infoset(messages: Sequence[GameMessage]) -> str | None:
    """The information set of the seat whose messages these are, in the current hand
    (its card and the hand's history so far), or None before its first card."""
    card: str | None = None
    history = ""
    for m in messages:
        if m.sender != GAME:
            continue
        found = _CARD.search(m.text)
        if found:
            card, history = found.group(1), ""
            continue
        move = _MOVE.search(m.text)
        if move and card is not None:
            history += ACTION_WORDS[move.group(2)]
    if card is None or history in TERMINAL:
        return None
    return card + history


def move_text(history: str, action: str) -> str:
    """TextArena's move for ``action`` (``p``/``b``) after ``history``."""
    facing_bet = history.endswith("b")
    if action == "p":
        return "[fold]" if facing_bet else "[check]"
    return "[call]" if facing_bet else "[bet]"


def read_action(text: str, infoset: str) -> str | None:
    """``p`` or ``b`` for a move text that is legal at ``infoset``, else None."""
    found = _TEXT_ACTION.search(text)
    if not found:
        return None
    word = found.group(1).lower()
    facing_bet = infoset.endswith("b")
    if facing_bet != (word in ("fold", "call")):
        return None
    return ACTION_WORDS[word]


def legal_moves(env: Any, seat: int) -> list[str] | None:
    """The moves of the current node of the hand, as ``[check]``, ``[bet]``, ..."""
    tree = env.state.game_state.get("current_legal_action_tree")
    if not isinstance(tree, dict):
        return None
    return [f"[{move}]" for move in tree]
