"""One connected browser (or script): its connection, rate limit and subscriptions."""

from __future__ import annotations

import itertools
from typing import Any

from websockets.asyncio.server import ServerConnection

_ids = itertools.count(1)


class Client:
    """A WebSocket client of the hub.

    Nothing is ever awaited on a client's behalf while serving others: frames are written
    to its connection's buffer at once, and a client whose buffer holds more than the
    hub's ``max_buffer_bytes`` is dropped (its unread frames are its queue).
    """

    def __init__(self, ws: ServerConnection, rate_per_s: float, burst: int, now: float) -> None:
        self.ws = ws
        self.id = next(_ids)
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens = float(burst)
        self._last = now
        self.violations = 0
        """Messages refused for the rate limit so far."""
        self.matches: dict[str, int] = {}
        """Match streams followed: match id -> audience (``PUBLIC`` or a seat)."""
        self.runs: set[str] = set()
        """Training runs whose metrics are followed."""
        self.lobby = False
        """True while the lobby is followed."""
        self.closed = False
        """True once dropped or disconnected: nothing more is sent."""

    def allow(self, now: float) -> bool:
        """Take one message from the token bucket; False when the client is over its
        rate (the message must be refused)."""
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate_per_s)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self.violations += 1
        return False

    def buffered(self) -> int:
        """Bytes written to this client that it has not read yet (0 once closed)."""
        transport: Any = self.ws.transport
        if transport is None or transport.is_closing():
            return 0
        return int(transport.get_write_buffer_size())

    @property
    def subscriptions(self) -> int:
        """Match and run streams followed."""
        return len(self.matches) + len(self.runs)

    def __repr__(self) -> str:
        return f"Client({self.id}, {self.ws.remote_address})"
