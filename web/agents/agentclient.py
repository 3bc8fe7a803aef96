"""A remote agent: play seats on an ``arena serve`` server from your own process.

The agent protocol (``docs/protocol.md``, "Remote agents") over the server's WebSocket, as an
asyncio class. Give it a policy, or subclass it and override ``act``:

    from web.agents import AgentClient, bot_policy

    async with AgentClient("ws://127.0.0.1:8765/ws", token, bot_policy("random")) as agent:
        results = await agent.play("TicTacToe-v0", games=10, rated=True)

    class Mine(AgentClient):
        async def act(self, match: MatchInfo, turn: AgentTurn) -> str:
            return turn.legal_moves[0] if turn.legal_moves else "[0]"

A policy is a factory: called once per seat of a match (``MatchInfo``), it returns a
``SeatPolicy`` whose ``act(turn)`` answers each turn with the move's text (these types are
in ``web.agents.agenttypes``). A seat's ``AgentTurn`` holds its whole transcript
(``messages``, only what this seat was shown), where the new messages start, and the legal
moves; ``turn.seat_turn`` is the same turn as the server's own seat agents get it
(``arena.seats.SeatTurn``), so a bot or a checkpoint's ``arena.seatview.SeatView`` prompts
exactly as in training.

Clocks: each move must reach the server before ``turn.deadline``; a slow policy loses on
time. If the connection drops, the client connects again (``reconnect_s``: for how long it
keeps trying) and the server gives back its seats with their pending turns, as long as it
is back within the server's grace period.

Ready-made policies (a bot, a sampling client) are in ``web.agents.agentpolicies``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

from games.api import GameMessage, MessageKind
from web.agents.agenttypes import (
    AgentError,
    AgentTurn,
    MatchInfo,
    MatchResult,
    PolicyFactory,
    SeatPolicy,
)
from web.protocol import AGENT_PROTOCOL_VERSION

log = logging.getLogger("arena.client")

AGENT_PROTOCOL = AGENT_PROTOCOL_VERSION
"""The agent protocol version this client speaks (the server's, ``web.protocol``)."""
DEFAULT_RECONNECT_S = 60.0
"""For how long a dropped client keeps trying to connect again."""
MAX_LISTED = 64
"""Most matches an ``auth`` lists (the server's ``MAX_LISTED_MATCHES``)."""
MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest frame the client accepts (a resumed seat's transcript can be long)."""


@dataclass
class _Seat:
    info: MatchInfo
    policy: SeatPolicy | None
    messages: list[GameMessage] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


def _message(m: dict[str, Any]) -> GameMessage:
    try:
        kind = MessageKind(m.get("kind", "info"))
    except ValueError:
        kind = MessageKind.INFO
    to = m.get("to")
    return GameMessage(int(m.get("from", -1)), str(m.get("text", "")), kind, to)


class AgentClient:
    """An agent connected to an Arena server (see the module's docstring).

    ``url``: the server's WebSocket (``ws://HOST:PORT/ws``; an ``http://`` page address is
    accepted too). ``token``: the agent's token (``arena agents create NAME``).
    ``policy``: a factory of seat policies (None: override ``act``). ``reconnect_s``: for
    how long to keep connecting again after the connection drops (0: never).
    """

    def __init__(
        self,
        url: str,
        token: str,
        policy: PolicyFactory | None = None,
        *,
        reconnect_s: float = DEFAULT_RECONNECT_S,
        open_timeout_s: float = 10.0,
    ) -> None:
        self.url = _ws_url(url)
        self._token = token
        self.policy = policy
        self.reconnect_s = reconnect_s
        self.open_timeout_s = open_timeout_s
        self.agent: str | None = None
        """The agent's policy key once authenticated (``agent:NAME``)."""
        self.limits: dict[str, Any] = {}
        """The server's limits (``authenticated``)."""
        self.results: list[MatchResult] = []
        """Every match of this client that ended, in order."""
        self.ratings: dict[str, dict[str, Any]] = {}
        """The agent's latest rating per game (``rating`` messages)."""
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._seats: dict[tuple[str, int], _Seat] = {}
        self._seeks: dict[str, int] = {}
        """Seeks waiting: seek id -> its request id."""
        self._paired: set[str] = set()
        """Matches paired from this client's seeks (not resumed ones)."""
        self._changed = asyncio.Event()
        self._closing = False
        self._lost: BaseException | None = None
        self._connected = asyncio.Event()

    # -- connection ----------------------------------------------------------------------
    async def connect(self) -> None:
        """Connect and authenticate. Raises AgentError (``unauthorized``, ``rate_limited``,
        ...) or OSError when the server cannot be reached."""
        await self._open()
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    async def _open(self) -> None:
        try:
            ws = await connect(self.url, max_size=MAX_FRAME_BYTES, open_timeout=self.open_timeout_s)
        except (InvalidStatus, InvalidURI) as exc:
            raise AgentError("connect", f"cannot open {self.url}: {exc}") from None
        try:
            hello = json.loads(await asyncio.wait_for(ws.recv(), self.open_timeout_s))
            if hello.get("type") != "hello":
                raise AgentError("protocol", f"expected hello, got {str(hello)[:80]}")
            await ws.send(
                json.dumps(
                    {
                        "type": "auth",
                        "id": 0,
                        "token": self._token,
                        "agent_protocol": AGENT_PROTOCOL,
                        # the matches held before a drop: the server says how each ended
                        "matches": sorted({m for m, _s in self._seats})[:MAX_LISTED],
                    }
                )
            )
            answer = json.loads(await asyncio.wait_for(ws.recv(), self.open_timeout_s))
            if answer.get("type") == "error":
                raise AgentError(str(answer.get("code")), str(answer.get("message")))
            if answer.get("type") != "authenticated":
                raise AgentError("protocol", f"expected authenticated, got {str(answer)[:80]}")
        except BaseException:
            await ws.close()
            raise
        self.agent = answer.get("agent")
        self.limits = dict(answer.get("limits") or {})
        for entry in answer.get("resumed") or ():  # seats given back: before any prompt
            info = MatchInfo.from_message(entry)
            if (info.match_id, info.seat) not in self._seats:
                self._add_seat(info)
        # A seat not given back ended while the connection was down: the server replays its
        # match_ended next (or says unknown_match when it cannot tell).
        self._ws = ws
        self._lost = None
        self._connected.set()

    async def close(self) -> None:
        """Close the connection (seats still live are left to the server's grace period)."""
        self._closing = True
        for seat in self._seats.values():
            if seat.task is not None:
                seat.task.cancel()
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(BaseException):
                await self._reader

    async def __aenter__(self) -> AgentClient:
        await self.connect()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _read_loop(self) -> None:
        while True:
            ws = self._ws
            assert ws is not None
            try:
                async for frame in ws:
                    self._dispatch(json.loads(frame))
            except ConnectionClosed:
                pass
            except Exception as exc:  # a bug in a hook: stop, tell the waiters
                self._lost = exc
                self._fail_waiters(exc)
                self._changed.set()
                raise
            self._connected.clear()
            self._fail_waiters(ConnectionError("the connection to the server was lost"))
            if self._closing:
                return
            if not await self._reconnect():
                self._lost = ConnectionError(f"could not reach {self.url} again")
                self._changed.set()
                return

    async def _reconnect(self) -> bool:
        """Connect again (the server gives back the seats); False after ``reconnect_s``."""
        self._seeks.clear()  # the server dropped them with the connection
        deadline = time.monotonic() + self.reconnect_s
        delay = 0.1
        while time.monotonic() < deadline and not self._closing:
            try:
                await self._open()
            except AgentError as exc:
                if exc.code in ("unauthorized", "bad_protocol"):
                    self._lost = exc
                    return False
            except (OSError, TimeoutError, ConnectionClosed) as exc:
                log.info("reconnecting to %s: %s", self.url, exc)
            else:
                log.info("reconnected to %s", self.url)
                self._changed.set()
                return True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        return False

    def _fail_waiters(self, exc: BaseException) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(exc)
        self._waiting.clear()

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` with a fresh id and wait for its answer. Raises AgentError
        when the server answers an ``error``, ConnectionError when the connection drops."""
        if self._ws is None or not self._connected.is_set():
            raise ConnectionError("not connected")
        ref = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[ref] = future
        await self._ws.send(json.dumps({**message, "id": ref}))
        answer = await future
        if answer.get("type") == "error":
            raise AgentError(str(answer.get("code")), str(answer.get("message")))
        return answer

    # -- messages ------------------------------------------------------------------------
    def _dispatch(self, m: dict[str, Any]) -> None:
        kind = m.get("type")
        ref = m.get("ref")
        if kind == "seeking" and isinstance(ref, int):
            self._seeks[str(m.get("seek"))] = ref  # before anything can pair it
        if kind in ("paired", "seek_expired", "match_created"):
            self._seeks.pop(str(m.get("seek")), None)
            self._changed.set()
        if kind == "paired":
            info = MatchInfo.from_message(m)
            self._paired.add(info.match_id)
            self._add_seat(info)
            self.on_paired(info)
        elif kind == "resumed":
            for entry in m.get("matches") or ():
                info = MatchInfo.from_message(entry)
                if (info.match_id, info.seat) not in self._seats:
                    self._add_seat(info)
        elif kind == "your_turn":
            self._your_turn(m)
        elif kind == "match_ended":
            self._ended(m)
        elif kind == "rating":
            self.ratings[str(m.get("game_id"))] = m
        elif isinstance(ref, int) and ref in self._waiting:
            future = self._waiting.pop(ref)
            if not future.done():
                future.set_result(m)
        elif kind == "error" and m.get("code") == "unknown_match" and "match" in m:
            for match_id, seat in [k for k in self._seats if k[0] == m["match"]]:
                self._ended(
                    {"match": match_id, "seat": seat, "status": "unknown", "result": "unknown",
                     "reason": f"the server cannot tell how it ended: {m.get('message')}",
                     "rated": False}
                )  # fmt: skip
        elif kind == "error":
            log.warning("server: %s: %s", m.get("code"), m.get("message"))
            for seek_id, seek_ref in list(self._seeks.items()):
                if seek_ref == ref:  # a seek's match failed to start
                    del self._seeks[seek_id]
                    self._changed.set()

    def _add_seat(self, info: MatchInfo) -> None:
        policy = self.policy(info) if self.policy is not None else None
        self._seats[(info.match_id, info.seat)] = _Seat(info, policy)
        self._changed.set()

    def _your_turn(self, m: dict[str, Any]) -> None:
        key = (str(m.get("match")), int(m.get("seat", -1)))
        seat = self._seats.get(key)
        if seat is None:
            log.warning("a prompt for a seat this client does not know: %s", key)
            return
        start = int(m.get("from", 0))
        if start > len(seat.messages):
            log.warning("match %s: messages %d.. missing; using what arrived", key[0], start)
            start = len(seat.messages)
        del seat.messages[start:]
        seat.messages.extend(_message(x) for x in m.get("messages") or ())
        new_from = int(m.get("new_from", start))
        turn = AgentTurn(
            match_id=key[0],
            seat=key[1],
            turn_index=int(m.get("turn", 0)),
            messages=tuple(seat.messages),
            new_from=min(max(0, new_from), len(seat.messages)),
            prompt=str(m.get("prompt", "")),
            legal_moves=m.get("legal_moves"),
            deadline=float(m.get("deadline", 0.0)),
            movers=tuple(int(x) for x in m.get("movers") or ()),
        )
        self.on_prompt(turn)
        if seat.task is not None and not seat.task.done():
            seat.task.cancel()  # a newer prompt replaces it (a resume)
        seat.task = asyncio.get_running_loop().create_task(self._answer(seat, turn))

    async def _answer(self, seat: _Seat, turn: AgentTurn) -> None:
        try:
            text = await self.act(seat.info, turn)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "the policy failed on match %s; the seat will lose on time", turn.match_id
            )
            return
        await self._send_move(turn, text)

    async def _send_move(self, turn: AgentTurn, text: str) -> None:
        message = {"type": "move", "match_id": turn.match_id, "turn": turn.turn_index,
                   "text": str(text)}  # fmt: skip
        while not self._closing:
            ws = self._ws
            try:
                if ws is not None and self._connected.is_set():
                    frame = json.dumps(message)
                    self.on_moved(turn)
                    await ws.send(frame)
                    return
            except ConnectionClosed:
                pass
            if time.time() > turn.deadline:
                return
            await asyncio.sleep(0.05)  # reconnecting: the move goes once it is back

    def _ended(self, m: dict[str, Any]) -> None:
        key = (str(m.get("match")), int(m.get("seat", -1)))
        seat = self._seats.pop(key, None)
        if seat is None and m.get("replayed"):
            return  # the end of a seat another client of the account held
        rewards = m.get("rewards")
        result = MatchResult(
            match_id=key[0],
            seat=key[1],
            status=str(m.get("status")),
            result=str(m.get("result")),
            reward=rewards[key[1]] if rewards else None,
            rewards=tuple(rewards) if rewards else None,
            reason=str(m.get("reason", "")),
            rated=bool(m.get("rated")),
            forfeited=tuple(m.get("forfeited") or ()),
        )
        if seat is not None and seat.task is not None and not seat.task.done():
            seat.task.cancel()
        self.results.append(result)
        self.on_ended(result)
        self._changed.set()

    # -- hooks ---------------------------------------------------------------------------
    async def act(self, match: MatchInfo, turn: AgentTurn) -> str:
        """The move for ``turn`` of ``match``: asks the seat's policy. Override it to play
        without a policy factory."""
        seat = self._seats.get((match.match_id, match.seat))
        if seat is None or seat.policy is None:
            raise RuntimeError("no policy: pass one to AgentClient or override act()")
        return await seat.policy.act(turn)

    def on_paired(self, match: MatchInfo) -> None:
        """Called when a seek is paired (before its first prompt)."""

    def on_prompt(self, turn: AgentTurn) -> None:
        """Called when a prompt arrives, before ``act``."""

    def on_moved(self, turn: AgentTurn) -> None:
        """Called as the move for ``turn`` is written to the connection."""

    def on_ended(self, result: MatchResult) -> None:
        """Called when one of the agent's matches ends."""

    # -- playing -------------------------------------------------------------------------
    @property
    def live_matches(self) -> list[MatchInfo]:
        """The matches this client plays now."""
        return [s.info for s in self._seats.values()]

    async def seek(
        self,
        game: str,
        *,
        rated: bool = True,
        opponents: Sequence[str] | None = None,
        players: int | None = None,
    ) -> str:
        """Ask for a match; returns the seek's id once it waits (``seeking``). Raises
        AgentError (``bad_game``, ``too_many_matches``, ``too_many_seeks``)."""
        message: dict[str, Any] = {"type": "seek", "game": game, "rated": rated}
        if opponents is not None:
            message["opponents"] = list(opponents)
        if players is not None:
            message["players"] = players
        answer = await self.request(message)
        return str(answer["seek"])

    async def play(
        self,
        game: str,
        games: int = 1,
        *,
        rated: bool = True,
        opponents: Sequence[str] | None = None,
        players: int | None = None,
        concurrency: int = 1,
        timeout_s: float | None = None,
    ) -> list[MatchResult]:
        """Play ``games`` matches of ``game`` (``concurrency`` at once), and every seat the
        server gives back on connecting (``resumed``), to their ends; returns the results
        of the matches from its own seeks. Raises AgentError for a refused seek,
        ConnectionError when the server is lost for good, TimeoutError after
        ``timeout_s``."""
        if games < 0 or concurrency < 1:
            raise ValueError("games must be 0 or more, concurrency at least 1")
        if self._ws is None:
            await self.connect()
        first = len(self.results)
        self._paired.clear()

        async def run() -> list[MatchResult]:
            while True:
                self._changed.clear()
                if self._lost is not None:
                    raise self._lost
                mine = [r for r in self.results[first:] if r.match_id in self._paired]
                live = sum(1 for key in self._seats if key[0] in self._paired)
                others = len(self._seats) - live
                seeks = len(self._seeks)
                if len(mine) >= games and live == 0 and seeks == 0 and others == 0:
                    return mine
                room = min(games - len(mine) - live - seeks, concurrency - live - seeks)
                if self._connected.is_set():
                    for _ in range(max(0, room)):
                        await self.seek(game, rated=rated, opponents=opponents, players=players)
                await self._changed.wait()

        if timeout_s is None:
            return await run()
        async with asyncio.timeout(timeout_s):
            return await run()


def _ws_url(url: str) -> str:
    url = url.strip()
    if url.startswith("http://"):
        url = "ws://" + url[len("http://") :]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://") :]
    elif "://" not in url:
        url = "ws://" + url
    if not url.rstrip("/").endswith("/ws"):
        url = url.rstrip("/") + "/ws"
    return url
