"""The web hub: the asyncio layer of the web server, over its sans-I/O core.

    hub = await serve(db, bus)          # http://127.0.0.1:8765/
    ...
    await hub.close()

``web.core.HubCore`` decides everything (what each request gets, who sees which frame, the
limits, hidden information); this module does the I/O around it, and nothing else:

* the ``websockets`` server: each HTTP request and WebSocket frame goes to the core, and
  the frames it produces are written to the clients;
* delivery and back-pressure: a frame is written straight into each client's connection
  buffer (``websockets.broadcast``), never awaited; a client whose unread bytes pass
  ``max_buffer_bytes`` is dropped, so a slow client never slows a game or anyone else;
* intake: the event bus (matches played in this process), the database follower
  (``web.live.follow``, matches other processes record), training-run files (``web.pages.metrics``);
* the I/O the core asks for (``Need``), each kind by its part: the database reads
  (``web.pages.dbreads``), browser matches (``web.live.browserhub``: each game built and run on the
  hub's game thread, never on its event loop, with a ``HumanSeat`` for the person), the
  agent protocol (``web.agents.agenthub``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from websockets.asyncio.server import Server, ServerConnection, broadcast
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed, InvalidMessage
from websockets.http11 import Request, Response
from websockets.protocol import State

from arena.coordinator import GameCoordinator
from arena.eventbus import EventBus, SubscriberDropped, Subscription
from arena.events import MatchEvent
from arena.gamethread import GameThread
from arena.seats import SeatTurn
from games.limits import SessionLimits
from matchmaking.seek import MatchmakerConfig
from storage import Database, list_matches
from storage.errors import StorageError
from web.agents.agenthub import AGENT_NEEDS, AgentService, FillIns, check_seek_game
from web.connections import Client
from web.core import Close, HubCore, HubStats, Need
from web.limits import ServerLimits
from web.live.browserhub import BrowserMatches
from web.live.follow import DEFAULT_POLL_INTERVAL_S, DatabaseFollower
from web.live.streams import Lobby, MatchStream
from web.pages import http
from web.pages.api import HttpApi, method_not_allowed
from web.pages.dbreads import DatabaseReads
from web.pages.hosts import DEFAULT_HOST, DEFAULT_PORT, HostCheck
from web.pages.metrics import RunWatcher
from web.protocol import MovesArePublic, ProtocolError, moves_are_public

log = logging.getLogger("web.hub")

STOPPED_REASON = "the server stopped"
"""Why the matches still live when the server stops end (aborted)."""
MAX_REQUEST_LINE_BYTES = 8192
"""How much of a request is looked at to find its method (``_Connection``)."""

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "HubStats", "WebHub", "serve"]


class _Connection(ServerConnection):
    """A server connection that answers any method but GET with 405 (``Allow: GET``)
    itself: websockets would close a request with a body without any answer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = b""
        self._looked = False
        self._refused = False

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._looked and self.protocol.state is State.CONNECTING:
            self._head += data[:MAX_REQUEST_LINE_BYTES]
            end = self._head.find(b" ")
            if end < 0 and len(self._head) < MAX_REQUEST_LINE_BYTES:
                super().data_received(data)  # the method is not complete yet
                return
            self._looked = True  # the rest goes to websockets as it comes
            method = self._head[: end if end >= 0 else 16]
            if method != b"GET":
                self._refused = True
                name = method.decode("ascii", "replace")
                self.protocol.handshake_exc = InvalidMessage(f"refused a {name[:20]} request")
                self.protocol.send_response(method_not_allowed(name))
                self.send_data()
                return
        super().data_received(data)


class LiveMatches:
    """The matches a hub runs itself (browser matches, matches from the seek queue): each
    coordinator and the task that waits for its end. A match leaves when that task ends."""

    def __init__(self) -> None:
        self._matches: dict[str, tuple[GameCoordinator, asyncio.Task[Any]]] = {}

    def add(self, match_id: str, coordinator: GameCoordinator, task: asyncio.Task[Any]) -> None:
        """Hold a running match until ``task`` ends."""
        self._matches[match_id] = (coordinator, task)
        task.add_done_callback(lambda _t: self._matches.pop(match_id, None))

    def get(self, match_id: str) -> GameCoordinator | None:
        """The running match's coordinator, or None."""
        found = self._matches.get(match_id)
        return found[0] if found is not None else None

    def task(self, match_id: str) -> asyncio.Task[Any] | None:
        """The task that waits for the running match's end, or None."""
        found = self._matches.get(match_id)
        return found[1] if found is not None else None

    def coordinators(self) -> list[GameCoordinator]:
        """Every running match."""
        return [c for c, _t in self._matches.values()]

    def tasks(self) -> list[asyncio.Task[Any]]:
        """The tasks that wait for their ends."""
        return [t for _c, t in self._matches.values()]

    def __len__(self) -> int:
        return len(self._matches)


