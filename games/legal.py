"""Read the legal moves a game lists in its observation text.

Many TextArena games end a turn's observation with a line such as
``Available Moves: '[0]', '[4]'`` or ``Your available actions are: '[check]', '[bet]'``.
The bracketed tokens after the last such phrase are the legal moves.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_PHRASE = re.compile(
    r"(?:available|valid|legal|possible)\s+(?:moves|actions|columns|options)[^:\n]{0,20}:",
    re.IGNORECASE,
)
_BRACKETED = re.compile(r"\[[^\[\]\n]{1,40}\]")
MAX_SCAN_CHARS = 4_000
"""Only the tail of a message is scanned: legal moves come last, and regexes on huge
texts are slow."""


def extract_legal_moves(text: str) -> list[str] | None:
    """The bracketed moves after the last "available/valid/legal moves:" phrase, or None.

    Returns the moves with their brackets (``["[0]", "[4]"]``), without duplicates, in the
    order listed; None when the text lists none.
    """
    tail = text[-MAX_SCAN_CHARS:]
    last = None
    for last in _PHRASE.finditer(tail):  # noqa: B007 - we want the last match
        pass
    if last is None:
        return None
    rest = tail[last.end() :]
    # The list runs to the end of its paragraph.
    paragraph = rest.split("\n\n", 1)[0]
    moves = list(dict.fromkeys(m.group(0) for m in _BRACKETED.finditer(paragraph)))
    return moves or None


def _connect_four(text: str) -> list[str] | None:
    """Columns whose top cell is empty on the last ``Board state:`` shown."""
    at = text.rfind("Board state:")
    if at < 0:
        return None
    lines = [line.strip() for line in text[at:].splitlines()[1:]]
    if len(lines) < 3 or not lines[1].startswith("-"):
        return None
    columns = lines[0].split()
    top = lines[2].split()
    if len(top) != len(columns):
        return None
    return [f"[{c}]" for c, cell in zip(columns, top, strict=True) if cell == "."] or None


_READERS: dict[str, Callable[[str], list[str] | None]] = {
    "ConnectFour-v0": _connect_four,
    "ConnectFour-v0-large": _connect_four,
}
"""Games whose legal moves must be read off the board rather than from a list."""


def has_reader(game_id: str) -> bool:
    """True when ``game_id`` has a game-specific legal-move reader."""
    return game_id in _READERS


def read_legal_moves(text: str, game_id: str | None = None) -> list[str] | None:
    """Legal moves shown in ``text``: the game's own reader when it has one, else the
    generic "available moves:" list."""
    reader = _READERS.get(game_id or "")
    if reader is not None:
        moves = reader(text)
        if moves is not None:
            return moves
    return extract_legal_moves(text)


def parse_move(action: str, legal_moves: list[str] | None) -> str | None:
    """The move a game reads from ``action``: what spectators of a live match may see of
    it, never the seat's free text around it (a model's reasoning can name its hidden card:
    ``Thinking: my card is J so [check]`` is shown as ``[check]``).

    With ``legal_moves``: the one that occurs first in ``action`` (ignoring case), as the
    game lists it. Without: the first bracketed token (``[4]``, at most 40 characters
    inside). None when there is none.
    """
    if legal_moves:
        text = action.lower()
        best: tuple[int, str] | None = None
        for move in legal_moves:
            at = text.find(move.lower())
            if at >= 0 and (best is None or at < best[0]):
                best = (at, move)
        return best[1] if best is not None else None
    found = _BRACKETED.search(action)
    return found.group(0) if found else None
