"""Seats played by people in a browser, without I/O: ``start_match`` against a bot or a
checkpoint, a person's seats from the seek queue, the tokens that are the only keys to
those seats, their ``move`` requests, and the limits on how many browser matches are
played or sought at once (in all, per connection, per address)."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from web.agents.agentdesk import AgentDesk
from web.agents.seeks import PendingMatch, SeatPlan
from web.connections import Client
from web.hubstats import HubStats
from web.limits import ServerLimits
from web.live.human import SeatNotWaiting
from web.live.livematches import LiveMatches
from web.needs import Need
from web.outbox import Outbox
from web.protocol import ClientRequest, ProtocolError

MAX_MOVE_CHARS = 4_000
"""Longest move text a browser may send (the game cuts it to its own cap)."""


class SeatHandle(Protocol):
    """A browser seat as the core sees it (``web.live.human.HumanSeat``)."""

    def submit(self, text: str) -> int:
        """Hand the seat's move to the game; the turn index. Raises SeatNotWaiting."""
        ...


@dataclass
class HumanMatch:
    """A match a browser started against a bot."""

    match_id: str
    game_id: str
    seat: int
    handle: SeatHandle
    token: str
    """The only key to the seat: only the browser that started the match holds it."""
    owner: int
    """The id of the client that started it."""
    address: str
    """That client's IP address."""
    is_over: Callable[[], bool]
    created: float
    """Unix time the seat was registered (the core's ``wall_clock``)."""

    @property
    def live(self) -> bool:
        """True until the match is over."""
        return not self.is_over()


@dataclass(frozen=True)
class StartedMatch:
    """What building a browser match gives back to the core (``start_match`` need)."""

    match_id: str
    handle: SeatHandle
    is_over: Callable[[], bool]


