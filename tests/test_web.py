"""The web hub: a real server on loopback, real ``websockets`` clients, real SQLite in
tmp_path and real games (``play_matches``, ``GameCoordinator``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.uri import parse_uri

from arena.clock import ManualClock
from arena.eventbus import EventBus
from arena.play import play_matches
from arena.seats import BotAgent, SeatAgent, SeatTurn
from games import register_game
from games.api import MoveResult
from games.registration import unregister_game
from storage import Database, Recorder, get_match, open_database
from tests.conftest import HANG_GUARD_S, CountingGame, no_hang, spin
from web import FORFEIT_MOVE, HumanSeat, SeatNotWaiting, ServerLimits, WebHub, serve
from web.pages.http import safe_static_path

# -- helpers ---------------------------------------------------------------------------------


class Paced:
    """A seat agent that waits for ``gate`` (if any), takes one of ``moves`` (if any: the
    test hands out the moves the match may play), then ``delay`` seconds, each move."""

    def __init__(
        self,
        agent: SeatAgent,
        delay: float,
        gate: asyncio.Event | None = None,
        moves: asyncio.Semaphore | None = None,
    ) -> None:
        self.agent = agent
        self.name = agent.name
        self.delay = delay
        self.gate = gate
        self.moves = moves

    async def act(self, turn: SeatTurn) -> str:
        if self.gate is not None:
            await self.gate.wait()
        if self.moves is not None:
            await self.moves.acquire()
        if self.delay:
            await asyncio.sleep(self.delay)
        return await self.agent.act(turn)


def paced(delay: float, gate: asyncio.Event | None = None) -> Callable[[int, BotAgent], SeatAgent]:
    return lambda _seat, agent: Paced(agent, delay, gate)


def stepped(moves: asyncio.Semaphore) -> Callable[[int, BotAgent], SeatAgent]:
    """Seats that play a move only when the test releases one from ``moves``: the match
    is where the test wants it when a client looks, however busy the machine is."""
    return lambda _seat, agent: Paced(agent, 0.0, moves=moves)


def allow(moves: asyncio.Semaphore, count: int) -> None:
    """Let the stepped seats play ``count`` more moves."""
    for _ in range(count):
        moves.release()


async def recv(ws: ClientConnection, timeout: float = HANG_GUARD_S) -> dict[str, Any]:
    """The next message (``timeout`` only guards against a hang)."""
    message = json.loads(await asyncio.wait_for(ws.recv(), timeout))
    assert isinstance(message, dict)
    return message


async def recv_until(
    ws: ClientConnection, done: Callable[[dict[str, Any]], bool], timeout: float = HANG_GUARD_S
) -> list[dict[str, Any]]:
    """Every message up to and including the first one ``done`` accepts."""
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        message = await recv(ws, max(0.01, deadline - time.monotonic()))
        out.append(message)
        if done(message):
            return out


async def client(hub: WebHub, **kwargs: Any) -> ClientConnection:
    ws = await connect(hub.ws_url, max_size=None, **kwargs)
    hello = await recv(ws)
    assert hello["type"] == "hello" and hello["epoch"] == hub.epoch
    return ws


async def request(ws: ClientConnection, message: dict[str, Any]) -> None:
    await ws.send(json.dumps(message))


async def wait_for(predicate: Callable[[], bool], timeout: float = HANG_GUARD_S) -> None:
    """Wait until ``predicate()`` holds (it reads the server's state, which real sockets
    change); ``timeout`` only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"a condition did not hold within {timeout:g} s"
        await asyncio.sleep(0.01)


def is_end(match_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == "event" and m["match"] == match_id and m["kind"] == "ended"


async def http_get(hub: WebHub, path: str) -> tuple[int, bytes]:
    """A raw GET (the path is sent exactly as given)."""
    reader, writer = await asyncio.open_connection(hub.host, hub.port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {hub.host}:{hub.port}\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), HANG_GUARD_S)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await open_database(str(tmp_path / "arena.db"))
    yield database
    await database.close()


@pytest.fixture
async def recorded(db: Database) -> AsyncIterator[tuple[Database, EventBus, Recorder]]:
    bus = EventBus()
    recorder = Recorder(db, bus)
    recorder.start()
    yield db, bus, recorder
    await recorder.close()


@pytest.fixture
async def hub(recorded: tuple[Database, EventBus, Recorder]) -> AsyncIterator[WebHub]:
    db, bus, _ = recorded
    server = await serve(db, bus, port=0, poll_interval_s=0.1, follow_db=False)
    yield server
    await server.close()


# -- streams -----------------------------------------------------------------------------------


async def test_lobby_and_match_events_arrive_in_order(
    hub: WebHub, recorded: tuple[Database, EventBus, Recorder]
) -> None:
    db, bus, recorder = recorded
    lobby = await client(hub)
    await request(lobby, {"type": "subscribe", "stream": "lobby", "id": 1})
    snapshot = await recv(lobby)
    assert snapshot["type"] == "lobby" and snapshot["ref"] == 1 and snapshot["live"] == []
    gate = asyncio.Event()
    games = asyncio.create_task(
        play_matches(
            "TicTacToe-v0", ["random", "random"], 2, bus=bus, agent_wrapper=paced(0.01, gate)
        )
    )
    await wait_for(lambda: len(hub.live_match_ids()) == 2)
    match_id = hub.live_match_ids()[0]
    watcher = await client(hub)
    await request(watcher, {"type": "subscribe", "stream": "match", "match_id": match_id})
    first = await recv(watcher)
    assert first["type"] == "snapshot" and first["v"] == 1 and first["status"] == "live"
    assert first["audience"] == "public" and "seed" not in first["match_info"]
    gate.set()
    events = await recv_until(watcher, is_end(match_id))
    await games
    versions = [m["v"] for m in events]
    assert versions == list(range(2, 2 + len(events)))
    turns = [m["turn"] for m in events if m["kind"] == "turn"]
    assert [t["index"] for t in turns] == list(range(len(turns)))
    assert all("observation" not in t for t in turns)
    ended = events[-1]
    assert ended["result"]["status"] == "finished"
    assert ended["reveal"]["seed"] is not None

    updates = await recv_until(
        lobby, lambda m: m["type"] == "lobby_update" and not m["started"] and m["live_total"] == 0
    )
    started = [line["id"] for u in updates for line in u["started"]]
    finished = [line["id"] for u in updates for line in u["ended"]]
    # A match that starts and ends between two updates is only reported as ended.
    assert set(started) <= set(finished) and match_id in finished and len(finished) == 2
    assert [u["v"] for u in updates] == list(range(1, len(updates) + 1))

    await recorder.flush()
    stored = await get_match(db, match_id)
    assert [t.action for t in stored.turns] == [t["action"] for t in turns]
    await lobby.close()
    await watcher.close()


