"""Read the legal moves a game lists in its observation text.

Many TextArena games end a turn's observation with a line such as
``Available Moves: '[0]', '[4]'`` or ``Your available actions are: '[check]', '[bet]'``.
The bracketed tokens after the last such phrase are the legal moves.
"""

from __future__ import annotations

import re

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