class BrowserSeats:
    """Browser seats and their requests (see the module's docstring; ``HubCore`` owns
    one). ``check_game(game, opponent)`` validates a browser match (raises ValueError with
    the reason; None: every one is taken); ``wall_clock`` (Unix time) stamps new seats."""

    def __init__(
        self,
        limits: ServerLimits,
        outbox: Outbox,
        stats: HubStats,
        *,
        matches: LiveMatches,
        agents: AgentDesk,
        check_game: Callable[[str, str], None] | None,
        wall_clock: Callable[[], float],
    ) -> None:
        self.limits = limits
        self.outbox = outbox
        self.stats = stats
        self.matches = matches
        self.agents = agents
        self.check_game = check_game
        self.wall_clock = wall_clock
        self.human: dict[str, list[HumanMatch]] = {}
        """Browser seats by match (a match from the seek queue may have several)."""
        self._starting: list[Client] = []
        """Clients whose browser match is being built (their slot is taken meanwhile)."""

    # -- tokens ------------------------------------------------------------------------------
    def _human_seat(self, match_id: str, token: str) -> HumanMatch | None:
        found = None
        for hm in self.human.get(match_id, ()):
            if hmac.compare_digest(hm.token.encode(), token.encode("utf-8", "replace")):
                found = hm
        return found

    def seat_for_token(self, match_id: str, token: str) -> int | None:
        """The seat ``token`` holds in ``match_id``, or None."""
        hm = self._human_seat(match_id, token)
        return hm.seat if hm is not None else None

    def evicted(self, match_id: str) -> None:
        """An ended match left memory: its seats are forgotten (unless one is live)."""
        humans = self.human.get(match_id)
        if humans is not None and not any(h.live for h in humans):
            del self.human[match_id]

    # -- moves -------------------------------------------------------------------------------
    def move(
        self, client: Client, request: ClientRequest, match_id: str, token: str, text: str
    ) -> None:
        """A browser's ``move`` with its seat's ``token``: ``move_ack``. Raises
        ProtocolError (``unknown_match``, ``forbidden``, ``match_over``, ``not_your_turn``)."""
        if not self.human.get(match_id):
            if self.matches.stream(match_id) is None and match_id not in self.agents.matches:
                raise ProtocolError("unknown_match", f"no match {match_id!r} is being played here")
            raise ProtocolError("forbidden", "no seat of this match is played from a browser")
        hm = self._human_seat(match_id, token) if token else None
        seat = hm.seat if hm is not None else None
        wanted = request.integer("seat")
        if hm is None or seat is None or (wanted is not None and wanted != seat):
            raise ProtocolError(
                "forbidden", "refused: only the browser holding this seat's token may move for it"
            )
        if not hm.live:
            raise ProtocolError("match_over", "this match is over")
        try:
            index = hm.handle.submit(text)
        except SeatNotWaiting:
            raise ProtocolError("not_your_turn", f"seat {seat} is not to move now") from None
        self.outbox.send(
            client,
            {
                "type": "move_ack",
                "ref": request.id,
                "match": match_id,
                "seat": seat,
                "index": index,
            },
        )

    # -- limits ------------------------------------------------------------------------------
    def _live_human(self, owner: Callable[[int, str], bool]) -> int:
        matches = sum(
            1
            for hms in self.human.values()
            for hm in hms
            if hm.live and owner(hm.owner, hm.address)
        )
        seeks = sum(
            1
            for o in self.agents.owners.values()
            if o.account is None and owner(o.client.id, o.client.address)
        )
        return matches + seeks + sum(1 for c in self._starting if owner(c.id, c.address))

    def check_limits(self, client: Client, what: str) -> None:
        """Raise ProtocolError ``too_many_matches`` when ``client`` may not start or seek
        another browser match (a seek counts as a match)."""
        limits = self.limits
        for count, most, scope in (
            (self._live_human(lambda _i, _a: True), limits.max_human_matches, "in all"),
            (
                self._live_human(lambda i, _a: i == client.id),
                limits.max_human_matches_per_connection,
                "on this connection",
            ),
            (
                self._live_human(lambda _i, a: a == client.address),
                limits.max_human_matches_per_address,
                "from your address",
            ),
        ):
            if count >= most:
                raise ProtocolError(
                    "too_many_matches",
                    f"{count} browser matches are being played or sought {scope} (the limit); "
                    f"finish one or try again later (refused: {what})",
                )

    # -- new seats ---------------------------------------------------------------------------
    def start_match(self, client: Client, request: ClientRequest) -> Need:
        """``start_match``: a ``start_match`` need, whose answer is ``match_created``.
        Raises ProtocolError (``too_many_matches``, ``bad_message``, ``bad_game``)."""
        game_id = request.text("game")
        opponent = request.text("opponent", required=False) or "random"
        seat = request.integer("seat", 0) or 0
        self.check_limits(client, "start_match")
        if seat not in (0, 1):
            raise ProtocolError("bad_message", "seat must be 0 or 1")
        if self.check_game is not None:
            try:
                self.check_game(game_id, opponent)
            except ValueError as exc:
                raise ProtocolError("bad_game", str(exc)) from None
        token = secrets.token_urlsafe(24)
        self._starting.append(client)  # the slot is taken while the game is built

        def started(result: Any) -> None:
            self._starting.remove(client)
            if isinstance(result, ProtocolError):
                raise result
            if isinstance(result, BaseException):
                raise ProtocolError("bad_game", f"{game_id} failed to start: {result}") from None
            assert isinstance(result, StartedMatch)
            self.human.setdefault(result.match_id, []).append(
                HumanMatch(
                    result.match_id,
                    game_id,
                    seat,
                    result.handle,
                    token,
                    client.id,
                    client.address,
                    result.is_over,
                    self.wall_clock(),
                )
            )
            self.stats.human_matches += 1
            self.outbox.send(
                client,
                {
                    "type": "match_created",
                    "ref": request.id,
                    "match": result.match_id,
                    "game_id": game_id,
                    "seat": seat,
                    "token": token,
                },
            )

        return Need("start_match", {"game": game_id, "opponent": opponent, "seat": seat}, started)

    def seek_seat(self, pending: PendingMatch, plan: SeatPlan, handle: Any) -> str:
        """A browser seat of a match from the seek queue: registered like one of
        ``start_match`` (its own token, its own audience); returns the token."""
        owner = plan.owner
        assert owner is not None
        token = secrets.token_urlsafe(24)
        self.human.setdefault(pending.match_id, []).append(
            HumanMatch(
                pending.match_id,
                pending.game_id,
                plan.seat,
                handle,
                token,
                owner.client.id,
                owner.client.address,
                lambda: pending.match_id not in self.agents.matches,
                self.wall_clock(),
            )
        )
        self.matches.add_human_seat(pending.match_id, plan.seat)
        self.stats.human_matches += 1
        return token
