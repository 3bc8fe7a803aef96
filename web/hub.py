"""The web hub: one ``websockets`` server for the pages, the JSON API and the live streams.

    hub = await serve(db, bus)          # http://127.0.0.1:8765/
    ...
    await hub.close()

Where matches come from. Inside the training process the hub subscribes to the event bus
and sees every move as it is played. When the games run in another process it follows the
database instead (``web.follow``: the trainer's recorder already writes every move there).
Both feed the same match streams; a match is taken from one source only.

Never slowing a game. The hub never awaits a client while handling an event: each frame is
written straight into the client's connection buffer (serialised once per audience, then
``websockets.broadcast``), and a client whose unread bytes pass ``max_buffer_bytes`` is
dropped. Lobby changes are batched per ``lobby_interval_s``. Every limit lives in
``ServerLimits``.

Hidden information: spectators get only what ``web.protocol`` deems public while a match
is live; the full reveal goes out with its end. A browser that started a match against a
bot holds its seat's token and sees that seat's prompts; anyone else's move for the seat is
refused (``web.human``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import re
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from os import PathLike
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sqlalchemy.exc import SQLAlchemyError
from websockets.asyncio.server import Server, ServerConnection, broadcast
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from arena.coordinator import BotAgent, GameCoordinator, SeatAgent, SeatTurn, format_messages
from arena.events import (
    EventBus,
    MatchAborted,
    MatchEnded,
    MatchEvent,
    MatchStarted,
    SubscriberDropped,
    Subscription,
    TurnPlayed,
)
from arena.gamethread import GameThread
from arena.play import validate_players
from games import make as make_game
from games.bots import UnknownBot, check_bot, make_bot
from games.registry import GameUnavailable, UnknownGame, catalogue, get_spec
from games.session import GameError, SessionLimits
from storage import Database, MatchDetail, MatchSummary, get_match, list_matches, list_runs
from storage.errors import AmbiguousMatchId, MatchNotFound, StorageError
from storage.queries import MAX_PAGE
from web import http
from web.clients import Client
from web.follow import DEFAULT_POLL_INTERVAL_S, DatabaseFollower
from web.human import HumanSeat, SeatNotWaiting
from web.limits import ServerLimits
from web.metrics import RunWatcher
from web.protocol import (
    PROTOCOL_VERSION,
    ClientRequest,
    MatchInfo,
    MovesArePublic,
    ProtocolError,
    TurnData,
    dumps,
    error,
    moves_are_public,
    parse_request,
)
from web.streams import PUBLIC, Lobby, MatchStream, Prompt

log = logging.getLogger("web.hub")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
HUMAN_GRACE_S = 10.0
"""How much longer than a browser seat's own deadline its coordinator waits before it
aborts the match (the seat forfeits first; this only catches a bug)."""
MAX_MOVE_CHARS = 4_000
"""Longest move text a browser may send (the game cuts it to its own cap)."""
HUMAN_OPPONENTS = ("random", "optimal")
"""Bots a person may play against."""
_MATCH_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    return host in _LOOPBACK or host.startswith("127.")


@dataclass
class HubStats:
    """What the hub has done so far."""

    connections: int = 0
    """WebSocket connections accepted."""
    refused_connections: int = 0
    """Connections refused at ``max_connections``."""
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

    def as_dict(self) -> dict[str, int]:
        """JSON-ready copy."""
        return dict(self.__dict__)


@dataclass
class HumanMatch:
    """A match a browser started against a bot."""

    match_id: str
    game_id: str
    seats: dict[int, HumanSeat]
    tokens: dict[int, str]
    """Seat -> the token only the starting browser holds."""
    coordinator: GameCoordinator
    task: asyncio.Task[Any] | None = None
    created: float = field(default_factory=time.time)

    @property
    def live(self) -> bool:
        """True until the match is over."""
        return not self.coordinator.done


class WebHub:
    """The web server: pages, JSON, live match/lobby/run streams and browser seats.

    ``db``: the database to read (None: only what the bus shows). ``bus``: the event bus
    to subscribe to (None: a private one, which browser matches publish to; pass the
    training process's bus to show its matches live). ``follow_db``: also poll ``db`` every
    ``poll_interval_s`` for matches played by other processes. ``run_sources``: training
    log dirs, ``metrics.jsonl`` files or glob patterns to chart. ``game_limits``: the
    session limits of browser matches. ``moves_public``: whether a game's moves may be
    shown live.
    """

    def __init__(
        self,
        db: Database | None,
        bus: EventBus | None = None,
        *,
        limits: ServerLimits | None = None,
        follow_db: bool = True,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        run_sources: Sequence[str | PathLike[str]] = (),
        static_dir: Path = http.STATIC_DIR,
        game_limits: SessionLimits | None = None,
        moves_public: MovesArePublic = moves_are_public,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError("poll_interval_s must be positive")
        self.db = db
        self.bus = bus if bus is not None else EventBus()
        self.limits = limits or ServerLimits()
        self.poll_interval_s = poll_interval_s
        self.static_dir = Path(static_dir)
        self.game_limits = game_limits
        self.moves_public = moves_public
        self.epoch = secrets.token_hex(6)
        """This server instance: versions are only comparable within one epoch."""
        self.stats = HubStats()
        self.lobby = Lobby(self.limits.lobby_live_limit, self.limits.recent_limit)
        self.runs = RunWatcher(run_sources, self.limits.metrics_rows)
        self.follower = (
            DatabaseFollower(
                db, self, poll_interval_s=poll_interval_s, recent_limit=self.limits.recent_limit
            )
            if db is not None and follow_db
            else None
        )
        self.host = DEFAULT_HOST
        self.port = 0
        self._live: dict[str, MatchStream] = {}
        self._ended: OrderedDict[str, MatchStream] = OrderedDict()
        self._human: dict[str, HumanMatch] = {}
        self._clients: set[Client] = set()
        self._run_watchers: dict[str, set[Client]] = {}
        self._server: Server | None = None
        self._sub: Subscription | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._games_cache: list[dict[str, Any]] | None = None
        self._closed = False
        self.game_thread = GameThread("arena-web-game")
        """Every call into a browser match's game runs here, never on the event loop."""

    # -- life cycle ----------------------------------------------------------------------
    async def start(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        """Subscribe to the bus, start following, and listen on ``host``:``port`` (0: any
        free port; read ``port`` after). Raises OSError when the address is taken,
        RuntimeError when already started or closed."""
        if self._server is not None or self._closed:
            raise RuntimeError("this hub was already started")
        self._sub = self.bus.subscribe(max_queue=self.limits.bus_max_queue, name="web")
        limits = self.limits
        try:
            self._server = await ws_serve(
                self._handle,
                host,
                port,
                process_request=self._process_request,
                compression=None,  # per-connection deflate would cost per client, not once
                max_size=limits.max_message_bytes,
                ping_interval=limits.ping_interval_s,
                ping_timeout=limits.ping_timeout_s,
                open_timeout=limits.open_timeout_s,
                close_timeout=limits.close_timeout_s,
                server_header="arena",
                logger=logging.getLogger("web.websockets"),
            )
        except BaseException:
            self._sub.close()
            self._sub = None
            raise
        self.host = host
        self.port = int(self._server.sockets[0].getsockname()[1]) if self._server.sockets else port
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._consume(), name="web-bus"))
        self._tasks.append(loop.create_task(self._lobby_loop(), name="web-lobby"))
        self._tasks.append(loop.create_task(self._poll_loop(), name="web-poll"))

    @property
    def url(self) -> str:
        """The lobby's address."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def ws_url(self) -> str:
        """The live protocol's address."""
        return self.url.replace("http://", "ws://", 1) + "ws"

    async def close(self) -> None:
        """Stop serving: close every connection, stop the browser matches (aborted), stop
        following. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for hm in list(self._human.values()):
            hm.coordinator.abort("the web server stopped")
        human_tasks = [hm.task for hm in self._human.values() if hm.task is not None]
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), self.limits.close_timeout_s + 1)
        for task in [*self._tasks, *human_tasks]:
            with contextlib.suppress(BaseException):
                await task
        if self._sub is not None:
            self._sub.close()
        self.game_thread.shutdown()

    async def __aenter__(self) -> WebHub:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def serve_forever(self) -> None:
        """Serve until cancelled. Raises RuntimeError when not started."""
        if self._server is None:
            raise RuntimeError("start() the hub first")
        await self._server.serve_forever()

    # -- views for tests and the JSON API ------------------------------------------------
    @property
    def clients(self) -> int:
        """Connected WebSocket clients."""
        return len(self._clients)

    def live_match_ids(self) -> list[str]:
        """Ids of the live matches the hub shows."""
        return [m for m, s in self._live.items() if s.live]

    def stream(self, match_id: str) -> MatchStream | None:
        """The match's stream, if in memory."""
        return self._live.get(match_id) or self._ended.get(match_id)

    # -- sending -------------------------------------------------------------------------
    def _deliver(self, clients: Iterable[Client], frame: str) -> None:
        """Write ``frame`` to every client at once; drop those too far behind."""
        limit = self.limits.max_buffer_bytes
        conns: list[ServerConnection] = []
        slow: list[Client] = []
        for client in clients:
            if client.closed:
                continue
            if client.buffered() > limit:
                slow.append(client)
            else:
                conns.append(client.ws)
        for client in slow:
            self._drop(client)
        if conns:
            broadcast(conns, frame)
            self.stats.frames += len(conns)

    def _send(self, client: Client, message: dict[str, Any]) -> None:
        if message.get("type") == "error":
            self.stats.errors_sent += 1
        self._deliver((client,), dumps(message))

    def _drop(self, client: Client) -> None:
        """Disconnect a client that does not read: at once, without a closing handshake
        (its buffer is full, a close frame would wait behind it)."""
        if client.closed:
            return
        self.stats.dropped_slow += 1
        log.info("dropped %r: more than %d bytes unread", client, self.limits.max_buffer_bytes)
        self._forget(client)
        transport = client.ws.transport
        if transport is not None:
            transport.abort()

    def _forget(self, client: Client) -> None:
        client.closed = True
        self._clients.discard(client)
        self.lobby.watchers.discard(client)
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

    def _fanout(self, stream: MatchStream, entry_frame: Callable[[int], str]) -> None:
        for audience, clients in list(stream.watchers.items()):
            if clients:
                self._deliver(list(clients), entry_frame(audience))

    # -- events: the bus -----------------------------------------------------------------
    async def _consume(self) -> None:
        while True:
            sub = self._sub
            if sub is None:
                return
            try:
                event = await sub.get()
            except SubscriberDropped:
                self._bus_dropped()
                continue
            except StopAsyncIteration:
                return
            self._on_event(event)
            self._pump()

    def _on_event(self, event: MatchEvent) -> None:
        try:
            self._handle_event(event)
        except Exception:  # a bug must not stop the stream for every other match
            log.exception("the web hub failed on %r", event)

    def _pump(self) -> None:
        """Handle every event already queued on the bus, now (so that what the hub adds
        itself, like a browser seat's prompt, comes after them)."""
        sub = self._sub
        while sub is not None:
            event = sub.get_nowait()
            if event is None:
                if sub.dropped:
                    self._bus_dropped()
                return
            self._on_event(event)

    def _bus_dropped(self) -> None:
        self.stats.bus_drops += 1
        log.error(
            "the event bus dropped the web hub (%d events behind): its live matches are %s",
            self.limits.bus_max_queue,
            "followed from the database" if self.follower else "shown as lost",
        )
        self._sub = self.bus.subscribe(max_queue=self.limits.bus_max_queue, name="web")
        for stream in list(self._live.values()):
            if stream.source != "bus":
                continue
            if self.follower is not None:
                stream.source = "db"
            else:
                self._end(
                    stream,
                    _aborted("the web server fell behind and lost this match's events", 0),
                    None,
                    time.time(),
                )

    def _handle_event(self, event: MatchEvent) -> None:
        self.stats.events += 1
        if isinstance(event, TurnPlayed):
            stream = self._live.get(event.match_id)
            if stream is None or stream.source != "bus":
                return
            turn = TurnData(
                index=event.index,
                seat=event.seat,
                action=event.action,
                valid=event.valid,
                reason=event.reason,
                truncated=event.truncated,
                elapsed_s=event.elapsed_s,
                time=event.time,
                public_state=event.public_state,
                observation=event.observation,
            )
            self._add_turn(stream, turn)
        elif isinstance(event, MatchStarted):
            if self.stream(event.match_id) is not None:
                return
            human = self._human.get(event.match_id)
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
                human_seats=tuple(sorted(human.seats)) if human else (),
            )
            self._add_stream(info, "bus")
        elif isinstance(event, MatchEnded | MatchAborted):
            stream = self._live.get(event.match_id)
            if stream is None or stream.source != "bus":
                return
            if isinstance(event, MatchEnded):
                result = {
                    "status": event.status,
                    "reason": event.reason,
                    "rewards": list(event.rewards),
                    "invalid_moves": list(event.invalid_moves),
                    "forfeited": list(event.forfeited),
                    "num_turns": event.num_turns,
                }
                self._end(stream, result, event.full_state, event.time)
            else:
                self._end(stream, _aborted(event.reason, event.num_turns), None, event.time)

    # -- events: shared by every source --------------------------------------------------
    def _add_stream(self, info: MatchInfo, source: str) -> MatchStream:
        stream = MatchStream(
            info,
            moves_public=self.moves_public(info.game_id),
            history_limit=self.limits.history_limit,
            source=source,
        )
        self._live[info.match_id] = stream
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
        self._live.pop(stream.match_id, None)
        self._keep_ended(stream)

    def _keep_ended(self, stream: MatchStream) -> None:
        self._ended[stream.match_id] = stream
        self._ended.move_to_end(stream.match_id)
        while len(self._ended) > self.limits.ended_cache:
            old_id, old = self._ended.popitem(last=False)
            for clients in old.watchers.values():
                for client in clients:
                    client.matches.pop(old_id, None)
            human = self._human.get(old_id)
            if human is not None and not human.live:
                del self._human[old_id]

    # -- events: the database (web.follow.FollowTarget) ----------------------------------
    def followed_live(self) -> dict[str, int]:
        """Live matches followed from the database: id -> turns known."""
        return {m: len(s.turns) for m, s in self._live.items() if s.source == "db"}

    def is_known(self, match_id: str) -> bool:
        """True when the hub already has this match."""
        return self.stream(match_id) is not None

    def db_started(self, summary: MatchSummary) -> None:
        """A live match found in the database."""
        self.stats.events += 1
        self._add_stream(_info_from_summary(summary, None), "db")

    def db_turns(self, match_id: str, turns: list[TurnData]) -> None:
        """New turns of a match followed from the database."""
        stream = self._live.get(match_id)
        if stream is None or stream.source != "db":
            return
        for turn in turns:
            if turn.index < len(stream.turns):
                continue
            self.stats.events += 1
            self._add_turn(stream, turn)

    def db_ended(self, detail: MatchDetail) -> None:
        """A followed match ended: its last turns, then its end with the full reveal."""
        stream = self._live.get(detail.match.id)
        if stream is None or stream.source != "db":
            return
        turns = [_turn_from_stored(t) for t in detail.turns]
        self.db_turns(stream.match_id, [*turns[len(stream.turns) :]])
        summary = detail.match
        self.stats.events += 1
        self._end(
            stream,
            _result_from_summary(summary),
            detail.full_state,
            summary.ended_at or time.time(),
            turns,
        )

    def db_gone(self, match_id: str) -> None:
        """A followed match was deleted from the database."""
        stream = self._live.get(match_id)
        if stream is not None:
            reason = "the match was deleted from the database"
            self._end(stream, _aborted(reason, len(stream.turns)), None, time.time())

    def db_recent(self, summaries: list[MatchSummary]) -> None:
        """The newest stored matches: ended ones the hub never saw join the lobby."""
        fresh = [
            _summary_dict(s) for s in summaries if s.status != "live" and not self.is_known(s.id)
        ]
        if fresh:
            self.lobby.add_recent(fresh)

    # -- periodic work -------------------------------------------------------------------
    async def _lobby_loop(self) -> None:
        while True:
            await asyncio.sleep(self.limits.lobby_interval_s)
            update = self.lobby.take_update()
            if update is not None and self.lobby.watchers:
                self._deliver(list(self.lobby.watchers), dumps(update))

    async def _poll_loop(self) -> None:
        if self.follower is None and self.db is not None:
            with contextlib.suppress(SQLAlchemyError, StorageError, OSError):
                self.db_recent(await list_matches(self.db, limit=self.limits.recent_limit))
        while True:
            try:
                if self.follower is not None:
                    await self.follower.poll_once()
                self._poll_runs()
            except Exception:  # a bug: log it, keep polling
                log.exception("the web hub's poll failed")
            await asyncio.sleep(self.poll_interval_s)

    def _poll_runs(self) -> None:
        for name, (rows, reset) in self.runs.poll().items():
            watchers = self._run_watchers.get(name)
            if watchers:
                message = {"type": "metrics", "run": name, "rows": rows, "reset": reset}
                self._deliver(list(watchers), dumps(message))

    # -- browser seats -------------------------------------------------------------------
    def _on_prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        self._pump()  # the turns before this prompt go out first
        stream = self._live.get(match_id)
        if stream is None:
            return
        prompt = Prompt(
            seat=seat,
            deadline=deadline,
            new_text=format_messages(turn.messages[turn.new_from :]),
            full_text=format_messages(turn.messages),
            legal_moves=turn.legal_moves,
        )
        entry = stream.add_prompt(prompt, time.time())
        if stream.watchers:
            self._fanout(stream, entry.frame)

    async def start_human_match(
        self, game_id: str, opponent: str = "random", seat: int = 0
    ) -> tuple[str, str]:
        """Start a match of ``game_id`` between a browser seat ``seat`` and the bot
        ``opponent``; returns (match id, the seat's token).

        Raises ProtocolError: ``bad_game`` (unknown or unavailable game, not two seats, a
        bot that cannot play it, or the game failed to start), ``bad_message`` (seat),
        ``too_many_matches`` (``max_human_matches`` are being played).
        """
        live = sum(1 for hm in self._human.values() if hm.live)
        if live >= self.limits.max_human_matches:
            raise ProtocolError(
                "too_many_matches",
                f"{live} browser matches are being played (the limit); try again later",
            )
        if seat not in (0, 1):
            raise ProtocolError("bad_message", "seat must be 0 or 1")
        if opponent not in HUMAN_OPPONENTS:
            raise ProtocolError(
                "bad_game", f"unknown opponent {opponent!r}; choose {', '.join(HUMAN_OPPONENTS)}"
            )
        try:
            spec = get_spec(game_id)
            if not spec.supports(2):
                raise ValueError(f"{game_id} is not a two-player game")
            validate_players(game_id, [opponent, opponent])
        except (UnknownGame, GameUnavailable, UnknownBot, ValueError) as exc:
            raise ProtocolError("bad_game", str(exc)) from None
        game_seed = secrets.randbelow(2**31)
        try:
            session = await self.game_thread.run(
                functools.partial(make_game, game_id, 2, game_seed, self.game_limits)
            )
        except (GameError, ValueError, UnknownGame, GameUnavailable) as exc:
            raise ProtocolError("bad_game", f"{game_id} failed to start: {exc}") from None
        match_id = uuid.uuid4().hex
        asked: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_prompt(turn: SeatTurn, deadline: float) -> None:
            self._on_prompt(match_id, seat, turn, deadline)
            if not asked.done():
                asked.set_result(None)

        human = HumanSeat(seat, timeout_s=self.limits.human_move_timeout_s, on_prompt=on_prompt)
        agents: dict[int, SeatAgent] = {
            seat: human,
            1 - seat: BotAgent(make_bot(opponent, seed=game_seed + 1), game_id),
        }
        players = [opponent, opponent]
        players[seat] = human.name
        coordinator = GameCoordinator(
            session,
            agents,
            bus=self.bus,
            match_id=match_id,
            move_timeout_s=self.limits.human_move_timeout_s + HUMAN_GRACE_S,
            players=players,
            game_thread=self.game_thread,
        )
        token = secrets.token_urlsafe(24)
        hm = HumanMatch(match_id, game_id, {seat: human}, {seat: token}, coordinator)
        self._human[match_id] = hm
        coordinator.start()
        hm.task = asyncio.get_running_loop().create_task(
            coordinator.wait_done(), name=f"web-human-{match_id[:8]}"
        )
        self.stats.human_matches += 1
        # Answer once the match is announced and the person is asked to move (or it is
        # over): a subscription right after the answer then finds it, with its prompt.
        await asyncio.wait({asked, hm.task}, return_when=asyncio.FIRST_COMPLETED)
        self._pump()
        return match_id, token

    def _seat_for_token(self, match_id: str, token: str) -> int | None:
        hm = self._human.get(match_id)
        if hm is None:
            return None
        for seat, expected in hm.tokens.items():
            if hmac.compare_digest(expected.encode(), token.encode()):
                return seat
        return None

    # -- requests ------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        client = Client(ws, self.limits.rate_per_s, self.limits.rate_burst, time.monotonic())
        self._clients.add(client)
        self.stats.connections += 1
        self._send(
            client,
            {
                "type": "hello",
                "protocol": PROTOCOL_VERSION,
                "epoch": self.epoch,
                "limits": self.limits.public(),
            },
        )
        try:
            async for frame in ws:
                if client.closed:
                    break
                if not client.allow(time.monotonic()):
                    self.stats.rate_limited += 1
                    if client.violations > self.limits.max_rate_violations:
                        await ws.close(1008, "rate limit exceeded")
                        break
                    limit = f"{self.limits.rate_per_s:g}/s, bursts of {self.limits.rate_burst}"
                    self._send(
                        client, error("rate_limited", f"too many messages ({limit}); dropped")
                    )
                    continue
                await self._request(client, frame)
        except ConnectionClosed:
            pass
        finally:
            self._forget(client)

    async def _request(self, client: Client, frame: str | bytes) -> None:
        ref: Any = None
        try:
            request = parse_request(frame)
            ref = request.id
            await self._dispatch(client, request)
        except ProtocolError as exc:
            self._send(client, error(exc.code, exc.message, ref))
        except Exception:  # a bug: keep serving everyone
            log.exception("request failed: %.200r", frame)
            self._send(client, error("internal", "the server failed on this request", ref))

    async def _dispatch(self, client: Client, request: ClientRequest) -> None:
        kind = request.type
        if kind == "ping":
            self._send(client, {"type": "pong", "ref": request.id, "time": time.time()})
        elif kind == "subscribe":
            await self._subscribe(client, request)
        elif kind == "unsubscribe":
            self._unsubscribe(client, request)
        elif kind == "move":
            self._move(client, request)
        elif kind == "start_match":
            match_id, token = await self.start_human_match(
                request.text("game"),
                request.text("opponent", required=False) or "random",
                request.integer("seat", 0) or 0,
            )
            hm = self._human[match_id]
            self._send(
                client,
                {
                    "type": "match_created",
                    "ref": request.id,
                    "match": match_id,
                    "game_id": hm.game_id,
                    "seat": next(iter(hm.seats)),
                    "token": token,
                },
            )

    async def _subscribe(self, client: Client, request: ClientRequest) -> None:
        stream_kind = request.text("stream")
        if stream_kind == "lobby":
            self.lobby.watchers.add(client)
            self._send(client, {**self.lobby.snapshot(), "ref": request.id})
        elif stream_kind == "match":
            await self._subscribe_match(client, request)
        elif stream_kind == "run":
            self._subscribe_run(client, request)
        else:
            raise ProtocolError("bad_message", "stream must be 'lobby', 'match' or 'run'")

    async def _subscribe_match(self, client: Client, request: ClientRequest) -> None:
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
            self._pump()
            seat = self._seat_for_token(match_id, token)
            if seat is None:
                raise ProtocolError("forbidden", "this token holds no seat of this match")
            audience = seat
        stream = await self._find_stream(match_id)
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
                self._deliver((client,), frame)
        else:
            snapshot = stream.snapshot(audience, self.epoch, resync=since is not None)
            self._send(client, {**snapshot, "ref": request.id})
        if not client.closed:
            stream.watchers.setdefault(audience, set()).add(client)
            client.matches[stream.match_id] = audience

    def _subscribe_run(self, client: Client, request: ClientRequest) -> None:
        name = request.text("run", max_chars=256)
        series = self.runs.runs.get(name)
        if series is None:
            self._poll_runs()
            series = self.runs.runs.get(name)
        if series is None:
            known = ", ".join(sorted(self.runs.runs)) or "none"
            raise ProtocolError("unknown_run", f"no training run {name!r}; watched runs: {known}")
        if name not in client.runs and client.subscriptions >= self.limits.max_subscriptions:
            raise ProtocolError(
                "too_many_subscriptions",
                f"at most {self.limits.max_subscriptions} streams per connection",
            )
        rows = _spread(list(series.rows), self.limits.metrics_snapshot_rows)
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
        else:
            raise ProtocolError("bad_message", "stream must be 'lobby', 'match' or 'run'")
        self._send(client, {"type": "unsubscribed", "ref": request.id, "stream": stream_kind})

    def _move(self, client: Client, request: ClientRequest) -> None:
        match_id = _check_match_id(request.text("match_id"))
        token = request.text("token", required=False)
        text = request.data.get("text")
        if not isinstance(text, str) or len(text) > MAX_MOVE_CHARS:
            raise ProtocolError(
                "bad_message", f"move: 'text' must be a string of at most {MAX_MOVE_CHARS} chars"
            )
        self._pump()
        hm = self._human.get(match_id)
        if hm is None:
            if self.stream(match_id) is None:
                raise ProtocolError("unknown_match", f"no match {match_id!r} is being played here")
            raise ProtocolError("forbidden", "no seat of this match is played from a browser")
        seat = self._seat_for_token(match_id, token) if token else None
        wanted = request.integer("seat")
        if seat is None or (wanted is not None and wanted != seat):
            raise ProtocolError(
                "forbidden", "refused: only the browser holding this seat's token may move for it"
            )
        if not hm.live:
            raise ProtocolError("match_over", "this match is over")
        try:
            index = hm.seats[seat].submit(text)
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

    async def _find_stream(self, match_id: str) -> MatchStream:
        """The match's stream, loaded from the database when not in memory.

        Raises ProtocolError ``unknown_match`` or ``unavailable`` (database error).
        """
        stream = self.stream(match_id)
        if stream is None and match_id in self._human:
            self._pump()
            stream = self.stream(match_id)
        if stream is not None:
            if match_id in self._ended:
                self._ended.move_to_end(match_id)
            return stream
        if self.db is None:
            raise ProtocolError("unknown_match", f"no match {match_id!r} is known here")
        try:
            detail = await get_match(self.db, match_id)
        except (MatchNotFound, AmbiguousMatchId) as exc:
            raise ProtocolError("unknown_match", str(exc)) from None
        except (SQLAlchemyError, StorageError, OSError) as exc:
            message = str(self.db.error(exc))
            raise ProtocolError("unavailable", f"cannot read the database: {message}") from None
        existing = self.stream(detail.match.id)
        if existing is not None:
            return existing
        return self._stream_from_detail(detail)

    def _stream_from_detail(self, detail: MatchDetail) -> MatchStream:
        summary = detail.match
        info = _info_from_summary(summary, detail.start_state)
        stream = MatchStream(
            info,
            moves_public=self.moves_public(info.game_id),
            history_limit=self.limits.history_limit,
            source="db",
        )
        turns = [_turn_from_stored(t) for t in detail.turns]
        if summary.status == "live":
            for turn in turns:
                stream.add_turn(turn)
            if self.follower is not None:  # else: a one-off view, not followed
                self._live[summary.id] = stream
                self.lobby.started(stream.summary())
        else:
            stream.end(
                _result_from_summary(summary),
                detail.full_state,
                summary.ended_at or summary.started_at,
                turns,
            )
            self._keep_ended(stream)
        return stream

    # -- HTTP ------------------------------------------------------------------------------
    async def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        parts = urlsplit(request.path)
        path = parts.path
        if path == "/ws":
            if "websocket" not in request.headers.get("Upgrade", "").lower():
                return http.text(HTTPStatus.UPGRADE_REQUIRED, "connect with a WebSocket")
            origin = request.headers.get("Origin")
            if origin is not None and not _same_origin(origin, request.headers.get("Host", "")):
                return http.text(HTTPStatus.FORBIDDEN, "cross-origin WebSocket refused")
            if len(self._clients) >= self.limits.max_connections:
                self.stats.refused_connections += 1
                return http.text(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"too many connections (the limit is {self.limits.max_connections})",
                )
            return None
        if path.startswith("/api/"):
            try:
                return await self._api(path, parse_qs(parts.query))
            except ValueError as exc:
                return http.json_error(HTTPStatus.BAD_REQUEST, "bad_request", str(exc))
            except ProtocolError as exc:
                status = (
                    HTTPStatus.NOT_FOUND
                    if exc.code.startswith("unknown")
                    else (
                        HTTPStatus.SERVICE_UNAVAILABLE
                        if exc.code == "unavailable"
                        else HTTPStatus.BAD_REQUEST
                    )
                )
                return http.json_error(status, exc.code, exc.message)
        if path.startswith("/static/"):
            return http.static_file(self.static_dir, path[len("/static/") :])
        return http.page(self.static_dir, path) or http.not_found()

    async def _api(self, path: str, query: dict[str, list[str]]) -> Response:
        """Answer a JSON API route. Raises ValueError (bad parameters), ProtocolError."""

        def arg(name: str) -> str | None:
            values = query.get(name)
            return values[-1] if values else None

        if path == "/api/matches":
            return http.json_response({"matches": await self._list_matches(arg)})
        if path.startswith("/api/matches/"):
            match_id = _check_match_id(unquote(path[len("/api/matches/") :]))
            stream = await self._find_stream(match_id)
            return http.json_response(stream.snapshot(PUBLIC, self.epoch))
        if path == "/api/runs":
            stored: list[dict[str, Any]] = []
            if self.db is not None:
                with contextlib.suppress(SQLAlchemyError, StorageError, OSError):
                    stored = [
                        {"id": r.id, "name": r.name, "created_at": r.created_at}
                        for r in await list_runs(self.db)
                    ]
            self._poll_runs()
            return http.json_response(
                {"runs": [s.info() for s in self.runs.runs.values()], "stored_runs": stored}
            )
        if path.startswith("/api/runs/"):
            name = unquote(path[len("/api/runs/") :])
            series = self.runs.runs.get(name)
            if series is None:
                raise ProtocolError("unknown_run", f"no training run {name!r} is watched")
            return http.json_response({"info": series.info(), "rows": list(series.rows)})
        if path == "/api/games":
            return http.json_response({"games": self._human_games()})
        if path == "/api/status":
            return http.json_response(
                {
                    "epoch": self.epoch,
                    "clients": len(self._clients),
                    "live": len(self._live),
                    "stats": self.stats.as_dict(),
                }
            )
        return http.json_error(HTTPStatus.NOT_FOUND, "not_found", f"no API route {path}")

    async def _list_matches(self, arg: Callable[[str], str | None]) -> list[dict[str, Any]]:
        limit = int(arg("limit") or 50)
        offset = int(arg("offset") or 0)
        if not 1 <= limit <= MAX_PAGE or offset < 0:
            raise ValueError(f"limit must be 1 to {MAX_PAGE} and offset 0 or more")
        game, run, status = arg("game") or None, arg("run") or None, arg("status") or None
        if self.db is None:
            streams = [*self._live.values(), *reversed(self._ended.values())]
            lines = [
                s.summary()
                for s in streams
                if (game is None or s.info.game_id == game)
                and (run is None or s.info.run_id == run)
                and (status is None or s.status == status)
            ]
            return lines[offset : offset + limit]
        try:
            found = await list_matches(
                self.db,
                game=game,
                run=run,
                policy=arg("policy") or None,
                status=status,
                limit=limit,
                offset=offset,
            )
        except (SQLAlchemyError, StorageError, OSError) as exc:
            message = str(self.db.error(exc))
            raise ProtocolError("unavailable", f"cannot read the database: {message}") from None
        return [_summary_dict(s) for s in found]

    def _human_games(self) -> list[dict[str, Any]]:
        if self._games_cache is None:
            games = []
            for spec in catalogue(available_only=True):
                if not spec.supports(2) or not spec.legal_moves:
                    continue
                bots = []
                for name in HUMAN_OPPONENTS:
                    with contextlib.suppress(UnknownBot, ValueError):
                        check_bot(name, spec)
                        bots.append(name)
                if bots:
                    games.append(
                        {
                            "id": spec.game_id,
                            "bots": bots,
                            "hidden_information": spec.hidden_information,
                            "description": spec.description,
                        }
                    )
            self._games_cache = games
        return self._games_cache


