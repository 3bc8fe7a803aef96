"""Seeks, without I/O: requests for a game from agents and from people in a browser, in
one ``matchmaking.seek.SeekQueue``; their limits, cancels and expiry, and the pairings
that become matches to start (``PendingMatch``), with the ratings they are paired by."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from arena.events import RatingsChanged
from arena.identity import SEEKABLE_KINDS, PolicyKind, PolicyRef
from matchmaking.seek import (
    DEFAULT_MU,
    DEFAULT_SIGMA,
    Filler,
    MatchmakerConfig,
    Pairing,
    Seek,
    SeekQueue,
)
from web.agents.agentsessions import Account, AgentSessions
from web.connections import Client
from web.limits import ServerLimits
from web.live.human import HUMAN_PLAYER
from web.needs import Need
from web.protocol import ClientRequest, ProtocolError

GameCheck = Callable[[str, int | None, bool], int]
"""``(game id, seats asked or None, for a person) -> seats``; raises ValueError with the
reason when the game cannot be sought here."""
FillerSource = Callable[[str, int], Sequence[tuple[str, PolicyKind, str]]]
"""``(game id, seats) -> (player text, kind, policy key)`` of each fill-in for it."""
SeatCount = Callable[[str | None, Client | None], int]
"""``(account name or None, connection or None) -> agent seats`` live of that account
and on that connection (None: any)."""


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


def _seek_options(request: ClientRequest) -> tuple[bool, frozenset[PolicyKind]]:
    """A ``seek``'s ``rated`` and ``opponents``. Raises ProtocolError ``bad_message``."""
    rated = request.data.get("rated", True)
    if not isinstance(rated, bool):
        raise ProtocolError("bad_message", "seek: 'rated' must be true or false")
    wanted = request.data.get("opponents")
    if wanted is None:
        return rated, frozenset(SEEKABLE_KINDS)
    if (
        not isinstance(wanted, list)
        or not wanted
        or len(wanted) > len(SEEKABLE_KINDS)
        or any(k not in SEEKABLE_KINDS for k in wanted)
    ):
        raise ProtocolError(
            "bad_message",
            f"seek: 'opponents' must be a list of some of {', '.join(SEEKABLE_KINDS)}",
        )
    return rated, frozenset(PolicyKind(k) for k in wanted)


