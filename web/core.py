"""The web server's sans-I/O core: requests and events in, frames and answers out.

``HubCore`` holds everything the server knows and decides everything it answers, the way
``websockets``' protocol objects do: no sockets, no database, no clock of its own (the
time is given: ``now`` arguments, and the ``clock``/``wall_clock`` it is built with).

* A client's frame goes in with ``receive``; a bus event with ``event``; a match followed
  from the database with the ``db_*`` methods (``web.live.follow.FollowTarget``); an HTTP
  request with ``http``. What is to be sent comes out of ``take_frames`` as (clients,
  frame) pairs; an HTTP request gets its ``Response``.
* When an answer needs I/O (a match read from the database, a page of stored matches, a
  browser match to build), the core returns a ``Need``: the asyncio layer (``web.hub``)
  does it and calls ``need.then(result)`` (the result, or the exception it raised), which
  carries on where the core stopped and may return another ``Need``.

The core routes; each concern is a state machine of its own, in its own module:

* ``web.live.livematches``: the match streams in memory, fed by the bus and the database, and
  the lobby;
* ``web.live.spectators``: subscriptions to the lobby and to match streams (snapshot, resume);
* ``web.pages.metricsfeed`` and ``web.pages.ratingsfeed``: the runs' metrics and the games' ratings;
* ``web.live.browserseats``: people's seats (``start_match``, ``move``, their limits);
* ``web.agents.agentdesk``: remote agents, the seek queue and agent seats;
* ``web.outbox``: the frames to send, in order.

Tests drive it directly: a frame in, frames out.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from arena.events import MatchEvent, MatchStarted, RatingsChanged, Turn
from arena.seats import SeatTurn
from matchmaking.seek import MatchmakerConfig
from storage import MatchDetail, MatchSummary
from web.agents.agentdesk import AgentDesk
from web.agents.seeks import FillerSource, GameCheck, PendingMatch, SeatPlan
from web.connections import Client
from web.hubstats import HubStats
from web.limits import ServerLimits
from web.live.browserseats import MAX_MOVE_CHARS, BrowserSeats, HumanMatch, SeatHandle, StartedMatch
from web.live.livematches import LiveMatches, check_match_id, is_match_id
from web.live.spectators import Spectators
from web.live.streams import Lobby, MatchStream
from web.needs import Close, Need
from web.outbox import Outbox
from web.pages import http
from web.pages.hosts import HostCheck
from web.pages.metrics import RunSeries
from web.pages.metricsfeed import MetricsFeed
from web.pages.ratingsfeed import RatingsFeed
from web.protocol import (
    AGENT_PROTOCOL_VERSION,
    AGENT_REQUEST_TYPES,
    PROTOCOL_VERSION,
    ClientRequest,
    MovesArePublic,
    ProtocolError,
    error,
    parse_request,
    request_id,
)

__all__ = [
    "MAX_MOVE_CHARS",
    "Close",
    "HubCore",
    "HubStats",
    "HumanMatch",
    "Need",
    "SeatHandle",
    "StartedMatch",
    "is_match_id",
]

log = logging.getLogger("web.core")

_STREAM_KINDS = "stream must be 'lobby', 'match', 'run' or 'ratings'"


def _no_seeks(game_id: str, players: int | None, person: bool) -> int:
    raise ValueError("this server does not pair seeks")


class HubCore:
    """Everything the web server knows and decides, without I/O (see the module's
    docstring). ``has_db``: whether a database stands behind it (else unknown matches are
    unknown). ``following``: whether matches are followed from the database.
    ``host_check``: the names the server answers to. ``games``: a function listing the
    games a person can play (``/api/games``). ``check_game``: validates a game and bot for
    a browser match (raises ValueError with the reason). ``clock`` (monotonic seconds) and
    ``wall_clock`` (Unix time) are where the core reads the time it is not given: the
    agent desk's deadlines, and the times it shows (a prompt's, a match's end, ``pong``)."""

    def __init__(
        self,
        limits: ServerLimits,
        *,
        moves_public: MovesArePublic,
        host_check: HostCheck,
        has_db: bool = False,
        following: bool = False,
        runs: Mapping[str, RunSeries] | None = None,
        static_dir: Path = http.STATIC_DIR,
        games: Callable[[], list[dict[str, Any]]] = list,
        check_game: Callable[[str, str], None] | None = None,
        check_seek: GameCheck | None = None,
        fillers: FillerSource | None = None,
        matchmaker: MatchmakerConfig | None = None,
        epoch: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.limits = limits
        self.wall_clock = wall_clock
        self.moves_public = moves_public
        self.host_check = host_check
        self.has_db = has_db
        self.following = following
        self.runs: Mapping[str, RunSeries] = runs if runs is not None else {}
        self.static_dir = static_dir
        self.games = games
        self.check_game = check_game
        self.check_seek = check_seek
        self.epoch = epoch or secrets.token_hex(6)
        """This server instance: versions are only comparable within one epoch."""
        self.stats = HubStats()
        self.clients: set[Client] = set()
        self.outbox = Outbox(self.stats)
        self.matches = LiveMatches(
            limits,
            self.outbox,
            self.stats,
            moves_public=moves_public,
            has_db=has_db,
            following=following,
            evicted=self._evicted,
            wall_clock=wall_clock,
        )
        """The match streams in memory and the lobby (``web.live.livematches``)."""
        self.agents = AgentDesk(
            limits,
            send=self.outbox.send,
            check_game=check_seek or _no_seeks,
            fillers=fillers,
            human_seat=self._seek_human_seat,
            matchmaker=matchmaker,
            has_db=has_db,
            clock=clock,
            wall_clock=wall_clock,
        )
        """Remote agents, the seek queue and agent seats (``web.agents.agentdesk``)."""
        self.browser = BrowserSeats(
            limits,
            self.outbox,
            self.stats,
            matches=self.matches,
            agents=self.agents,
            check_game=check_game,
            wall_clock=wall_clock,
        )
        """People's seats (``web.live.browserseats``)."""
        self.spectators = Spectators(
            limits,
            self.outbox,
            self.matches,
            epoch=self.epoch,
            seat_for_token=self.browser.seat_for_token,
        )
        """Who watches the lobby and which match (``web.live.spectators``)."""
        self.metrics_feed = MetricsFeed(limits, self.outbox, self.runs)
        self.ratings_feed = RatingsFeed(limits, self.outbox, check_game=check_seek, has_db=has_db)

    # -- output and views --------------------------------------------------------------------
    def take_frames(self) -> list[tuple[tuple[Client, ...], str]]:
        """The frames to send since the last call: (clients, frame) pairs, in order."""
        return self.outbox.take()

    @property
    def lobby(self) -> Lobby:
        """The lobby's state."""
        return self.matches.lobby

    @property
    def live(self) -> dict[str, MatchStream]:
        """The live matches in memory, by id."""
        return self.matches.live

    @property
    def ended(self) -> OrderedDict[str, MatchStream]:
        """The matches in memory that ended, oldest first."""
        return self.matches.ended

    @property
    def human(self) -> dict[str, list[HumanMatch]]:
        """Browser seats by match."""
        return self.browser.human

    def stream(self, match_id: str) -> MatchStream | None:
        """The match's stream, if in memory."""
        return self.matches.stream(match_id)

    def live_match_ids(self) -> list[str]:
        """Ids of the live matches shown."""
        return self.matches.live_match_ids()

    def find_stream(self, match_id: str, then: Callable[[MatchStream], Any]) -> Any:
        """``then(stream)`` for the match, at once when it is in memory, else after it is
        read from the database (a ``get_match`` need). Raises ProtocolError
        ``unknown_match``; the need's continuation also ``unavailable``."""
        return self.matches.find_stream(match_id, then)

    def seat_for_token(self, match_id: str, token: str) -> int | None:
        """The seat ``token`` holds in ``match_id``, or None."""
        return self.browser.seat_for_token(match_id, token)

    # -- connections -------------------------------------------------------------------------
    def connect(self, client: Client) -> None:
        """A WebSocket client connected: it gets ``hello``."""
        self.clients.add(client)
        self.stats.connections += 1
        self.outbox.send(
            client,
            {
                "type": "hello",
                "protocol": PROTOCOL_VERSION,
                "agent_protocol": AGENT_PROTOCOL_VERSION,
                "epoch": self.epoch,
                "limits": self.limits.public(),
            },
        )

    def forget(self, client: Client) -> None:
        """A client disconnected or was dropped: nothing more is sent to it."""
        client.closed = True
        self.clients.discard(client)
        self.agents.disconnected(client)
        self.spectators.forget(client)
        self.ratings_feed.forget(client)
        self.metrics_feed.forget(client)

    # -- requests ----------------------------------------------------------------------------
    def receive(self, client: Client, frame: str | bytes, now: float) -> Need | Close | None:
        """One frame from ``client`` (``now``: a monotonic clock, for its rate limit).
        Returns a ``Need`` when the answer needs I/O, a ``Close`` when the connection must
        be closed, else None; frames to send are in ``take_frames``. Never raises."""
        if client.closed:
            return None
        if not client.allow(now):
            self.stats.rate_limited += 1
            if client.violations > self.limits.max_rate_violations:
                return Close(1008, "rate limit exceeded")
            limit = f"{client.rate_per_s:g}/s, bursts of {client.burst}"  # its own limits
            message = f"too many messages ({limit}); this one was dropped"
            self.outbox.send(client, error("rate_limited", message, request_id(frame)))
            return None
        try:
            request = parse_request(frame)
        except ProtocolError as exc:
            self.outbox.send(client, error(exc.code, exc.message, exc.ref))
            return None
        return self._guarded(client, request.id, lambda: self._dispatch(client, request))

    def _guarded(self, client: Client, ref: Any, step: Callable[[], Any]) -> Any:
        """Run one step of a request; a ProtocolError becomes its ``error`` answer, and a
        ``Need``'s continuation is guarded the same way."""
        try:
            result = step()
        except ProtocolError as exc:
            self.outbox.send(client, error(exc.code, exc.message, ref))
            return None
        except Exception:  # a bug: answer, and keep serving everyone
            log.exception("request failed")
            self.outbox.send(client, error("internal", "the server failed on this request", ref))
            return None
        if isinstance(result, Need):
            then = result.then
            return Need(
                result.kind,
                result.args,
                lambda value: self._guarded(client, ref, lambda: then(value)),
            )
        return result

    def _dispatch(self, client: Client, request: ClientRequest) -> Need | None:
        kind = request.type
        if kind == "ping":
            message = {"type": "pong", "ref": request.id, "time": self.wall_clock()}
            self.outbox.send(client, message)
        elif kind == "subscribe":
            return self._subscribe(client, request)
        elif kind == "unsubscribe":
            self._unsubscribe(client, request)
        elif kind == "move":
            self._move(client, request)
        elif kind == "start_match":
            return self.browser.start_match(client, request)
        elif kind == "seek" and self.agents.account_of(client) is None:
            self.browser.check_limits(client, "seek")  # a person in a browser
            return self.agents.seek(client, request)
        elif kind in AGENT_REQUEST_TYPES:
            need = self.agents.receive(client, request)
            if need is not None and need.kind == "authenticate":
                return self._counting_auth_failures(need)
            return need
        return None

    def _counting_auth_failures(self, need: Need) -> Need:
        then = need.then

        def checked(result: Any) -> Any:
            if result is None:
                self.stats.auth_failures += 1
            return then(result)

        return Need(need.kind, need.args, checked)

    def _subscribe(self, client: Client, request: ClientRequest) -> Need | None:
        stream_kind = request.text("stream")
        if stream_kind == "lobby":
            self.spectators.subscribe_lobby(client, request)
            return None
        if stream_kind == "match":
            return self.spectators.subscribe_match(client, request)
        if stream_kind == "run":
            return self.metrics_feed.subscribe(client, request, polled=False)
        if stream_kind == "ratings":
            return self.ratings_feed.subscribe(client, request)
        raise ProtocolError("bad_message", _STREAM_KINDS)

    def _unsubscribe(self, client: Client, request: ClientRequest) -> None:
        stream_kind = request.text("stream")
        if stream_kind == "lobby":
            self.spectators.unsubscribe_lobby(client)
        elif stream_kind == "match":
            self.spectators.unwatch(client, request.text("match_id"))
        elif stream_kind == "run":
            self.metrics_feed.unsubscribe(client, request.text("run", max_chars=256))
        elif stream_kind == "ratings":
            self.ratings_feed.unsubscribe(client, request.text("game"))
        else:
            raise ProtocolError("bad_message", _STREAM_KINDS)
        self.outbox.send(client, {"type": "unsubscribed", "ref": request.id, "stream": stream_kind})

    def _move(self, client: Client, request: ClientRequest) -> None:
        """A ``move``: with a seat's token, a browser seat's; else an agent's."""
        match_id = check_match_id(request.text("match_id"))
        token = request.text("token", required=False)
        text = request.data.get("text")
        if not isinstance(text, str) or len(text) > MAX_MOVE_CHARS:
            raise ProtocolError(
                "bad_message", f"move: 'text' must be a string of at most {MAX_MOVE_CHARS} chars"
            )
        if token:
            self.browser.move(client, request, match_id, token, text)
            return
        if self.agents.account_of(client) is None:
            raise ProtocolError(
                "forbidden",
                "a move needs the seat's token (a browser seat) or an agent connection "
                "that authenticated (auth) and holds the seat",
            )
        self.outbox.send(client, self.agents.move(client, request, text))

    # -- browser seats -----------------------------------------------------------------------
    def _seek_human_seat(self, pending: PendingMatch, plan: SeatPlan, handle: Any) -> str:
        return self.browser.seek_seat(pending, plan, handle)

    def _evicted(self, match_id: str) -> None:
        self.browser.evicted(match_id)

    def human_match_starting(self, match_id: str, human_seats: Sequence[int]) -> None:
        """A browser match is about to be announced: its seats are browser seats (they get
        an audience of their own)."""
        self.matches.human_match_starting(match_id, human_seats)

    def prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        """A browser seat must move: the ``waiting`` event (its prompt only for itself)."""
        self.matches.prompt(match_id, seat, turn, deadline)

    # -- events ------------------------------------------------------------------------------
    def event(self, event: MatchEvent) -> None:
        """A bus event (matches played in this process)."""
        self.stats.events += 1
        if isinstance(event, RatingsChanged):
            # Ratings kept for pairing and sent to the agents concerned, and to the game's
            # ``ratings`` subscribers (a leaderboard updates live).
            self.agents.ratings_changed(event)
            self.ratings_feed.changed(event)
            return
        self.matches.event(event)
        if isinstance(event, MatchStarted):
            self.agents.announced(event.match_id)

    def bus_dropped(self) -> None:
        """The bus dropped the hub: its live matches are followed from the database (or
        ended as lost when there is none)."""
        self.stats.bus_drops += 1
        self.matches.bus_dropped()

    # -- events: the database (web.live.follow.FollowTarget) --------------------------------------
    def followed_live(self) -> dict[str, int]:
        """Live matches followed from the database: id -> turns known."""
        return self.matches.followed_live()

    def is_known(self, match_id: str) -> bool:
        """True when the hub already has this match."""
        return self.matches.is_known(match_id)

    def db_started(self, summary: MatchSummary) -> None:
        """A live match found in the database."""
        self.matches.db_started(summary)

    def db_turns(self, match_id: str, turns: list[Turn]) -> None:
        """New turns of a match followed from the database."""
        self.matches.db_turns(match_id, turns)

    def db_ended(self, detail: MatchDetail) -> None:
        """A followed match ended: its last turns, then its end with the full reveal."""
        self.matches.db_ended(detail)

    def db_gone(self, match_id: str) -> None:
        """A followed match was deleted from the database."""
        self.matches.db_gone(match_id)

    def db_recent(self, summaries: list[MatchSummary]) -> None:
        """The newest stored matches: ended ones the hub never saw join the lobby."""
        self.matches.db_recent(summaries)

    # -- periodic work -----------------------------------------------------------------------
    def tick_lobby(self) -> None:
        """Send the lobby's batched changes (every ``lobby_interval_s``)."""
        self.matches.tick_lobby()

    def metrics(self, name: str, rows: list[dict[str, float | None]], reset: bool) -> None:
        """New rows of a training run's metrics."""
        self.metrics_feed.rows(name, rows, reset)