async def serve(
    db: Database | None,
    bus: EventBus | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    **options: Any,
) -> WebHub:
    """Start a ``WebHub`` on ``host``:``port`` and return it (serving; ``await
    hub.close()`` stops it). ``options`` are ``WebHub``'s keyword arguments.

    Raises OSError when the address cannot be bound, ValueError for bad options.
    """
    hub = WebHub(db, bus, **options)
    await hub.start(host, port)
    return hub


# -- helpers ---------------------------------------------------------------------------------
def _check_match_id(match_id: str) -> str:
    if not _MATCH_ID.match(match_id):
        raise ProtocolError("unknown_match", f"{match_id[:40]!r} is not a match id")
    return match_id


def _same_origin(origin: str, host: str) -> bool:
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    return bool(netloc) and netloc.lower() == host.lower()


def _spread(rows: list[Any], most: int) -> list[Any]:
    """At most ``most`` of ``rows``, evenly spaced, the last one included."""
    if len(rows) <= most:
        return rows
    step = len(rows) / most
    picked = [rows[int(i * step)] for i in range(most - 1)]
    return [*picked, rows[-1]]


def _aborted(reason: str, num_turns: int) -> dict[str, Any]:
    return {
        "status": "aborted",
        "reason": reason,
        "rewards": None,
        "invalid_moves": None,
        "forfeited": [],
        "num_turns": num_turns,
    }