async def test_reconnect_with_a_version_gets_what_it_missed(
    hub: WebHub, recorded: tuple[Database, EventBus, Recorder]
) -> None:
    _db, bus, _ = recorded
    moves = asyncio.Semaphore(0)
    games = asyncio.create_task(
        play_matches("TicTacToe-v0", ["random", "random"], 1, bus=bus, agent_wrapper=stepped(moves))
    )
    await wait_for(lambda: bool(hub.live_match_ids()))
    match_id = hub.live_match_ids()[0]
    ws = await client(hub)
    await request(ws, {"type": "subscribe", "stream": "match", "match_id": match_id})
    snapshot = await recv(ws)
    assert snapshot["type"] == "snapshot" and snapshot["v"] == 1  # no move played yet
    allow(moves, 2)
    seen = await recv_until(ws, lambda m: m.get("kind") == "turn" and m["turn"]["index"] >= 1)
    last = seen[-1]["v"]
    await ws.close()
    stream = hub.stream(match_id)
    assert stream is not None
    allow(moves, 2)
    await wait_for(lambda: stream.version >= last + 2)  # moves were missed
    assert stream.live
    ws = await client(hub)
    await request(
        ws,
        {
            "type": "subscribe",
            "stream": "match",
            "match_id": match_id,
            "since": last,
            "epoch": hub.epoch,
            "id": 7,
        },
    )
    resume = await recv(ws)
    assert resume["type"] == "resume" and resume["from"] == last and resume["ref"] == 7
    allow(moves, 100)  # the rest of the match
    rest = await recv_until(ws, is_end(match_id))
    assert [m["v"] for m in rest] == list(range(last + 1, last + 1 + len(rest)))
    await games
    # Another server epoch (a restart) or a version from the future: a full snapshot.
    await request(
        ws, {"type": "subscribe", "stream": "match", "match_id": match_id, "since": 3, "epoch": "x"}
    )
    resync = await recv(ws)
    assert resync["type"] == "snapshot" and resync["resync"] is True
    assert resync["audience"] == "full" and resync["v"] == rest[-1]["v"]
    await ws.close()


async def test_a_client_too_far_behind_gets_a_resync(db: Database) -> None:
    bus = EventBus()
    hub = await serve(db, bus, port=0, limits=ServerLimits(history_limit=3), follow_db=False)
    try:
        moves = asyncio.Semaphore(0)
        games = asyncio.create_task(
            play_matches(
                "TicTacToe-v0", ["random", "random"], 1, bus=bus, agent_wrapper=stepped(moves)
            )
        )
        await wait_for(lambda: bool(hub.live_match_ids()))
        match_id = hub.live_match_ids()[0]
        stream = hub.stream(match_id)
        assert stream is not None
        allow(moves, 5)  # version 6: the start and five turns, more than the history holds
        await wait_for(lambda: stream.version >= 6)
        assert stream.live
        ws = await client(hub)
        await request(
            ws,
            {
                "type": "subscribe",
                "stream": "match",
                "match_id": match_id,
                "since": 1,
                "epoch": hub.epoch,
            },
        )
        snapshot = await recv(ws)
        assert snapshot["type"] == "snapshot" and snapshot["resync"] is True
        assert len(snapshot["turns"]) == snapshot["v"] - 1
        allow(moves, 100)
        rest = await recv_until(ws, is_end(match_id))
        assert [m["v"] for m in rest] == list(
            range(snapshot["v"] + 1, snapshot["v"] + 1 + len(rest))
        )
        await games
        await ws.close()
    finally:
        await hub.close()


def _assert_nothing_private(frames: list[str]) -> None:
    for frame in frames:
        assert "Your card" not in frame, frame[:300]
        assert "observation" not in frame, frame[:300]
        assert '"seed"' not in frame, frame[:300]
        assert "full_board" not in frame, frame[:300]  # the all-seeing boards wait for the end
        for board in _boards(json.loads(frame)):
            assert not any(where.startswith("seat") for where in board.get("cards", {})), board


def _boards(message: Any) -> list[dict[str, Any]]:
    """Every board in a frame: snapshots', match headers' and turns'."""
    found = []
    if isinstance(message, dict):
        for key, value in message.items():
            if key in ("board", "start_board", "full_board", "start_full_board") and value:
                found.append(value)
            else:
                found.extend(_boards(value))
    elif isinstance(message, list):
        for item in message:
            found.extend(_boards(item))
    return found


_DEALT = re.compile(r"Your card is: '([JQK])'")


def _assert_full_boards_show_the_deal(reveal: dict[str, Any]) -> None:
    """After the end, each seat's card in the all-seeing board before its move is the card
    its own observation named (the boards and the deal agree)."""
    before = reveal["start_full_board"]
    checked = 0
    for turn in reveal["turns"]:
        dealt = _DEALT.findall(turn["observation"] or "")
        if dealt and before is not None:
            assert before["cards"][f"seat {turn['seat']}"] == [dealt[-1]], (turn, before)
            checked += 1
        before = turn["full_board"] or turn["board"]
    assert checked >= 2  # at least the first move of each seat


async def _watch_kuhn(hub: WebHub, bus: EventBus, delay: float) -> tuple[list[str], str]:
    """Play one Kuhn poker match and record every raw frame a spectator gets."""
    gate = asyncio.Event()
    games = asyncio.create_task(
        play_matches(
            "KuhnPoker-v0", ["random", "random"], 1, bus=bus, agent_wrapper=paced(delay, gate)
        )
    )
    await wait_for(lambda: bool(hub.live_match_ids()))
    match_id = hub.live_match_ids()[0]
    ws = await client(hub)
    await request(ws, {"type": "subscribe", "stream": "lobby"})
    await request(ws, {"type": "subscribe", "stream": "match", "match_id": match_id})
    gate.set()
    frames: list[str] = []
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        frame = await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
        assert isinstance(frame, str)
        frames.append(frame)
        if is_end(match_id)(json.loads(frame)):
            break
        status, body = await http_get(hub, f"/api/matches/{match_id}")
        assert status == 200
        if json.loads(body)["status"] == "live":  # (it may have ended meanwhile)
            frames.append(body.decode())
    await games
    await ws.close()
    return frames, match_id


