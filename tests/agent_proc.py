"""A remote agent in a process of its own, for the end-to-end tests (and bench.agents).

    python -m tests.agent_proc play --server URL --token T --game G [--think S] ...
    python -m tests.agent_proc intrude --server URL --token T --match ID

``play`` plays with ``web.agents`` and a random legal move after ``--think`` seconds
(``--think 1e9``: it never answers), printing one JSON line per event (``authenticated``,
``paired``, ``prompt``, ``moved``, ``ended``, ``done``). ``intrude`` speaks the raw
protocol: it authenticates with the token and tries to move in a match it may not hold,
printing every answer; it is what a hostile client would do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from typing import Any

from web.agents import AgentClient, AgentError, AgentTurn, MatchInfo, MatchResult


def emit(**fields: Any) -> None:
    print(json.dumps({"t": time.time(), **fields}), flush=True)


class Thinking(AgentClient):
    """Plays a random legal move after ``think`` seconds."""

    def __init__(self, *args: Any, think: float, seed: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.think = think
        self.rng = random.Random(seed)

    async def act(self, match: MatchInfo, turn: AgentTurn) -> str:
        await asyncio.sleep(self.think)
        return self.rng.choice(turn.legal_moves) if turn.legal_moves else "[0]"

    def on_paired(self, match: MatchInfo) -> None:
        emit(event="paired", match=match.match_id, seat=match.seat, players=list(match.players))

    def on_prompt(self, turn: AgentTurn) -> None:
        emit(
            event="prompt",
            match=turn.match_id,
            seat=turn.seat,
            turn=turn.turn_index,
            messages=len(turn.messages),
            new_from=turn.new_from,
        )

    def on_moved(self, turn: AgentTurn) -> None:
        emit(event="moved", match=turn.match_id, turn=turn.turn_index)

    def on_ended(self, result: MatchResult) -> None:
        emit(event="ended", **result.__dict__)


async def play(args: argparse.Namespace) -> int:
    agent = Thinking(args.server, args.token, think=args.think, seed=args.seed, reconnect_s=5.0)
    try:
        await agent.connect()
    except AgentError as exc:
        emit(event="refused", code=exc.code, message=exc.message)
        return 2
    emit(event="authenticated", agent=agent.agent, resumed=len(agent.live_matches))
    opponents = args.opponents.split(",") if args.opponents else None
    results = await agent.play(
        args.game,
        args.games,
        rated=not args.casual,
        opponents=opponents,
        concurrency=args.concurrency,
    )
    emit(event="done", results=[r.result for r in results], all=len(agent.results))
    await agent.close()
    return 0


async def intrude(args: argparse.Namespace) -> int:
    from websockets.asyncio.client import connect

    async with connect(args.server) as ws:

        async def recv() -> dict[str, Any]:
            message = json.loads(await asyncio.wait_for(ws.recv(), 60))  # a hang guard
            emit(event="frame", frame=message)
            return message

        await recv()  # hello
        await ws.send(json.dumps({"type": "auth", "token": args.token, "id": 1}))
        await recv()
        await ws.send(json.dumps({"type": "move", "match_id": args.match, "text": "[4]", "id": 2}))
        await recv()
        await ws.send(json.dumps({"type": "resign", "match_id": args.match, "id": 3}))
        await recv()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("play")
    p.add_argument("--server", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--game", default="TicTacToe-v0")
    p.add_argument("--games", type=int, default=1)
    p.add_argument("--think", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--opponents")
    p.add_argument("--casual", action="store_true")
    p.add_argument("--concurrency", type=int, default=1)
    i = sub.add_parser("intrude")
    i.add_argument("--server", required=True)
    i.add_argument("--token", required=True)
    i.add_argument("--match", required=True)
    args = parser.parse_args()
    return asyncio.run(play(args) if args.mode == "play" else intrude(args))


if __name__ == "__main__":
    sys.exit(main())
