"""Remote agents and seekers, without I/O: authentication, seeks, agent seats, prompts.

``AgentDesk`` is the part of the sans-I/O core (``web.core.HubCore`` owns one) that
serves the agent protocol (``docs/protocol.md``, "Remote agents"):

* ``auth``: a token proves an agent account (checked by the asyncio layer through a
  ``Need``; the token travels as a ``Secret`` and is never logged). Failed tries are
  rate-limited per IP address (``auth_failure_burst``, ``auth_failure_refill_s``).
* ``seek`` / ``cancel_seek``: requests for a game, in one ``matchmaking.seek.SeekQueue``
  for agents and people in a browser alike; ``tick`` pairs them and returns the matches
  to start (``PendingMatch``), which the asyncio layer builds and reports back
  (``started`` / ``failed``).
* agent seats: a seat's prompts (``your_turn``: exactly the seat's own new messages and
  its legal moves) go to the one connection that holds it; ``move`` and ``resign`` are
  accepted only from that connection. A dropped connection leaves its seats orphaned:
  the account's next connection takes them over (``resumed``, and the pending prompt with
  the seat's whole transcript); past ``agent_reconnect_grace_s`` each forfeits (``tick``
  returns the ``Forfeit``s to apply). A revoked account is disconnected and its seats
  forfeit.

It keeps no clock of its own: ``clock`` (monotonic seconds) and ``wall_clock`` (Unix
time) are given, so tests drive time.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from arena.coordinator import SeatTurn
from arena.events import RatingsChanged, format_messages
from arena.identity import PolicyKind, PolicyRef
from games.api import GameMessage
from games.outcome import result_of
from matchmaking.seek import (
    DEFAULT_MU,
    DEFAULT_SIGMA,
    OPPONENT_KINDS,
    Filler,
    MatchmakerConfig,
    Pairing,
    Seek,
    SeekQueue,
)
from storage.agents import MAX_TOKEN_CHARS
from web.clients import Client
from web.convert import rating_json
from web.human import HUMAN_PLAYER
from web.limits import ServerLimits
from web.needs import Close, Need, Secret
from web.protocol import AGENT_PROTOCOL_VERSION, MAX_ID_CHARS, ClientRequest, ProtocolError

MAX_AUTH_ADDRESSES = 10_000
"""IP addresses whose failed authentications are remembered (the oldest are forgotten)."""
ENDED_MATCHES = 4_096
"""Ended matches from the seek queue whose ends are kept (for ``match_over`` and for the
agents that were away when they ended); older ones are read back from the database."""
MAX_LISTED_MATCHES = 64
"""Most match ids an ``auth`` may list in ``matches``."""


class PromptedSeat(Protocol):
    """A live seat that waits for moves from outside (``web.remote.RemoteSeat``,
    ``web.human.HumanSeat``)."""

    @property
    def waiting(self) -> bool:
        """True while it waits for a move."""
        ...

    turn: SeatTurn | None
    deadline: float | None

    def submit(self, text: str) -> int:
        """Hand over the move; the turn index. Raises SeatNotWaiting."""
        ...


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


@dataclass
class SeekOwner:
    """Who made a waiting seek, and how to answer them."""

    seek: Seek
    client: Client
    ref: Any
    """The ``seek`` request's id (answers carry it back as ``ref``)."""
    account: Account | None
    """The agent, or None for a person in a browser."""


@dataclass(frozen=True)
class SeatPlan:
    """Who plays one seat of a match about to start."""

    seat: int
    player: str
    """What the match records (``agent:NAME``, ``human``, ``random``, ``run:NAME@STEP``)."""
    kind: PolicyKind
    """``AGENT``, ``HUMAN``, ``BOT`` or ``CHECKPOINT``."""
    owner: SeekOwner | None = None
    """The seek it answers (None for fill-ins)."""


@dataclass(frozen=True)
class PendingMatch:
    """A pairing to build and start (``AgentDesk.tick``)."""

    match_id: str
    pairing: Pairing
    seats: tuple[SeatPlan, ...]

    @property
    def game_id(self) -> str:
        """The game."""
        return self.pairing.game_id


@dataclass(frozen=True)
class Forfeit:
    """A seat to forfeit now (``GameCoordinator.forfeit``)."""

    match_id: str
    seat: int
    reason: str