async def test_spectators_never_see_a_private_card_before_the_end(
    hub: WebHub, recorded: tuple[Database, EventBus, Recorder]
) -> None:
    _db, bus, _ = recorded
    frames, match_id = await _watch_kuhn(hub, bus, 0.02)
    live, end = frames[:-1], json.loads(frames[-1])
    _assert_nothing_private(live)
    assert any('"action":"[' in f for f in live)  # the bets are public
    turns = [json.loads(f)["turn"] for f in live if '"kind":"turn"' in f]
    assert turns and all(t["board"]["kind"] == "cards" for t in turns)
    assert turns[0]["board"]["face_down"] == {"0": 1, "1": 1}  # backs, for spectators
    observations = "\n".join(t["observation"] for t in end["reveal"]["turns"])
    assert "Your card is" in observations
    assert end["reveal"]["full_state"]
    _assert_full_boards_show_the_deal(end["reveal"])
    status, body = await http_get(hub, f"/api/matches/{match_id}")
    assert status == 200 and b"Your card is" in body
    replay = json.loads(body)  # what the replay page reads, from the database
    _assert_full_boards_show_the_deal(replay["reveal"])
    assert [t["board"] for t in replay["turns"]] == [t["board"] for t in end["reveal"]["turns"]]


async def test_a_server_following_the_database_shows_matches_live_and_hides_cards(
    recorded: tuple[Database, EventBus, Recorder], tmp_path: Path
) -> None:
    """``arena serve`` in another process: no bus, only the database the trainer writes."""
    _db, bus, _ = recorded
    reader = await open_database(str(tmp_path / "arena.db"), recover=False)
    hub = await serve(reader, None, port=0, poll_interval_s=0.05, follow_db=True)
    try:
        lobby = await client(hub)
        await request(lobby, {"type": "subscribe", "stream": "lobby"})
        await recv(lobby)
        frames, match_id = await _watch_kuhn(hub, bus, 0.15)
        live, end = frames[:-1], json.loads(frames[-1])
        _assert_nothing_private(live)
        turns = [json.loads(f)["turn"] for f in live if '"kind":"turn"' in f]
        assert [t["index"] for t in turns] == list(range(len(turns)))
        assert len(turns) >= 3  # moves arrived one by one, not all at the end
        assert all(t["board"]["face_down"] == {"0": 1, "1": 1} for t in turns[:1])
        assert "Your card is" in "\n".join(t["observation"] for t in end["reveal"]["turns"])
        _assert_full_boards_show_the_deal(end["reveal"])  # stored, read back at the end
        updates = await recv_until(
            lobby,
            lambda m: m["type"] == "lobby_update" and any(e["id"] == match_id for e in m["ended"]),
        )
        assert any(s["id"] == match_id for u in updates for s in u["started"])
        await lobby.close()
    finally:
        await hub.close()
        await reader.close()


# -- seats -------------------------------------------------------------------------------------


async def test_only_the_seat_token_holder_can_move(
    hub: WebHub, recorded: tuple[Database, EventBus, Recorder]
) -> None:
    db, _bus, recorder = recorded
    player = await client(hub)
    await request(
        player,
        {"type": "start_match", "game": "TicTacToe-v0", "opponent": "random", "seat": 0, "id": 1},
    )
    created = await recv(player)
    assert created["type"] == "match_created" and created["ref"] == 1
    match_id, token, seat = created["match"], created["token"], created["seat"]
    assert seat == 0
    spectator = await client(hub)
    await request(spectator, {"type": "subscribe", "stream": "match", "match_id": match_id})
    snapshot = await recv(spectator)
    assert snapshot["pending"]["seat"] == 0 and "prompt" not in snapshot["pending"]
    # A spectator's moves are refused, with or without a (wrong) token.
    for attempt in ({}, {"token": "guess"}, {"token": token[:-1] + "x"}):
        await request(spectator, {"type": "move", "match_id": match_id, "text": "[4]", **attempt})
        refused = await recv_until(spectator, lambda m: m["type"] == "error")
        assert refused[-1]["code"] == "forbidden"
    await request(
        spectator, {"type": "subscribe", "stream": "match", "match_id": match_id, "token": "x"}
    )
    assert (await recv_until(spectator, lambda m: m["type"] == "error"))[-1]["code"] == "forbidden"

    await request(
        player, {"type": "subscribe", "stream": "match", "match_id": match_id, "token": token}
    )
    mine = await recv(player)
    assert mine["audience"] == "seat" and mine["seat"] == 0
    prompt = mine["pending"]
    while True:
        assert prompt["legal_moves"], prompt
        await request(
            player,
            {
                "type": "move",
                "match_id": match_id,
                "token": token,
                "text": prompt["legal_moves"][0],
            },
        )
        messages = await recv_until(
            player,
            lambda m: m.get("kind") in ("waiting", "ended") and m.get("seat", 0) == 0,
        )
        acks = [m for m in messages if m["type"] == "move_ack"]
        assert acks and acks[0]["seat"] == 0
        if messages[-1]["kind"] == "ended":
            break
        prompt = messages[-1]
        assert "Available Moves" in prompt["prompt"]
    await request(player, {"type": "move", "match_id": match_id, "token": token, "text": "[0]"})
    assert (await recv_until(player, lambda m: m["type"] == "error"))[-1]["code"] == "match_over"
    await recorder.flush()
    stored = await get_match(db, match_id)
    assert stored.match.status == "finished"
    assert stored.match.players == ("human", "random")
    assert stored.match.seats[0].kind == "human"
    await player.close()
    await spectator.close()


async def test_a_person_who_does_not_move_forfeits_at_the_deadline(db: Database) -> None:
    limits = ServerLimits(human_move_timeout_s=0.3)
    hub = await serve(db, None, port=0, limits=limits, follow_db=False)
    try:
        ws = await client(hub)
        await request(ws, {"type": "start_match", "game": "TicTacToe-v0", "seat": 1})
        created = await recv(ws)
        await request(
            ws,
            {"type": "subscribe", "stream": "match", "match_id": created["match"]},
        )
        # Finished with seat 1 forfeited: its own 0.3 s deadline, not the match's move
        # clock (which would abort it, after 120 s).
        events = await recv_until(ws, is_end(created["match"]))
        result = events[-1]["result"]
        assert result["status"] == "finished" and result["forfeited"] == [1]
        assert result["rewards"][1] == -1.0 and result["rewards"][0] == 1.0
        reveal = events[-1]["reveal"]["turns"]
        assert reveal[-1]["action"] == FORFEIT_MOVE and reveal[-1]["valid"] is False
        await ws.close()
    finally:
        await hub.close()


