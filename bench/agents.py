"""Remote agents: 200 agents in 100 simultaneous matches on loopback; move-to-prompt latency.

The server runs in this process as ``arena serve`` runs it: a ``WebHub`` with its recorder
(a real SQLite file), the live ratings (``matchmaking.recording.Recording``) and the seek
queue. The agents are ``web.agents.AgentClient``s, each with its own account, token and
WebSocket connection, spread over ``--workers`` processes. Every agent seeks a rated
TicTacToe-v0 match against another agent, answers each prompt with a random legal move
after ``--think-ms`` (a model's answer time; 0: at once, the heaviest load), and seeks again
when its match ends, for ``--seconds``; so about ``agents / 2`` matches are live at once.

Latency: from the moment an agent writes its move to its connection to the moment the
opponent's next prompt (``your_turn``) arrives in the opponent's process (both read
``time.monotonic``, one clock on one machine), over every move followed by the other
seat's turn. Stalls: matches that did not finish (aborted, or live at the end), and the
longest such latency; an agent whose last seek found no partner once the others had
stopped is counted apart (``unpaired_at_end``), not as a stall. Figures are percentiles of
one run per think time.

    python -m bench.agents [--json] [--agents 200] [--workers 2] [--seconds 20]
                           [--think-ms 0,100,1000]
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from arena.runtime import freeze_heap
from bench.common import emit, parser, raise_open_files
from web.agents import AgentClient, AgentTurn, MatchInfo

GAME = "TicTacToe-v0"
END_GRACE_S = 10.0
"""After the run's time is up, how long an agent's last match may take to end (or its last
seek to be paired) before it counts as a stall, on top of the longest a match can take at
the agents' pace (``match_time_s``): a match that began just before the end still has all
its moves to play."""
MAX_MOVES = 9
"""Most moves a TicTacToe-v0 match can have."""


def match_time_s(think: float) -> float:
    """The longest a match can take when every answer takes up to 1.5 x ``think``."""
    return MAX_MOVES * 1.5 * think


# -- the agents' processes --------------------------------------------------------------------
class TimedAgent(AgentClient):
    """Answers a random legal move after ``think`` seconds; records when each move leaves
    and each prompt arrives."""

    def __init__(self, url: str, token: str, think: float, seed: int, log: dict[str, list]) -> None:
        super().__init__(url, token, reconnect_s=0.0)
        self.think = think
        self.rng = random.Random(seed)
        self.log = log

    async def act(self, match: MatchInfo, turn: AgentTurn) -> str:
        if self.think > 0:
            await asyncio.sleep(self.think * self.rng.uniform(0.5, 1.5))
        return self.rng.choice(turn.legal_moves) if turn.legal_moves else "[0]"

    def on_prompt(self, turn: AgentTurn) -> None:
        self.log["prompts"].append((turn.match_id, turn.turn_index, turn.seat, time.monotonic()))

    def on_moved(self, turn: AgentTurn) -> None:
        self.log["moves"].append((turn.match_id, turn.turn_index, turn.seat, time.monotonic()))


def worker_main(pipe: Connection, url: str, tokens: list[str], think: float, seed: int) -> None:
    """Child process: connect one agent per token, report ready, play until told the
    duration is over, send back the log."""
    raise_open_files()
    asyncio.run(_work(pipe, url, tokens, think, seed))


async def _work(pipe: Connection, url: str, tokens: list[str], think: float, seed: int) -> None:
    log: dict[str, list] = {"prompts": [], "moves": [], "results": [], "errors": [], "unpaired": []}
    agents = [TimedAgent(url, t, think, seed * 1000 + i, log) for i, t in enumerate(tokens)]
    semaphore = asyncio.Semaphore(8)

    async def connect(agent: TimedAgent) -> None:
        async with semaphore:
            await agent.connect()

    await asyncio.gather(*(connect(a) for a in agents))
    freeze_heap()  # as arena agent does once it is connected
    pipe.send("ready")
    seconds = await asyncio.to_thread(pipe.recv)
    stop_at = time.monotonic() + seconds

    grace = END_GRACE_S + match_time_s(think)

    async def play(agent: TimedAgent) -> None:
        while (left := stop_at - time.monotonic()) > 0:
            try:
                results = await agent.play(GAME, 1, opponents=["agent"], timeout_s=left + grace)
            except TimeoutError:
                if agent.live_matches:  # a match that did not end: a stall
                    log["errors"].append(f"a match still live {grace:g} s after the end")
                else:  # its last seek found no partner: the others had stopped
                    log["unpaired"].append(1)
                return
            except Exception as exc:  # reported, counted: never silently lost
                log["errors"].append(f"{type(exc).__name__}: {exc}")
                return
            log["results"].extend((r.match_id, r.status, r.result) for r in results)

    await asyncio.gather(*(play(a) for a in agents))
    for agent in agents:
        await agent.close()
    pipe.send(log)


# -- one measurement --------------------------------------------------------------------------
async def measure(agents: int, workers: int, seconds: float, think: float) -> dict[str, Any]:
    """Run ``agents`` agents for ``seconds`` with ``think`` seconds per move; the figures."""
    from matchmaking.recording import Recording
    from matchmaking.seek import MatchmakerConfig
    from storage import count_matches, open_database
    from storage.agents import create_agent
    from web import ServerLimits, WebHub

    folder = tempfile.TemporaryDirectory(prefix="bench-agents-")
    db = await open_database(str(Path(folder.name) / "arena.db"))
    tokens = [(await create_agent(db, f"bench{i:04d}"))[1] for i in range(agents)]
    limits = ServerLimits(max_connections=agents + 100, max_agent_connections=1)
    hub = WebHub(db, None, limits=limits, matchmaker=MatchmakerConfig(fill_after_s=None))
    recording = await Recording.start(db, hub.bus)
    await hub.start("127.0.0.1", 0)
    freeze_heap()  # as arena serve does once it serves
    context = multiprocessing.get_context("spawn")
    children = []
    pipes = []
    live_samples: list[int] = []
    cpu_before = time.process_time()
    try:
        for w in range(workers):
            mine = tokens[w::workers]
            pipe, child_pipe = context.Pipe()
            child = context.Process(
                target=worker_main, args=(child_pipe, hub.ws_url, mine, think, w), daemon=True
            )
            child.start()
            children.append(child)
            pipes.append(pipe)
        for pipe in pipes:
            ready = await asyncio.to_thread(pipe.recv)
            assert ready == "ready", ready
        started = time.monotonic()
        for pipe in pipes:
            pipe.send(seconds)
        while time.monotonic() - started < seconds:
            await asyncio.sleep(0.5)
            live_samples.append(len(hub.core.agents.matches))
        logs = [await asyncio.to_thread(pipe.recv) for pipe in pipes]
        elapsed = time.monotonic() - started
        await recording.flush()
        aborted = await count_matches(db, status="aborted")
        live_left = await count_matches(db, status="live")
    finally:
        for child in children:
            child.join(10)
            if child.is_alive():
                child.terminate()
        server_cpu = time.process_time() - cpu_before
        await hub.close()
        await recording.close()
        await db.close()
        folder.cleanup()
    prompts: dict[tuple[str, int], tuple[int, float]] = {}
    moves = []
    results = []
    errors = []
    unpaired = 0
    for log in logs:
        for match_id, index, seat, t in log["prompts"]:
            prompts[(match_id, index)] = (seat, t)
        moves.extend(log["moves"])
        results.extend(log["results"])
        errors.extend(log["errors"])
        unpaired += len(log["unpaired"])
    in_window = sum(1 for _m, _i, _s, t in moves if t - started <= seconds)
    latencies = []
    for match_id, index, seat, t in moves:
        nxt = prompts.get((match_id, index + 1))
        if nxt is not None and nxt[0] != seat:
            latencies.append(nxt[1] - t)
    latencies.sort()
    ended = {m: status for m, status, _r in results}
    finished = sum(1 for status in ended.values() if status == "finished")

    def pct(q: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {
        "agents": agents,
        "workers": workers,
        "think_ms": think * 1000,
        "seconds": seconds,
        "wall_s": round(elapsed, 1),
        "live_matches_mean": round(statistics.mean(live_samples), 1) if live_samples else 0,
        "live_matches_min": min(live_samples) if live_samples else 0,
        "matches": len(ended),
        "finished": finished,
        "aborted": aborted,
        "left_live": live_left,
        "moves": len(moves),
        "moves_per_s": round(in_window / seconds, 1),
        "unpaired_at_end": unpaired,
        "latency_samples": len(latencies),
        "p50_ms": round(1000 * statistics.median(latencies), 2) if latencies else None,
        "p90_ms": round(pct(0.90), 2) if latencies else None,
        "p99_ms": round(pct(0.99), 2) if latencies else None,
        "max_ms": round(1000 * latencies[-1], 2) if latencies else None,
        "errors": errors[:5],
        "server_cpu_s": round(server_cpu, 1),
    }


def main() -> None:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--agents", type=int, default=200, help="agents (two per match)")
    args_parser.add_argument("--workers", type=int, default=2, help="agent processes")
    args_parser.add_argument("--seconds", type=float, default=20.0, help="seconds of play")
    args_parser.add_argument(
        "--think-ms", default="0,100,1000", help="each agent's time per move, comma-separated"
    )
    args = args_parser.parse_args()
    limit = raise_open_files()
    if limit < args.agents * 2 + 200:
        raise SystemExit(f"the open-files limit ({limit}) is too low for {args.agents} agents")
    results: dict[str, object] = {"game": GAME}
    for think_ms in [float(t) for t in args.think_ms.split(",")]:
        r = asyncio.run(measure(args.agents, args.workers, args.seconds, think_ms / 1000))
        results[f"think_{think_ms:g}ms"] = r
        print(
            f"think {think_ms:>5g} ms: {r['agents']} agents, {r['live_matches_mean']} matches "
            f"live on average (min {r['live_matches_min']}), {r['finished']}/{r['matches']} "
            f"finished, {r['aborted']} aborted, {r['left_live']} left live; "
            f"{r['moves_per_s']} moves/s; move -> next prompt p50 {r['p50_ms']} ms, "
            f"p90 {r['p90_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms "
            f"({r['latency_samples']} moves); server CPU {r['server_cpu_s']} s"
            + (f"; errors: {r['errors']}" if r["errors"] else ""),
            flush=True,
        )
    emit(results, args.json)


if __name__ == "__main__":
    main()
