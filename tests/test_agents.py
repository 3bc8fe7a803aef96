"""Remote agents end to end: a real server on loopback (``WebHub`` with its recorder and
live ratings on a real SQLite file), real ``websockets`` clients, agents in processes of
their own (``tests.agent_proc``) and in this one (``web.agents``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from matchmaking.recording import Recording
from matchmaking.seek import MatchmakerConfig
from storage import Database, get_match, list_matches, open_database
from storage.agents import create_agent
from storage.ratings import load_ratings
from tests.conftest import HANG_GUARD_S
from web import ServerLimits, WebHub
from web.agents import AgentClient, AgentError, AgentTurn, MatchInfo, bot_policy

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Server:
    hub: WebHub
    db: Database
    recording: Recording
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.hub.ws_url

    async def token(self, name: str) -> str:
        if name not in self.tokens:
            _info, self.tokens[name] = await create_agent(self.db, name)
        return self.tokens[name]

    async def ended(self, match_id: str, timeout: float = HANG_GUARD_S) -> None:
        """Wait for the hub's match ``match_id`` to end (a forfeit ends it on the game
        thread, after the call that asked for it returned)."""
        task = self.hub.matches.task(match_id)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), timeout)

    async def settle(self) -> None:
        await self.recording.flush()

    async def ratings(self, game: str = "TicTacToe-v0") -> dict[str, Any]:
        await self.settle()
        return {r.policy: r for r in await load_ratings(self.db, game)}


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path,
    *,
    limits: ServerLimits | None = None,
    matchmaker: MatchmakerConfig | None = None,
    fill: list[str] | None = None,
) -> AsyncIterator[Server]:
    db = await open_database(str(tmp_path / "arena.db"))
    hub = WebHub(
        db,
        None,
        limits=limits or ServerLimits(agent_tick_s=0.05),
        matchmaker=matchmaker or MatchmakerConfig(fill_after_s=None),
        fill=fill,
        follow_db=False,
    )
    recording = await Recording.start(db, hub.bus)
    await hub.start("127.0.0.1", 0)
    server = Server(hub, db, recording)
    try:
        yield server
    finally:
        await hub.close()
        await recording.close()
        await db.close()


class Proc:
    """An agent process (``tests.agent_proc``) and the JSON lines it printed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []

    async def until(
        self, done: Callable[[dict[str, Any]], bool], timeout: float = HANG_GUARD_S
    ) -> dict[str, Any]:
        for event in self.events:
            if done(event):
                return event
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; events so far: {self.events[-5:]}"
            line = await asyncio.wait_for(self.proc.stdout.readline(), left)
            assert line, f"the process ended; events: {self.events[-5:]}"
            event = json.loads(line)
            self.events.append(event)
            if done(event):
                return event

    async def finish(self, timeout: float = 2 * HANG_GUARD_S) -> int:
        assert self.proc.stdout is not None
        out, _ = await asyncio.wait_for(self.proc.communicate(), timeout)
        self.events.extend(json.loads(line) for line in out.decode().splitlines() if line)
        assert self.proc.returncode is not None
        return self.proc.returncode

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]


async def spawn(*args: str) -> Proc:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.agent_proc", *args,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    return Proc(proc)


async def wait_for(predicate: Callable[[], bool], timeout: float = HANG_GUARD_S) -> None:
    """Wait until ``predicate()`` holds (the server's state, which real sockets and
    processes change); ``timeout`` only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"a condition did not hold within {timeout:g} s"
        await asyncio.sleep(0.02)


async def recv(ws: ClientConnection, timeout: float = HANG_GUARD_S) -> dict[str, Any]:
    message = json.loads(await asyncio.wait_for(ws.recv(), timeout))
    assert isinstance(message, dict)
    return message


class Waiting(AgentClient):
    """An agent whose policy waits for ``go`` (set it to let it move)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.go = asyncio.Event()
        self.prompts: list[AgentTurn] = []
        self.paired: list[MatchInfo] = []

    def on_paired(self, match: MatchInfo) -> None:
        self.paired.append(match)

    def on_prompt(self, turn: AgentTurn) -> None:
        self.prompts.append(turn)

    async def act(self, match: MatchInfo, turn: AgentTurn) -> str:
        await self.go.wait()
        return turn.legal_moves[0] if turn.legal_moves else "[0]"


# -- several agent processes ------------------------------------------------------------------