async def test_human_seat_waits_for_its_move_and_refuses_others() -> None:
    """The seat waits for the browser's move until its deadline (shown as Unix time, from
    the seat's wall clock); past it, the seat forfeits, and every later turn at once."""
    clock = ManualClock()
    prompts: list[float] = []
    seat = HumanSeat(
        0,
        timeout_s=5,
        on_prompt=lambda _turn, deadline: prompts.append(deadline),
        clock=clock,
        wall_clock=lambda: 1_000.0,
    )
    with pytest.raises(SeatNotWaiting):
        seat.submit("[1]")
    turn = SeatTurn(seat=0, messages=[], new_from=0, legal_moves=["[1]"], turn_index=3)
    task = asyncio.create_task(seat.act(turn))
    await spin()
    assert seat.waiting and prompts == [1_005.0] and seat.deadline == 1_005.0
    clock.advance(4.9)  # most of its time gone: still waiting
    await spin()
    assert seat.waiting
    assert seat.submit("[1]") == 3
    assert await no_hang(task, "the seat's move") == "[1]"
    assert not seat.timed_out and clock.pending == 0  # the deadline's timer went with it
    with pytest.raises(SeatNotWaiting):
        seat.submit("[2]")
    quick = HumanSeat(0, timeout_s=5, clock=clock)
    late = asyncio.create_task(quick.act(turn))
    await spin()
    clock.advance(5.0)
    assert await no_hang(late, "the deadline") == FORFEIT_MOVE
    assert quick.timed_out and await quick.act(turn) == FORFEIT_MOVE  # at once from now on
    assert not quick.waiting and clock.pending == 0


# -- bad input and limits ------------------------------------------------------------------------


async def test_malformed_input_gets_errors_and_everyone_else_is_served(hub: WebHub) -> None:
    other = await client(hub)
    await request(other, {"type": "subscribe", "stream": "lobby"})
    await recv(other)
    ws = await client(hub)
    cases: list[tuple[str | bytes, str]] = [
        ("not json", "bad_json"),
        ("[1, 2]", "bad_json"),
        ('{"type": "dance"}', "unknown_type"),
        ('{"no": "type"}', "unknown_type"),
        (b"\x00\x01binary", "bad_frame"),
        ('{"type": "subscribe"}', "bad_message"),
        ('{"type": "subscribe", "stream": "nope"}', "bad_message"),
        ('{"type": "subscribe", "stream": "match", "match_id": "../../etc"}', "unknown_match"),
        (
            '{"type": "subscribe", "stream": "match", "match_id": "0123456789abcdef"}',
            "unknown_match",
        ),
        ('{"type": "subscribe", "stream": "match", "match_id": 5}', "bad_message"),
        ('{"type": "subscribe", "stream": "run", "run": "nope"}', "unknown_run"),
        ('{"type": "move", "match_id": "abc", "token": "t", "text": "[1]"}', "unknown_match"),
        ('{"type": "start_match", "game": "NoSuchGame-v0"}', "bad_game"),
        ('{"type": "start_match", "game": "TicTacToe-v0", "opponent": "god"}', "bad_game"),
        ('{"type": "start_match", "game": "TicTacToe-v0", "seat": 7}', "bad_message"),
        ('{"type": "ping", "id": 99}', "pong"),
    ]
    for frame, code in cases:
        await ws.send(frame)
        answer = await recv(ws)
        assert answer.get("code", answer["type"]) == code, (frame, answer)
    # The connection is still fine, and so is everyone else's.
    await request(ws, {"type": "ping", "id": "x"})
    assert (await recv(ws))["ref"] == "x"
    await request(other, {"type": "ping", "id": 1})
    assert (await recv(other))["type"] == "pong"
    await ws.close()
    await other.close()


async def test_a_lone_surrogate_from_a_client_never_breaks_a_frame(
    hub: WebHub, caplog: pytest.LogCaptureFixture
) -> None:
    ws = await client(hub)
    # Valid JSON: the escape decodes to a lone surrogate, which UTF-8 cannot encode.
    await ws.send('{"type": "ping", "id": "\\ud800"}')
    pong = await recv(ws)
    assert pong["type"] == "pong" and pong["ref"] == "\ufffd"
    await ws.send('{"type": "subscribe", "stream": "\\udc80", "id": "\\udfff"}')
    refused = await recv(ws)
    assert refused["code"] == "bad_message" and refused["ref"] == "\ufffd"
    await request(ws, {"type": "ping", "id": "still open"})
    assert (await recv(ws))["ref"] == "still open"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    await ws.close()


async def test_an_oversize_frame_closes_that_connection_only(db: Database) -> None:
    hub = await serve(
        db, None, port=0, limits=ServerLimits(max_message_bytes=1024), follow_db=False
    )
    try:
        other = await client(hub)
        ws = await client(hub)
        await ws.send(json.dumps({"type": "ping", "pad": "x" * 5000}))
        with pytest.raises(ConnectionClosed) as closed:
            await recv(ws)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        await request(other, {"type": "ping"})
        assert (await recv(other))["type"] == "pong"
        again = await client(hub)
        await again.close()
        await other.close()
    finally:
        await hub.close()


async def test_rate_limit_refuses_a_flood_without_disconnecting(db: Database) -> None:
    # The bucket's arithmetic is the core's (tests/test_web_core.py gives it the time);
    # here, the real server on a real clock: a refill rate slow enough that the flood
    # cannot earn more than two messages back even if sending it takes two seconds.
    limits = ServerLimits(rate_per_s=1, rate_burst=5)
    hub = await serve(db, None, port=0, limits=limits, follow_db=False)
    try:
        ws = await client(hub)
        for i in range(12):
            await request(ws, {"type": "ping", "id": i})
        answers = [await recv(ws) for _ in range(12)]
        assert sum(a["type"] == "pong" for a in answers) >= 5
        assert sum(a.get("code") == "rate_limited" for a in answers) >= 5
        await asyncio.sleep(1.0)  # (at least) one message earned back
        await request(ws, {"type": "ping", "id": "later"})
        assert (await recv(ws))["ref"] == "later"
        await ws.close()
    finally:
        await hub.close()


