"""A game's board as the compact JSON text the session checks it as: what JSON cannot hold,
what is not a board and what is too long are refused here, so that nothing later has to."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from games.api import PublicBoard

MAX_BOARD_CHARS = 65_536
"""Longest board kept, as compact JSON (a 12 x 15 Connect Four grid takes about 1,000
characters); a longer one is dropped (logged once) and the text view is shown instead."""

_BOARD_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""Encodes the boards orjson does not (``encode_board``)."""

_FLOAT_FIELDS = ("pot", "chips", "scores", "extra")
"""The fields of ``PublicBoard.as_dict()`` that may hold floats."""


def decode_board(text: str) -> dict[str, Any]:
    """A board's JSON text (``encode_board``'s) as data: a fresh copy each time."""
    data: dict[str, Any] = json.loads(text)
    return data


def _finite(value: Any) -> bool:
    """False when ``value`` (plain data: ``PublicBoard.as_dict()``'s) holds a float NaN
    or infinity."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


def encode_board(board: Any, what: str) -> str | None:
    """``board`` (a ``PublicBoard`` or None) as compact JSON text. Raises TypeError or
    ValueError for what is not a board, holds what JSON cannot or is too long.

    orjson encodes it (a board is read at every move someone watches or records, and the
    standard library's encoder takes several times longer) once the only fields that may
    hold floats are known to be finite (orjson would write NaN as null); what orjson
    refuses (a lone surrogate, an integer over 64 bits, a key that is not text) goes to
    the standard library's encoder, which decides as it always did."""
    if board is None:
        return None
    if not isinstance(board, PublicBoard):
        raise TypeError(f"{what} returned {type(board).__name__}, not a PublicBoard")
    data = board.as_dict()
    text: str | None = None
    finite = True
    for key in _FLOAT_FIELDS:  # (a loop: a generator costs more than these few checks)
        if key in data and not _finite(data[key]):
            finite = False
            break
    if finite:
        try:
            text = orjson.dumps(data).decode()
        except TypeError:
            text = None
    if text is None:
        try:  # TypeError names what JSON cannot hold (a set, an object)
            text = _BOARD_JSON.encode(data)
        except ValueError:
            raise ValueError("the board holds NaN or an infinity: JSON cannot") from None
    if len(text) > MAX_BOARD_CHARS:
        raise ValueError(
            f"the board is {len(text)} characters as JSON, over MAX_BOARD_CHARS ({MAX_BOARD_CHARS})"
        )
    return text
