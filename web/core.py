"""The web server's sans-I/O core: requests and events in, frames and answers out.

``HubCore`` holds everything the server knows (match streams, the lobby, who follows
what, browser seats and their tokens, the limits) and decides everything it answers, the
way ``websockets``' protocol objects do: no sockets, no database, no clock of its own
(the time is given: ``now`` arguments, and the ``clock``/``wall_clock`` it is built with).

* A client's frame goes in with ``receive``; a bus event with ``event``; a match followed
  from the database with the ``db_*`` methods (``web.follow.FollowTarget``); an HTTP
  request with ``http``. What is to be sent comes out of ``take_frames`` as (clients,
  frame) pairs; an HTTP request gets its ``Response``.
* When an answer needs I/O (a match read from the database, a page of stored matches, a
  browser match to build), the core returns a ``Need``: the asyncio layer (``web.hub``)
  does it and calls ``need.then(result)`` (the result, or the exception it raised), which
  carries on where the core stopped and may return another ``Need``.

Tests drive it directly: a frame in, frames out.
"""

from __future__ import annotations

import hmac
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from arena.coordinator import SeatTurn
from arena.events import (
    MatchAborted,
    MatchEnded,
    MatchEvent,
    MatchStarted,
    RatingsChanged,
    RoundProgress,
    TurnPlayed,
    format_messages,
)
from matchmaking.seek import MatchmakerConfig
from storage import MatchDetail, MatchSummary
from storage.errors import AmbiguousMatchId, MatchNotFound
from web import http
from web.agentdesk import AgentDesk, FillerSource, GameCheck, PendingMatch, SeatPlan
from web.clients import Client
from web.convert import (
    aborted_result,
    ended_result,
    info_from_summary,
    rating_json,
    result_from_summary,
    summary_line,
    turns_of,
)
from web.hosts import HostCheck
from web.human import SeatNotWaiting
from web.limits import ServerLimits
from web.metrics import RunSeries
from web.needs import Close, Need
from web.protocol import (
    AGENT_PROTOCOL_VERSION,
    AGENT_REQUEST_TYPES,
    PROTOCOL_VERSION,
    ClientRequest,
    MatchInfo,
    MovesArePublic,
    ProtocolError,
    TurnData,
    dumps,
    error,
    parse_request,
    request_id,
)
from web.streams import PUBLIC, Lobby, MatchStream, Prompt

log = logging.getLogger("web.core")

MAX_MOVE_CHARS = 4_000
"""Longest move text a browser may send (the game cuts it to its own cap)."""
_MATCH_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


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


class SeatHandle(Protocol):
    """A browser seat as the core sees it (``web.human.HumanSeat``)."""

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


def is_match_id(match_id: str) -> bool:
    """True when ``match_id`` looks like a match id (anything else is refused at once)."""
    return bool(_MATCH_ID.match(match_id))


def _no_seeks(game_id: str, players: int | None, person: bool) -> int:
    raise ValueError("this server does not pair seeks")