async def test_connections_over_the_limit_and_cross_origin_are_refused(db: Database) -> None:
    hub = await serve(db, None, port=0, limits=ServerLimits(max_connections=2), follow_db=False)
    try:
        first, second = await client(hub), await client(hub)
        with pytest.raises(InvalidStatus) as refused:
            await connect(hub.ws_url)
        assert refused.value.response.status_code == 503
        await first.close()
        await wait_for(lambda: hub.clients == 1)
        with pytest.raises(InvalidStatus) as cross:
            await connect(hub.ws_url, origin="http://evil.example")  # type: ignore[arg-type]
        assert cross.value.response.status_code == 403
        same = await client(hub, origin=f"http://{hub.host}:{hub.port}")
        await same.close()
        await second.close()
    finally:
        await hub.close()


class _StalledClient:
    """A client that completes the handshake, asks for a lot, and never reads again."""

    def __init__(self, hub: WebHub) -> None:
        self.hub = hub
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.setblocking(False)
        self.protocol = ClientProtocol(parse_uri(hub.ws_url))

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.sock_connect(self.sock, (self.hub.host, self.hub.port))
        self.protocol.send_request(self.protocol.connect())
        await self._flush()
        while self.protocol.handshake_exc is None and not self.protocol.events_received():
            self.protocol.receive_data(await loop.sock_recv(self.sock, 65536))
        assert self.protocol.handshake_exc is None

    async def _flush(self) -> None:
        for data in self.protocol.data_to_send():
            await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def send(self, message: dict[str, Any]) -> None:
        self.protocol.send_text(json.dumps(message).encode())
        await self._flush()

    def close(self) -> None:
        self.sock.close()


async def test_a_stalled_client_is_dropped_and_games_finish_on_time(db: Database) -> None:
    bus = EventBus()
    limits = ServerLimits(max_buffer_bytes=32 * 1024, rate_per_s=1e6, rate_burst=1_000_000)
    hub = await serve(db, bus, port=0, limits=limits, follow_db=False)
    stalled = None
    try:
        await play_matches("KuhnPoker-v0", ["random", "random"], 1, bus=bus)  # a big reveal
        done_id = next(iter(hub.lobby.recent))["id"]
        gate = asyncio.Event()
        games = asyncio.create_task(
            play_matches(
                "TicTacToe-v0", ["random", "random"], 20, bus=bus, agent_wrapper=paced(0.01, gate)
            )
        )
        await wait_for(lambda: len(hub.live_match_ids()) == 20)
        watcher = await client(hub)
        stalled = _StalledClient(hub)
        await stalled.open()
        await wait_for(lambda: hub.clients == 2)
        await stalled.send({"type": "subscribe", "stream": "lobby"})
        for match_id in hub.live_match_ids():
            await request(watcher, {"type": "subscribe", "stream": "match", "match_id": match_id})
            await stalled.send({"type": "subscribe", "stream": "match", "match_id": match_id})
        gate.set()
        # Each answer is a full snapshot with every seat's view: the stalled client's
        # socket buffers fill up, then its queue on the server.
        with contextlib.suppress(OSError):
            for _ in range(100):
                if hub.stats.dropped_slow:
                    break
                for _ in range(50):
                    await stalled.send(
                        {"type": "subscribe", "stream": "match", "match_id": done_id}
                    )
                await asyncio.sleep(0.005)
        # The games played on while it stalled: frames are written to a connection's
        # buffer, never awaited (how fast they play is bench.web's to measure).
        stats = await no_hang(games, "20 games beside a stalled client")
        assert stats.finished == 20
        await wait_for(lambda: hub.stats.dropped_slow == 1)
        assert hub.clients == 1
        # The client that reads got every match to its end.
        ends: set[str] = set()
        while len(ends) < 20:
            message = await recv(watcher)
            if message.get("kind") == "ended":
                ends.add(message["match"])
        await watcher.close()
    finally:
        if stalled is not None:
            stalled.close()
        await hub.close()


# -- HTTP ----------------------------------------------------------------------------------------


async def test_pages_json_and_no_path_traversal(
    hub: WebHub, recorded: tuple[Database, EventBus, Recorder]
) -> None:
    _db, bus, recorder = recorded
    await play_matches("TicTacToe-v0", ["random", "optimal"], 2, bus=bus)
    await recorder.flush()
    for path in ("/", "/match?id=x", "/replay", "/run", "/play", "/static/app.css"):
        status, body = await http_get(hub, path)
        assert status == 200 and body, path
    status, body = await http_get(hub, "/static/vendor/uPlot.LICENSE.txt")
    assert status == 200 and b"MIT" in body
    status, body = await http_get(hub, "/api/matches?game=TicTacToe-v0&limit=5")
    matches = json.loads(body)["matches"]
    assert status == 200 and len(matches) == 2
    status, body = await http_get(hub, f"/api/matches/{matches[0]['id']}")
    assert status == 200 and json.loads(body)["audience"] == "full"
    status, body = await http_get(hub, "/api/games")
    assert any(
        g["id"] == "TicTacToe-v0" and "optimal" in g["bots"] for g in json.loads(body)["games"]
    )
    for path in (
        "/static/../hub.py",
        "/static/%2e%2e/hub.py",
        "/static/..%2fhub.py",
        "/static/vendor/../../hub.py",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/static/..%5chub.py",
        "/../web/hub.py",
        "/api/matches/..%2f..%2fetc",
        "/api/matches?limit=0",
        "/api/nothing",
    ):
        status, body = await http_get(hub, path)
        assert status in (400, 404), path
        assert b"import" not in body and b"root:" not in body, path
    static = Path(__file__).resolve().parents[1] / "web" / "static"
    assert safe_static_path(static, "app.css") is not None
    assert safe_static_path(static, "../hub.py") is None
    assert safe_static_path(static, "%2E%2E/hub.py") is None


