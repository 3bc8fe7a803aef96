"""What recording costs: bot self-play games/s with the recorder on vs off, same run.

Off: the games publish to a bus nobody listens to (so no event is even built). On: a
``storage.Recorder`` writes every match and turn to a fresh SQLite file; the clock stops
only once the recorder has drained its queue, so the figure is games fully stored per
second. Rounds alternate off and on; the median of each is kept; the ratio is also given
by CPU time of the whole process, which other load on the machine disturbs less. Last,
the recorder's capacity: turns stored per second when it only writes. A game whose legal
moves the ``random`` bot cannot read would be played by ``RandomMovePolicy`` self-play
through ``MatchGroupBuilder`` instead (it publishes to the default bus).

    python -m bench.storage [--games 600] [--rounds 3] [--json]
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from arena.envs import MatchGroupBuilder
from arena.events import EventBus, default_bus
from arena.play import play_matches
from arena.policies import RandomMovePolicy
from arena.rollouts import do_group_rollout
from bench.common import emit, median, parser
from games.bots import UnknownBot, check_bot
from games.registry import get_spec
from storage import Recorder, open_database

GAMES = ("TicTacToe-v0", "ConnectFour-v0")
GROUP_SIZE = 8


def bots_can_play(game_id: str) -> bool:
    """True when the ``random`` bot can play ``game_id`` (it lists its legal moves)."""
    try:
        check_bot("random", get_spec(game_id))
    except UnknownBot:
        return False
    return True


async def play(game_id: str, num_games: int, seed: int, bus: EventBus) -> int:
    """Play ``num_games`` random games of ``game_id``, publishing to ``bus``; return the
    number of turns played."""
    if bots_can_play(game_id):
        stats = await play_matches(game_id, ["random", "random"], num_games, seed=seed, bus=bus)
        if stats.aborted:
            raise RuntimeError(f"{stats.aborted} games aborted: {stats.abort_reasons}")
        return stats.turns
    assert bus is default_bus(), "MatchGroupBuilder publishes to the default bus"
    policy = RandomMovePolicy(seed=seed)
    builders = [
        MatchGroupBuilder(game_id, num_games=GROUP_SIZE, seed=seed + g * GROUP_SIZE)
        for g in range(max(1, num_games // GROUP_SIZE))
    ]
    groups = await asyncio.gather(*(do_group_rollout(b, policy) for b in builders))
    return sum(int(m.get("turns", 0)) for g in groups for m in g.metrics_G) // 2


@dataclass
class Sample:
    """One measurement."""

    games_per_s: float
    cpu_per_game_ms: float
    """CPU time of the whole process (the database thread included) per game."""
    turns_stored_per_s: float = 0.0


async def measure(
    game_id: str, num_games: int, seed: int, folder: Path | None, events: bool = False
) -> Sample:
    """Play and time ``num_games`` games; with ``folder``, record them into a new database
    there (the clock stops once the recorder has drained).

    ``events`` (with no folder): a subscriber that discards every event, to show what
    building the events costs the games, apart from storing them.
    """
    bus = default_bus()
    if bus.has_subscribers:
        raise RuntimeError("the default bus already has subscribers: the figures would lie")
    if folder is None:
        sub = bus.subscribe(max_queue=10**9, name="discard") if events else None
        started, cpu = time.perf_counter(), time.process_time()
        await play(game_id, num_games, seed, bus)
        if sub is not None:
            while sub.get_nowait() is not None:
                pass
            sub.close()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        return Sample(num_games / seconds, 1000 * cpu / num_games)
    db = await open_database(str(folder / f"{game_id}-{seed}.db"))
    try:
        recorder = Recorder(db, bus)
        started, cpu = time.perf_counter(), time.process_time()
        async with recorder:
            await play(game_id, num_games, seed, bus)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        await db.close()
    stats = recorder.stats
    if stats.drops or stats.lost_matches or stats.matches_ended < num_games:
        raise RuntimeError(f"the recorder lost data: {stats}")
    return Sample(num_games / seconds, 1000 * cpu / num_games, stats.turns / seconds)


async def drain_capacity(game_id: str, num_games: int, folder: Path) -> float:
    """Turns stored per second by a recorder that only writes: the events of
    ``num_games`` games are queued first, then the clock runs until they are stored."""
    bus = default_bus()
    collector = bus.subscribe(max_queue=10**9, name="collect")
    await play(game_id, num_games, 99, bus)
    collector.close()
    events = []
    while (event := collector.get_nowait()) is not None:
        events.append(event)
    db = await open_database(str(folder / f"{game_id}-drain.db"))
    try:
        recorder = Recorder(db, bus)
        recorder.start()
        for event in events:
            bus.publish(event)
        started = time.perf_counter()
        await recorder.close()
        seconds = time.perf_counter() - started
    finally:
        await db.close()
    return recorder.stats.turns / seconds


def _runs(
    off: list[Sample], events: list[Sample], on: list[Sample]
) -> list[tuple[str, list[Sample]]]:
    return [("off", off), ("events", events), ("on", on)]


def main() -> None:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--games", type=int, default=600, help="games per measurement")
    args = args_parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="arena-bench-") as tmp:
        folder = Path(tmp)
        for game_id in GAMES:
            off: list[Sample] = []
            events: list[Sample] = []
            on: list[Sample] = []
            asyncio.run(measure(game_id, 16, 0, None))  # warm-up: imports, caches
            for r in range(args.rounds):
                seed = 1000 * r
                off.append(asyncio.run(measure(game_id, args.games, seed, None)))
                events.append(asyncio.run(measure(game_id, args.games, seed, None, True)))
                on.append(asyncio.run(measure(game_id, args.games, seed, folder)))
            gps = {k: median([x.games_per_s for x in v]) for k, v in _runs(off, events, on)}
            cpu = {k: median([x.cpu_per_game_ms for x in v]) for k, v in _runs(off, events, on)}
            turns_ps = median([x.turns_stored_per_s for x in on])
            capacity = asyncio.run(drain_capacity(game_id, 4 * args.games, folder))
            ratio, cpu_ratio = gps["on"] / gps["off"], cpu["off"] / cpu["on"]
            print(
                f"{game_id:<15} games/s: off {gps['off']:6.1f}  events only {gps['events']:6.1f}"
                f"  recorded {gps['on']:6.1f}   ratio {ratio:.2f} (events "
                f"{gps['events'] / gps['off']:.2f}, recorder {gps['on'] / gps['events']:.2f})"
                f"   by CPU time {cpu_ratio:.2f}"
            )
            print(
                f"{'':<15} turns stored/s: {turns_ps:5.0f} while playing, {capacity:6.0f} when "
                "only writing"
            )
            results[game_id] = {
                "off_games_per_s": round(gps["off"], 1),
                "events_only_games_per_s": round(gps["events"], 1),
                "on_games_per_s": round(gps["on"], 1),
                "turns_stored_per_s": round(turns_ps),
                "write_only_turns_per_s": round(capacity),
                "ratio": round(ratio, 3),
                "events_ratio": round(gps["events"] / gps["off"], 3),
                "recorder_ratio": round(gps["on"] / gps["events"], 3),
                "cpu_ms_per_game": {k: round(v, 3) for k, v in cpu.items()},
                "cpu_ratio": round(cpu_ratio, 3),
            }
    emit(results, args.json)


if __name__ == "__main__":
    main()
