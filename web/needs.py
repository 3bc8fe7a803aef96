"""What the sans-I/O core hands the asyncio layer: I/O it needs done, a connection to
close. No I/O here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Need:
    """I/O the core cannot do itself. ``kind`` says what (``get_match``, ``list_matches``,
    ``list_runs``, ``poll_runs``, ``start_match``, ``authenticate``, ``load_ratings``,
    ``forfeit``), ``args`` with what; the asyncio layer does it and calls ``then`` with the
    result, or with the exception it raised. ``then`` returns the answer (a ``Response``
    for HTTP, None for a WebSocket request: its frames are in ``take_frames``), or another
    ``Need``."""

    kind: str
    args: dict[str, Any]
    then: Callable[[Any], Any]


@dataclass(frozen=True)
class Close:
    """The connection must be closed with ``code`` (a WebSocket close code)."""

    code: int
    reason: str


class Secret:
    """A value that must never be shown (an agent's token in a ``Need``): its ``repr`` and
    ``str`` hide it, so no log line or traceback can print it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The value itself."""
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__