async def test_run_metrics_stream_as_they_are_written(db: Database, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "tictactoe-1"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"run_name": "ttt-1"}))
    metrics = run_dir / "metrics.jsonl"

    def write(step: int) -> None:
        row = {
            "step": step,
            "env/all/reward/total": 0.1 * step,
            "test/random/win": 0.5,
            "test/optimal/draw": 0.2,
            "test/random/invalid_move_rate": 0.01,
            "optim/loss": float("nan") if step == 2 else 1.0 / (step + 1),
            "note": "text is ignored",
        }
        with metrics.open("a") as f:
            f.write(json.dumps(row) + "\n")

    for step in range(3):
        write(step)
    hub = await serve(
        db,
        None,
        port=0,
        poll_interval_s=0.05,
        follow_db=False,
        run_sources=[str(tmp_path / "runs" / "*" / "metrics.jsonl")],
    )
    try:
        ws = await client(hub)
        await request(ws, {"type": "subscribe", "stream": "run", "run": "tictactoe-1"})
        first = await recv(ws)
        assert first["type"] == "metrics" and first["reset"] is True
        assert [r["step"] for r in first["rows"]] == [0, 1, 2]
        assert first["rows"][2]["optim/loss"] is None and "note" not in first["rows"][0]
        assert first["info"]["run_id"] == "ttt-1"
        write(3)
        with metrics.open("a") as f:
            f.write('{"step": 4, "optim/loss"')  # half a line: waits for the rest
        update = await recv(ws)
        assert [r["step"] for r in update["rows"]] == [3] and update["reset"] is False
        with metrics.open("a") as f:
            f.write(": 0.5}\n")
        update = await recv(ws)
        assert update["rows"] == [{"step": 4.0, "optim/loss": 0.5}]
        status, body = await http_get(hub, "/api/runs")
        assert status == 200 and json.loads(body)["runs"][0]["name"] == "tictactoe-1"
        await ws.close()
    finally:
        await hub.close()


async def test_a_seat_holder_sees_its_own_card_and_spectators_do_not(hub: WebHub) -> None:
    player = await client(hub)
    await request(player, {"type": "start_match", "game": "KuhnPoker-v0", "seat": 0})
    created = await recv(player)
    match_id, token = created["match"], created["token"]
    spectator = await client(hub)
    await request(spectator, {"type": "subscribe", "stream": "match", "match_id": match_id})
    await request(
        player, {"type": "subscribe", "stream": "match", "match_id": match_id, "token": token}
    )
    mine = await recv(player)
    assert "Your card is" in mine["pending"]["prompt"]
    prompt = mine["pending"]
    while True:
        move = prompt["legal_moves"][0]
        await request(player, {"type": "move", "match_id": match_id, "token": token, "text": move})
        messages = await recv_until(player, lambda m: m.get("kind") == "ended" or "prompt" in m)
        if messages[-1].get("kind") == "ended":
            break
        prompt = messages[-1]
    frames: list[str] = []
    while True:
        frame = await asyncio.wait_for(spectator.recv(), HANG_GUARD_S)
        assert isinstance(frame, str)
        if is_end(match_id)(json.loads(frame)):
            break
        frames.append(frame)
    _assert_nothing_private(frames)
    assert any('"kind":"waiting"' in f for f in frames)
    await player.close()
    await spectator.close()


def test_each_event_is_serialised_once_per_audience() -> None:
    from arena.events import Turn
    from web.live.streams import PUBLIC, MatchStream
    from web.protocol import MatchInfo

    info = MatchInfo("m1", "KuhnPoker-v0", 3, 2, ("human", "random"), None, None, 0.0, None, (0,))
    stream = MatchStream(info, moves_public=False, history_limit=8, source="bus")
    turn = Turn(
        index=0, seat=0, action="[bet]", move="[bet]", valid=True, reason=None,
        truncated=False, elapsed_s=0.1, time=1.0, observation="Your card is: 'K'",
    )  # fmt: skip
    entry = stream.add_turn(turn)
    public = entry.frame(PUBLIC)
    assert entry.frame(PUBLIC) is public and entry.frame(1) is public  # one string, reused
    assert entry.frame(0) is not public and '"action":"[bet]"' in entry.frame(0)
    assert '"action":null' in public and "Your card" not in public
    assert entry.frame(0) is entry.frame(0)


# -- game code off the loop ----------------------------------------------------------------------


class _ThreadProbe(CountingGame):
    """Records the threads that run its code; its first step blocks until released."""

    threads: set[int] = set()
    in_step = threading.Event()
    release = threading.Event()

    def reset(self, num_players: int, seed: int) -> None:
        self.threads.add(threading.get_ident())
        super().reset(num_players, seed)

    def step(self, action: str) -> MoveResult:
        self.threads.add(threading.get_ident())
        if not self.release.is_set():
            self.in_step.set()
            self.release.wait(HANG_GUARD_S)
            self.in_step.clear()
        return super().step(action)

    def legal_moves(self, seat: int) -> list[str] | None:
        self.threads.add(threading.get_ident())
        return super().legal_moves(seat)

    def public_state(self) -> str:
        self.threads.add(threading.get_ident())
        return super().public_state()


@pytest.fixture
def thread_probe_game() -> Iterator[str]:
    """ThreadProbe-v0, registered for one test (a game left registered would reach every
    later test that walks the catalogue)."""
    register_game("ThreadProbe-v0", min_players=2, max_players=2)(lambda: _ThreadProbe(rounds=2))
    yield "ThreadProbe-v0"
    unregister_game("ThreadProbe-v0")


async def test_browser_matches_run_game_code_off_the_servers_loop(
    hub: WebHub, thread_probe_game: str
) -> None:
    loop_thread = threading.get_ident()
    _ThreadProbe.threads.clear()  # other tests may play every registered game here
    player, other = await client(hub), await client(hub)
    # Seat 1: the bot moves first, and its step blocks in the game.
    await request(player, {"type": "start_match", "game": "ThreadProbe-v0", "seat": 1, "id": 1})
    await asyncio.get_running_loop().run_in_executor(None, _ThreadProbe.in_step.wait, HANG_GUARD_S)
    assert _ThreadProbe.in_step.is_set()
    await request(other, {"type": "ping", "id": "during"})
    pong = await recv(other)
    # The server answered while the game was still inside its step.
    assert pong["type"] == "pong" and _ThreadProbe.in_step.is_set()
    _ThreadProbe.release.set()
    created = await recv(player)
    assert created["type"] == "match_created"
    match_id, token = created["match"], created["token"]
    await request(
        player, {"type": "subscribe", "stream": "match", "match_id": match_id, "token": token}
    )
    prompt = (await recv(player))["pending"]
    while True:
        move = {"type": "move", "match_id": match_id, "token": token}
        await request(player, {**move, "text": prompt["legal_moves"][0]})
        messages = await recv_until(player, lambda m: m.get("kind") == "ended" or "prompt" in m)
        if messages[-1].get("kind") == "ended":
            break
        prompt = messages[-1]
    assert messages[-1]["result"]["status"] == "finished"
    assert _ThreadProbe.threads and loop_thread not in _ThreadProbe.threads
    await player.close()
    await other.close()


