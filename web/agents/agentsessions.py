"""Agent sessions, without I/O: which connections are authenticated as which agent
account, and the ``auth`` request that makes one so.

A token proves an account: the asyncio layer checks it through an ``authenticate`` need
(the token travels as a ``Secret`` and is never logged). Failed tries are rate-limited
per IP address (``auth_failure_burst`` tries, one back every ``auth_failure_refill_s``),
and so are the checks in flight (``auth_in_flight_per_address``); an account has at most
``max_agent_connections`` connections.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from arena.identity import PolicyRef
from storage.agents import MAX_TOKEN_CHARS
from web.connections import Client
from web.limits import ServerLimits
from web.needs import Need, Secret
from web.protocol import AGENT_PROTOCOL_VERSION, MAX_ID_CHARS, ClientRequest, ProtocolError

MAX_AUTH_ADDRESSES = 10_000
"""IP addresses whose failed authentications are remembered (the oldest are forgotten)."""
MAX_LISTED_MATCHES = 64
"""Most match ids an ``auth`` may list in ``matches``."""


@dataclass(frozen=True)
class Account:
    """An authenticated agent account (what the ``authenticate`` need answers)."""

    name: str

    @property
    def key(self) -> str:
        """Its policy key (``agent:NAME``)."""
        return PolicyRef.agent(self.name).key


@dataclass
class AgentConn:
    """An authenticated agent connection."""

    client: Client
    account: Account
    resume: bool
    """Takes over the account's orphaned seats."""
    since: float
    seats: set[tuple[str, int]] = field(default_factory=set)
    seeks: set[str] = field(default_factory=set)


class _Tries:
    """A token bucket of failed authentications for one address, and its checks in
    flight."""

    def __init__(self, burst: int, now: float) -> None:
        self.tokens = float(burst)
        self.last = now
        self.in_flight = 0


Authenticated = Callable[[Client, Account, bool, Any, Sequence[str]], Need | None]
"""What follows a token that checked out: ``(client, account, resume, the auth's id, the
match ids it listed)``; may return a ``Need``."""


def _auth_options(request: ClientRequest) -> tuple[bool, list[str]]:
    """An ``auth``'s ``resume`` and ``matches``, once its protocol version is checked.
    Raises ProtocolError (``bad_protocol``, ``bad_message``)."""
    version = request.integer("agent_protocol", AGENT_PROTOCOL_VERSION)
    if version != AGENT_PROTOCOL_VERSION:
        raise ProtocolError(
            "bad_protocol",
            f"this server speaks agent protocol {AGENT_PROTOCOL_VERSION}, not {version}: "
            "use a client for that version",
        )
    resume = request.data.get("resume", True)
    if not isinstance(resume, bool):
        raise ProtocolError("bad_message", "auth: 'resume' must be true or false")
    listed = request.data.get("matches", [])
    if (
        not isinstance(listed, list)
        or len(listed) > MAX_LISTED_MATCHES
        or not all(isinstance(m, str) and 0 < len(m) <= MAX_ID_CHARS for m in listed)
    ):
        raise ProtocolError(
            "bad_message",
            f"auth: 'matches' must be a list of at most {MAX_LISTED_MATCHES} match ids",
        )
    return resume, listed


