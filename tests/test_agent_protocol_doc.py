"""``docs/protocol.md``, "Remote agents", checked against a real ``arena serve``: a process on
a free loopback port with a temporary SQLite file, tokens made by ``arena agents create``
in a subprocess, and an agent that is nothing but the raw ``websockets`` client sending
and reading the frames exactly as the document writes them."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.conftest import HANG_GUARD_S
from tests.test_agents import recv as recv_frame

ROOT = Path(__file__).resolve().parents[1]
GAME = "TicTacToe-v0"
HEADER = {
    "match",
    "game_id",
    "players",
    "num_players",
    "rated",
    "move_timeout_s",
    "reconnect_grace_s",
    "seat",
}
"""A match header's fields, as the document lists them."""
HELLO_LIMITS = {
    "max_message_bytes",
    "rate_per_s",
    "rate_burst",
    "max_subscriptions",
    "history_limit",
    "human_move_timeout_s",
    "max_human_matches_per_connection",
    "agent_move_timeout_s",
    "agent_reconnect_grace_s",
    "max_agent_matches",
    "max_agent_matches_per_connection",
    "agent_rate_per_s",
    "agent_rate_burst",
}
"""``hello.limits``, as the document lists them."""
YOUR_TURN = {
    "type",
    "match",
    "seat",
    "turn",
    "deadline",
    "time_left_s",
    "messages",
    "from",
    "new_from",
    "prompt",
    "legal_moves",
}
MESSAGE_KINDS = {"prompt", "action", "description", "board", "info", "admin"}


@dataclass
class Served:
    """An ``arena serve`` process and the tokens of the accounts made for it."""

    http: str
    tokens: dict[str, str]

    @property
    def ws(self) -> str:
        return self.http.replace("http://", "ws://", 1) + "ws"


def arena(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "arena_cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=3 * HANG_GUARD_S, check=True,
    )  # fmt: skip


