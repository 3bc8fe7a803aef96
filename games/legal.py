"""The one reader of the legal moves that a game lists in its observation text.

Many TextArena games end a turn's observation with a line such as
``Available Moves: '[0]', '[4]'``, ``Your available actions are: '[check]', '[bet]'`` or
``Your remaining hand: '[A]' '[2]'``. :func:`extract_legal_moves` reads such lists; a
game whose moves must be read some other way (Connect Four's, off the board) gives its
own reader in its module's ``GameKit``, which :func:`extract_legal_moves` tries first when
it is given (``games.registry.read_legal_moves`` finds it by game id). What a game reads
from a seat's answer is the game API's ``parse_move``.

Everything that reads moves from text uses this module: the TextArena adapter, the text
policies (``arena.policies.RandomMovePolicy``) and the catalogue probe (``tools.probe``).
"""

from __future__ import annotations

import re

from games.api import BRACKETED_MOVE, TextMoveReader

MAX_SCAN_CHARS = 4_000
"""Only the last this-many characters of a text are scanned: legal moves come last, and
regexes on huge texts are slow."""

_MOVES_HEADER = re.compile(
    r"(?:\b(?:available|valid|legal|possible|viable|allowed)\s+"
    r"(?:moves?|actions?|targets?|options?|choices?|columns?)"
    r"|\byour\s+(?:options|moves|actions|choices)"
    r"|\bremaining\s+(?:hand|money\s+cards))"
    r"(?:\s+(?:are|is))?"
    r"(?:\s*\([^()\n]{0,40}\))?"
    r"[ \t]*(?::|$)",
    re.IGNORECASE | re.MULTILINE,
)
# Templates, not moves: ``[bet X]``, ``[<number>]``, ``[move ...]``, ``[idx]``.
_PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|…|\s[XNY]\]$|\bidx\b|\bamount\b", re.IGNORECASE)
_PLAIN_TOKEN = re.compile(r"[A-Za-z0-9][\w\- ]{0,19}")
_PARAGRAPH_END = re.compile(r"\n[ \t]*\n")


def extract_legal_moves(text: str, reader: TextMoveReader | None = None) -> list[str] | None:
    """The legal moves that ``text`` lists last, or None when it lists none.

    ``reader``: the game's own reader (its ``GameKit.read_legal_moves``), tried first on
    the last ``MAX_SCAN_CHARS`` characters; when it finds none, the generic reader below.

    Looks for the last phrase such as "Available Moves:", "Valid moves:", "Your available
    actions are:", "Valid targets:", "Your remaining hand:" or "Viable moves" that is
    followed by a list, and returns the bracketed tokens of that list in order, without
    duplicates (``["[0]", "[4]"]``). The list is the rest of the phrase's line; when that
    line holds no bracketed token, the rest of the paragraph (up to a blank line).
    Templates such as ``[bet X]`` or ``[<number>]`` are dropped. A plain comma-separated
    list on the phrase's line ("Available Moves: up, down") is returned bracketed
    (``["[up]", "[down]"]``). Only the last ``MAX_SCAN_CHARS`` characters are read.
    """
    tail = text[-MAX_SCAN_CHARS:]
    if reader is not None:
        moves = reader(tail)
        if moves is not None:
            return moves
    for header in reversed(list(_MOVES_HEADER.finditer(tail))):
        rest = tail[header.end() :]
        line, _, _ = rest.partition("\n")
        moves = _bracketed_moves(line)
        if not moves:
            paragraph = _PARAGRAPH_END.split(rest, maxsplit=1)[0]
            moves = _bracketed_moves(paragraph)
        if not moves and not BRACKETED_MOVE.search(line):
            moves = _plain_moves(line)
        if moves:
            return moves
    return None


def _bracketed_moves(text: str) -> list[str]:
    """Bracketed tokens of ``text`` that are not templates, in order, without duplicates."""
    found: list[str] = []
    for token in BRACKETED_MOVE.findall(text):
        if not _PLACEHOLDER.search(token) and token not in found:
            found.append(token)
    return found


def _plain_moves(line: str) -> list[str]:
    """Bracket a plain list such as ``up, down, left`` (two items at least), else []."""
    items = [item.strip(" \t'\"`.;") for item in re.split(r",|/|\||\bor\b", line)]
    items = [item for item in items if item]
    if len(items) < 2 or not all(_PLAIN_TOKEN.fullmatch(item) for item in items):
        return []
    return [f"[{item}]" for item in dict.fromkeys(items)]