class WebHub:
    """The web server: pages, JSON, live match/lobby/run streams and browser seats.

    ``db``: the database to read (None: only what the bus shows). ``bus``: the event bus
    to subscribe to (None: a private one, which browser matches publish to; pass the
    training process's bus to show its matches live). ``follow_db``: also poll ``db`` every
    ``poll_interval_s`` for matches played by other processes. ``run_sources``: training
    log dirs, ``metrics.jsonl`` files or glob patterns to chart. ``game_limits``: the
    session limits of browser matches. ``moves_public``: whether a game's moves may be
    shown live. ``allowed_hosts``: host names the server answers to besides its own
    address (see ``web.pages.hosts``; ``*``: any). ``matchmaker``: how the seek queue pairs;
    ``fill``: the bots, checkpoints (``run:NAME@STEP``, under ``runs_dir``) and models that
    fill empty seats (None: each game's own bots; empty: none; ``web.agents.agenthub.FillIns``
    says which and what it raises).
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
        allowed_hosts: Sequence[str] = (),
        matchmaker: MatchmakerConfig | None = None,
        fill: Sequence[str] | None = None,
        runs_dir: str = "runs",
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError("poll_interval_s must be positive")
        self.db = db
        self.bus = bus if bus is not None else EventBus()
        self.limits = limits or ServerLimits()
        self.poll_interval_s = poll_interval_s
        self.game_limits = game_limits
        self.allowed_hosts = tuple(allowed_hosts)
        self.runs = RunWatcher(run_sources, self.limits.metrics_rows, self.limits.metrics_eval_rows)
        fill_ins = FillIns(fill, runs_dir)
        self.runs_dir = runs_dir
        self.browser = BrowserMatches(self, runs_dir, models=fill_ins.models())
        """People's matches against a bot, checkpoint or model (``web.live.browserhub``)."""
        self.checkpoints = self.browser.checkpoints
        """The stored checkpoints a person may play (``/api/games``, ``start_match``)."""
        self.reads = DatabaseReads(db, self.limits)
        """The core's database reads (``web.pages.dbreads``)."""
        following = db is not None and follow_db
        self.core = HubCore(
            self.limits,
            moves_public=moves_public,
            host_check=HostCheck(DEFAULT_HOST, self.allowed_hosts),
            has_db=db is not None,
            following=following,
            runs=self.runs.runs,
            static_dir=Path(static_dir),
            games=self.browser.games,
            check_game=self.browser.check_game,
            check_seek=check_seek_game,
            fillers=fill_ins,
            matchmaker=matchmaker,
        )
        self.agents = AgentService(self, fill_ins)
        """Remote agents and the seek queue: their I/O (``web.agents.agenthub``)."""
        self.api = HttpApi(self.core)
        self.follower = (
            DatabaseFollower(
                db,
                self.core,
                poll_interval_s=poll_interval_s,
                recent_limit=self.limits.recent_limit,
            )
            if db is not None and following
            else None
        )
        self.game_thread = GameThread("arena-web-game")
        """Every call into a browser match's game runs here, never on the event loop."""
        self.host = DEFAULT_HOST
        self.port = 0
        self._conns: dict[Client, ServerConnection] = {}
        self.matches = LiveMatches()
        """The matches this hub runs itself (the agent service adds its own)."""
        self._server: Server | None = None
        self._sub: Subscription | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    # -- life cycle ----------------------------------------------------------------------
    async def start(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        """Subscribe to the bus, start following, and listen on ``host``:``port`` (0: any
        free port; read ``port`` after). Raises OSError when the address is taken,
        ValueError for a malformed allowed host, RuntimeError when already started."""
        if self._server is not None or self._closed:
            raise RuntimeError("this hub was already started")
        await self.agents.fill_ins.preload()
        self.core.host_check = HostCheck(host, self.allowed_hosts)
        self._sub = self.bus.subscribe(max_queue=self.limits.bus_max_queue, name="web")
        limits = self.limits
        try:
            self._server = await ws_serve(
                self._handle,
                host,
                port,
                process_request=self._process_request,
                create_connection=_Connection,
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
        self.agents.start()

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
        following. Idempotent. A cancellation of the caller is not swallowed: the clean-up
        finishes first, then it propagates; a failure of a background task is logged."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await self.agents.close()
        for coordinator in self.matches.coordinators():
            coordinator.abort(STOPPED_REASON)
        cancelled = False
        try:
            # The matches end (aborted) and each agent seat's match_ended is written
            # before the connections close.
            ending = self.matches.tasks()
            if ending:
                await asyncio.wait(ending, timeout=self.limits.close_timeout_s)
            await asyncio.sleep(0)  # the matches' done callbacks
        except asyncio.CancelledError:
            cancelled = True  # finish the clean-up, then propagate
        # What happened up to now reaches the pages before they lose the server: the
        # lobby's batched changes (matches that ended in the last moment) included.
        self.pump()
        self.core.tick_lobby()
        self.flush()
        try:
            if self._server is not None:
                self._server.close()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._server.wait_closed(), self.limits.close_timeout_s + 1
                    )
        except asyncio.CancelledError:
            cancelled = True
        waiting = [*self._tasks, *self.matches.tasks()]
        while waiting:
            try:
                await asyncio.wait(waiting)  # never raises for the tasks' own errors
            except asyncio.CancelledError:
                cancelled = True  # finish the clean-up, then propagate
            waiting = [t for t in waiting if not t.done()]
        for task in [*self._tasks, *self.matches.tasks()]:
            if not task.cancelled() and task.exception() is not None:
                log.error("a web hub task failed: %r", task.exception())
        if self._sub is not None:
            self._sub.close()
        self.game_thread.shutdown()
        if cancelled:
            raise asyncio.CancelledError

    async def __aenter__(self) -> WebHub:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- views for tests and the JSON API ------------------------------------------------
    @property
    def epoch(self) -> str:
        """This server instance (versions are only comparable within one epoch)."""
        return self.core.epoch

    @property
    def stats(self) -> HubStats:
        """What the hub has done so far."""
        return self.core.stats

    @property
    def lobby(self) -> Lobby:
        """The lobby's state."""
        return self.core.lobby

    @property
    def clients(self) -> int:
        """Connected WebSocket clients."""
        return len(self.core.clients)

    def live_match_ids(self) -> list[str]:
        """Ids of the live matches the hub shows."""
        return self.core.live_match_ids()

    def stream(self, match_id: str) -> MatchStream | None:
        """The match's stream, if in memory."""
        return self.core.stream(match_id)

    # -- sending -------------------------------------------------------------------------
    def flush(self) -> None:
        """Write what the core produced: each frame to its clients at once."""
        for clients, frame in self.core.take_frames():
            self._deliver(clients, frame)

    def _deliver(self, clients: Iterable[Client], frame: str) -> None:
        limit = self.limits.max_buffer_bytes
        conns: list[ServerConnection] = []
        for client in clients:
            conn = self._conns.get(client)
            if conn is None or client.closed:
                continue
            if _buffered(conn) > limit:
                self._drop(client, conn)
            else:
                conns.append(conn)
        if conns:
            broadcast(conns, frame)
            self.core.stats.frames += len(conns)

    async def close_client(self, client: Client, code: int, reason: str) -> None:
        """Close ``client``'s connection with ``code`` and ``reason`` (nothing when it is
        gone already)."""
        conn = self._conns.get(client)
        if conn is not None:
            await conn.close(code, reason)

    def _drop(self, client: Client, conn: ServerConnection) -> None:
        """Disconnect a client that does not read: at once, without a closing handshake
        (its buffer is full, a close frame would wait behind it)."""
        self.core.stats.dropped_slow += 1
        log.info("dropped %r: more than %d bytes unread", client, self.limits.max_buffer_bytes)
        self.core.forget(client)
        self._conns.pop(client, None)
        if conn.transport is not None:
            conn.transport.abort()

    # -- the core's needs ----------------------------------------------------------------
    async def _resolve(self, outcome: Any) -> Any:
        """Fulfil the core's needs until it has its answer."""
        while isinstance(outcome, Need):
            result = await self._fulfil(outcome)
            self.pump()
            outcome = outcome.then(result)
            self.flush()
        return outcome

    async def _fulfil(self, need: Need) -> Any:
        """Do the I/O ``need`` asks for; the result, or the exception it raised."""
        args = need.args
        try:
            if need.kind == "poll_runs":
                self._poll_runs()
                return None
            if need.kind == "start_match":
                return await self.browser.start(args["game"], args["opponent"], args["seat"])
            if need.kind in AGENT_NEEDS:
                return await self.agents.fulfil(need)
            return await self.reads.fulfil(need)
        except (ProtocolError, StorageError) as exc:
            return exc
        except (SQLAlchemyError, OSError) as exc:
            return self.db.error(exc) if self.db is not None else StorageError(str(exc))

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
            self.pump()
            self.flush()

    def _on_event(self, event: MatchEvent) -> None:
        try:
            self.core.event(event)
        except Exception:  # a bug must not stop the stream for every other match
            log.exception("the web hub failed on %r", event)

    def pump(self) -> None:
        """Hand the core every event already queued on the bus, now (so that what the hub
        adds itself, like a browser seat's prompt, comes after them)."""
        sub = self._sub
        while sub is not None:
            event = sub.get_nowait()
            if event is None:
                if sub.dropped:
                    self._bus_dropped()
                return
            self._on_event(event)

    def _bus_dropped(self) -> None:
        log.error(
            "the event bus dropped the web hub (%d events behind): its live matches are %s",
            self.limits.bus_max_queue,
            "followed from the database" if self.follower else "shown as lost",
        )
        self._sub = self.bus.subscribe(max_queue=self.limits.bus_max_queue, name="web")
        self.core.bus_dropped()
        self.flush()

    # -- periodic work -------------------------------------------------------------------
    async def _lobby_loop(self) -> None:
        while True:
            await asyncio.sleep(self.limits.lobby_interval_s)
            self.core.tick_lobby()
            self.flush()

    async def _poll_loop(self) -> None:
        if self.follower is None and self.db is not None:
            with contextlib.suppress(SQLAlchemyError, StorageError, OSError):
                self.core.db_recent(await list_matches(self.db, limit=self.limits.recent_limit))
        while True:
            try:
                if self.follower is not None:
                    await self.follower.poll_once()
                self._poll_runs()
            except Exception:  # a bug: log it, keep polling
                log.exception("the web hub's poll failed")
            self.flush()
            await asyncio.sleep(self.poll_interval_s)

    def _poll_runs(self) -> None:
        for name, (rows, reset) in self.runs.poll().items():
            self.core.metrics(name, rows, reset)

    # -- browser seats -------------------------------------------------------------------
    def human_prompt(self, match_id: str, seat: int, turn: SeatTurn, deadline: float) -> None:
        """A person in a browser seat must move: the turns before reach spectators first,
        then the prompt goes to the person."""
        self.pump()  # the turns before this prompt go out first
        self.core.prompt(match_id, seat, turn, deadline)
        self.flush()

    # -- requests ------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        address = ws.remote_address[0] if ws.remote_address else "unknown"
        client = Client(
            str(address), self.limits.rate_per_s, self.limits.rate_burst, time.monotonic()
        )
        self._conns[client] = ws
        self.core.connect(client)
        self.flush()
        try:
            async for frame in ws:
                if client.closed:
                    break
                self.pump()
                outcome = await self._resolve(self.core.receive(client, frame, time.monotonic()))
                self.flush()
                if isinstance(outcome, Close):
                    await ws.close(outcome.code, outcome.reason)
                    break
        except ConnectionClosed:
            pass
        finally:
            self.core.forget(client)
            self._conns.pop(client, None)

    async def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        self.pump()
        method = getattr(request, "method", "GET")  # (websockets < 16 only parses GET)
        outcome = await self._resolve(self.api.answer(method, request.path, request.headers))
        return outcome if isinstance(outcome, Response) else None


def _buffered(conn: ServerConnection) -> int:
    """Bytes written to ``conn`` that its client has not read yet (0 once closed)."""
    transport: Any = conn.transport
    if transport is None or transport.is_closing():
        return 0
    return int(transport.get_write_buffer_size())


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