@dataclass
class AgentSeat:
    """A seat of a live match played by a remote agent."""

    match_id: str
    seat: int
    account: Account
    header: dict[str, Any]
    """What ``paired`` and ``resumed`` say about the match."""
    handle: PromptedSeat
    conn: Client | None
    orphaned_at: float | None = None
    forfeiting: bool = False
    resend_all: bool = False
    """Taken over by a new connection: its next prompt carries the whole transcript."""


@dataclass
class EndedSeat:
    """An agent seat of a match that ended: its ``match_ended`` frame, the connections it
    was sent to, and the ``rating`` frame once the match is rated."""

    account: str
    """The account's name."""
    frame: dict[str, Any]
    told: set[Client] = field(default_factory=set)
    rating: dict[str, Any] | None = None


@dataclass
class DeskWork:
    """What ``tick`` asks the asyncio layer to do."""

    start: list[PendingMatch] = field(default_factory=list)
    forfeits: list[Forfeit] = field(default_factory=list)


class _Tries:
    """A token bucket of failed authentications for one address, and its checks in
    flight."""

    def __init__(self, burst: int, now: float) -> None:
        self.tokens = float(burst)
        self.last = now
        self.in_flight = 0


GameCheck = Callable[[str, int | None, bool], int]
"""``(game id, seats asked or None, for a person) -> seats``; raises ValueError with the
reason when the game cannot be sought here."""
FillerSource = Callable[[str, int], Sequence[tuple[str, PolicyKind, str]]]
"""``(game id, seats) -> (player text, kind, policy key)`` of each fill-in for it."""
HumanSeatSink = Callable[[PendingMatch, SeatPlan, PromptedSeat], str]
"""Registers a browser seat of a started match with the core; returns its token."""


def message_json(message: GameMessage) -> dict[str, Any]:
    """One transcript message as the agent protocol sends it."""
    return {
        "from": message.sender,
        "to": message.to,
        "kind": message.kind.value,
        "text": message.text,
    }


def result_for(seat: int, status: str, rewards: Sequence[float] | None) -> str:
    """``win``, ``loss`` or ``draw`` for ``seat`` (``games.outcome``), or ``aborted``."""
    if status == "aborted" or rewards is None:
        return "aborted"
    return result_of(seat, rewards).value