class Seeks:
    """The waiting seeks and their owners (the agent desk owns one). ``send(client,
    message)`` queues a frame; ``check_game`` validates a seek's game; ``fillers`` lists a
    game's fill-ins; ``agent_seats`` counts live agent seats (for the per-account and
    per-connection limits); ``clock`` (monotonic seconds) dates seeks."""

    def __init__(
        self,
        limits: ServerLimits,
        sessions: AgentSessions,
        *,
        send: Callable[[Client, dict[str, Any]], None],
        check_game: GameCheck,
        fillers: FillerSource,
        agent_seats: SeatCount,
        matchmaker: MatchmakerConfig | None,
        clock: Callable[[], float],
        seed: int | None,
    ) -> None:
        self.limits = limits
        self.sessions = sessions
        self.send = send
        self.check_game = check_game
        self.fill_source = fillers
        self.agent_seats = agent_seats
        self.clock = clock
        self.queue = SeekQueue(matchmaker, self._fillers, seed=seed)
        self.owners: dict[str, SeekOwner] = {}
        self.ratings: dict[str, dict[str, tuple[float, float]]] = {}
        """Game -> policy key -> (mu, sigma), for the games whose ratings were loaded."""

    # -- ratings -------------------------------------------------------------------------
    def rating(self, game_id: str, key: str) -> tuple[float, float]:
        """(rating, standard error) of policy ``key`` in ``game_id``: stored, else the
        rating of a policy never rated (``matchmaking.seek.DEFAULT_MU``, ``DEFAULT_SIGMA``)."""
        return self.ratings.get(game_id, {}).get(key, (DEFAULT_MU, DEFAULT_SIGMA))

    def _loaded(self, game_id: str, then: Callable[[Any], None]) -> Callable[[Any], None]:
        def loaded(result: Any) -> None:
            if isinstance(result, BaseException):
                then(result)
                return
            if game_id not in self.ratings:
                self.ratings[game_id] = {k: (v[0], v[1]) for k, v in dict(result).items()}
            then(None)

        return loaded

    def ratings_changed(self, event: RatingsChanged) -> None:
        """New ratings after a rated match: kept for pairing (for games loaded)."""
        table = self.ratings.get(event.game_id)
        if table is not None:
            for key, mu, sigma, _ordinal in event.ratings:
                table[key] = (mu, sigma)

    # -- requests ------------------------------------------------------------------------
    def _owner_key(self, client: Client) -> tuple[str, PolicyKind, Account | None]:
        account = self.sessions.account_of(client)
        if account is not None:
            return account.key, PolicyKind.AGENT, account
        return PolicyRef.human(str(client.id)).key, PolicyKind.HUMAN, None

    def count(self, account: str | None, client: Client | None) -> int:
        """Seeks waiting of ``account`` (by name) and from ``client`` (None: any)."""
        return sum(
            1
            for o in self.owners.values()
            if (account is None or (o.account is not None and o.account.name == account))
            and (client is None or o.client is client)
        )

    def _check_limits(self, client: Client, account: Account | None) -> None:
        limits = self.limits
        if account is not None:
            held = self.agent_seats(account.name, None) + self.count(account.name, None)
            if held >= limits.max_agent_matches:
                raise ProtocolError(
                    "too_many_matches",
                    f"{account.key} plays or seeks {limits.max_agent_matches} matches (the "
                    "limit, max_agent_matches): wait for one to end",
                )
            held = self.agent_seats(None, client) + self.count(None, client)
            if held >= limits.max_agent_matches_per_connection:
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

    def seek(self, client: Client, request: ClientRequest) -> Need | None:
        """A ``seek`` (an agent's, or a browser person's: the core checks a person's
        browser-match limits first): ``seeking``, after a ``load_ratings`` need when the
        game's ratings are not loaded yet. Raises ProtocolError."""
        game_id = request.text("game")
        rated, opponents = _seek_options(request)
        players = request.integer("players")
        owner, kind, account = self._owner_key(client)
        try:
            num_players = self.check_game(game_id, players, kind is PolicyKind.HUMAN)
        except ValueError as exc:
            raise ProtocolError("bad_game", str(exc)) from None
        self._check_limits(client, account)

        def queue(_loaded: Any = None) -> None:
            if isinstance(_loaded, BaseException):
                raise ProtocolError("unavailable", f"cannot read the ratings: {_loaded}")
            if client.closed or (account is not None and client not in self.sessions.conns):
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
            self._queue(SeekOwner(seek, client, request.id, account))

        if game_id not in self.ratings:
            return Need("load_ratings", {"game": game_id}, self._loaded(game_id, queue))
        queue()
        return None

    def _queue(self, owner: SeekOwner) -> None:
        seek, client = owner.seek, owner.client
        self.queue.add(seek)
        self.owners[seek.seek_id] = owner
        conn = self.sessions.conns.get(client)
        if conn is not None:
            conn.seeks.add(seek.seek_id)
        self.send(
            client,
            {
                "type": "seeking",
                "ref": owner.ref,
                "seek": seek.seek_id,
                "game_id": seek.game_id,
                "players": seek.num_players,
                "rated": seek.rated,
                "opponents": sorted(seek.opponents),
                "rating": {"mu": seek.mu, "sigma": seek.sigma},
            },
        )

    def cancel(self, client: Client, request: ClientRequest) -> None:
        """A ``cancel_seek``: ``seek_cancelled``. Raises ProtocolError ``unknown_seek``."""
        seek_id = request.text("seek")
        owner = self.owners.get(seek_id)
        if owner is None or owner.client is not client:
            raise ProtocolError("unknown_seek", f"no seek {seek_id[:40]!r} of yours is waiting")
        self.drop(seek_id)
        self.send(client, {"type": "seek_cancelled", "ref": request.id, "seek": seek_id})

    def drop(self, seek_id: str) -> SeekOwner | None:
        """Take a seek out of the queue; who made it, if it was waiting."""
        self.queue.remove(seek_id)
        owner = self.owners.pop(seek_id, None)
        if owner is not None:
            conn = self.sessions.conns.get(owner.client)
            if conn is not None:
                conn.seeks.discard(seek_id)
        return owner

    def drop_client(self, client: Client) -> None:
        """``client`` is gone: its seeks are dropped."""
        for seek_id in [i for i, o in self.owners.items() if o.client is client]:
            self.drop(seek_id)

    # -- time ----------------------------------------------------------------------------
    def expire(self, now: float) -> None:
        """Drop the seeks older than ``seek_timeout_s`` (their owners get ``seek_expired``)."""
        for seek in self.queue.expire(now - self.limits.seek_timeout_s):
            owner = self.drop(seek.seek_id)
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

    def pair(self, now: float) -> list[PendingMatch]:
        """Pair the queue at ``now``: the matches to start (their seeks leave it)."""
        return [self._plan(pairing) for pairing in self.queue.pair(now)]

    def _fillers(self, game_id: str, num_players: int) -> list[Filler]:
        return [
            Filler(player, kind, *self.rating(game_id, key))
            for player, kind, key in self.fill_source(game_id, num_players)
        ]

    def _plan(self, pairing: Pairing) -> PendingMatch:
        seats = []
        for index, member in enumerate(pairing.seats):
            if isinstance(member, Seek):
                owner = self.drop(member.seek_id)
                player = member.owner if member.kind is PolicyKind.AGENT else HUMAN_PLAYER
                seats.append(SeatPlan(index, player, member.kind, owner))
            else:
                seats.append(SeatPlan(index, member.player, member.kind))
        return PendingMatch(uuid.uuid4().hex, pairing, tuple(seats))

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
