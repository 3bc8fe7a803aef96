"""The agent protocol's edges, each against a real ``arena serve`` process (a free loopback
port, a temporary SQLite file, tokens from ``arena agents create``) and a raw
``websockets`` client that sends and reads the frames as ``docs/protocol.md`` writes them:
a resign before the first prompt, ``ref`` on every answer, ``match_over`` after the end,
the burst after ``auth``, what an agent away at the end gets, ``num_turns`` live and after
a crash, and what agents get when the server stops (SIGINT, SIGTERM) and after it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import HANG_GUARD_S
from tests.test_agent_protocol_doc import create_token

ROOT = Path(__file__).resolve().parents[1]
GAME = "TicTacToe-v0"
RESIGN_ROUNDS = 50


@dataclass
class Server:
    """An ``arena serve`` process on a database."""

    proc: subprocess.Popen[str]
    http: str

    @property
    def ws(self) -> str:
        return self.http.replace("http://", "ws://", 1) + "ws"

    def stop(self, sig: int = signal.SIGINT) -> int:
        """Send ``sig``; the exit code."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@contextlib.contextmanager
def serving(db: Path, *options: str) -> Iterator[Server]:
    """``arena serve`` on ``db`` (bots fill a seek's seat at once) while the body runs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with (db.parent / "serve.err").open("a") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "arena_cli", "serve", "--db", str(db), "--port", "0",
             "--no-follow", "--fill-after-s", "0", "--fill", "random", *options],
            cwd=db.parent, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Arena is served at"), line + (db.parent / "serve.err").read_text()
        yield Server(proc, line.split()[4])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "arena.db"


@pytest.fixture
def tokens(db: Path) -> dict[str, str]:
    return {name: create_token(name, db) for name in ("alice", "bob")}


class Agent:
    """A raw websocket client: frames in the order they came, answers by ``ref``."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self._read = 0

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def next(self, timeout: float = HANG_GUARD_S) -> dict[str, Any]:
        """The next frame not read yet."""
        if self._read == len(self.frames):
            self.frames.append(json.loads(await asyncio.wait_for(self.ws.recv(), timeout)))
        frame = self.frames[self._read]
        self._read += 1
        return frame

    async def until(self, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Read frames until one for which ``done`` holds; it."""
        while True:
            frame = await self.next()
            if done(frame):
                return frame

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request with an id; its answer (frames before it are kept)."""
        await self.send(message)
        start = self._read
        while True:
            frame = await self.next()
            if frame.get("ref") == message["id"] and frame.get("type") not in ("paired",):
                del self.frames[self._read - 1]
                self._read = start
                return frame


@contextlib.asynccontextmanager
async def agent(server: Server, token: str | None, **auth: Any) -> AsyncIterator[Agent]:
    """A connection, authenticated with ``token`` (None: not authenticated)."""
    async with connect(server.ws) as ws:
        client = Agent(ws)
        hello = await client.next()
        assert hello["type"] == "hello"
        if token is not None:
            answer = await client.ask({"type": "auth", "id": "auth", "token": token, **auth})
            assert answer["type"] == "authenticated", answer
        yield client


def is_type(kind: str, match: str | None = None) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f.get("type") == kind and (match is None or f.get("match") == match)


async def get_json(url: str) -> Any:
    def get() -> Any:
        with urllib.request.urlopen(url, timeout=HANG_GUARD_S) as response:
            return json.loads(response.read())

    return await asyncio.to_thread(get)


async def seek_bot(client: Agent, ref: str = "s") -> dict[str, Any]:
    """Seek a bot; the ``paired`` frame."""
    await client.send({"type": "seek", "id": ref, "game": GAME, "opponents": ["bot"]})
    return await client.until(is_type("paired"))


# -- resign ----------------------------------------------------------------------------------


async def test_a_resign_before_the_first_prompt_ends_the_match_at_once_every_time(
    db: Path, tokens: dict[str, str]
) -> None:
    """``resign`` sent the moment ``paired`` arrives (before the first ``your_turn`` of a
    seat that moves first, or while the bot thinks): ``resigned``, then ``match_ended``
    at once, and no prompt after the resignation; 50 times. The move clock is 10 minutes:
    a match that went on would keep the test waiting for a frame that never comes."""
    with serving(db, "--agent-move-timeout-s", "600") as server:
        async with agent(server, tokens["alice"]) as alice:
            first_seat = 0
            for round_ in range(RESIGN_ROUNDS):
                paired = await seek_bot(alice, f"s{round_}")
                match = paired["match"]
                await alice.send({"type": "resign", "id": f"r{round_}", "match_id": match})
                after_resign = False
                while True:
                    frame = await alice.next()
                    if frame.get("match") != match:
                        continue
                    if frame["type"] == "resigned":
                        assert frame == {"type": "resigned", "ref": f"r{round_}",
                                         "match": match, "seat": paired["seat"]}  # fmt: skip
                        after_resign = True
                    elif frame["type"] == "your_turn":
                        assert not after_resign, "a prompt after the resignation"
                    elif frame["type"] == "match_ended":
                        break
                assert frame["status"] == "finished" and frame["result"] == "loss"
                assert frame["reason"] == "agent:alice resigned"
                assert frame["forfeited"] == [paired["seat"]]
                first_seat += paired["seat"] == 0
            query = server.http + "api/matches?policy=agent:alice&limit=100"
            stored = await get_json(query)
            deadline = asyncio.get_running_loop().time() + HANG_GUARD_S
            while len(stored["matches"]) < RESIGN_ROUNDS or any(
                m["status"] == "live" for m in stored["matches"]
            ):  # being written (the recorder stores in batches)
                assert asyncio.get_running_loop().time() < deadline, "the matches hang"
                await asyncio.sleep(0.05)
                stored = await get_json(query)
    assert len(stored["matches"]) == RESIGN_ROUNDS
    assert {m["status"] for m in stored["matches"]} == {"finished"}
    assert 0 < first_seat < RESIGN_ROUNDS  # both seats were dealt: both orders raced


async def test_a_resign_before_the_first_prompt_also_ends_the_other_agents_seat(
    db: Path, tokens: dict[str, str]
) -> None:
    with serving(db, "--agent-move-timeout-s", "600") as server:
        async with agent(server, tokens["alice"]) as alice, agent(server, tokens["bob"]) as bob:
            for who in (alice, bob):
                await who.send({"type": "seek", "id": "s", "game": GAME, "opponents": ["agent"]})
            paired = await alice.until(is_type("paired"))
            await alice.send({"type": "resign", "id": "r", "match_id": paired["match"]})
            ended = await bob.until(is_type("match_ended", paired["match"]))
            assert ended["result"] == "win" and ended["reason"] == "agent:alice resigned"
            mine = await alice.until(is_type("match_ended", paired["match"]))
            assert mine["result"] == "loss"


# -- answers carry the request's id ----------------------------------------------------------


async def test_every_answer_to_a_request_with_an_id_carries_it_back(
    db: Path, tokens: dict[str, str]
) -> None:
    with serving(db) as server:
        async with agent(server, None) as anon:
            unknown = await anon.ask({"type": "nope", "id": 5})
            assert unknown["type"] == "error" and unknown["code"] == "unknown_type"
            not_json_type = await anon.ask({"type": 7, "id": "t"})
            assert not_json_type["code"] == "unknown_type"
            for bad in ([1], {"a": 1}, 1.5, True, "x" * 129, "", 2**60):
                await anon.send({"type": "ping", "id": bad})
                refused = await anon.next()
                assert refused["type"] == "error" and refused["code"] == "bad_message", bad
                assert "ref" not in refused and "'id'" in refused["message"]
            # Over the message rate (a browser's 20/s, bursts of 40): every dropped
            # request is answered rate_limited with its id, so none is silently lost.
            ids = list(range(100, 180))
            for ref in ids:
                await anon.send({"type": "ping", "id": ref})
            answers = [await anon.next() for _ in ids]
            assert [a["ref"] for a in answers] == ids
            kinds = {a["type"] if a["type"] == "pong" else a["code"] for a in answers}
            assert kinds == {"pong", "rate_limited"}
            limited = next(a for a in answers if a["type"] == "error")
            assert "20/s, bursts of 40" in limited["message"]
        async with agent(server, tokens["alice"]) as alice:
            move = await alice.ask({"type": "move", "id": "m", "match_id": "0" * 32, "text": "x"})
            assert move["code"] == "unknown_match" and move["ref"] == "m"


async def test_right_after_auth_the_documented_burst_is_there(
    db: Path, tokens: dict[str, str]
) -> None:
    """150 pings at once right after ``authenticated``: all within the agent's burst of
    200, so 150 pongs, whatever the browser's limits had left."""
    with serving(db) as server:
        async with agent(server, None) as conn:
            for ref in range(30):  # most of a browser's burst of 40, used before the auth
                await conn.send({"type": "ping", "id": ref})
            assert [(await conn.next())["type"] for _ in range(30)] == ["pong"] * 30
            answer = await conn.ask({"type": "auth", "id": "a", "token": tokens["alice"]})
            assert answer["type"] == "authenticated"
            assert answer["limits"]["agent_rate_burst"] == 200
            for ref in range(150):
                await conn.send({"type": "ping", "id": ref})
            answers = [await conn.next() for _ in range(150)]
    assert [a["type"] for a in answers] == ["pong"] * 150
    assert [a["ref"] for a in answers] == list(range(150))


async def test_a_move_or_resign_after_the_end_answers_match_over(
    db: Path, tokens: dict[str, str]
) -> None:
    with serving(db) as server:
        async with agent(server, tokens["alice"]) as alice:
            paired = await seek_bot(alice)
            match = paired["match"]
            await alice.send({"type": "resign", "id": "r", "match_id": match})
            await alice.until(is_type("match_ended", match))
            move = await alice.ask({"type": "move", "id": "m", "match_id": match, "text": "[4]"})
            assert move["type"] == "error" and move["code"] == "match_over" and move["ref"] == "m"
            again = await alice.ask({"type": "resign", "id": "r2", "match_id": match})
            assert again["code"] == "match_over" and again["ref"] == "r2"
        async with agent(server, tokens["bob"]) as bob:
            other = await bob.ask({"type": "move", "id": "m", "match_id": match, "text": "[4]"})
            assert other["code"] == "unknown_match"  # bob held no seat of it


# -- away at the end -------------------------------------------------------------------------


async def test_an_agent_away_when_its_match_ended_hears_the_end_then_the_rating(
    db: Path, tokens: dict[str, str]
) -> None:
    """The connection drops mid-match; the seat forfeits after the grace period. Another
    connection of the account (``resume: false``, open all along) gets nothing of that
    match: it was never told of it. Back, alice gets the end replayed, then its rating:
    never a rating before its match's end."""
    with serving(db, "--reconnect-grace-s", "0.5") as server:
        async with agent(server, tokens["alice"], resume=False) as bystander:
            async with agent(server, tokens["alice"]) as alice:
                paired = await seek_bot(alice)
            match = paired["match"]
            stored = await get_json(server.http + f"api/matches/{match}")
            while stored["status"] == "live":  # the grace period runs out
                stored = await get_json(server.http + f"api/matches/{match}")
            async with agent(server, tokens["alice"]) as back:
                await back.until(is_type("rating"))
            ping = await bystander.ask({"type": "ping", "id": "p"})
            assert ping["type"] == "pong"
    assert [f["type"] for f in back.frames] == ["hello", "match_ended", "rating"]
    _hello, ended, rating = back.frames
    assert ended["match"] == match and ended["replayed"] is True
    assert ended["result"] == "loss" and "was not back within 0.5 s" in ended["reason"]
    assert rating["match"] == match and rating["agent"] == "agent:alice"
    assert rating["rating"] < 1000.0  # it lost to the random bot, the anchor
    assert [f["type"] for f in bystander.frames] == ["hello"]


async def test_a_resume_false_connection_is_told_the_seat_waits_for_a_resuming_one(
    db: Path, tokens: dict[str, str]
) -> None:
    with serving(db, "--agent-move-timeout-s", "600") as server:
        async with agent(server, tokens["alice"]) as first:
            paired = await seek_bot(first)
        async with agent(server, tokens["alice"], resume=False) as watcher:
            move = await watcher.ask(
                {"type": "move", "id": "m", "match_id": paired["match"], "text": "[4]"}
            )
    assert move["code"] == "forbidden"
    assert "held by no connection now" in move["message"] and "resume true" in move["message"]


# -- num_turns ------------------------------------------------------------------------------


async def _listed(server: Server, match: str) -> dict[str, Any]:
    """The match's line in ``/api/matches`` (``num_turns`` -1 while it is not stored)."""
    listed = await get_json(server.http + "api/matches?limit=10")
    found = [m for m in listed["matches"] if m["id"] == match]
    return found[0] if found else {"num_turns": -1}


@pytest.mark.slow
async def test_num_turns_is_true_while_live_and_after_a_crash(
    db: Path, tokens: dict[str, str]
) -> None:
    """A live match's line counts its stored turns (it said 0 until the end); after a
    SIGKILL and a restart the match is aborted with the turns it had stored."""
    with serving(db, "--agent-move-timeout-s", "600") as server:
        async with agent(server, tokens["alice"]) as alice:
            paired = await seek_bot(alice)
            match = paired["match"]
            turn = await alice.until(is_type("your_turn", match))
            text = turn["legal_moves"][0]  # one move (no game ends in four), then it thinks
            await alice.ask({"type": "move", "id": 1, "match_id": match, "text": text})
            turn = await alice.until(is_type("your_turn", match))
            played = turn["turn"]
            assert played >= 2
            line = await _listed(server, match)
            while line["num_turns"] < played:  # the recorder writes the last turns
                line = await _listed(server, match)
            snapshot = await get_json(server.http + f"api/matches/{match}")
            assert line["status"] == "live" and line["num_turns"] == len(snapshot["turns"])
            server.proc.kill()
            server.proc.wait()
    with serving(db) as again:
        line = await _listed(again, match)
        snapshot = await get_json(again.http + f"api/matches/{match}")
    assert line["status"] == "aborted" and snapshot["status"] == "aborted"
    assert line["num_turns"] == len(snapshot["turns"]) == played


# -- the server stops ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_when_the_server_stops_agents_get_their_matches_end_before_the_close(
    db: Path, tokens: dict[str, str], sig: int
) -> None:
    """Alice is connected with a seat waiting for her move, Bob's connection dropped (his
    seat is orphaned): on the signal alice gets ``match_ended`` (aborted, the reason) and
    then the close (1001). After a restart, each reconnects listing the match it held and
    gets its end replayed (Bob learns it only then); an id it held no seat of is
    ``unknown_match``."""
    with serving(db, "--agent-move-timeout-s", "600", "--reconnect-grace-s", "600") as server:
        async with agent(server, tokens["bob"]) as bob_before:
            bob_match = (await seek_bot(bob_before))["match"]
        async with agent(server, tokens["alice"]) as alice:
            paired = await seek_bot(alice)
            match = paired["match"]
            await alice.until(is_type("your_turn", match))
            server.proc.send_signal(sig)
            ended = await alice.until(is_type("match_ended", match))
            with pytest.raises(ConnectionClosed) as closed:
                await alice.next()
        assert server.proc.wait(timeout=HANG_GUARD_S) == 0
    assert ended["status"] == "aborted" and ended["result"] == "aborted"
    assert ended["reason"] == "the server stopped" and ended["rewards"] is None
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    with serving(db) as again:
        async with agent(again, tokens["alice"], matches=[match, bob_match]) as back:
            replayed = await back.until(is_type("match_ended"))
            unknown = await back.until(is_type("error"))
        async with agent(again, tokens["bob"], matches=[bob_match]) as bob:
            bob_end = await bob.until(is_type("match_ended"))
    assert replayed["match"] == match and replayed["replayed"] is True
    assert replayed["status"] == "aborted" and replayed["reason"] == "the server stopped"
    assert replayed["seat"] == paired["seat"] and replayed["rated"] is True
    assert unknown["code"] == "unknown_match" and unknown["ref"] == "auth"
    assert unknown["match"] == bob_match
    assert bob_end["match"] == bob_match and bob_end["status"] == "aborted"
    assert bob_end["reason"] == "the server stopped" and bob_end["replayed"] is True