class AgentSessions:
    """The authenticated agent connections, by connection and by account (the agent desk
    owns one). ``has_db``: whether tokens can be checked; ``clock`` (monotonic seconds)
    times the failed tries."""

    def __init__(self, limits: ServerLimits, *, has_db: bool, clock: Callable[[], float]) -> None:
        self.limits = limits
        self.has_db = has_db
        self.clock = clock
        self.conns: dict[Client, AgentConn] = {}
        self.by_account: dict[str, set[Client]] = {}
        self._tries: OrderedDict[str, _Tries] = OrderedDict()
        self._authenticating: set[Client] = set()

    # -- views ---------------------------------------------------------------------------
    def account_of(self, client: Client) -> Account | None:
        """The agent account ``client`` authenticated as, if any."""
        conn = self.conns.get(client)
        return conn.account if conn is not None else None

    def online(self) -> list[str]:
        """Names of the accounts connected now."""
        return sorted(self.by_account)

    def agents(self) -> list[dict[str, Any]]:
        """Each connected agent: its connections, seats and seeks (no token, nothing
        private)."""
        out = []
        for name, clients in sorted(self.by_account.items()):
            conns = [self.conns[c] for c in clients if c in self.conns]
            out.append(
                {
                    "agent": PolicyRef.agent(name).key,
                    "connections": len(conns),
                    "matches": sorted({m for c in conns for m, _s in c.seats}),
                    "seeks": sum(len(c.seeks) for c in conns),
                }
            )
        return out

    def resuming(self, name: str) -> AgentConn | None:
        """The newest connection of account ``name`` that takes over orphaned seats."""
        others = [
            self.conns[c]
            for c in self.by_account.get(name, ())
            if c in self.conns and self.conns[c].resume
        ]
        return max(others, key=lambda c: c.since) if others else None

    # -- auth ----------------------------------------------------------------------------
    def _bucket(self, address: str, now: float) -> _Tries:
        tries = self._tries.get(address)
        if tries is None:
            tries = self._tries[address] = _Tries(self.limits.auth_failure_burst, now)
            while len(self._tries) > MAX_AUTH_ADDRESSES:
                self._tries.popitem(last=False)
        self._tries.move_to_end(address)
        refill = (now - tries.last) / self.limits.auth_failure_refill_s
        tries.tokens = min(float(self.limits.auth_failure_burst), tries.tokens + refill)
        tries.last = now
        return tries

    def _tries_left(self, address: str) -> _Tries:
        """The address's bucket. Raises ProtocolError ``rate_limited`` when it may not
        try now."""
        tries = self._bucket(address, self.clock())
        if tries.tokens < 1.0:
            wait = (1.0 - tries.tokens) * self.limits.auth_failure_refill_s
            raise ProtocolError(
                "rate_limited",
                f"too many failed authentications from your address: try again in {wait:.0f} s",
            )
        if tries.in_flight >= self.limits.auth_in_flight_per_address:
            raise ProtocolError(
                "rate_limited",
                f"{tries.in_flight} authentications from your address are being checked (the "
                "limit, auth_in_flight_per_address): wait for their answers",
            )
        return tries

    def auth(self, client: Client, request: ClientRequest, then: Authenticated) -> Need:
        """An ``auth``: an ``authenticate`` need, whose continuation calls ``then`` when
        the token proves an account (and the connection is still open). Raises
        ProtocolError (``bad_message``, ``bad_protocol``, ``unavailable``,
        ``rate_limited``, ``unauthorized``; the continuation also ``unavailable``)."""
        conn = self.conns.get(client)
        if conn is not None:
            raise ProtocolError(
                "bad_message", f"this connection is authenticated already, as {conn.account.key}"
            )
        if client in self._authenticating:
            raise ProtocolError("bad_message", "an auth of this connection is being checked")
        resume, listed = _auth_options(request)
        if not self.has_db:
            raise ProtocolError("unavailable", "this server has no database: no agent accounts")
        tries = self._tries_left(client.address)
        token = request.data.get("token")
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
            tries.tokens -= 1.0
            raise ProtocolError(
                "unauthorized",
                f"auth: 'token' must be the agent's token (text of at most {MAX_TOKEN_CHARS} "
                "characters): `arena agents create NAME` prints one",
            )
        self._authenticating.add(client)
        tries.in_flight += 1

        def checked(result: Any) -> Need | None:
            self._authenticating.discard(client)
            tries.in_flight -= 1
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot check the token now: {result}")
            if not isinstance(result, Account):
                tries.tokens -= 1.0
                raise ProtocolError(
                    "unauthorized",
                    "this token is wrong or revoked: check it, or ask the server's operator "
                    "for a new one (arena agents create NAME)",
                )
            if client.closed:
                return None
            return then(client, result, resume, request.id, listed)

        return Need("authenticate", {"token": Secret(token)}, checked)

    # -- connections ---------------------------------------------------------------------
    def register(self, client: Client, account: Account, resume: bool) -> AgentConn:
        """``client`` is authenticated as ``account`` now (its agent rate limit applies).
        Raises ProtocolError ``too_many_connections``."""
        clients = self.by_account.get(account.name, set())
        if len(clients) >= self.limits.max_agent_connections:
            raise ProtocolError(
                "too_many_connections",
                f"{account.key} has {len(clients)} connections (the limit, "
                "max_agent_connections): close one first",
            )
        conn = AgentConn(client, account, resume, self.clock())
        self.conns[client] = conn
        self.by_account.setdefault(account.name, set()).add(client)
        client.set_rate(self.limits.agent_rate_per_s, self.limits.agent_rate_burst)
        return conn

    def drop(self, client: Client) -> AgentConn | None:
        """``client`` is gone: its session (None when it had none)."""
        self._authenticating.discard(client)
        conn = self.conns.pop(client, None)
        if conn is None:
            return None
        clients = self.by_account.get(conn.account.name)
        if clients is not None:
            clients.discard(client)
            if not clients:
                del self.by_account[conn.account.name]
        return conn
