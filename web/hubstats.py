"""The web server's counters: what the hub has done since it started (``/api/status``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class HubStats:
    """What the hub has done so far."""

    connections: int = 0
    """WebSocket connections accepted."""
    refused_connections: int = 0
    """Connections refused at ``max_connections``."""
    refused_hosts: int = 0
    """Requests refused for their ``Host`` or ``Origin``."""
    dropped_slow: int = 0
    """Clients dropped for falling ``max_buffer_bytes`` behind."""
    rate_limited: int = 0
    """Messages refused for the rate limit."""
    errors_sent: int = 0
    """Error messages sent to clients."""
    events: int = 0
    """Match events taken in (bus and database)."""
    frames: int = 0
    """Frames written to clients."""
    bus_drops: int = 0
    """Times the event bus dropped the hub for falling behind."""
    human_matches: int = 0
    """Matches started from a browser."""
    seek_matches: int = 0
    """Matches started from the seek queue (agents and browsers)."""
    auth_failures: int = 0
    """Agent authentications refused (a wrong, revoked or malformed token)."""

    def as_dict(self) -> dict[str, int]:
        """JSON-ready copy."""
        return dict(self.__dict__)