def create_token(name: str, db: Path) -> str:
    """``arena agents create NAME``: the token is the line after ``created agent:NAME``."""
    lines = arena("agents", "create", name, "--db", str(db), cwd=db.parent).stdout.splitlines()
    assert lines[0].startswith(f"created agent:{name}; its token"), lines
    token = lines[1]
    assert token.startswith("arena_") and len(token) <= 128
    return token


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("served")
    db = folder / "arena.db"
    tokens = {name: create_token(name, db) for name in ("alice", "bob")}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = folder / "serve.err"
    with log.open("w") as err:  # a file: a chatty server never blocks on a full pipe
        proc = subprocess.Popen(
            [sys.executable, "-m", "arena_cli", "serve", "--db", str(db), "--port", "0",
             "--no-follow", "--fill-after-s", "0"],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bots fill a seek's seat at once (--fill-after-s 0)
        assert line.startswith("Arena is served at http://127.0.0.1:"), line + log.read_text()
        yield Served(line.split()[4], tokens)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=HANG_GUARD_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def send(ws: ClientConnection, message: dict[str, Any]) -> None:
    await ws.send(json.dumps(message))


_early: dict[int, list[dict[str, Any]]] = {}
"""Frames that arrived while ``ask`` waited for an answer, per connection, in order."""


async def recv(ws: ClientConnection, timeout: float = HANG_GUARD_S) -> dict[str, Any]:
    """The connection's next frame (those ``ask`` set aside first)."""
    early = _early.get(id(ws))
    if early:
        return early.pop(0)
    return await recv_frame(ws, timeout)


async def ask(ws: ClientConnection, message: dict[str, Any]) -> dict[str, Any]:
    """Send a request and read its answer (the frame with its ``ref``; a prompt or an end
    that the game produced meanwhile may come first, and is kept for ``recv``)."""
    await send(ws, message)
    while True:
        frame = await recv_frame(ws)
        if "id" not in message or frame.get("ref") == message["id"]:
            return frame
        _early.setdefault(id(ws), []).append(frame)


async def get_json(url: str) -> Any:
    def get() -> Any:
        with urllib.request.urlopen(url, timeout=HANG_GUARD_S) as response:
            return json.loads(response.read())

    return await asyncio.to_thread(get)


async def hello_and_auth(ws: ClientConnection, token: str, ref: Any = 1) -> dict[str, Any]:
    hello = await recv(ws)
    assert hello["type"] == "hello" and hello["agent_protocol"] == 1
    assert set(hello["limits"]) == HELLO_LIMITS
    auth = await ask(ws, {"type": "auth", "id": ref, "token": token, "agent_protocol": 1})
    assert auth["type"] == "authenticated" and auth["ref"] == ref
    assert auth["limits"] == hello["limits"] and auth["resumed"] == []
    return auth


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """``your_turn.prompt`` as the document defines it from the messages."""
    return "\n".join(
        f"[{'GAME' if m['from'] == -1 else 'Player ' + str(m['from'])}] {m['text']}"
        for m in messages
    )


async def test_an_agent_plays_a_whole_match_as_the_document_says(served: Served) -> None:
    async with connect(served.ws) as ws:
        auth = await hello_and_auth(ws, served.tokens["alice"])
        assert auth["agent"] == "agent:alice" and auth["name"] == "alice"
        assert auth["agent_protocol"] == 1
        online = await get_json(served.http + "api/agents")
        assert online["agents"] == [
            {"agent": "agent:alice", "connections": 1, "matches": [], "seeks": 0}
        ]
        assert served.tokens["alice"] not in json.dumps(online)

        seeking = await ask(ws, {"type": "seek", "id": 2, "game": GAME, "opponents": ["bot"]})
        assert seeking["type"] == "seeking" and seeking["ref"] == 2
        assert seeking["game_id"] == GAME and seeking["players"] == 2
        assert seeking["rated"] is True and seeking["opponents"] == ["bot"]
        assert set(seeking["rating"]) == {"mu", "sigma"}

        paired = await recv(ws)  # before any your_turn of the match
        assert paired["type"] == "paired" and paired["ref"] == 2
        assert paired["seek"] == seeking["seek"]
        assert set(paired) == HEADER | {"type", "ref", "seek"}
        match_id, seat = paired["match"], paired["seat"]
        assert paired["game_id"] == GAME and paired["num_players"] == 2 and paired["rated"]
        assert paired["players"][seat] == "agent:alice"
        assert paired["players"][1 - seat] in ("random", "optimal")  # a bot filled the seat

        transcript: list[dict[str, Any]] = []
        rng = random.Random(0)
        moves = 0
        after: dict[str, dict[str, Any]] = {}  # match_ended, and rating (a rated match)
        while len(after) < 2:
            frame = await recv(ws)
            if frame["type"] != "your_turn":
                after[frame["type"]] = frame
                continue
            assert "match_ended" not in after
            assert set(frame) == YOUR_TURN
            assert frame["match"] == match_id and frame["seat"] == seat
            assert frame["from"] == frame["new_from"] == len(transcript)  # only what is new
            transcript[frame["from"] :] = frame["messages"]
            for message in frame["messages"]:
                assert set(message) == {"from", "to", "kind", "text"}
                assert message["kind"] in MESSAGE_KINDS and message["to"] in (None, seat)
            assert frame["prompt"] == prompt_text(transcript[frame["new_from"] :])
            assert 0 < frame["time_left_s"] <= paired["move_timeout_s"]
            move = rng.choice(frame["legal_moves"])
            ack = await ask(
                ws,
                {"type": "move", "id": f"m{frame['turn']}", "match_id": match_id,
                 "turn": frame["turn"], "text": move},
            )  # fmt: skip
            assert ack == {
                "type": "move_ack",
                "ref": f"m{frame['turn']}",
                "match": match_id,
                "seat": seat,
                "index": frame["turn"],
            }
            moves += 1

        assert set(after) == {"match_ended", "rating"}, after
        ended, rating = after["match_ended"], after["rating"]
        assert moves >= 2  # the second seat, lost as fast as it can be (X wins on move 5)
        assert ended["match"] == match_id and ended["seat"] == seat
        assert ended["status"] == "finished" and ended["forfeited"] == []
        assert ended["rated"] is True
        mine, theirs = ended["rewards"][seat], ended["rewards"][1 - seat]
        expected = "win" if mine > theirs else "loss" if mine < theirs else "draw"
        assert ended["result"] == expected
        assert set(ended) == {"type", "match", "seat", "status", "reason", "rewards",
                              "forfeited", "result", "rated", "replayed"}  # fmt: skip
        assert ended["replayed"] is False
        assert set(rating) == {"type", "game_id", "match", "agent", "rating", "sigma", "lower",
                               "upper", "games", "mu", "ordinal"}  # fmt: skip
        assert rating["agent"] == "agent:alice" and rating["games"] >= 1
        assert rating["game_id"] == GAME and rating["match"] == match_id
        assert rating["mu"] == rating["rating"]
        assert rating["ordinal"] == pytest.approx(rating["mu"] - 3 * rating["sigma"])
        assert rating["lower"] == pytest.approx(rating["rating"] - 1.96 * rating["sigma"], 1e-3)


async def test_refusals_carry_the_documented_codes(served: Served) -> None:
    token = served.tokens["bob"]
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    async with connect(served.ws) as ws:
        assert (await recv(ws))["type"] == "hello"
        before = await ask(ws, {"type": "move", "id": 1, "match_id": "0" * 32, "text": "[4]"})
        assert before["type"] == "error" and before["code"] == "forbidden" and before["ref"] == 1
        refused = await ask(ws, {"type": "auth", "id": 2, "token": wrong})
        assert refused["type"] == "error" and refused["code"] == "unauthorized"
        assert refused["ref"] == 2 and token not in json.dumps(refused)
        version = await ask(ws, {"type": "auth", "id": 3, "token": token, "agent_protocol": 2})
        assert version["code"] == "bad_protocol"
        auth = await ask(ws, {"type": "auth", "id": 4, "token": token})  # the same connection
        assert auth["type"] == "authenticated" and auth["agent"] == "agent:bob"
        again = await ask(ws, {"type": "auth", "id": 5, "token": token})
        assert again["code"] == "bad_message"

        for seek, code in (
            ({"game": GAME, "opponents": ["robot"]}, "bad_message"),
            ({"game": GAME, "rated": "yes"}, "bad_message"),
            ({"game": GAME, "players": 3}, "bad_game"),
            ({"game": "TicTacToe-v9"}, "bad_game"),
        ):
            answer = await ask(ws, {"type": "seek", "id": 6, **seek})
            assert answer["type"] == "error" and answer["code"] == code, (seek, answer)
        unknown = await ask(ws, {"type": "cancel_seek", "id": 7, "seek": "0123456789abcdef"})
        assert unknown["code"] == "unknown_seek"
        casual = {"type": "seek", "id": 8, "game": GAME, "rated": False, "opponents": ["agent"]}
        seeking = await ask(ws, casual)
        assert seeking["type"] == "seeking" and seeking["rated"] is False
        cancelled = await ask(ws, {"type": "cancel_seek", "id": 9, "seek": seeking["seek"]})
        assert cancelled == {"type": "seek_cancelled", "ref": 9, "seek": seeking["seek"]}
        nowhere = await ask(ws, {"type": "move", "id": 10, "match_id": "0" * 32, "text": "[4]"})
        assert nowhere["code"] == "unknown_match"

        # resign: the seat forfeits at once
        await send(ws, {"type": "seek", "id": 11, "game": GAME, "opponents": ["bot"]})
        assert (await recv(ws))["type"] == "seeking"
        paired = await recv(ws)
        assert paired["type"] == "paired" and paired["ref"] == 11
        turn = await recv(ws)
        assert turn["type"] == "your_turn" and turn["match"] == paired["match"]
        early = await ask(
            ws,
            {"type": "move", "id": 12, "match_id": paired["match"], "turn": turn["turn"] + 1,
             "text": turn["legal_moves"][0]},
        )  # fmt: skip
        assert early["code"] == "not_your_turn"
        resigned = await ask(ws, {"type": "resign", "id": 13, "match_id": paired["match"]})
        assert resigned == {
            "type": "resigned",
            "ref": 13,
            "match": paired["match"],
            "seat": paired["seat"],
        }
        ended = await recv(ws)
        assert ended["type"] == "match_ended" and ended["result"] == "loss"
        assert ended["reason"] == "agent:bob resigned" and ended["forfeited"] == [paired["seat"]]