@pytest.mark.slow
async def test_two_agent_processes_seek_pair_play_to_the_end_and_ratings_update(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server:
        alice, bob = await server.token("alice"), await server.token("bob")
        procs = [
            await spawn("play", "--server", server.url, "--token", alice, "--games", "3",
                        "--opponents", "agent", "--seed", "1"),
            await spawn("play", "--server", server.url, "--token", bob, "--games", "3",
                        "--opponents", "agent", "--seed", "2"),
        ]  # fmt: skip
        assert [await p.finish() for p in procs] == [0, 0]
        for proc, me, other in ((procs[0], "alice", "bob"), (procs[1], "bob", "alice")):
            paired = proc.of("paired")
            assert len(paired) == 3
            assert all(set(p["players"]) == {f"agent:{me}", f"agent:{other}"} for p in paired)
            ended = proc.of("ended")
            assert len(ended) == 3 and all(e["status"] == "finished" for e in ended)
            assert all(e["result"] in ("win", "loss", "draw") and e["rated"] for e in ended)
        wins = {e["match_id"]: e["result"] for e in procs[0].of("ended")}
        for e in procs[1].of("ended"):  # the two sides agree on every result
            assert {wins[e["match_id"]], e["result"]} in ({"win", "loss"}, {"draw"})
        ratings = await server.ratings()
        assert ratings["agent:alice"].games == 3 and ratings["agent:bob"].games == 3
        score = sum(
            {"win": 1.0, "draw": 0.5, "loss": 0.0}[e["result"]] for e in procs[0].of("ended")
        )
        gap = ratings["agent:alice"].mu - ratings["agent:bob"].mu
        assert (gap > 0) == (score > 1.5) and (gap < 0) == (score < 1.5)  # who scored more
        stored = await list_matches(server.db, policy="agent:alice")
        assert len(stored) == 3 and {m.status for m in stored} == {"finished"}
        detail = await get_match(server.db, stored[0].id)
        assert detail.turns and {t.seat for t in detail.turns} == {0, 1}


@pytest.mark.slow
async def test_an_agent_killed_mid_game_comes_back_and_finishes_its_seat(tmp_path: Path) -> None:
    # A grace period no busy machine outlasts: the second process has to start and connect.
    limits = ServerLimits(agent_tick_s=0.05, agent_reconnect_grace_s=300.0)
    async with serving(
        tmp_path, limits=limits, matchmaker=MatchmakerConfig(fill_after_s=0.0), fill=["random"]
    ) as server:
        token = await server.token("alice")
        first = await spawn("play", "--server", server.url, "--token", token, "--games", "1",
                            "--opponents", "bot", "--think", "0.3")  # fmt: skip
        moved = await first.until(lambda e: e.get("event") == "moved")
        match_id = moved["match"]
        first.proc.send_signal(signal.SIGKILL)
        await first.finish()
        desk = server.hub.core.agents
        await wait_for(lambda: all(s.conn is None for s in desk.seats.values()))
        assert [s.match_id for s in desk.seats.values()] == [match_id]  # orphaned, live
        second = await spawn("play", "--server", server.url, "--token", token, "--games", "0")
        assert await second.finish() == 0
        (ended,) = second.of("ended")
        assert ended["match_id"] == match_id and ended["status"] == "finished"
        assert ended["forfeited"] == []  # it came back in time: played to the end
        resumed_prompt = second.of("prompt")[0]
        seen_before = first.of("prompt")[-1]
        # The fresh process holds the whole transcript: at least what the first had seen
        # (the kill may come before or after the first move left).
        assert resumed_prompt["match"] == match_id
        assert resumed_prompt["messages"] >= seen_before["messages"] >= 2
        await server.settle()
        detail = await get_match(server.db, match_id)
        seat = next(s.seat for s in detail.match.seats if s.policy == "agent:alice")
        mine = [t for t in detail.turns if t.seat == seat]
        assert len(mine) >= 2 and all(t.valid for t in mine)  # one process each, at least
        assert detail.match.status == "finished"


@pytest.mark.slow
async def test_an_agent_that_stops_answering_loses_on_time_and_blocks_no_one(
    tmp_path: Path,
) -> None:
    limits = ServerLimits(agent_tick_s=0.05, agent_move_timeout_s=1.0)
    async with serving(
        tmp_path, limits=limits, matchmaker=MatchmakerConfig(fill_after_s=0.0), fill=["random"]
    ) as server:
        silent = await spawn(
            "play",
            "--server",
            server.url,
            "--token",
            await server.token("silent"),
            "--opponents",
            "bot",
            "--think",
            "1e9",
        )
        busy = await spawn(
            "play",
            "--server",
            server.url,
            "--token",
            await server.token("busy"),
            "--opponents",
            "bot",
            "--games",
            "5",
            "--concurrency",
            "2",
        )
        assert await busy.finish() == 0  # others' matches go on meanwhile
        assert len(busy.of("ended")) == 5
        ended = await silent.until(lambda e: e.get("event") == "ended")
        assert ended["result"] == "loss" and ended["status"] == "finished"
        assert "lost on time" in ended["reason"] and ended["forfeited"] == [ended["seat"]]
        assert ended["reward"] == -1.0
        assert await silent.finish() == 0
        await server.settle()
        (match,) = await list_matches(server.db, policy="agent:silent")
        seat = next(s for s in match.seats if s.policy == "agent:silent")
        assert match.status == "finished" and seat.forfeited and seat.reward == -1.0
        ratings = await server.ratings()
        assert ratings["agent:silent"].games == 1
        assert ratings["agent:silent"].mu < ratings["bot:random@1"].mu  # it lost to the bot


@pytest.mark.slow
async def test_a_wrong_or_revoked_token_moves_nothing(tmp_path: Path) -> None:
    limits = ServerLimits(agent_tick_s=0.05, agent_account_poll_s=0.2)
    async with serving(
        tmp_path, limits=limits, matchmaker=MatchmakerConfig(fill_after_s=0.0), fill=["random"]
    ) as server:
        alice_token = await server.token("alice")
        carol_token = await server.token("carol")
        alice = Waiting(server.url, alice_token, reconnect_s=0.0)
        await alice.connect()
        play = asyncio.create_task(alice.play("TicTacToe-v0", 1, opponents=["bot"]))
        await wait_for(lambda: bool(alice.prompts))
        match_id = alice.prompts[0].match_id
        wrong = alice_token[:-4] + ("AAAA" if not alice_token.endswith("AAAA") else "BBBB")
        for token, auth_answer, refusal in (
            (wrong, "unauthorized", "authenticated (auth)"),
            (carol_token, "authenticated", "agent:carol holds no seat"),
        ):
            intruder = await spawn("intrude", "--server", server.url, "--token", token,
                                   "--match", match_id)  # fmt: skip
            assert await intruder.finish() == 0
            frames = [e["frame"] for e in intruder.of("frame")]
            auth, move, resign = frames[1], frames[2], frames[3]
            assert auth["type"] == auth_answer or auth.get("code") == auth_answer
            assert move["code"] == "forbidden" and refusal in move["message"]
            assert resign["code"] == "forbidden"
            assert alice_token not in json.dumps(frames)
        assert server.hub.stats.auth_failures >= 1
        # revoked through the CLI while alice plays: her connection closes, her seat forfeits
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "arena_cli", "agents", "revoke", "alice",
            "--db", str(tmp_path / "arena.db"), cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await cli.communicate()
        assert cli.returncode == 0 and b"revoked agent:alice" in out
        with pytest.raises((ConnectionError, AgentError)):
            await asyncio.wait_for(play, HANG_GUARD_S)
        await server.ended(match_id)
        await server.settle()
        (match,) = await list_matches(server.db, policy="agent:alice")
        seat = next(s for s in match.seats if s.policy == "agent:alice")
        assert match.status == "finished" and seat.forfeited and "revoked" in match.reason
        detail = await get_match(server.db, match_id)
        assert [t for t in detail.turns if t.seat == seat.seat] == []  # nobody moved for her
        intruder = await spawn("intrude", "--server", server.url, "--token", alice_token,
                               "--match", match_id)  # fmt: skip
        assert await intruder.finish() == 0
        frames = [e["frame"] for e in intruder.of("frame")]
        assert frames[1]["code"] == "unauthorized" and frames[2]["code"] == "forbidden"


# -- in-process agents (real server, real sockets) --------------------------------------------


async def test_hello_names_the_agent_protocol_and_a_script_without_origin_may_connect(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server:
        async with connect(server.url) as ws:  # websockets sends no Origin
            hello = await recv(ws)
            assert hello["agent_protocol"] == 1
            assert hello["limits"]["agent_move_timeout_s"] == 60.0
        agent = AgentClient(server.url, await server.token("alice"), bot_policy("random"))
        await agent.connect()
        assert agent.agent == "agent:alice" and agent.limits["max_agent_matches"] == 16
        await agent.close()


async def test_a_casual_match_is_recorded_and_rates_no_one(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        a = AgentClient(server.url, await server.token("a"), bot_policy("random"))
        b = AgentClient(server.url, await server.token("b"), bot_policy("random", seed=1))
        ra, rb = await asyncio.wait_for(
            asyncio.gather(
                a.play("TicTacToe-v0", 2, rated=False), b.play("TicTacToe-v0", 2, rated=False)
            ),
            HANG_GUARD_S,
        )
        assert len(ra) == len(rb) == 2 and not any(r.rated for r in ra)
        ratings = await server.ratings()
        assert "agent:a" not in ratings and "agent:b" not in ratings
        assert server.recording.keeper.stats.rated == 0
        await server.settle()
        assert len(await list_matches(server.db, policy="agent:a")) == 2
        await a.close()
        await b.close()
        # Stored as casual: neither a rebuild of the ratings nor a Bradley-Terry fit of
        # the stored results counts them.
        from matchmaking.leaderboard import leaderboard
        from matchmaking.live import rebuild_ratings

        assert await rebuild_ratings(server.db, "TicTacToe-v0") == 0
        board = await leaderboard(server.db, "TicTacToe-v0", "bt")
        assert board.matches == 0 and board.rows == []


async def test_games_with_more_seats_fill_them_all_with_agents(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        agents = [
            AgentClient(server.url, await server.token(f"p{i}"), bot_policy("random", seed=i))
            for i in range(3)
        ]
        results = await asyncio.wait_for(
            asyncio.gather(*(a.play("LowestUnique-v0", 1, players=3) for a in agents)),
            HANG_GUARD_S,
        )
        ids = {r[0].match_id for r in results}
        assert len(ids) == 1 and {r[0].seat for r in results} == {0, 1, 2}
        await server.settle()
        (match,) = await list_matches(server.db, game="LowestUnique-v0")
        assert sorted(s.policy for s in match.seats) == ["agent:p0", "agent:p1", "agent:p2"]
        for a in agents:
            await a.close()


async def test_spectators_of_an_agent_match_see_no_private_card(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        a = Waiting(server.url, await server.token("a"))
        b = Waiting(server.url, await server.token("b"))
        a.go.set()
        async with connect(server.url) as spectator:
            await recv(spectator)
            await spectator.send(json.dumps({"type": "subscribe", "stream": "lobby"}))
            await recv(spectator)
            plays = [
                asyncio.create_task(x.play("KuhnPoker-v0", 1, opponents=["agent"])) for x in (a, b)
            ]
            await wait_for(lambda: bool(a.paired))
            match_id = a.paired[0].match_id
            await spectator.send(
                json.dumps({"type": "subscribe", "stream": "match", "match_id": match_id})
            )
            b.go.set()
            seen: list[str] = []
            while True:
                frame = await recv(spectator)
                if frame.get("type") == "lobby_update":
                    continue
                if frame.get("kind") == "ended" or (
                    frame.get("type") == "snapshot" and frame["status"] != "live"
                ):
                    break
                seen.append(json.dumps(frame))
            await asyncio.wait_for(asyncio.gather(*plays), HANG_GUARD_S)
        private = {
            m.text
            for agent in (a, b)
            for turn in agent.prompts
            for m in turn.messages
            if m.to is not None and "Your card is" in m.text
        }
        assert private, "the agents were shown their cards"
        card_lines = {line for text in private for line in text.splitlines() if "card" in line}
        assert seen and not any(line in frame for line in card_lines for frame in seen)
        for prompt in a.prompts:  # each agent saw only its own private messages
            assert all(m.to in (None, prompt.seat) for m in prompt.messages)
        await a.close()
        await b.close()


async def test_a_person_in_the_browser_seeks_and_plays_an_agent(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        agent = AgentClient(server.url, await server.token("alice"), bot_policy("random"))
        await agent.connect()
        origin = f"http://127.0.0.1:{server.hub.port}"
        async with connect(server.url, origin=origin) as browser:  # type: ignore[arg-type]
            await recv(browser)
            await browser.send(json.dumps({"type": "seek", "game": "TicTacToe-v0", "id": 1}))
            assert (await recv(browser))["type"] == "seeking"
            play = asyncio.create_task(agent.play("TicTacToe-v0", 1))
            created = await recv(browser)
            assert created["type"] == "match_created" and created["ref"] == 1
            match_id, token, seat = created["match"], created["token"], created["seat"]
            await browser.send(json.dumps({"type": "subscribe", "stream": "match",
                                           "match_id": match_id, "token": token}))  # fmt: skip
            while True:
                frame = await recv(browser)
                pending = frame.get("pending") if frame.get("type") == "snapshot" else None
                waiting = frame if frame.get("kind") == "waiting" else pending
                if waiting and waiting.get("seat") == seat and waiting.get("legal_moves"):
                    move = waiting["legal_moves"][0]
                    await browser.send(json.dumps({"type": "move", "match_id": match_id,
                                                   "token": token, "text": move}))  # fmt: skip
                if frame.get("kind") == "ended":
                    break
            (result,) = await asyncio.wait_for(play, HANG_GUARD_S)
        assert result.status == "finished" and result.match_id == match_id
        await server.settle()
        detail = await get_match(server.db, match_id)
        assert sorted(s.policy for s in detail.match.seats) == ["agent:alice", "human"]
        await agent.close()


async def test_rated_results_reach_leaderboard_subscribers_live(tmp_path: Path) -> None:
    async with serving(
        tmp_path, matchmaker=MatchmakerConfig(fill_after_s=0.0), fill=["random"]
    ) as server:
        async with connect(server.url) as board:
            await recv(board)
            await board.send(json.dumps({"type": "subscribe", "stream": "ratings",
                                         "game": "TicTacToe-v0", "id": 5}))  # fmt: skip
            first = await recv(board)
            assert first["type"] == "ratings" and first["rows"] == [] and first["ref"] == 5
            agent = AgentClient(server.url, await server.token("alice"), bot_policy("random"))
            (result,) = await asyncio.wait_for(agent.play("TicTacToe-v0", 1), HANG_GUARD_S)
            changed = await recv(board)
            assert changed["type"] == "ratings_changed" and changed["match"] == result.match_id
            assert {r["policy"] for r in changed["rows"]} == {"agent:alice", "bot:random@1"}
            await wait_for(lambda: "TicTacToe-v0" in agent.ratings)
            assert agent.ratings["TicTacToe-v0"]["agent"] == "agent:alice"
            await agent.close()
        await server.settle()  # the leaderboard counts stored matches
        status, body = await http_get(server, "/api/leaderboard?game=TicTacToe-v0")
        assert status == 200
        rows = json.loads(body)["rows"]
        assert {r["policy"] for r in rows} == {"agent:alice", "bot:random@1"}


async def test_the_agents_api_lists_who_is_online(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        agent = Waiting(server.url, await server.token("alice"))
        await agent.connect()
        await agent.seek("TicTacToe-v0", opponents=["agent"])
        status, body = await http_get(server, "/api/agents")
        assert status == 200
        data = json.loads(body)
        assert data["agents"] == [
            {"agent": "agent:alice", "connections": 1, "matches": [], "seeks": 1}
        ]
        assert data["status"]["seeks"] == 1
        assert server.tokens["alice"] not in body.decode()
        await agent.close()
        await wait_for(lambda: len(server.hub.core.agents.queue) == 0)


async def test_per_connection_caps_refuse_more_seeks_with_the_reason(tmp_path: Path) -> None:
    limits = ServerLimits(agent_tick_s=0.05, max_agent_matches_per_connection=2)
    async with serving(tmp_path, limits=limits) as server:
        agent = Waiting(server.url, await server.token("alice"))
        await agent.connect()
        await agent.seek("TicTacToe-v0", opponents=["agent"])
        await agent.seek("TicTacToe-v0", opponents=["agent"])
        with pytest.raises(AgentError) as info:
            await agent.seek("TicTacToe-v0", opponents=["agent"])
        assert info.value.code == "too_many_matches"
        with pytest.raises(AgentError) as info:
            await agent.seek("NoSuchGame-v0")
        assert info.value.code == "bad_game" and "NoSuchGame-v0" in info.value.message
        await agent.close()


async def http_get(server: Server, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection(server.hub.host, server.hub.port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.hub.port}\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), HANG_GUARD_S)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_a_client_back_after_its_match_ended_is_not_left_waiting(tmp_path: Path) -> None:
    """The seat forfeits while the client cannot reconnect; once back, the server replays
    how it ended, and ``play`` returns that match as the server ended it."""
    limits = ServerLimits(agent_tick_s=0.05, agent_reconnect_grace_s=0.3)
    async with serving(
        tmp_path, limits=limits, matchmaker=MatchmakerConfig(fill_after_s=0.0), fill=["random"]
    ) as server:
        agent = Waiting(server.url, await server.token("alice"), reconnect_s=30.0)
        await agent.connect()
        play = asyncio.create_task(agent.play("TicTacToe-v0", 1, opponents=["bot"]))
        await wait_for(lambda: bool(agent.paired))
        match_id = agent.paired[0].match_id
        reopen = agent._open
        blocked = asyncio.Event()

        async def unreachable() -> None:
            blocked.set()
            raise OSError("the network is down")

        agent._open = unreachable  # type: ignore[method-assign]
        assert agent._ws is not None
        await agent._ws.close()  # the connection drops; reconnecting fails for now
        await asyncio.wait_for(blocked.wait(), HANG_GUARD_S)
        await server.ended(match_id)  # the grace period passed: the seat forfeited
        await server.settle()
        (stored,) = await list_matches(server.db, policy="agent:alice")
        assert stored.status == "finished"
        agent._open = reopen  # type: ignore[method-assign]
        (result,) = await asyncio.wait_for(play, HANG_GUARD_S)
        assert result.match_id == match_id and result.status == "finished"
        assert result.result == "loss" and agent.live_matches == []
        assert result.reason == "agent:alice left and was not back within 0.3 s"
        await agent.close()


class Together(AgentClient):
    """An agent that bids the lowest card it holds once ``go`` is set, and tells
    ``prompted`` of each prompt."""

    def __init__(self, *args: Any, prompted: asyncio.Queue[AgentTurn], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.go = asyncio.Event()
        self.prompted = prompted
        self.paired: list[MatchInfo] = []

    def on_paired(self, match: MatchInfo) -> None:
        self.paired.append(match)

    def on_prompt(self, turn: AgentTurn) -> None:
        self.prompted.put_nowait(turn)

    async def act(self, match: MatchInfo, turn: AgentTurn) -> str:
        await self.go.wait()
        return (turn.legal_moves or ["[1]"])[0]


async def test_two_agents_get_your_turn_at_once_and_spectators_see_who_bid_never_what(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server:
        prompted: asyncio.Queue[AgentTurn] = asyncio.Queue()
        a = Together(server.url, await server.token("a"), prompted=prompted)
        b = Together(server.url, await server.token("b"), prompted=prompted)
        plays = [
            asyncio.create_task(x.play("Goofspiel-v0", 1, opponents=["agent"])) for x in (a, b)
        ]
        first = [await asyncio.wait_for(prompted.get(), 30) for _ in range(2)]
        # Both seats are asked for round 1 at the same time, neither having moved.
        assert {t.match_id for t in first} == {a.paired[0].match_id}
        assert sorted(t.seat for t in first) == [0, 1]
        assert [t.movers for t in first] == [(0, 1), (0, 1)]
        assert sorted(t.turn_index for t in first) == [0, 1]
        match_id = first[0].match_id
        async with connect(server.url) as spectator:
            await recv(spectator)
            await spectator.send(
                json.dumps({"type": "subscribe", "stream": "match", "match_id": match_id})
            )
            snapshot = await recv(spectator)
            assert snapshot["round"] == {"round": 1, "movers": [0, 1], "moved": []}
            mine = a if a.paired[0].seat == 0 else b
            mine.go.set()  # seat 0 bids; seat 1 has not
            frame = await recv(spectator)
            assert frame["kind"] == "round" and frame["moved"] == [0]
            status, body = await http_get(server, f"/api/matches/{match_id}")
            live = json.loads(body)
            assert status == 200 and live["status"] == "live" and live["turns"] == []
            assert live["round"]["moved"] == [0]
            assert "[1]" not in body.decode()  # seat 0's bid is nowhere
            other = b if mine is a else a
            other.go.set()
            turns = []
            while len(turns) < 2:
                frame = await recv(spectator)
                if frame.get("kind") == "turn":
                    turns.append(frame["turn"])
            # The round is over: both bids at once, in seat order, shown to spectators.
            assert [(t["seat"], t["action"], t["round"]) for t in turns] == [
                (0, "[1]", 1),
                (1, "[1]", 1),
            ]
        results = await asyncio.wait_for(asyncio.gather(*plays), 60)
        assert {r[0].status for r in results} == {"finished"}
        await server.settle()
        (stored,) = await list_matches(server.db, game="Goofspiel-v0")
        assert stored.num_turns == 26 and stored.status == "finished"
        for agent in (a, b):
            await agent.close()


async def test_goofspiel_agents_fill_three_and_four_seats(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        for players in (3, 4):
            agents = [
                AgentClient(server.url, await server.token(f"g{i}"), bot_policy("match", seed=i))
                for i in range(players)
            ]
            results = await asyncio.wait_for(
                asyncio.gather(*(x.play("Goofspiel-v0", 1, players=players) for x in agents)),
                60,
            )
            assert {r[0].seat for r in results} == set(range(players))
            assert {r[0].status for r in results} == {"finished"}
            for agent in agents:
                await agent.close()


async def test_a_language_model_fills_a_seat_under_its_recorded_name(tmp_path: Path) -> None:
    """``arena serve --fill model:DIR``: the model's weights load as the server starts, an
    agent that seeks a ``model`` opponent plays it, and the match is recorded and rated
    under the model's name with its weights' hash (a tiny model here; SmolLM2 is the same
    seat, ``tests/test_real_model.py``)."""
    from tests.tiny_models import write_tiny_model_dir

    path = write_tiny_model_dir(tmp_path / "tiny-llama", "llama")
    async with serving(
        tmp_path, matchmaker=MatchmakerConfig(fill_after_s=0.0), fill=[f"model:{path}"]
    ) as server:
        agent = AgentClient(server.url, await server.token("alice"), bot_policy("random"))
        play = agent.play("TicTacToe-v0", 1, opponents=["model"])
        (result,) = await asyncio.wait_for(play, HANG_GUARD_S)
        await agent.close()
        await server.settle()
        detail = await get_match(server.db, result.match_id)
        policies = sorted(s.policy for s in detail.match.seats)
        assert policies[0] == "agent:alice"
        name, digest = policies[1].split("@")
        assert name == "model:tiny-llama" and len(digest) == 8
        assert detail.match.status == "finished"
        ratings = await server.ratings()
        assert ratings[policies[1]].games == 1
        # The kinds a seek may name now include the model kinds, and nothing else.
        bob = Waiting(server.url, await server.token("bob"))
        await bob.connect()
        with pytest.raises(AgentError) as info:
            await bob.seek("TicTacToe-v0", opponents=["model", "robot"])
        assert "agent, human, bot, checkpoint, model, openai" in str(info.value)
        await bob.close()


async def test_a_remote_agent_plays_as_any_player_a_command_seats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``arena agent --policy`` seats its player as ``arena play`` does
    (``matchmaking.players.player_spec``): a served model here, answering from a chat
    server on loopback, against an agent playing a bot."""
    from matchmaking.served import close_clients
    from tools.chatserver import ChatServer, legal_move_responder
    from web.cli import agent_policy

    monkeypatch.setenv("ARENA_TEST_AGENT_KEY", "sk-agent")
    async with ChatServer(legal_move_responder(), key="sk-agent") as chat:
        text = f"openai:{chat.base_url}#{chat.model}?key_env=ARENA_TEST_AGENT_KEY"
        served = await agent_policy(text, "TicTacToe-v0")
        async with serving(tmp_path) as server:
            a = AgentClient(server.url, await server.token("served"), served)
            b = AgentClient(server.url, await server.token("bot"), bot_policy("random"))
            ra, rb = await asyncio.wait_for(
                asyncio.gather(
                    a.play("TicTacToe-v0", 2, rated=False), b.play("TicTacToe-v0", 2, rated=False)
                ),
                HANG_GUARD_S,
            )
            await a.close()
            await b.close()
        await close_clients()
    assert len(ra) == len(rb) == 2
    assert all(r.status == "finished" for r in ra)
    assert chat.counts["ok"] >= 2  # the served model answered its moves
    with pytest.raises(ValueError, match="cannot be seated"):
        await agent_policy("learner:x", "TicTacToe-v0")
