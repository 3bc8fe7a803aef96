"""The text forms events carry: a board as compact JSON text, and a seat's messages as the
one text it is shown."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson

from arena.text import encodable
from games.api import GAME, GameMessage

_BOARD_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def board_json(board: dict[str, Any] | None) -> str | None:
    """A board as the compact JSON text events and storage carry (None stays None); a
    lone surrogate in it becomes U+FFFD (``arena.text.encodable``)."""
    if board is None:
        return None
    try:
        return orjson.dumps(board).decode()
    except TypeError:  # a lone surrogate, a key that is not text, a very large integer
        return encodable(_BOARD_JSON.encode(board))


def format_messages(messages: Sequence[GameMessage]) -> str:
    """Messages as one text, each line tagged with its sender (TextArena's style): what a
    seat is shown, and what ``TurnPlayed.observation`` holds."""
    parts = []
    for m in messages:
        sender = "GAME" if m.sender == GAME else f"Player {m.sender}"
        parts.append(f"[{sender}] {m.text}")
    return "\n".join(parts)