# -- hardening: a real server ---------------------------------------------------------------------


class _Thinking:
    """A seat that says what it thinks before its move (a model's reasoning)."""

    def __init__(self, agent: SeatAgent) -> None:
        self.agent = agent
        self.name = agent.name

    async def act(self, turn: SeatTurn) -> str:
        await asyncio.sleep(0.02)
        card = "\n".join(m.text for m in turn.messages).split("Your card is: ")[-1][:3]
        return f"Thinking: Your card is: {card} so {await self.agent.act(turn)}"


async def test_live_spectators_see_the_parsed_move_never_the_seats_reasoning(
    hub: WebHub, recorded: tuple[Database, EventBus, Recorder], tmp_path: Path
) -> None:
    _db, bus, recorder = recorded
    reader = await open_database(str(tmp_path / "arena.db"), read_only=True)
    follower = await serve(reader, None, port=0, poll_interval_s=0.05, follow_db=True)
    try:
        gate = asyncio.Event()
        games = asyncio.create_task(
            play_matches(
                "KuhnPoker-v0",
                ["random", "random"],
                1,
                bus=bus,
                agent_wrapper=lambda _s, agent: _Thinking(Paced(agent, 0.0, gate)),
            )
        )
        await wait_for(lambda: bool(hub.live_match_ids()))
        match_id = hub.live_match_ids()[0]
        await recorder.flush()
        await wait_for(lambda: match_id in follower.live_match_ids())
        watchers = []
        for server in (hub, follower):  # in the training process, and from the database
            ws = await client(server)
            await request(ws, {"type": "subscribe", "stream": "match", "match_id": match_id})
            watchers.append(ws)
        gate.set()
        for ws in watchers:
            frames: list[str] = []
            while True:
                frame = await asyncio.wait_for(ws.recv(), HANG_GUARD_S)
                assert isinstance(frame, str)
                if is_end(match_id)(json.loads(frame)):
                    end = json.loads(frame)
                    break
                frames.append(frame)
            live = "\n".join(frames)
            assert "Thinking" not in live and "Your card" not in live
            moves = [json.loads(f)["turn"]["action"] for f in frames if '"kind":"turn"' in f]
            assert moves and all(m in ("[check]", "[bet]", "[call]", "[fold]") for m in moves)
            assert all(t["action"].startswith("Thinking") for t in end["reveal"]["turns"])
            await ws.close()
        await games
    finally:
        await follower.close()
        await reader.close()


async def _raw(hub: WebHub, data: bytes, head_only: bool = False) -> bytes:
    """Send ``data`` as it is; the whole answer (its head only: a 101 stays open)."""
    reader, writer = await asyncio.open_connection(hub.host, hub.port)
    writer.write(data)
    await writer.drain()
    read = reader.readuntil(b"\r\n\r\n") if head_only else reader.read()
    out = await asyncio.wait_for(read, HANG_GUARD_S)
    writer.close()
    return out


