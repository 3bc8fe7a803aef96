"""What served models' moves cost: requests and tokens per seat and per recorded name.

Every served seat (``matchmaking.served``) counts each move it is asked for in a
``TokenUsage`` of its own and adds it to this process's count under its recorded name
(``count_usage``); the commands take ``token_usage()`` before they play and print
``usage_since`` it after (``usage_lines``, ``usage_dict`` for ``--json``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields, replace


@dataclass
class TokenUsage:
    """Requests and tokens of a served seat (or of every seat recorded under one name).
    Every request ends one way: ``requests == answered + failed + cancelled``."""

    requests: int = 0
    """Moves asked for (a move's retries are one request)."""
    answered: int = 0
    """Requests answered with a chat completion (its text played as the move, legal or
    not)."""
    failed: int = 0
    """Requests that raised ServedModelError (their match was aborted with the reason)."""
    cancelled: int = 0
    """Requests cancelled before an answer: the move clock ran out, or the match ended
    (aborted, forfeited by another seat) or was stopped while the seat waited."""
    prompt_tokens: int = 0
    """Prompt tokens, as the server reported them."""
    completion_tokens: int = 0
    """Answer tokens, as the server reported them."""
    unreported: int = 0
    """Answers that came without a ``usage`` block (their tokens are not counted)."""

    def add(self, other: TokenUsage) -> None:
        """Add ``other``'s counts to these."""
        for name in _USAGE_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def minus(self, other: TokenUsage) -> TokenUsage:
        """These counts less ``other``'s (what happened since ``other`` was taken)."""
        return TokenUsage(**{n: getattr(self, n) - getattr(other, n) for n in _USAGE_FIELDS})

    def as_dict(self) -> dict[str, int]:
        """JSON-ready counts."""
        return {n: getattr(self, n) for n in _USAGE_FIELDS}

    def __str__(self) -> str:
        text = (
            f"{self.requests} requests, {self.prompt_tokens} prompt + "
            f"{self.completion_tokens} completion tokens"
        )
        if self.failed:
            text += f", {self.failed} failed"
        if self.cancelled:
            text += f", {self.cancelled} cancelled"
        if self.unreported:
            text += f", {self.unreported} answers without usage"
        return text


_USAGE_FIELDS = tuple(f.name for f in fields(TokenUsage))
_USAGE: dict[str, TokenUsage] = {}
_USAGE_LOCK = threading.Lock()


def count_usage(name: str, usage: TokenUsage) -> None:
    """Add ``usage`` to this process's count for the recorded name ``name``."""
    with _USAGE_LOCK:
        _USAGE.setdefault(name, TokenUsage()).add(usage)


def token_usage() -> dict[str, TokenUsage]:
    """A copy of this process's usage so far, per recorded name (every served seat adds its
    requests to it)."""
    with _USAGE_LOCK:
        return {name: replace(usage) for name, usage in _USAGE.items()}


def usage_since(before: dict[str, TokenUsage]) -> dict[str, TokenUsage]:
    """The usage per recorded name since ``before`` (an earlier ``token_usage()``), for the
    names that made requests since."""
    since = {}
    for name, usage in token_usage().items():
        delta = usage.minus(before.get(name, TokenUsage()))
        if delta.requests:
            since[name] = delta
    return since


def usage_dict(usage: dict[str, TokenUsage]) -> dict[str, object]:
    """``{"token_usage": {name: counts}}`` for a command's JSON, or ``{}`` when no served
    model played."""
    if not usage:
        return {}
    return {"token_usage": {name: u.as_dict() for name, u in sorted(usage.items())}}


def usage_lines(usage: dict[str, TokenUsage]) -> list[str]:
    """One line per served model, for a command's text summary."""
    return [f"tokens: {name}: {u}" for name, u in sorted(usage.items())]
