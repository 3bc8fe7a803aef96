"""Live spectators: event delivery latency, and game throughput with 0, 100 and 1,000 of them.

100 bot games (TicTacToe-v0, random vs random) run at once in this process, on the same
event loop as a ``WebHub`` that subscribes to their event bus: how ``arena serve`` runs
inside a training process. Every bot move takes ``--move-ms`` (a model's answer time;
0 for bots at full speed). Spectators are WebSocket clients on loopback in a second
process (``websockets``' sans-I/O client on raw asyncio connections: a cheap load
generator): spectator i follows match i % 100, and every 10th one the lobby too. All of
them subscribe before the first move.

Latency: from an event's time (``TurnPlayed.time``, taken when the move was applied) to its
arrival at a spectator, over every turn and end event every spectator received.
Throughput: games per second from the first move to the last game's end, relative to the
same games with no spectator, in the same run (median of ``--rounds`` alternating rounds).

    python -m bench.web [--json] [--rounds 3] [--spectators 0,100,1000] [--move-ms 100]
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import re
import statistics
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from arena.eventbus import EventBus
from arena.play import play_matches
from arena.seats import BotAgent, SeatAgent, SeatTurn
from bench.common import emit, median, parser, raise_open_files
from web import ServerLimits, serve

GAME = "TicTacToe-v0"
LOBBY_EVERY = 10
"""Every 10th spectator also follows the lobby."""
CONNECT_CONCURRENCY = 64
"""Spectators connecting at once (the listen backlog is 100)."""


class Paced:
    """A bot that waits for the start gate, then ``delay`` seconds before each move."""

    def __init__(self, agent: SeatAgent, delay: float, gate: asyncio.Event) -> None:
        self.agent = agent
        self.name = agent.name
        self.delay = delay
        self.gate = gate

    async def act(self, turn: SeatTurn) -> str:
        await self.gate.wait()
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        else:
            await asyncio.sleep(0)  # still yield, as any real seat does
        return await self.agent.act(turn)


def _pacer(delay: float, gate: asyncio.Event) -> Callable[[int, BotAgent], SeatAgent]:
    return lambda _seat, agent: Paced(agent, delay, gate)


# -- the spectators' process -----------------------------------------------------------------------
_EVENT_TIME = re.compile(rb'^\{"type":"event".*?"t":(-?[0-9.eE+]+)')


class Spectator(asyncio.Protocol):
    """A lightweight WebSocket spectator: ``websockets``' sans-I/O client protocol on a raw
    asyncio connection, so that the load generator's own CPU use (on a machine with few
    cores, shared with the server) stays small. It records each event's delivery latency."""

    def __init__(self, url: str, latencies: list[float]) -> None:
        self.protocol = ClientProtocol(parse_uri(url), max_size=None)
        self.latencies = latencies
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.subscribed: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.protocol.send_request(self.protocol.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.protocol.receive_data(data)
        for event in self.protocol.events_received():
            if isinstance(event, Response):
                if self.protocol.handshake_exc is not None:
                    self.opened.set_exception(self.protocol.handshake_exc)
                else:
                    self.opened.set_result(None)
            elif isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                text = bytes(event.data)
                found = _EVENT_TIME.match(text)
                if found is not None:
                    self.latencies.append(now - float(found.group(1)))
                elif text.startswith(b'{"type":"snapshot"') and not self.subscribed.done():
                    self.subscribed.set_result(None)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.opened, self.subscribed):
            if not future.done():
                future.set_exception(ConnectionError(f"connection lost: {exc}"))

    def send(self, message: dict[str, Any]) -> None:
        self.protocol.send_text(json.dumps(message).encode())
        self._flush()

    def _flush(self) -> None:
        assert self.transport is not None
        for data in self.protocol.data_to_send():
            if data:
                self.transport.write(data)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def spectators_main(pipe: Connection, url: str, match_ids: list[str], count: int) -> None:
    """Child process: connect ``count`` spectators, report ready, record latencies."""
    raise_open_files()
    asyncio.run(_spectate(pipe, url, match_ids, count))


async def _spectate(pipe: Connection, url: str, match_ids: list[str], count: int) -> None:
    latencies: list[float] = []
    semaphore = asyncio.Semaphore(CONNECT_CONCURRENCY)
    host, port = parse_uri(url).host, parse_uri(url).port
    loop = asyncio.get_running_loop()

    async def open_one(i: int) -> Spectator:
        async with semaphore:
            _transport, spectator = await loop.create_connection(
                lambda: Spectator(url, latencies), host, port
            )
            await asyncio.wait_for(spectator.opened, 60)
            spectator.send(
                {"type": "subscribe", "stream": "match", "match_id": match_ids[i % len(match_ids)]}
            )
            if i % LOBBY_EVERY == 0:
                spectator.send({"type": "subscribe", "stream": "lobby"})
            await asyncio.wait_for(spectator.subscribed, 60)
            return spectator

    spectators = await asyncio.gather(*(open_one(i) for i in range(count)))
    pipe.send("ready")
    expected = await asyncio.to_thread(pipe.recv)
    deadline = time.monotonic() + 10
    while len(latencies) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    for spectator in spectators:
        spectator.abort()
    pipe.send({"latencies": latencies, "received": len(latencies)})