async def test_requests_for_another_host_are_refused_dns_rebinding(db: Database) -> None:
    hub = await serve(db, None, port=0, follow_db=False)
    allowing = await serve(db, None, port=0, follow_db=False, allowed_hosts=["arena.lan"])
    try:
        handshake = (
            "GET /ws HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        )
        for path in ("/api/matches", "/"):
            answer = await _raw(hub, f"GET {path} HTTP/1.1\r\nHost: evil.example\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 403") and b"--allow-host" in answer
        answer = await _raw(hub, handshake.format(host="evil.example").encode())
        assert answer.startswith(b"HTTP/1.1 403")
        assert hub.clients == 0 and hub.stats.refused_hosts == 3
        ok = await _raw(allowing, handshake.format(host="arena.lan:80").encode(), head_only=True)
        assert ok.startswith(b"HTTP/1.1 101")
        with pytest.raises(InvalidStatus) as cross:  # the right Host, a page elsewhere
            await connect(hub.ws_url, origin="http://evil.example")  # type: ignore[arg-type]
        assert cross.value.response.status_code == 403
    finally:
        await hub.close()
        await allowing.close()


async def test_one_client_cannot_take_every_browser_match_slot(db: Database) -> None:
    limits = ServerLimits(
        max_human_matches=16, max_human_matches_per_connection=2, max_human_matches_per_address=3
    )
    hub = await serve(db, None, port=0, limits=limits, follow_db=False)
    try:
        first, second = await client(hub), await client(hub)
        answers = []
        for ws in (first, first, first, second, second):
            await request(ws, {"type": "start_match", "game": "TicTacToe-v0"})
            answers.append(await recv(ws))
        kinds = [a.get("code", a["type"]) for a in answers]
        assert kinds == ["match_created", "match_created", "too_many_matches", "match_created",
                         "too_many_matches"]  # fmt: skip
        assert "connection" in answers[2]["message"] and "address" in answers[4]["message"]
        await first.close()
        await second.close()
    finally:
        await hub.close()


async def test_api_parameters_and_methods_get_clear_answers(hub: WebHub) -> None:
    for path in (
        "/api/matches?offset=99999999999999999999",
        "/api/matches?limit=1e9",
        "/api/matches?offset=-5",
    ):
        status, body = await http_get(hub, path)
        assert status == 400 and json.loads(body)["error"] == "bad_request", path
    for method, extra in (("POST", "Content-Length: 5\r\n\r\nhello"), ("DELETE", "\r\n")):
        request_text = f"{method} /api/matches HTTP/1.1\r\nHost: {hub.host}:{hub.port}\r\n{extra}"
        answer = await _raw(hub, request_text.encode())
        head = answer.split(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 405") and b"\r\nAllow: GET" in head, method


async def test_api_runs_shows_no_absolute_path(db: Database, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "ttt"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 0, "optim/loss": 1.0}\n')
    hub = await serve(db, None, port=0, follow_db=False, run_sources=[str(run_dir)])
    try:
        status, body = await http_get(hub, "/api/runs")
        assert status == 200 and json.loads(body)["runs"][0]["source"].endswith("metrics.jsonl")
        assert str(tmp_path).encode() not in body
        status, body = await http_get(hub, "/api/runs/ttt")
        assert status == 200 and str(tmp_path).encode() not in body
    finally:
        await hub.close()


async def test_api_runs_gives_each_runs_game_start_last_evaluation_and_best_checkpoint(
    db: Database, tmp_path: Path
) -> None:
    from storage.rundir import RunDirectory

    run = RunDirectory(tmp_path / "runs" / "ttt")
    run.write_config({"run_name": "ttt", "game_id": "TicTacToe-v0"})
    run.append_metrics(-1, {"warmup/seconds": 1.0})
    run.append_metrics(0, {"test/random/win": 0.4, "test/random/draw": 0.1, "optim/loss": 1.0})
    run.append_metrics(1, {"optim/loss": 0.5})
    run.append_checkpoint({"step": 0, "sampler_path": "w0", "time": 1000.0})
    run.append_checkpoint({"step": 1, "state_path": "s1", "sampler_path": "w1", "time": 2000.0})
    run.mark_best(1, **{"test/random/win": 0.6})
    hub = await serve(
        db, None, port=0, follow_db=False, run_sources=[str(tmp_path / "runs" / "*")],
        runs_dir=str(tmp_path / "runs"),
    )  # fmt: skip
    try:
        status, body = await http_get(hub, "/api/runs")
        (info,) = json.loads(body)["runs"]
        assert status == 200 and info["game_id"] == "TicTacToe-v0" and info["last_step"] == 1
        assert info["started_at"] == 1000.0  # the first checkpoint, before config.json's time
        assert info["last_eval"] == {
            "step": 0, "metrics": {"test/random/win": 0.4, "test/random/draw": 0.1}
        }  # fmt: skip
        assert info["checkpoints"] == 2
        assert info["best"] == {"step": 1, "test/random/win": 0.6}
        # The play page's opponents: the game's bots and its stored checkpoints.
        status, body = await http_get(hub, "/api/games")
        ttt = next(g for g in json.loads(body)["games"] if g["id"] == "TicTacToe-v0")
        assert ttt["checkpoints"] == [
            {"player": "run:ttt@1", "policy": "checkpoint:ttt@1", "run": "ttt", "step": 1,
             "best": True},
            {"player": "run:ttt@0", "policy": "checkpoint:ttt@0", "run": "ttt", "step": 0,
             "best": False},
        ]  # fmt: skip
        kuhn = next(g for g in json.loads(body)["games"] if g["id"] == "KuhnPoker-v0")
        assert kuhn["checkpoints"] == []
        ws = await client(hub)
        for game, opponent, why in (
            ("TicTacToe-v0", "run:ttt@7", "has no checkpoint at step 7"),
            ("KuhnPoker-v0", "run:ttt@0", "was trained on TicTacToe-v0"),
            ("TicTacToe-v0", "run:nope@0", "no run 'nope'"),
            ("TicTacToe-v0", "agent:alice", "cannot play here"),
        ):
            await request(ws, {"type": "start_match", "game": game, "opponent": opponent})
            answer = await recv(ws)
            assert answer["type"] == "error" and answer["code"] == "bad_game", opponent
            assert why in answer["message"], answer["message"]
        await ws.close()
    finally:
        await hub.close()


async def test_resuming_a_match_read_back_after_the_cache_dropped_it_gets_a_snapshot(
    recorded: tuple[Database, EventBus, Recorder],
) -> None:
    db, bus, recorder = recorded
    hub = await serve(db, bus, port=0, limits=ServerLimits(ended_cache=1), follow_db=False)
    try:
        moves = asyncio.Semaphore(0)
        games = asyncio.create_task(
            play_matches(
                "TicTacToe-v0", ["random", "random"], 1, bus=bus, agent_wrapper=stepped(moves)
            )
        )
        await wait_for(lambda: bool(hub.live_match_ids()))
        match_id = hub.live_match_ids()[0]
        ws = await client(hub)
        await request(ws, {"type": "subscribe", "stream": "match", "match_id": match_id})
        assert (await recv(ws))["type"] == "snapshot"
        allow(moves, 1)
        seen = await recv_until(ws, lambda m: m.get("kind") == "turn")
        await ws.close()  # the client goes away having seen v = 2
        allow(moves, 100)
        await games
        await play_matches("TicTacToe-v0", ["random", "random"], 1, bus=bus)  # evicts it
        await recorder.flush()
        await wait_for(lambda: hub.stream(match_id) is None)
        ws = await client(hub)
        await request(
            ws,
            {"type": "subscribe", "stream": "match", "match_id": match_id,
             "since": seen[-1]["v"], "epoch": hub.epoch},
        )  # fmt: skip
        answer = await recv(ws)
        assert answer["type"] == "snapshot" and answer["resync"] is True
        assert answer["status"] == "finished"
        await ws.close()
    finally:
        await hub.close()


class _Blocking(CountingGame):
    """Its first step blocks until released (a slow game step in progress)."""

    release = threading.Event()
    entered = threading.Event()

    def step(self, action: str) -> MoveResult:
        if not self.release.is_set():
            self.entered.set()
            self.release.wait(HANG_GUARD_S)
        return super().step(action)


@pytest.fixture
def blocking_game() -> Iterator[str]:
    """Blocking-v0, registered for one test."""
    register_game("Blocking-v0", min_players=2, max_players=2)(lambda: _Blocking(rounds=2))
    yield "Blocking-v0"
    unregister_game("Blocking-v0")


async def test_closing_the_hub_does_not_swallow_the_callers_cancellation(
    db: Database, blocking_game: str
) -> None:
    hub = await serve(db, None, port=0, follow_db=False)
    ws = await client(hub)
    await request(ws, {"type": "start_match", "game": "Blocking-v0", "seat": 1})
    await asyncio.get_running_loop().run_in_executor(None, _Blocking.entered.wait, HANG_GUARD_S)
    assert _Blocking.entered.is_set()
    closing = asyncio.create_task(hub.close())
    await no_hang(ws.wait_closed(), "the server closing the connection")
    await spin()
    assert not closing.done()  # it waits for the game step in progress
    closing.cancel()
    await spin()
    assert not closing.done()  # the clean-up goes on
    _Blocking.release.set()
    await asyncio.wait({closing}, timeout=HANG_GUARD_S)
    assert closing.cancelled()  # the cancellation reached the caller...
    assert hub.clients == 0 and not len(hub.matches)  # ...after the clean-up finished
