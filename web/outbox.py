"""The frames the sans-I/O core decided to send, queued in order until the asyncio layer
takes them (``HubCore.take_frames``). Every part of the core writes here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from web.connections import Client
from web.hubstats import HubStats
from web.live.streams import MatchStream
from web.protocol import dumps


class Outbox:
    """(clients, frame) pairs to send, in order; closed clients are left out. ``stats``
    counts the errors sent."""

    def __init__(self, stats: HubStats) -> None:
        self.stats = stats
        self._frames: list[tuple[tuple[Client, ...], str]] = []

    def take(self) -> list[tuple[tuple[Client, ...], str]]:
        """The frames queued since the last call: (clients, frame) pairs, in order."""
        out, self._frames = self._frames, []
        return out

    def out(self, clients: Iterable[Client], frame: str) -> None:
        """Queue one frame for ``clients`` (those still open)."""
        targets = tuple(c for c in clients if not c.closed)
        if targets:
            self._frames.append((targets, frame))

    def send(self, client: Client, message: dict[str, Any]) -> None:
        """Queue one message for ``client``."""
        if message.get("type") == "error":
            self.stats.errors_sent += 1
        self.out((client,), dumps(message))

    def fanout(self, stream: MatchStream, entry_frame: Callable[[int], str]) -> None:
        """Queue a match event for each audience watching ``stream`` (its frame for that
        audience)."""
        for audience, clients in list(stream.watchers.items()):
            if clients:
                self.out(list(clients), entry_frame(audience))