def _check_match_id(match_id: str) -> str:
    if not is_match_id(match_id):
        raise ProtocolError("unknown_match", f"{match_id[:40]!r} is not a match id")
    return match_id


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
        self.lobby = Lobby(limits.lobby_live_limit, limits.recent_limit)
        self.clients: set[Client] = set()
        self.live: dict[str, MatchStream] = {}
        self.ended: OrderedDict[str, MatchStream] = OrderedDict()
        self.human: dict[str, list[HumanMatch]] = {}
        """Browser seats by match (a match from the seek queue may have several)."""
        self._starting: list[Client] = []
        """Clients whose browser match is being built (their slot is taken meanwhile)."""
        self._run_watchers: dict[str, set[Client]] = {}
        self._frames: list[tuple[tuple[Client, ...], str]] = []
        self._pending_human: dict[str, tuple[int, ...]] = {}
        """Browser matches being started: match id -> browser seats."""
        self.agents = AgentDesk(
            limits,
            send=self._send,
            check_game=check_seek or _no_seeks,
            fillers=fillers,
            human_seat=self._seek_human_seat,
            matchmaker=matchmaker,
            has_db=has_db,
            clock=clock,
            wall_clock=wall_clock,
        )
        """Remote agents, the seek queue and agent seats (``web.agentdesk``)."""
        self._rating_watchers: dict[str, set[Client]] = {}

    # -- output ------------------------------------------------------------------------------
    def take_frames(self) -> list[tuple[tuple[Client, ...], str]]:
        """The frames to send since the last call: (clients, frame) pairs, in order."""
        out, self._frames = self._frames, []
        return out

    def _out(self, clients: Iterable[Client], frame: str) -> None:
        targets = tuple(c for c in clients if not c.closed)
        if targets:
            self._frames.append((targets, frame))

    def _send(self, client: Client, message: dict[str, Any]) -> None:
        if message.get("type") == "error":
            self.stats.errors_sent += 1
        self._out((client,), dumps(message))

    def _fanout(self, stream: MatchStream, entry_frame: Callable[[int], str]) -> None:
        for audience, clients in list(stream.watchers.items()):
            if clients:
                self._out(list(clients), entry_frame(audience))

    # -- views -------------------------------------------------------------------------------
    def stream(self, match_id: str) -> MatchStream | None:
        """The match's stream, if in memory."""
        return self.live.get(match_id) or self.ended.get(match_id)

    def live_match_ids(self) -> list[str]:
        """Ids of the live matches shown."""
        return [m for m, s in self.live.items() if s.live]

    # -- connections -------------------------------------------------------------------------
    def connect(self, client: Client) -> None:
        """A WebSocket client connected: it gets ``hello``."""
        self.clients.add(client)
        self.stats.connections += 1
        self._send(
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
        self.lobby.watchers.discard(client)
        for rating_watchers in self._rating_watchers.values():
            rating_watchers.discard(client)
        for match_id in list(client.matches):
            self._unwatch(client, match_id)
        for run in list(client.runs):
            watchers = self._run_watchers.get(run)
            if watchers is not None:
                watchers.discard(client)
        client.runs.clear()

    def _unwatch(self, client: Client, match_id: str) -> bool:
        audience = client.matches.pop(match_id, None)
        if audience is None:
            return False
        stream = self.stream(match_id)
        if stream is not None:
            stream.watchers.get(audience, set()).discard(client)
        return True

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
            self._send(client, error("rate_limited", message, request_id(frame)))
            return None
        try:
            request = parse_request(frame)
        except ProtocolError as exc:
            self._send(client, error(exc.code, exc.message, exc.ref))
            return None
        return self._guarded(client, request.id, lambda: self._dispatch(client, request))

    def _guarded(self, client: Client, ref: Any, step: Callable[[], Any]) -> Any:
        """Run one step of a request; a ProtocolError becomes its ``error`` answer, and a
        ``Need``'s continuation is guarded the same way."""
        try:
            result = step()
        except ProtocolError as exc:
            self._send(client, error(exc.code, exc.message, ref))
            return None
        except Exception:  # a bug: answer, and keep serving everyone
            log.exception("request failed")
            self._send(client, error("internal", "the server failed on this request", ref))
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
            self._send(client, {"type": "pong", "ref": request.id, "time": self.wall_clock()})
        elif kind == "subscribe":
            return self._subscribe(client, request)
        elif kind == "unsubscribe":
            self._unsubscribe(client, request)
        elif kind == "move":
            self._move(client, request)
        elif kind == "start_match":
            return self._start_match(client, request)
        elif kind == "seek" and self.agents.account_of(client) is None:
            self._check_human_limits(client, "seek")  # a person in a browser
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

    # -- subscriptions -----------------------------------------------------------------------
    def _subscribe(self, client: Client, request: ClientRequest) -> Need | None:
        stream_kind = request.text("stream")
        if stream_kind == "lobby":
            self.lobby.watchers.add(client)
            self._send(client, {**self.lobby.snapshot(), "ref": request.id})
            return None
        if stream_kind == "match":
            return self._subscribe_match(client, request)
        if stream_kind == "run":
            return self._subscribe_run(client, request, polled=False)
        if stream_kind == "ratings":
            return self._subscribe_ratings(client, request)
        raise ProtocolError("bad_message", "stream must be 'lobby', 'match', 'run' or 'ratings'")

    def _subscribe_ratings(self, client: Client, request: ClientRequest) -> Need | None:
        game_id = request.text("game")
        if self.check_seek is not None:
            try:
                self.check_seek(game_id, None, False)
            except ValueError as exc:
                raise ProtocolError("bad_game", str(exc)) from None
        if (
            game_id not in client.rating_games
            and client.subscriptions >= self.limits.max_subscriptions
        ):
            raise ProtocolError(
                "too_many_subscriptions",
                f"at most {self.limits.max_subscriptions} streams per connection",
            )

        def answer(result: Any) -> None:
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read the ratings: {result}")
            rows = sorted(
                (rating_json(k, mu, sg, games) for k, (mu, sg, games) in dict(result).items()),
                key=lambda r: (-r["rating"], r["policy"]),
            )
            self._rating_watchers.setdefault(game_id, set()).add(client)
            client.rating_games.add(game_id)
            self._send(
                client, {"type": "ratings", "ref": request.id, "game_id": game_id, "rows": rows}
            )

        if not self.has_db:
            answer({})
            return None
        return Need("load_ratings", {"game": game_id}, answer)

    def _subscribe_match(self, client: Client, request: ClientRequest) -> Need | None:
        match_id = _check_match_id(request.text("match_id"))
        token = request.text("token", required=False)
        since = request.integer("since")
        if match_id not in client.matches and client.subscriptions >= self.limits.max_subscriptions:
            raise ProtocolError(
                "too_many_subscriptions",
                f"at most {self.limits.max_subscriptions} streams per connection: "
                "unsubscribe from one first",
            )
        audience = PUBLIC
        if token:
            seat = self.seat_for_token(match_id, token)
            if seat is None:
                raise ProtocolError("forbidden", "this token holds no seat of this match")
            audience = seat

        def subscribe(stream: MatchStream) -> None:
            if client.closed:
                return
            self._unwatch(client, stream.match_id)
            frames = None
            if since is not None and request.data.get("epoch") == self.epoch:
                frames = stream.missed(since, audience)
            if frames is not None:
                self._send(
                    client,
                    {
                        "type": "resume",
                        "ref": request.id,
                        "match": stream.match_id,
                        "from": since,
                        "v": stream.version,
                        "epoch": self.epoch,
                    },
                )
                for frame in frames:
                    self._out((client,), frame)
            else:
                snapshot = stream.snapshot(audience, self.epoch, resync=since is not None)
                self._send(client, {**snapshot, "ref": request.id})
            stream.watchers.setdefault(audience, set()).add(client)
            client.matches[stream.match_id] = audience

        return self.find_stream(match_id, subscribe)

    def find_stream(self, match_id: str, then: Callable[[MatchStream], Any]) -> Any:
        """``then(stream)`` for the match, at once when it is in memory, else after it is
        read from the database (a ``get_match`` need). Raises ProtocolError
        ``unknown_match``; the need's continuation also ``unavailable``."""
        stream = self.stream(match_id)
        if stream is not None:
            if match_id in self.ended:
                self.ended.move_to_end(match_id)
            return then(stream)
        if not self.has_db:
            raise ProtocolError("unknown_match", f"no match {match_id!r} is known here")

        def loaded(result: Any) -> Any:
            if isinstance(result, MatchNotFound | AmbiguousMatchId):
                raise ProtocolError("unknown_match", str(result))
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read the database: {result}") from None
            assert isinstance(result, MatchDetail)
            existing = self.stream(result.match.id)
            return then(existing if existing is not None else self._stream_from_detail(result))

        return Need("get_match", {"match_id": match_id}, loaded)

    def _stream_from_detail(self, detail: MatchDetail) -> MatchStream:
        summary = detail.match
        info = info_from_summary(
            summary, detail.start_state, detail.start_board, detail.start_full_board
        )
        ended = summary.status != "live"
        stream = MatchStream(
            info,
            moves_public=self.moves_public(info.game_id),
            history_limit=self.limits.history_limit,
            source="db",
            resumable=not ended,  # its versions are new: they mean nothing to old clients
        )
        turns = turns_of(detail)
        if not ended:
            for turn in turns:
                stream.add_turn(turn)
            if self.following:  # else: a one-off view, not followed
                self.live[summary.id] = stream
                self.lobby.started(stream.summary())
        else:
            stream.end(
                result_from_summary(summary),
                detail.full_state,
                summary.ended_at or summary.started_at,
                turns,
            )
            self._keep_ended(stream)
        return stream

    def _subscribe_run(self, client: Client, request: ClientRequest, polled: bool) -> Need | None:
        name = request.text("run", max_chars=256)
        series = self.runs.get(name)
        if series is None and not polled:  # new runs appear when their files are read
            return Need(
                "poll_runs", {}, lambda _: self._subscribe_run(client, request, polled=True)
            )
        if series is None:
            known = ", ".join(sorted(self.runs)) or "none"
            raise ProtocolError("unknown_run", f"no training run {name!r}; watched runs: {known}")
        if name not in client.runs and client.subscriptions >= self.limits.max_subscriptions:
            raise ProtocolError(
                "too_many_subscriptions",
                f"at most {self.limits.max_subscriptions} streams per connection",
            )
        rows = series.rows.snapshot(self.limits.metrics_snapshot_rows)
        self._send(
            client,
            {
                "type": "metrics",
                "ref": request.id,
                "run": name,
                "info": series.info(),
                "rows": rows,
                "reset": True,
            },
        )
        self._run_watchers.setdefault(name, set()).add(client)
        client.runs.add(name)
        return None

    def _unsubscribe(self, client: Client, request: ClientRequest) -> None:
        stream_kind = request.text("stream")
        if stream_kind == "lobby":
            self.lobby.watchers.discard(client)
        elif stream_kind == "match":
            self._unwatch(client, request.text("match_id"))
        elif stream_kind == "run":
            name = request.text("run", max_chars=256)
            client.runs.discard(name)
            self._run_watchers.get(name, set()).discard(client)
        elif stream_kind == "ratings":
            game_id = request.text("game")
            self._rating_watchers.get(game_id, set()).discard(client)
            client.rating_games.discard(game_id)
        else:
            raise ProtocolError(
                "bad_message", "stream must be 'lobby', 'match', 'run' or 'ratings'"
            )
        self._send(client, {"type": "unsubscribed", "ref": request.id, "stream": stream_kind})

    # -- browser seats -----------------------------------------------------------------------
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

    def _move(self, client: Client, request: ClientRequest) -> None:
        match_id = _check_match_id(request.text("match_id"))
        token = request.text("token", required=False)
        text = request.data.get("text")
        if not isinstance(text, str) or len(text) > MAX_MOVE_CHARS:
            raise ProtocolError(
                "bad_message", f"move: 'text' must be a string of at most {MAX_MOVE_CHARS} chars"
            )
        if not token:
            if self.agents.account_of(client) is None:
                raise ProtocolError(
                    "forbidden",
                    "a move needs the seat's token (a browser seat) or an agent connection "
                    "that authenticated (auth) and holds the seat",
                )
            self._send(client, self.agents.move(client, request, text))
            return
        if not self.human.get(match_id):
            if self.stream(match_id) is None and match_id not in self.agents.matches:
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
        self._send(
            client,
            {
                "type": "move_ack",
                "ref": request.id,
                "match": match_id,
                "seat": seat,
                "index": index,
            },
        )

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

    def _check_human_limits(self, client: Client, what: str) -> None:
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

    def _start_match(self, client: Client, request: ClientRequest) -> Need:
        game_id = request.text("game")
        opponent = request.text("opponent", required=False) or "random"
        seat = request.integer("seat", 0) or 0
        self._check_human_limits(client, "start_match")
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
            self._send(
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

    def _seek_human_seat(self, pending: PendingMatch, plan: SeatPlan, handle: Any) -> str:
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
        seats = {*self._pending_human.get(pending.match_id, ()), plan.seat}
        self._pending_human[pending.match_id] = tuple(sorted(seats))
        self.stats.human_matches += 1
        return token

    def human_match_starting(self, match_id: str, human_seats: Sequence[int]) -> None:
        """A browser match is about to be announced: its seats are browser seats (they get
        an audience of their own)."""
        self._pending_human[match_id] = tuple(human_seats)

    def prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        """A browser seat must move: the ``waiting`` event (its prompt only for itself)."""
        stream = self.live.get(match_id)
        if stream is None:
            return
        prompt = Prompt(
            seat=seat,
            deadline=deadline,
            new_text=format_messages(turn.messages[turn.new_from :]),
            full_text=format_messages(turn.messages),
            legal_moves=turn.legal_moves,
        )
        entry = stream.add_prompt(prompt, self.wall_clock())
        if stream.watchers:
            self._fanout(stream, entry.frame)

    # -- events: the bus ---------------------------------------------------------------------
    def event(self, event: MatchEvent) -> None:
        """A bus event (matches played in this process)."""
        self.stats.events += 1
        if isinstance(event, RatingsChanged):
            self._ratings_changed(event)
        elif isinstance(event, TurnPlayed):
            stream = self.live.get(event.match_id)
            if stream is None or stream.source != "bus":
                return
            turn = event.turn()
            self._add_turn(stream, turn)
        elif isinstance(event, RoundProgress):
            stream = self.live.get(event.match_id)
            if stream is None or stream.source != "bus":
                return
            entry = stream.add_round(event.round, list(event.movers), list(event.moved), event.time)
            if stream.watchers:
                self._fanout(stream, entry.frame)
        elif isinstance(event, MatchStarted):
            if self.stream(event.match_id) is not None:
                self.agents.announced(event.match_id)
                return
            info = MatchInfo(
                match_id=event.match_id,
                game_id=event.game_id,
                seed=event.seed,
                num_players=event.num_players,
                players=tuple(event.players),
                run_id=event.run_id,
                group_id=event.group_id,
                started_at=event.time,
                start_state=event.public_state,
                human_seats=self._pending_human.pop(event.match_id, ()),
                start_board=event.board,
                start_full_board=event.full_board,
            )
            self._add_stream(info, "bus")
            self.agents.announced(event.match_id)
        elif isinstance(event, MatchEnded | MatchAborted):
            stream = self.live.get(event.match_id)
            if stream is None or stream.source != "bus":
                return
            if isinstance(event, MatchEnded):
                result = ended_result(
                    event.status,
                    event.reason,
                    event.rewards,
                    event.invalid_moves,
                    event.forfeited,
                    event.num_turns,
                )
                self._end(stream, result, event.full_state, event.time)
            else:
                self._end(stream, aborted_result(event.reason, event.num_turns), None, event.time)

    def _ratings_changed(self, event: RatingsChanged) -> None:
        """Ratings kept for pairing, sent to the agents concerned and to the game's
        ``ratings`` subscribers (a leaderboard updates live)."""
        self.agents.ratings_changed(event)
        watchers = self._rating_watchers.get(event.game_id)
        if watchers:
            games: tuple[int | None, ...] = event.games or (None,) * len(event.ratings)
            rows = [
                rating_json(k, mu, sg, n)
                for (k, mu, sg, _o), n in zip(event.ratings, games, strict=True)
            ]
            message = {
                "type": "ratings_changed",
                "game_id": event.game_id,
                "match": event.match_id,
                "rows": rows,
            }
            self._out(list(watchers), dumps(message))

    def bus_dropped(self) -> None:
        """The bus dropped the hub: its live matches are followed from the database (or
        ended as lost when there is none)."""
        self.stats.bus_drops += 1
        for stream in list(self.live.values()):
            if stream.source != "bus":
                continue
            if self.following:
                stream.source = "db"
            else:
                reason = "the web server fell behind and lost this match's events"
                self._end(stream, aborted_result(reason, 0), None, self.wall_clock())

    # -- events: shared by every source ------------------------------------------------------
    def _add_stream(self, info: MatchInfo, source: str) -> MatchStream:
        stream = MatchStream(
            info,
            moves_public=self.moves_public(info.game_id),
            history_limit=self.limits.history_limit,
            source=source,
        )
        self.live[info.match_id] = stream
        self.lobby.started(stream.summary())
        return stream

    def _add_turn(self, stream: MatchStream, turn: TurnData) -> None:
        entry = stream.add_turn(turn)
        self.lobby.moved(stream.match_id, len(stream.turns))
        if stream.watchers:
            self._fanout(stream, entry.frame)

    def _end(
        self,
        stream: MatchStream,
        result: dict[str, Any],
        full_state: str | None,
        when: float,
        turns: Iterable[TurnData] | None = None,
    ) -> None:
        entry = stream.end(result, full_state, when, turns)
        if stream.watchers:
            self._fanout(stream, entry.frame)
        self.lobby.ended(stream.summary())
        self.live.pop(stream.match_id, None)
        self._keep_ended(stream)

    def _keep_ended(self, stream: MatchStream) -> None:
        self.ended[stream.match_id] = stream
        self.ended.move_to_end(stream.match_id)
        while len(self.ended) > self.limits.ended_cache:
            old_id, old = self.ended.popitem(last=False)
            for clients in old.watchers.values():
                for client in clients:
                    client.matches.pop(old_id, None)
            humans = self.human.get(old_id)
            if humans is not None and not any(h.live for h in humans):
                del self.human[old_id]

    # -- events: the database (web.follow.FollowTarget) --------------------------------------
    def followed_live(self) -> dict[str, int]:
        """Live matches followed from the database: id -> turns known."""
        return {m: len(s.turns) for m, s in self.live.items() if s.source == "db"}

    def is_known(self, match_id: str) -> bool:
        """True when the hub already has this match."""
        return self.stream(match_id) is not None

    def db_started(self, summary: MatchSummary) -> None:
        """A live match found in the database."""
        self.stats.events += 1
        self._add_stream(info_from_summary(summary, None), "db")

    def db_turns(self, match_id: str, turns: list[TurnData]) -> None:
        """New turns of a match followed from the database."""
        stream = self.live.get(match_id)
        if stream is None or stream.source != "db":
            return
        for turn in turns:
            if turn.index < len(stream.turns):
                continue
            self.stats.events += 1
            self._add_turn(stream, turn)

    def db_ended(self, detail: MatchDetail) -> None:
        """A followed match ended: its last turns, then its end with the full reveal."""
        stream = self.live.get(detail.match.id)
        if stream is None or stream.source != "db":
            return
        turns = turns_of(detail)
        self.db_turns(stream.match_id, [*turns[len(stream.turns) :]])
        # The poll that found it live read no start views: the end's reveal has them.
        stream.info.start_state = detail.start_state
        stream.info.start_board = detail.start_board
        stream.info.start_full_board = detail.start_full_board
        summary = detail.match
        self.stats.events += 1
        self._end(
            stream,
            result_from_summary(summary),
            detail.full_state,
            summary.ended_at or self.wall_clock(),
            turns,
        )

    def db_gone(self, match_id: str) -> None:
        """A followed match was deleted from the database."""
        stream = self.live.get(match_id)
        if stream is not None:
            reason = "the match was deleted from the database"
            self._end(stream, aborted_result(reason, len(stream.turns)), None, self.wall_clock())

    def db_recent(self, summaries: list[MatchSummary]) -> None:
        """The newest stored matches: ended ones the hub never saw join the lobby."""
        fresh = [
            summary_line(s) for s in summaries if s.status != "live" and not self.is_known(s.id)
        ]
        if fresh:
            self.lobby.add_recent(fresh)

    # -- periodic work -----------------------------------------------------------------------
    def tick_lobby(self) -> None:
        """Send the lobby's batched changes (every ``lobby_interval_s``)."""
        update = self.lobby.take_update()
        if update is not None and self.lobby.watchers:
            self._out(list(self.lobby.watchers), dumps(update))

    def metrics(self, name: str, rows: list[dict[str, float | None]], reset: bool) -> None:
        """New rows of a training run's metrics."""
        watchers = self._run_watchers.get(name)
        if watchers:
            message = {"type": "metrics", "run": name, "rows": rows, "reset": reset}
            self._out(list(watchers), dumps(message))