# -- one measurement ----------------------------------------------------------------------------
async def measure(spectators: int, games: int, move_s: float, seed: int) -> dict[str, Any]:
    """Play ``games`` games watched by ``spectators``; return the figures."""
    bus = EventBus()
    limits = ServerLimits(max_connections=spectators + 100)
    hub = await serve(None, bus, port=0, limits=limits)
    child = None
    pipe = None
    try:
        gate = asyncio.Event()
        task = asyncio.create_task(
            play_matches(
                GAME,
                ["random", "random"],
                games,
                seed=seed,
                concurrency=games,
                bus=bus,
                agent_wrapper=_pacer(move_s, gate),
            )
        )
        while len(hub.live_match_ids()) < games:
            await asyncio.sleep(0.01)
        match_ids = hub.live_match_ids()
        if spectators:
            context = multiprocessing.get_context("spawn")
            pipe, child_pipe = context.Pipe()
            child = context.Process(
                target=spectators_main,
                args=(child_pipe, hub.ws_url, match_ids, spectators),
                daemon=True,
            )
            child.start()
            ready = await asyncio.to_thread(pipe.recv)
            assert ready == "ready", ready
            assert hub.clients == spectators, hub.clients
        started = time.perf_counter()
        gate.set()
        stats = await task
        elapsed = time.perf_counter() - started
        if stats.finished != games:
            raise RuntimeError(f"only {stats.finished} of {games} games finished: {stats}")
        result: dict[str, Any] = {
            "spectators": spectators,
            "games_per_s": games / elapsed,
            "dropped": hub.stats.dropped_slow,
        }
        if spectators and pipe is not None and child is not None:
            per_match = {}
            for match_id in match_ids:
                stream = hub.stream(match_id)
                assert stream is not None
                per_match[match_id] = stream.version - 1  # turns and end, after the start
            expected = sum(per_match[match_ids[i % len(match_ids)]] for i in range(spectators))
            pipe.send(expected)
            report = await asyncio.to_thread(pipe.recv)
            child.join(10)
            latencies = sorted(report["latencies"])
            result.update(
                p50_ms=1000 * statistics.median(latencies),
                p99_ms=1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
                max_ms=1000 * latencies[-1],
                delivered=report["received"] / expected,
                events=len(latencies),
            )
        return result
    finally:
        if child is not None and child.is_alive():
            child.terminate()
        await hub.close()


def main() -> None:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--games", type=int, default=100, help="live games at once")
    args_parser.add_argument(
        "--spectators", default="0,100,1000", help="spectator counts, comma-separated"
    )
    args_parser.add_argument(
        "--move-ms", type=float, default=100.0, help="milliseconds each bot move takes"
    )
    args = args_parser.parse_args()
    counts = [int(c) for c in args.spectators.split(",")]
    if 0 not in counts:
        counts.insert(0, 0)
    limit = raise_open_files()
    if limit < max(counts) + 200:
        raise SystemExit(f"the open-files limit ({limit}) is too low for {max(counts)} spectators")
    runs: dict[int, list[dict[str, Any]]] = {c: [] for c in counts}
    for r in range(args.rounds):
        for count in counts:
            runs[count].append(
                asyncio.run(measure(count, args.games, args.move_ms / 1000, seed=1000 * r))
            )
    base = median([m["games_per_s"] for m in runs[0]])
    results: dict[str, object] = {"games": args.games, "move_ms": args.move_ms, "game": GAME}
    for count in counts:
        ms = runs[count]
        gps = median([m["games_per_s"] for m in ms])
        row: dict[str, Any] = {"games_per_s": round(gps, 1), "ratio": round(gps / base, 3)}
        line = f"{count:>5} spectators  {gps:7.1f} games/s  ratio {gps / base:5.2f}"
        if count:
            for key in ("p50_ms", "p99_ms", "max_ms"):
                row[key] = round(median([m[key] for m in ms]), 1)
            row["delivered"] = round(min(m["delivered"] for m in ms), 4)
            row["dropped"] = max(m["dropped"] for m in ms)
            line += (
                f"   latency p50 {row['p50_ms']:6.1f} ms  p99 {row['p99_ms']:6.1f} ms"
                f"   delivered {row['delivered']:.1%}  dropped {row['dropped']}"
            )
        print(line, flush=True)
        results[f"spectators_{count}"] = row
    emit(results, args.json)


if __name__ == "__main__":
    main()
