"""Each game's own ``random``, whatever thread it runs on and whatever else draws.

TextArena seeds and draws from the module-level functions of Python's ``random``
(``random.seed``, ``random.choice``, ...), which share one hidden generator. ``install()``
(run when ``games`` is imported) replaces those functions with ones that draw from the
generator of the game running on the calling thread, when ``use(rng)`` has set one, and
from the shared generator otherwise. So a game replays the same from the same seed however
many other games run interleaved and whatever other code, on any thread, draws from
``random`` meanwhile; and entering a game costs two attribute stores, not a copy of the
generator's state.

Limit: code that bound a function before ``install()`` ran (``from random import choice``
in a module imported earlier) draws from the shared generator; a game doing so fails the
conformance kit's ``seeded``/``interleaved`` checks. Draw from ``random.choice(...)`` or from
your own ``random.Random(seed)``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

ROUTED = (
    "seed",
    "getstate",
    "setstate",
    "random",
    "uniform",
    "triangular",
    "randint",
    "choice",
    "randrange",
    "sample",
    "shuffle",
    "choices",
    "normalvariate",
    "lognormvariate",
    "expovariate",
    "vonmisesvariate",
    "gammavariate",
    "gauss",
    "betavariate",
    "binomialvariate",
    "paretovariate",
    "weibullvariate",
    "getrandbits",
    "randbytes",
)
"""The module-level functions of ``random`` that are routed (those this Python has)."""

_local = threading.local()
_shared: random.Random = random._inst
_installed = False
_lock = threading.Lock()


def _routed(name: str) -> Callable[..., Any]:
    shared = getattr(_shared, name)

    def routed(*args: Any, **kwargs: Any) -> Any:
        rng = getattr(_local, "rng", None)
        if rng is None:
            return shared(*args, **kwargs)
        return getattr(rng, name)(*args, **kwargs)

    routed.__name__ = name
    routed.__qualname__ = name
    routed.__doc__ = shared.__doc__
    return routed


def install() -> None:
    """Route ``random``'s module-level functions (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        for name in ROUTED:
            if hasattr(_shared, name) and hasattr(random, name):
                setattr(random, name, _routed(name))
        _installed = True


def swap(rng: random.Random | None) -> random.Random | None:
    """Make ``random``'s functions on this thread draw from ``rng`` (None: the shared
    generator); returns the generator it replaced (``swap`` it back when done)."""
    previous = getattr(_local, "rng", None)
    _local.rng = rng
    return previous


@contextmanager
def use(rng: random.Random) -> Iterator[None]:
    """Within the block, ``random``'s functions called on this thread draw from ``rng``."""
    previous = swap(rng)
    try:
        yield
    finally:
        swap(previous)


def current() -> random.Random | None:
    """The generator ``use()`` set on this thread, if any."""
    return getattr(_local, "rng", None)