class AgentDesk:
    """Agents, seekers and agent seats (see the module's docstring).

    ``send(client, message)`` queues a frame; ``check_game`` validates a seek's game;
    ``fillers`` lists a game's fill-ins; ``human_seat`` registers a browser seat of a
    started match (and returns its token); ``has_db``: whether tokens can be checked.
    ``clock`` (monotonic) times the desk's deadlines; ``wall_clock`` (Unix time) is what
    agents are shown.
    """

    def __init__(
        self,
        limits: ServerLimits,
        *,
        send: Callable[[Client, dict[str, Any]], None],
        check_game: GameCheck,
        fillers: FillerSource | None = None,
        human_seat: HumanSeatSink | None = None,
        matchmaker: MatchmakerConfig | None = None,
        has_db: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        seed: int | None = None,
    ) -> None:
        self.limits = limits
        self.send = send
        self.check_game = check_game
        self.fill_source: FillerSource = fillers or (lambda _g, _n: ())
        self.human_seat = human_seat
        self.has_db = has_db
        self.clock = clock
        self.wall_clock = wall_clock
        """Unix time, for what agents are shown (a turn's time left before its deadline)."""
        self.queue = SeekQueue(matchmaker, self._fillers, seed=seed)
        self.conns: dict[Client, AgentConn] = {}
        self.by_account: dict[str, set[Client]] = {}
        self.seats: dict[tuple[str, int], AgentSeat] = {}
        self.owners: dict[str, SeekOwner] = {}
        self.matches: dict[str, dict[str, Any]] = {}
        """Live matches started from seeks: match id -> header."""
        self.ratings: dict[str, dict[str, tuple[float, float]]] = {}
        """Game -> policy key -> (mu, sigma), for the games whose ratings were loaded."""
        self.ended: OrderedDict[str, list[EndedSeat]] = OrderedDict()
        """The last ``ENDED_MATCHES`` matches from the seek queue that ended: their agent
        seats."""
        self._unannounced: dict[str, list[tuple[Client, dict[str, Any]]]] = {}
        """Frames for matches whose start the core has not seen yet (``announced``)."""
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

    def status(self) -> dict[str, Any]:
        """Agents online, seeks waiting, agent seats live (for ``/api/status`` and
        ``/api/agents``)."""
        return {
            "agents_online": len(self.by_account),
            "agent_connections": len(self.conns),
            "seeks": len(self.queue),
            "agent_seats": len(self.seats),
            "seek_matches": len(self.matches),
        }

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

    def seat_of(self, match_id: str, seat: int) -> AgentSeat | None:
        """The agent seat ``seat`` of ``match_id``, if an agent plays it."""
        return self.seats.get((match_id, seat))

    # -- requests ------------------------------------------------------------------------
    def receive(self, client: Client, request: ClientRequest) -> Need | None:
        """An agent-protocol request (``auth``, ``seek``, ``cancel_seek``, ``resign``).
        Raises ProtocolError for a refused one."""
        kind = request.type
        if kind == "auth":
            return self._auth(client, request)
        if kind == "seek":
            return self.seek(client, request)
        if kind == "cancel_seek":
            self._cancel_seek(client, request)
            return None
        if kind == "resign":
            return self._resign(client, request)
        raise ProtocolError("unknown_type", f"{kind!r} is not an agent request")

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

    def _auth(self, client: Client, request: ClientRequest) -> Need:
        conn = self.conns.get(client)
        if conn is not None:
            raise ProtocolError(
                "bad_message", f"this connection is authenticated already, as {conn.account.key}"
            )
        if client in self._authenticating:
            raise ProtocolError("bad_message", "an auth of this connection is being checked")
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
        if not self.has_db:
            raise ProtocolError("unavailable", "this server has no database: no agent accounts")
        now = self.clock()
        tries = self._bucket(client.address, now)
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
            return self._authenticated(client, result, resume, request.id, listed)

        return Need("authenticate", {"token": Secret(token)}, checked)

    def _authenticated(
        self, client: Client, account: Account, resume: bool, ref: Any, listed: Sequence[str]
    ) -> Need | None:
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
        taken = self._orphans(account) if resume else []
        self.send(
            client,
            {
                "type": "authenticated",
                "ref": ref,
                "agent": account.key,
                "name": account.name,
                "agent_protocol": AGENT_PROTOCOL_VERSION,
                "limits": self.limits.public(),
                "resumed": [s.header for s in taken],
            },
        )
        self._bind(conn, taken)
        return self._replay(conn, ref, listed if resume else [])

    def _replay(self, conn: AgentConn, ref: Any, listed: Sequence[str]) -> Need | None:
        """After ``authenticated`` (with ``resume``): the end of each match of the account
        that ended while no connection held its seat, and of each match ``listed`` that is
        over (read from the database when it is not in memory); ``unknown_match`` for a
        listed match the account holds no seat of."""
        name = conn.account.name
        held = {m for m, _s in conn.seats}
        replayed: set[str] = set()
        wanted = set(listed) - held
        for match_id, seats in self.ended.items():
            for ended in seats:
                if ended.account == name and (not ended.told or match_id in wanted):
                    self._tell(conn.client, match_id, ended, replayed=True)
                    replayed.add(match_id)
        live = {k[0] for k, s in self.seats.items() if s.account.name == name}
        missing = [m for m in dict.fromkeys(listed) if m not in replayed and m not in live]
        if not missing:
            return None

        def found(result: Any) -> None:
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read those matches now: {result}")
            frames: Mapping[str, list[dict[str, Any]]] = result
            for match_id in missing:
                mine = frames.get(match_id) or []
                if not mine:
                    self.send(
                        conn.client,
                        {
                            "type": "error",
                            "code": "unknown_match",
                            "ref": ref,
                            "match": match_id,
                            "message": f"{conn.account.key} held no seat of an ended match "
                            f"{match_id[:40]!r} here",
                        },
                    )
                for frame in mine:
                    self.send(conn.client, {**frame, "replayed": True})

        return Need("ended_matches", {"account": conn.account.key, "ids": missing}, found)

    def _tell(self, client: Client, match_id: str, ended: EndedSeat, replayed: bool) -> None:
        """Send a seat's ``match_ended`` (then its ``rating``, once rated) to ``client``."""
        ended.told.add(client)
        self.send(client, {**ended.frame, "replayed": replayed})
        if ended.rating is not None:
            self.send(client, ended.rating)

    def _orphans(self, account: Account) -> list[AgentSeat]:
        return [
            s
            for s in self.seats.values()
            if s.account.name == account.name and s.conn is None and not s.forfeiting
        ]

    def _take_orphans(self, conn: AgentConn) -> None:
        """Bind the account's orphaned seats to ``conn`` (already authenticated):
        ``resumed``, then each pending prompt with the seat's whole transcript."""
        mine = self._orphans(conn.account)
        if mine:
            self.send(conn.client, {"type": "resumed", "matches": [s.header for s in mine]})
            self._bind(conn, mine)

    def _bind(self, conn: AgentConn, mine: list[AgentSeat]) -> None:
        for seat in mine:
            seat.conn = conn.client
            seat.orphaned_at = None
            conn.seats.add((seat.match_id, seat.seat))
        for seat in mine:
            handle = seat.handle
            if handle.waiting and handle.turn is not None and handle.deadline is not None:
                self._prompt_frame(seat, handle.turn, handle.deadline, full=True)
            else:  # not to move now: its next prompt tells it everything
                seat.resend_all = True

    def _owner_key(self, client: Client) -> tuple[str, PolicyKind, Account | None]:
        conn = self.conns.get(client)
        if conn is not None:
            return conn.account.key, PolicyKind.AGENT, conn.account
        return PolicyRef.human(str(client.id)).key, PolicyKind.HUMAN, None

    def _live_count(self, account: str | None, client: Client | None) -> int:
        seats = sum(
            1
            for s in self.seats.values()
            if (account is None or s.account.name == account)
            and (client is None or s.conn is client)
        )
        seeks = sum(
            1
            for o in self.owners.values()
            if (account is None or (o.account is not None and o.account.name == account))
            and (client is None or o.client is client)
        )
        return seats + seeks

    def seek(self, client: Client, request: ClientRequest) -> Need | None:
        """A ``seek`` (an agent's, or a browser person's: the core checks a person's
        browser-match limits first). Raises ProtocolError."""
        game_id = request.text("game")
        rated = request.data.get("rated", True)
        if not isinstance(rated, bool):
            raise ProtocolError("bad_message", "seek: 'rated' must be true or false")
        wanted = request.data.get("opponents")
        if wanted is None:
            opponents = frozenset(OPPONENT_KINDS)
        elif (
            not isinstance(wanted, list)
            or not wanted
            or len(wanted) > len(OPPONENT_KINDS)
            or any(k not in OPPONENT_KINDS for k in wanted)
        ):
            raise ProtocolError(
                "bad_message",
                f"seek: 'opponents' must be a list of some of {', '.join(OPPONENT_KINDS)}",
            )
        else:
            opponents = frozenset(PolicyKind(k) for k in wanted)
        players = request.integer("players")
        owner, kind, account = self._owner_key(client)
        try:
            num_players = self.check_game(game_id, players, kind is PolicyKind.HUMAN)
        except ValueError as exc:
            raise ProtocolError("bad_game", str(exc)) from None
        limits = self.limits
        if account is not None:
            if self._live_count(account.name, None) >= limits.max_agent_matches:
                raise ProtocolError(
                    "too_many_matches",
                    f"{account.key} plays or seeks {limits.max_agent_matches} matches (the "
                    "limit, max_agent_matches): wait for one to end",
                )
            if self._live_count(None, client) >= limits.max_agent_matches_per_connection:
                raise ProtocolError(
                    "too_many_matches",
                    f"this connection plays or seeks {limits.max_agent_matches_per_connection}"
                    " matches (the limit, max_agent_matches_per_connection): wait for one to "
                    "end",
                )
        if len(self.queue) >= limits.max_seeks:
            raise ProtocolError(
                "too_many_seeks",
                f"{limits.max_seeks} seeks are waiting (the limit, max_seeks): try again later",
            )

        def queue(_loaded: Any = None) -> None:
            if isinstance(_loaded, BaseException):
                raise ProtocolError("unavailable", f"cannot read the ratings: {_loaded}")
            if client.closed or (account is not None and client not in self.conns):
                return
            mu, sigma = self.rating(
                game_id, owner if account is not None else PolicyRef.human(HUMAN_PLAYER).key
            )
            seek = Seek(
                seek_id=secrets.token_hex(8),
                owner=owner,
                kind=kind,
                game_id=game_id,
                num_players=num_players,
                rated=rated,
                opponents=opponents,
                created=self.clock(),
                mu=mu,
                sigma=sigma,
            )
            self.queue.add(seek)
            self.owners[seek.seek_id] = SeekOwner(seek, client, request.id, account)
            conn = self.conns.get(client)
            if conn is not None:
                conn.seeks.add(seek.seek_id)
            self.send(
                client,
                {
                    "type": "seeking",
                    "ref": request.id,
                    "seek": seek.seek_id,
                    "game_id": game_id,
                    "players": num_players,
                    "rated": rated,
                    "opponents": sorted(opponents),
                    "rating": {"mu": mu, "sigma": sigma},
                },
            )

        if game_id not in self.ratings:
            return Need("load_ratings", {"game": game_id}, self._loaded(game_id, queue))
        queue()
        return None

    def _loaded(self, game_id: str, then: Callable[[Any], None]) -> Callable[[Any], None]:
        def loaded(result: Any) -> None:
            if isinstance(result, BaseException):
                then(result)
                return
            if game_id not in self.ratings:
                self.ratings[game_id] = {k: (v[0], v[1]) for k, v in dict(result).items()}
            then(None)

        return loaded

    def rating(self, game_id: str, key: str) -> tuple[float, float]:
        """(rating, standard error) of policy ``key`` in ``game_id``: stored, else the
        rating of a policy never rated (``matchmaking.seek.DEFAULT_MU``, ``DEFAULT_SIGMA``)."""
        return self.ratings.get(game_id, {}).get(key, (DEFAULT_MU, DEFAULT_SIGMA))

    def _cancel_seek(self, client: Client, request: ClientRequest) -> None:
        seek_id = request.text("seek")
        owner = self.owners.get(seek_id)
        if owner is None or owner.client is not client:
            raise ProtocolError("unknown_seek", f"no seek {seek_id[:40]!r} of yours is waiting")
        self._drop_seek(seek_id)
        self.send(client, {"type": "seek_cancelled", "ref": request.id, "seek": seek_id})

    def _drop_seek(self, seek_id: str) -> SeekOwner | None:
        self.queue.remove(seek_id)
        owner = self.owners.pop(seek_id, None)
        if owner is not None:
            conn = self.conns.get(owner.client)
            if conn is not None:
                conn.seeks.discard(seek_id)
        return owner

    def _held_seat(self, client: Client, match_id: str) -> AgentSeat:
        """The seat of ``match_id`` that ``client`` holds. Raises ProtocolError."""
        conn = self.conns.get(client)
        if conn is None:
            raise ProtocolError("forbidden", "authenticate first (auth): this is an agent's seat")
        held = [s for s in self.seats.values() if s.match_id == match_id]
        mine = [s for s in held if s.conn is client]
        if mine:
            return mine[0]
        ours = [s for s in held if s.account.name == conn.account.name]
        if any(s.conn is not None for s in ours):
            raise ProtocolError(
                "forbidden", f"this seat of {conn.account.key} is held by another connection"
            )
        if ours:
            raise ProtocolError(
                "forbidden",
                f"this seat of {conn.account.key} is held by no connection now: a connection "
                "that authenticates with resume true takes it over",
            )
        if match_id in self.matches or held:
            raise ProtocolError("forbidden", f"{conn.account.key} holds no seat of this match")
        if any(e.account == conn.account.name for e in self.ended.get(match_id, ())):
            raise ProtocolError("match_over", f"match {match_id[:40]!r} is over")
        raise ProtocolError("unknown_match", f"no live match {match_id[:40]!r} has your seat")

    def move(self, client: Client, request: ClientRequest, text: str) -> dict[str, Any]:
        """An agent's ``move``: hands ``text`` to its seat; returns the ``move_ack``.
        Raises ProtocolError (``forbidden``, ``not_your_turn``, ``unknown_match``)."""
        match_id = request.text("match_id")
        seat = self._held_seat(client, match_id)
        handle = seat.handle
        turn = request.integer("turn")
        if not handle.waiting or handle.turn is None:
            raise ProtocolError("not_your_turn", f"seat {seat.seat} is not to move now")
        if turn is not None and turn != handle.turn.turn_index:
            raise ProtocolError(
                "not_your_turn",
                f"turn {turn} is not the one being played (turn {handle.turn.turn_index})",
            )
        from web.human import SeatNotWaiting

        try:
            index = handle.submit(text)
        except SeatNotWaiting:
            raise ProtocolError("not_your_turn", f"seat {seat.seat} is not to move now") from None
        return {
            "type": "move_ack",
            "ref": request.id,
            "match": match_id,
            "seat": seat.seat,
            "index": index,
        }

    def _resign(self, client: Client, request: ClientRequest) -> Need:
        match_id = request.text("match_id")
        seat = self._held_seat(client, match_id)
        reason = f"{seat.account.key} resigned"
        forfeit = Forfeit(match_id, seat.seat, reason)

        def done(result: Any) -> None:
            if isinstance(result, BaseException):
                raise ProtocolError("match_over", "this match is over")
            self.send(
                client,
                {"type": "resigned", "ref": request.id, "match": match_id, "seat": seat.seat},
            )

        seat.forfeiting = True
        return Need("forfeit", {"forfeit": forfeit}, done)

    # -- connections ---------------------------------------------------------------------
    def disconnected(self, client: Client) -> None:
        """``client`` is gone: its seeks are dropped, its seats orphaned (another
        connection of the account that resumes takes them at once; else the grace period
        starts)."""
        self._authenticating.discard(client)
        for seek_id in [i for i, o in self.owners.items() if o.client is client]:
            self._drop_seek(seek_id)
        conn = self.conns.pop(client, None)
        if conn is None:
            return
        clients = self.by_account.get(conn.account.name)
        if clients is not None:
            clients.discard(client)
            if not clients:
                del self.by_account[conn.account.name]
        now = self.clock()
        for key in conn.seats:
            seat = self.seats.get(key)
            if seat is not None and seat.conn is client:
                seat.conn = None
                seat.orphaned_at = now
        others = [
            self.conns[c]
            for c in self.by_account.get(conn.account.name, ())
            if c in self.conns and self.conns[c].resume
        ]
        if others:
            self._take_orphans(max(others, key=lambda c: c.since))

    def revoked(self, names: Iterable[str]) -> tuple[list[tuple[Client, Close]], list[Forfeit]]:
        """The accounts ``names`` were revoked: their connections are to be closed, their
        live seats forfeited (and their seeks are dropped)."""
        closes: list[tuple[Client, Close]] = []
        forfeits: list[Forfeit] = []
        for name in set(names):
            for client in list(self.by_account.get(name, ())):
                self.send(
                    client,
                    {
                        "type": "error",
                        "code": "revoked",
                        "message": f"agent:{name}'s token was revoked: its seats forfeit",
                    },
                )
                closes.append((client, Close(1008, "token revoked")))
                self.disconnected(client)
            for seat in self.seats.values():
                if seat.account.name == name and not seat.forfeiting:
                    seat.forfeiting = True
                    forfeits.append(
                        Forfeit(seat.match_id, seat.seat, f"agent:{name}'s token was revoked")
                    )
        return closes, forfeits

    # -- time ----------------------------------------------------------------------------
    def tick(self) -> DeskWork:
        """Expire old seeks, pair the queue, and find the orphaned seats whose grace
        period is over. Returns the matches to start and the seats to forfeit."""
        now = self.clock()
        work = DeskWork()
        for seek in self.queue.expire(now - self.limits.seek_timeout_s):
            owner = self._drop_seek(seek.seek_id)
            if owner is not None:
                self.send(
                    owner.client,
                    {
                        "type": "seek_expired",
                        "ref": owner.ref,
                        "seek": seek.seek_id,
                        "message": f"no match within {self.limits.seek_timeout_s:g} s: seek again",
                    },
                )
        for pairing in self.queue.pair(now):
            work.start.append(self._plan(pairing))
        grace = self.limits.agent_reconnect_grace_s
        for seat in self.seats.values():
            orphaned = seat.orphaned_at
            if seat.conn is not None or seat.forfeiting or orphaned is None:
                continue
            if now - orphaned >= grace:
                seat.forfeiting = True
                work.forfeits.append(
                    Forfeit(
                        seat.match_id,
                        seat.seat,
                        f"{seat.account.key} left and was not back within {grace:g} s",
                    )
                )
        return work

    def _fillers(self, game_id: str, num_players: int) -> list[Filler]:
        return [
            Filler(player, kind, *self.rating(game_id, key))
            for player, kind, key in self.fill_source(game_id, num_players)
        ]

    def _plan(self, pairing: Pairing) -> PendingMatch:
        seats = []
        for index, member in enumerate(pairing.seats):
            if isinstance(member, Seek):
                owner = self._drop_seek(member.seek_id)
                player = member.owner if member.kind is PolicyKind.AGENT else HUMAN_PLAYER
                seats.append(SeatPlan(index, player, member.kind, owner))
            else:
                seats.append(SeatPlan(index, member.player, member.kind))
        return PendingMatch(uuid.uuid4().hex, pairing, tuple(seats))

    # -- matches -------------------------------------------------------------------------
    def header(self, pending: PendingMatch, players: Sequence[str]) -> dict[str, Any]:
        """What ``paired`` and ``resumed`` say about a match (no seat: added per seat)."""
        return {
            "match": pending.match_id,
            "game_id": pending.game_id,
            "players": list(players),
            "num_players": pending.pairing.num_players,
            "rated": pending.pairing.rated,
            "move_timeout_s": self.limits.agent_move_timeout_s,
            "reconnect_grace_s": self.limits.agent_reconnect_grace_s,
        }

    def started(
        self,
        pending: PendingMatch,
        players: Sequence[str],
        handles: Mapping[int, PromptedSeat],
    ) -> None:
        """A pending match was built (not yet started): its agent seats and browser seats
        are registered; they are told (``paired``, ``match_created``) once the core has
        seen the match start (``announced``), so that a subscription to it finds it."""
        header = self.header(pending, players)
        self.matches[pending.match_id] = header
        frames = self._unannounced[pending.match_id] = []
        now = self.clock()
        for plan in pending.seats:
            handle = handles.get(plan.seat)
            owner = plan.owner
            if handle is None or owner is None:
                continue
            seat_header = {**header, "seat": plan.seat}
            if plan.kind is PolicyKind.HUMAN:
                if self.human_seat is None:
                    continue
                token = self.human_seat(pending, plan, handle)
                frames.append(
                    (
                        owner.client,
                        {
                            "type": "match_created",
                            "ref": owner.ref,
                            "seek": owner.seek.seek_id,
                            "match": pending.match_id,
                            "game_id": pending.game_id,
                            "seat": plan.seat,
                            "token": token,
                            "rated": pending.pairing.rated,
                        },
                    )
                )
                continue
            assert owner.account is not None
            conn = self.conns.get(owner.client)
            seat = AgentSeat(
                pending.match_id,
                plan.seat,
                owner.account,
                seat_header,
                handle,
                conn.client if conn is not None else None,
                orphaned_at=None if conn is not None else now,
            )
            self.seats[(pending.match_id, plan.seat)] = seat
            if conn is not None:
                conn.seats.add((pending.match_id, plan.seat))
                paired = {"type": "paired", "ref": owner.ref, "seek": owner.seek.seek_id}
                frames.append((conn.client, {**paired, **seat_header}))
            else:  # it left while the match was built: the next connection resumes it
                others = [
                    self.conns[c]
                    for c in self.by_account.get(owner.account.name, ())
                    if c in self.conns and self.conns[c].resume
                ]
                if others:
                    self._take_orphans(max(others, key=lambda c: c.since))

    def announced(self, match_id: str) -> None:
        """The core saw the match start: its seats are told now (``paired``,
        ``match_created``), before any prompt."""
        for client, message in self._unannounced.pop(match_id, ()):
            seat = self.seats.get((match_id, int(message.get("seat", -1))))
            if message["type"] == "paired" and (seat is None or seat.conn is not client):
                continue  # it left meanwhile: the next connection gets ``resumed``
            self.send(client, message)

    def failed(self, pending: PendingMatch, reason: str) -> None:
        """A pending match could not be built: its seekers are told (``error``
        ``bad_game`` with their seek's ``ref``)."""
        for plan in pending.seats:
            if plan.owner is not None:
                self.send(
                    plan.owner.client,
                    {
                        "type": "error",
                        "code": "bad_game",
                        "ref": plan.owner.ref,
                        "message": f"{pending.game_id} failed to start: {reason}; seek again",
                    },
                )

    def prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        """An agent seat must move: ``your_turn`` to the connection holding it (none while
        it is orphaned: the next connection gets the prompt when it resumes)."""
        self.announced(match_id)  # (the core has seen its start: the hub pumps first)
        agent_seat = self.seats.get((match_id, seat))
        if agent_seat is not None and agent_seat.conn is not None:
            self._prompt_frame(agent_seat, turn, deadline, full=agent_seat.resend_all)

    def _prompt_frame(self, seat: AgentSeat, turn: SeatTurn, deadline: float, full: bool) -> None:
        assert seat.conn is not None
        seat.resend_all = False
        start = 0 if full else turn.new_from
        self.send(
            seat.conn,
            {
                "type": "your_turn",
                "match": seat.match_id,
                "seat": seat.seat,
                "turn": turn.turn_index,
                "deadline": deadline,
                "time_left_s": round(max(0.0, deadline - self.wall_clock()), 3),
                "from": start,
                "new_from": turn.new_from,
                "messages": [message_json(m) for m in turn.messages[start:]],
                "prompt": format_messages(turn.messages[turn.new_from :]),
                "legal_moves": turn.legal_moves,
                # A simultaneous round: every seat asked at once (each gets its own
                # your_turn); absent for a move in turn.
                **({"movers": list(turn.movers)} if turn.movers else {}),
            },
        )

    def match_over(
        self,
        match_id: str,
        status: str,
        reason: str,
        rewards: Sequence[float] | None,
        forfeited: Sequence[int],
    ) -> None:
        """A match started from seeks ended: each agent seat is told (``match_ended``)
        and freed."""
        self.announced(match_id)
        self.matches.pop(match_id, None)
        ended: list[EndedSeat] = []
        for key in [k for k in self.seats if k[0] == match_id]:
            seat = self.seats.pop(key)
            for conn in self.conns.values():
                conn.seats.discard(key)
            frame = match_ended_frame(
                match_id,
                seat.seat,
                status,
                reason,
                rewards,
                forfeited,
                bool(seat.header.get("rated")),
            )
            record = EndedSeat(seat.account.name, frame)
            ended.append(record)
            if seat.conn is not None:  # else: replayed when the agent is back (``_replay``)
                self._tell(seat.conn, match_id, record, replayed=False)
        if ended:
            self.ended[match_id] = ended
            while len(self.ended) > ENDED_MATCHES:
                self.ended.popitem(last=False)

    def ratings_changed(self, event: RatingsChanged) -> None:
        """New ratings after a rated match: kept for pairing, and sent (``rating``) to the
        connections that were told the end of that match's agent seats, right after it
        (an agent away when it ended gets both when it is back)."""
        table = self.ratings.get(event.game_id)
        games: tuple[int | None, ...] = event.games or (None,) * len(event.ratings)
        rows = {}
        for (key, mu, sigma, _ordinal), count in zip(event.ratings, games, strict=True):
            if table is not None:
                table[key] = (mu, sigma)
            rows[key] = rating_json(key, mu, sigma, count)
        for ended in self.ended.get(event.match_id, ()):
            key = PolicyRef.agent(ended.account).key
            row = rows.get(key)
            if row is None or not ended.frame.get("rated"):
                continue
            fields = {k: v for k, v in row.items() if k != "policy"}
            ended.rating = {
                "type": "rating",
                "game_id": event.game_id,
                "match": event.match_id,
                "agent": key,
                **fields,
            }
            for client in ended.told:
                if not client.closed:
                    self.send(client, ended.rating)


def match_ended_frame(
    match_id: str,
    seat: int,
    status: str,
    reason: str,
    rewards: Sequence[float] | None,
    forfeited: Sequence[int],
    rated: bool,
) -> dict[str, Any]:
    """The ``match_ended`` frame of one seat (``replayed`` is added when it is sent)."""
    return {
        "type": "match_ended",
        "match": match_id,
        "seat": seat,
        "status": status,
        "reason": reason,
        "rewards": list(rewards) if rewards is not None else None,
        "forfeited": list(forfeited),
        "result": result_for(seat, status, rewards),
        "rated": rated,
    }
