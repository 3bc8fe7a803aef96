"""Every limit the web server enforces, in one place, with safe defaults.

The server serves people on a shared machine (and, with ``--host``, a network): each limit
bounds what one client can cost the process, so that no client can slow a game, exhaust
memory or starve the other clients.
"""

from __future__ import annotations

from dataclasses import dataclass

from web.pages.metrics import EVAL_ROWS, STEP_ROWS


@dataclass(frozen=True)
class ServerLimits:
    """Limits of one ``WebHub``. Every field is named and has a documented default."""

    max_message_bytes: int = 64 * 1024
    """Largest frame a client may send; a larger one closes its connection with code 1009
    ("message too big"), which the library enforces before the frame is buffered."""
    max_connections: int = 2_000
    """WebSocket connections at once; one more is answered HTTP 503."""
    rate_per_s: float = 20.0
    """Messages a client may send per second, on average (a token bucket)."""
    rate_burst: int = 40
    """Messages a client may send at once before ``rate_per_s`` applies."""
    max_rate_violations: int = 200
    """Messages refused for the rate limit before the connection is closed (code 1008)."""
    max_buffer_bytes: int = 1024 * 1024
    """Bytes queued for a client that it has not read yet. A client further behind is
    dropped: it never slows the games or the other clients."""
    max_subscriptions: int = 64
    """Match and run streams one connection may follow at once."""
    ping_interval_s: float | None = 20.0
    """Seconds between keepalive pings (None: none)."""
    ping_timeout_s: float | None = 20.0
    """Seconds a client may take to answer a ping before it is disconnected."""
    open_timeout_s: float = 10.0
    """Seconds a client may take to complete the opening handshake."""
    close_timeout_s: float = 2.0
    """Seconds to wait for a client's closing handshake."""
    history_limit: int = 256
    """Events kept per match for clients that reconnect; one further behind gets a
    snapshot (``resync``) instead."""
    ended_cache: int = 256
    """Ended matches kept in memory for viewers; older ones are read from the database."""
    lobby_interval_s: float = 0.25
    """Lobby changes are sent at most this often, batched: the lobby's cost does not grow
    with the number of matches per second."""
    lobby_live_limit: int = 200
    """Live matches listed in the lobby; more are counted, not listed."""
    recent_limit: int = 50
    """Recently ended matches the lobby keeps and shows."""
    max_human_matches: int = 16
    """Matches against bots that browsers may play at once, in all."""
    max_human_matches_per_connection: int = 2
    """Of those, matches one connection may be playing at once."""
    max_human_matches_per_address: int = 4
    """Of those, matches the connections of one IP address may be playing at once (so that
    no one client can take every slot)."""
    human_move_timeout_s: float = 60.0
    """Seconds a person has for each move; then the seat forfeits (see ``HumanSeat``)."""
    metrics_rows: int = STEP_ROWS
    """Rows of ``metrics.jsonl`` without evaluation figures kept per training run, evenly
    spread over the whole run (every 2nd, 4th... row once it has more; the newest always):
    ``web.pages.metrics.STEP_ROWS``."""
    metrics_eval_rows: int = EVAL_ROWS
    """Evaluation rows (with ``test/...`` figures) kept per training run: all of them up to
    this many, then thinned the same way (``web.pages.metrics.EVAL_ROWS``)."""
    metrics_snapshot_rows: int = 500
    """Rows without evaluation figures a run's live stream starts with (evenly spaced over
    the run, the newest included), besides every evaluation row kept; the JSON API gives
    every row kept."""
    bus_max_queue: int = 100_000
    """Events the hub may fall behind on the event bus before the bus drops it (then it
    follows the affected matches from the database, or ends them as lost)."""
    max_agent_matches: int = 16
    """Matches one agent account may be playing at once, its open seeks included."""
    max_agent_matches_per_connection: int = 8
    """Of those, matches one connection may be playing at once, its open seeks included."""
    max_agent_connections: int = 4
    """Connections one agent account may have authenticated at once."""
    max_seeks: int = 1_000
    """Seeks waiting in the queue, in all (agents' and browsers'); one more is refused."""
    seek_timeout_s: float = 600.0
    """Seconds a seek may wait to be paired; then it expires (``seek_expired``)."""
    agent_move_timeout_s: float = 60.0
    """Seconds an agent has for each move; then its seat loses on time (a forfeit)."""
    agent_reconnect_grace_s: float = 60.0
    """Seconds an agent whose connection dropped has to come back (authenticate again)
    and resume its seats; then each of them forfeits. The move clock keeps running."""
    agent_rate_per_s: float = 100.0
    """Messages an authenticated agent connection may send per second, on average (it
    replaces ``rate_per_s`` once the connection authenticates)."""
    agent_rate_burst: int = 200
    """Messages an authenticated agent connection may send at once."""
    auth_failure_burst: int = 10
    """Failed authentications one IP address may make in a row; then it must wait."""
    auth_failure_refill_s: float = 6.0
    """Seconds after which an address that used up ``auth_failure_burst`` may try once
    more (10 tries a minute at most, in the long run)."""
    leaderboard_cache_s: float = 5.0
    """How long a computed ``/api/leaderboard`` answer is reused (a Bradley-Terry fit reads
    every stored result of the game)."""
    auth_in_flight_per_address: int = 16
    """Authentications of one IP address being checked at once (so that many connections
    cannot send more guesses than the failure budget before the first answers)."""
    agent_tick_s: float = 0.1
    """How often the seek queue is paired and the grace periods are checked."""
    agent_account_poll_s: float = 5.0
    """How often the accounts of connected agents are checked: a revoked agent is
    disconnected and its live seats forfeit within this time."""

    def __post_init__(self) -> None:
        for name in (
            "max_message_bytes",
            "max_connections",
            "rate_burst",
            "max_buffer_bytes",
            "max_subscriptions",
            "history_limit",
            "ended_cache",
            "lobby_live_limit",
            "recent_limit",
            "max_human_matches",
            "max_human_matches_per_connection",
            "max_human_matches_per_address",
            "metrics_snapshot_rows",
            "bus_max_queue",
            "max_agent_matches",
            "max_agent_matches_per_connection",
            "max_agent_connections",
            "max_seeks",
            "agent_rate_burst",
            "auth_failure_burst",
            "auth_in_flight_per_address",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("metrics_rows", "metrics_eval_rows"):  # a run's first and newest rows
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be at least 2")
        for name in (
            "rate_per_s",
            "open_timeout_s",
            "close_timeout_s",
            "lobby_interval_s",
            "human_move_timeout_s",
            "seek_timeout_s",
            "agent_move_timeout_s",
            "agent_reconnect_grace_s",
            "agent_rate_per_s",
            "auth_failure_refill_s",
            "agent_tick_s",
            "agent_account_poll_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_rate_violations < 0:
            raise ValueError("max_rate_violations must be 0 or more")
        if self.leaderboard_cache_s < 0:
            raise ValueError("leaderboard_cache_s must be 0 or more")
        for name in ("ping_interval_s", "ping_timeout_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive (or None)")

    def public(self) -> dict[str, float | int | None]:
        """The limits a client should know (sent in the ``hello`` message)."""
        return {
            "max_message_bytes": self.max_message_bytes,
            "rate_per_s": self.rate_per_s,
            "rate_burst": self.rate_burst,
            "max_subscriptions": self.max_subscriptions,
            "history_limit": self.history_limit,
            "human_move_timeout_s": self.human_move_timeout_s,
            "max_human_matches_per_connection": self.max_human_matches_per_connection,
            "agent_move_timeout_s": self.agent_move_timeout_s,
            "agent_reconnect_grace_s": self.agent_reconnect_grace_s,
            "max_agent_matches": self.max_agent_matches,
            "max_agent_matches_per_connection": self.max_agent_matches_per_connection,
            "agent_rate_per_s": self.agent_rate_per_s,
            "agent_rate_burst": self.agent_rate_burst,
        }
