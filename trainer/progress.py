"""Progress of the long phases (warm-up, its data, evaluations): a bar with rate and ETA.

The trainer reports through a ``ProgressFactory``: ``factory(description, total, unit)``
returns something with ``update(n)`` and ``close()``. The CLI passes ``tqdm_bars`` (bars
on stderr that vanish when done); library use gets ``no_bars`` unless it asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Progress(Protocol):
    """One phase's bar."""

    def update(self, n: int = 1) -> object:
        """``n`` more units done."""
        ...

    def close(self) -> None:
        """The phase is over."""
        ...


ProgressFactory = Callable[[str, int, str], Progress]


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def no_bars(description: str, total: int, unit: str) -> Progress:
    """No output."""
    return _NoBar()


def tqdm_bars(description: str, total: int, unit: str) -> Progress:
    """A tqdm bar (rate and ETA) on stderr that is cleared when the phase ends."""
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit=unit, leave=False, dynamic_ncols=True)
