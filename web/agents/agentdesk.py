"""Remote agents and seekers, without I/O: authentication, seeks, agent seats, prompts.

``AgentDesk`` is the part of the sans-I/O core (``web.core.HubCore`` owns one) that
serves the agent protocol (``docs/protocol.md``, "Remote agents"). It routes; each
concern is a state machine of its own, in its own module:

* ``web.agents.agentsessions``: ``auth`` (a token proves an agent account, checked by the
  asyncio layer through a ``Need``; failed tries rate-limited per IP address) and the
  authenticated connections;
* ``web.agents.seeks``: ``seek`` / ``cancel_seek``, for agents and people in a browser alike in
  one ``matchmaking.seek.SeekQueue``; ``tick`` pairs them and returns the matches to
  start (``PendingMatch``), which the asyncio layer builds and reports back (``started``
  / ``failed``);
* ``web.agents.agentseats``: agent seats: prompts (``your_turn``) to the one connection that
  holds a seat, ``move`` and ``resign`` from it only; a dropped connection leaves its
  seats orphaned: the account's next connection takes them over (``resumed``), and past
  ``agent_reconnect_grace_s`` each forfeits (``tick`` returns the ``Forfeit``s to apply).
  A revoked account is disconnected and its seats forfeit;
* ``web.agents.agentends``: ``match_ended`` and ``rating`` for each agent seat, kept for the
  agents that were away.

It keeps no clock of its own: ``clock`` (monotonic seconds) and ``wall_clock`` (Unix
time) are given, so tests drive time.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arena.events import RatingsChanged
from arena.identity import PolicyRef
from arena.seats import SeatTurn
from matchmaking.seek import MatchmakerConfig, SeekQueue
from web.agents.agentends import ENDED_MATCHES, AgentEnds, EndedSeat, match_ended_frame, result_for
from web.agents.agentseats import (
    AgentSeat,
    AgentSeats,
    Forfeit,
    HumanSeatSink,
    PromptedSeat,
    message_json,
)
from web.agents.agentsessions import (
    MAX_AUTH_ADDRESSES,
    MAX_LISTED_MATCHES,
    Account,
    AgentConn,
    AgentSessions,
)
from web.agents.seeks import (
    HUMAN_PLAYER,
    FillerSource,
    GameCheck,
    PendingMatch,
    SeatPlan,
    SeekOwner,
    Seeks,
)
from web.connections import Client
from web.limits import ServerLimits
from web.needs import Close, Need
from web.protocol import AGENT_PROTOCOL_VERSION, ClientRequest, ProtocolError

__all__ = [
    "ENDED_MATCHES",
    "HUMAN_PLAYER",
    "MAX_AUTH_ADDRESSES",
    "MAX_LISTED_MATCHES",
    "Account",
    "AgentConn",
    "AgentDesk",
    "AgentSeat",
    "DeskWork",
    "EndedSeat",
    "FillerSource",
    "Forfeit",
    "GameCheck",
    "HumanSeatSink",
    "PendingMatch",
    "PromptedSeat",
    "SeatPlan",
    "SeekOwner",
    "match_ended_frame",
    "message_json",
    "result_for",
]


@dataclass
class DeskWork:
    """What ``tick`` asks the asyncio layer to do."""

    start: list[PendingMatch] = field(default_factory=list)
    forfeits: list[Forfeit] = field(default_factory=list)


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
        self.sessions = AgentSessions(limits, has_db=has_db, clock=clock)
        self.ends = AgentEnds(send)
        self.agent_seats = AgentSeats(
            limits,
            self.sessions,
            send=send,
            human_seat=human_seat,
            ended_for=self.ends.ended_for,
            clock=clock,
            wall_clock=wall_clock,
        )
        self.seeks = Seeks(
            limits,
            self.sessions,
            send=send,
            check_game=check_game,
            fillers=self.fill_source,
            agent_seats=self.agent_seats.count,
            matchmaker=matchmaker,
            clock=clock,
            seed=seed,
        )

    # -- state, as its parts hold it ---------------------------------------------------
    @property
    def conns(self) -> dict[Client, AgentConn]:
        """The authenticated connections."""
        return self.sessions.conns

    @property
    def by_account(self) -> dict[str, set[Client]]:
        """Account name -> its authenticated connections."""
        return self.sessions.by_account

    @property
    def queue(self) -> SeekQueue:
        """The seeks waiting."""
        return self.seeks.queue

    @property
    def owners(self) -> dict[str, SeekOwner]:
        """Seek id -> who made it."""
        return self.seeks.owners

    @property
    def ratings(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Game -> policy key -> (mu, sigma), for the games whose ratings were loaded."""
        return self.seeks.ratings

    @property
    def seats(self) -> dict[tuple[str, int], AgentSeat]:
        """The live agent seats: (match id, seat) -> seat."""
        return self.agent_seats.seats

    @property
    def matches(self) -> dict[str, dict[str, Any]]:
        """Live matches started from seeks: match id -> header."""
        return self.agent_seats.matches

    @property
    def ended(self) -> OrderedDict[str, list[EndedSeat]]:
        """The last ``ENDED_MATCHES`` matches from the seek queue that ended: their agent
        seats."""
        return self.ends.ended

    # -- views ---------------------------------------------------------------------------
    def account_of(self, client: Client) -> Account | None:
        """The agent account ``client`` authenticated as, if any."""
        return self.sessions.account_of(client)

    def online(self) -> list[str]:
        """Names of the accounts connected now."""
        return self.sessions.online()

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
        return self.sessions.agents()

    def seat_of(self, match_id: str, seat: int) -> AgentSeat | None:
        """The agent seat ``seat`` of ``match_id``, if an agent plays it."""
        return self.seats.get((match_id, seat))

    def rating(self, game_id: str, key: str) -> tuple[float, float]:
        """(rating, standard error) of policy ``key`` in ``game_id``: stored, else the
        rating of a policy never rated (``matchmaking.seek.DEFAULT_MU``, ``DEFAULT_SIGMA``)."""
        return self.seeks.rating(game_id, key)

    # -- requests ------------------------------------------------------------------------
    def receive(self, client: Client, request: ClientRequest) -> Need | None:
        """An agent-protocol request (``auth``, ``seek``, ``cancel_seek``, ``resign``).
        Raises ProtocolError for a refused one."""
        kind = request.type
        if kind == "auth":
            return self.sessions.auth(client, request, self._authenticated)
        if kind == "seek":
            return self.seek(client, request)
        if kind == "cancel_seek":
            self.seeks.cancel(client, request)
            return None
        if kind == "resign":
            return self.agent_seats.resign(client, request)
        raise ProtocolError("unknown_type", f"{kind!r} is not an agent request")

    def _authenticated(
        self, client: Client, account: Account, resume: bool, ref: Any, listed: Sequence[str]
    ) -> Need | None:
        conn = self.sessions.register(client, account, resume)
        taken = self.agent_seats.orphans(account) if resume else []
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
        self.agent_seats.bind(conn, taken)
        live = self.agent_seats.live_matches(account.name)
        return self.ends.replay(conn, ref, listed if resume else [], live)

    def seek(self, client: Client, request: ClientRequest) -> Need | None:
        """A ``seek`` (an agent's, or a browser person's: the core checks a person's
        browser-match limits first). Raises ProtocolError."""
        return self.seeks.seek(client, request)

    def move(self, client: Client, request: ClientRequest, text: str) -> dict[str, Any]:
        """An agent's ``move``: hands ``text`` to its seat; returns the ``move_ack``.
        Raises ProtocolError (``forbidden``, ``not_your_turn``, ``unknown_match``)."""
        return self.agent_seats.move(client, request, text)

    # -- connections ---------------------------------------------------------------------
    def disconnected(self, client: Client) -> None:
        """``client`` is gone: its seeks are dropped, its seats orphaned (another
        connection of the account that resumes takes them at once; else the grace period
        starts)."""
        self.seeks.drop_client(client)
        conn = self.sessions.drop(client)
        if conn is None:
            return
        self.agent_seats.orphan(conn, self.clock())
        other = self.sessions.resuming(conn.account.name)
        if other is not None:
            self.agent_seats.take_orphans(other)

    def revoked(self, names: Iterable[str]) -> tuple[list[tuple[Client, Close]], list[Forfeit]]:
        """The accounts ``names`` were revoked: their connections are to be closed, their
        live seats forfeited (and their seeks are dropped)."""
        closes: list[tuple[Client, Close]] = []
        forfeits: list[Forfeit] = []
        for name in set(names):
            for client in list(self.by_account.get(name, ())):
                account = PolicyRef.agent(name).key
                self.send(
                    client,
                    {
                        "type": "error",
                        "code": "revoked",
                        "message": f"{account}'s token was revoked: its seats forfeit",
                    },
                )
                closes.append((client, Close(1008, "token revoked")))
                self.disconnected(client)
            forfeits += self.agent_seats.forfeit_account(name)
        return closes, forfeits

    # -- time ----------------------------------------------------------------------------
    def tick(self) -> DeskWork:
        """Expire old seeks, pair the queue, and find the orphaned seats whose grace
        period is over. Returns the matches to start and the seats to forfeit."""
        now = self.clock()
        self.seeks.expire(now)
        start = self.seeks.pair(now)
        return DeskWork(start, self.agent_seats.overdue(now))

    # -- matches -------------------------------------------------------------------------
    def header(self, pending: PendingMatch, players: Sequence[str]) -> dict[str, Any]:
        """What ``paired`` and ``resumed`` say about a match (no seat: added per seat)."""
        return self.agent_seats.header(pending, players)

    def started(
        self,
        pending: PendingMatch,
        players: Sequence[str],
        handles: Mapping[int, PromptedSeat],
    ) -> None:
        """A pending match was built (not yet started): its agent seats and browser seats
        are registered; they are told (``paired``, ``match_created``) once the core has
        seen the match start (``announced``), so that a subscription to it finds it."""
        self.agent_seats.started(pending, players, handles)

    def announced(self, match_id: str) -> None:
        """The core saw the match start: its seats are told now (``paired``,
        ``match_created``), before any prompt."""
        self.agent_seats.announced(match_id)

    def failed(self, pending: PendingMatch, reason: str) -> None:
        """A pending match could not be built: its seekers are told (``error``
        ``bad_game`` with their seek's ``ref``)."""
        self.seeks.failed(pending, reason)

    def prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        """An agent seat must move: ``your_turn`` to the connection holding it (none while
        it is orphaned: the next connection gets the prompt when it resumes)."""
        self.agent_seats.prompt(match_id, seat, turn, deadline)

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
        self.agent_seats.announced(match_id)
        seats = self.agent_seats.remove_match(match_id)
        self.ends.seats_ended(match_id, seats, status, reason, rewards, forfeited)

    def ratings_changed(self, event: RatingsChanged) -> None:
        """New ratings after a rated match: kept for pairing, and sent (``rating``) to the
        connections that were told the end of that match's agent seats, right after it
        (an agent away when it ended gets both when it is back)."""
        self.seeks.ratings_changed(event)
        self.ends.ratings_changed(event)
