"""One connected browser (or script): its rate limit and subscriptions. No I/O: the
asyncio layer (``web.hub``) keeps the connection that goes with each client."""

from __future__ import annotations

import itertools

_ids = itertools.count(1)


class Client:
    """A WebSocket client of the hub.

    ``address``: the remote IP address (the per-address limits count by it).
    """

    def __init__(self, address: str, rate_per_s: float, burst: int, now: float) -> None:
        self.id = next(_ids)
        self.address = address
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
        self.rating_games: set[str] = set()
        """Games whose ratings are followed (the ``ratings`` stream)."""
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

    def set_rate(self, rate_per_s: float, burst: int) -> None:
        """Switch to other limits (an agent once it authenticates) with a full bucket: the
        new burst is there at once, whatever the old limits left."""
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens = float(burst)

    @property
    def subscriptions(self) -> int:
        """Match, run and ratings streams followed."""
        return len(self.matches) + len(self.runs) + len(self.rating_games)

    def __repr__(self) -> str:
        return f"Client({self.id}, {self.address})"
