"""Text that can always be stored and sent: the one sanitising function.

Python strings may hold lone surrogates (``"\\udc80"``): a model's bytes decoded with
``surrogateescape``, or a browser's JSON escape ``"\\ud800"``. They cannot be encoded as
UTF-8, so SQLite's driver and the websocket layer refuse them, which would lose a whole
recorded match or close a connection. ``encodable`` is applied once at each boundary where
text leaves the process (``storage`` for everything written to the database, ``web`` for
every frame and JSON answer); games and seats see the text exactly as it was sent.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
"""What a lone surrogate becomes (the Unicode replacement character)."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` with every lone surrogate replaced by ``REPLACEMENT``: it always encodes as
    UTF-8. Text without surrogates is returned as it is (the common case costs one check)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text