def _info_from_summary(summary: MatchSummary, start_state: str | None) -> MatchInfo:
    return MatchInfo(
        match_id=summary.id,
        game_id=summary.game_id,
        seed=summary.seed,
        num_players=summary.num_players,
        players=summary.players,
        run_id=summary.run_id,
        group_id=summary.group_id,
        started_at=summary.started_at,
        start_state=start_state,
        human_seats=tuple(s.seat for s in summary.seats if s.kind == "human"),
    )


def _result_from_summary(summary: MatchSummary) -> dict[str, Any]:
    if summary.status == "aborted":
        return _aborted(summary.reason, summary.num_turns)
    return {
        "status": summary.status,
        "reason": summary.reason,
        "rewards": [s.reward for s in summary.seats],
        "invalid_moves": [s.invalid_moves for s in summary.seats],
        "forfeited": [s.seat for s in summary.seats if s.forfeited],
        "num_turns": summary.num_turns,
    }


def _summary_dict(summary: MatchSummary) -> dict[str, Any]:
    """A stored match's lobby line (no seed: it may be live)."""
    out: dict[str, Any] = {
        "id": summary.id,
        "game_id": summary.game_id,
        "players": list(summary.players),
        "run_id": summary.run_id,
        "group_id": summary.group_id,
        "started_at": summary.started_at,
        "num_turns": summary.num_turns,
        "status": summary.status,
        "human_seats": [s.seat for s in summary.seats if s.kind == "human"],
    }
    if summary.status != "live":
        out.update(
            ended_at=summary.ended_at,
            rewards=[s.reward for s in summary.seats],
            reason=summary.reason,
        )
    return out


def _turn_from_stored(turn: Any) -> TurnData:
    return TurnData(
        index=turn.index,
        seat=turn.seat,
        action=turn.action,
        valid=turn.valid,
        reason=turn.reason,
        truncated=turn.truncated,
        elapsed_s=turn.elapsed_s,
        time=turn.time,
        public_state=turn.public_state,
        observation=turn.observation,
    )
