"""What recording costs: bot self-play games/s with the recorder on vs off, same run, into
SQLite and into PostgreSQL, and the bytes it stores per turn and per match.

Off: the games publish to a bus nobody listens to (so no event is even built). On: a
``storage.Recorder`` writes every match and turn to a fresh database, an SQLite file or a
new database on a private PostgreSQL server that the benchmark starts
(``tools.pgserver``, with PostgreSQL's durable defaults: fsync and synchronous commits
on); the clock stops only once the recorder has drained its queue, so the figure is games
fully stored per second. Rounds alternate off, SQLite and PostgreSQL; the median of each
is kept; the ratio is also given by CPU time of the whole process (the database server's
own time is not in it), which other load on the machine disturbs less. Then the
recorder's capacity: turns stored per second when it only writes. PostgreSQL's figures
are also given as ratios to SQLite's, measured in the same run. Without PostgreSQL here
(``--no-postgres``, or no server can start) only SQLite is measured. A game whose legal
moves the ``random`` bot cannot read would be played by ``RandomMovePolicy`` self-play
through ``MatchGroupBuilder`` instead (it publishes to the default bus).

Space: what the database grew by (SQLite: its pages in use, after the WAL is
checkpointed; PostgreSQL: its tables with their indexes and TOAST), over the empty
database of the same schema, per turn and per match stored. The games: tic-tac-toe,
Connect Four, and a long one, ``LowestUnique-v0`` (hidden numbers, private messages)
played for ``LONG_ROUNDS`` rounds: 1,000 moves a match; the same game at a tenth of that
length gives the growth ratio of a match's storage with its length (linear: 10).

Each game is measured after a warm-up, with the heap frozen (``arena.runtime.freeze_heap``)
as a command that records does once it is set up: the cyclic garbage collector would
otherwise walk every module torch and textarena loaded at each full collection, a cost
that grows with what the games and the recorder keep alive.

    python -m bench.storage [--games 600] [--rounds 3] [--no-postgres] [--json]
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text

from arena.envs import MatchGroupBuilder
from arena.eventbus import EventBus, Subscription, default_bus
from arena.play import play_matches
from arena.policies import RandomMovePolicy
from arena.rollouts import do_group_rollout
from arena.runtime import freeze_heap
from bench.common import emit, median, parser
from games.bots import UnknownBot, check_bot
from games.registry import get_spec
from storage import Database, Recorder, open_database
from tools.pgserver import PostgresServer, PostgresUnavailable, start_server

GAMES = ("TicTacToe-v0", "ConnectFour-v0", "LowestUnique-v0-long")
GROUP_SIZE = 8
LONG_ROUNDS = 500
"""Rounds of the long game (two seats: 1,000 moves)."""
LONG_GAMES_DIVISOR = 50
"""The long game plays this many times fewer matches per measurement."""


def register_long_games() -> None:
    """``LowestUnique-v0-long`` (``LONG_ROUNDS`` rounds) and ``LowestUnique-v0-tenth``
    (a tenth of them), for this benchmark only."""
    from games.native.lowest_unique import LowestUniqueGame
    from games.registration import register_game, unregister_game

    for game_id, rounds in (
        ("LowestUnique-v0-long", LONG_ROUNDS),
        ("LowestUnique-v0-tenth", LONG_ROUNDS // 10),
    ):
        unregister_game(game_id)
        register_game(
            game_id,
            min_players=2,
            max_players=15,
            hidden_information=True,
            description="LowestUnique-v0, longer (bench.storage)",
        )(functools.partial(LowestUniqueGame, rounds=rounds))


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
        MatchGroupBuilder(game_id, group_size=GROUP_SIZE, seed=seed + g * GROUP_SIZE)
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
    bytes: int = 0
    """What the database grew by."""
    turns: int = 0
    """Turns stored."""
    matches: int = 0
    """Matches stored."""


NewDatabase = Callable[[str], str]
"""Where to record: a name -> the path or URL of a new, empty database."""


def sqlite_databases(folder: Path) -> NewDatabase:
    """New SQLite files in ``folder``."""
    return lambda name: str(folder / f"{name}.db")


def postgres_databases(server: PostgresServer) -> NewDatabase:
    """New databases on ``server``."""
    numbers = itertools.count()
    return lambda name: server.create_database(f"bench_{next(numbers)}")


async def measure(
    game_id: str, num_games: int, seed: int, new_db: NewDatabase | None, events: bool = False
) -> Sample:
    """Play and time ``num_games`` games; with ``new_db``, record them into a new database
    (the clock stops once the recorder has drained).

    ``events`` (with no database): a subscriber that takes every event as it comes and
    discards it, to show what building the events costs the games, apart from storing
    them.
    """
    bus = default_bus()
    if bus.has_subscribers:
        raise RuntimeError("the default bus already has subscribers: the figures would lie")
    if new_db is None:
        sub = bus.subscribe(max_queue=10**9, name="discard") if events else None
        drain = asyncio.get_running_loop().create_task(_discard(sub)) if sub else None
        started, cpu = time.perf_counter(), time.process_time()
        await play(game_id, num_games, seed, bus)
        if sub is not None and drain is not None:
            sub.close()
            await drain
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        return Sample(num_games / seconds, 1000 * cpu / num_games)
    db = await open_database(new_db(f"{game_id}-{seed}"))
    try:
        empty = await stored_bytes(db)
        recorder = Recorder(db, bus)
        started, cpu = time.perf_counter(), time.process_time()
        async with recorder:
            await play(game_id, num_games, seed, bus)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        grown = await stored_bytes(db) - empty
    finally:
        await db.close()
    stats = recorder.stats
    if stats.drops or stats.lost_matches or stats.matches_ended < num_games:
        raise RuntimeError(f"the recorder lost data: {stats}")
    return Sample(
        num_games / seconds,
        1000 * cpu / num_games,
        stats.turns / seconds,
        bytes=grown,
        turns=stats.turns,
        matches=stats.matches_ended,
    )


async def _discard(sub: Subscription) -> None:
    """Take every event as it comes, as a subscriber that keeps up does, and drop it."""
    async for _event in sub:
        pass


async def stored_bytes(db: Database) -> int:
    """The bytes ``db`` takes: SQLite's pages in use (after a checkpoint of the WAL),
    PostgreSQL's tables with their indexes and TOAST."""
    async with db.engine.connect() as conn:
        if db.is_sqlite:
            await db.checkpoint()
            pages = (await conn.exec_driver_sql("PRAGMA page_count")).scalar_one()
            free = (await conn.exec_driver_sql("PRAGMA freelist_count")).scalar_one()
            size = (await conn.exec_driver_sql("PRAGMA page_size")).scalar_one()
            return int((pages - free) * size)
        total = await conn.execute(
            text(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
            )
        )
        return int(total.scalar_one())


async def drain_capacity(game_id: str, num_games: int, new_db: NewDatabase) -> float:
    """Turns stored per second by a recorder that only writes: the events of
    ``num_games`` games are queued first, then the clock runs until they are stored."""
    bus = default_bus()
    collector = bus.subscribe(max_queue=10**9, name="collect")
    await play(game_id, num_games, 99, bus)
    collector.close()
    events = []
    while (event := collector.get_nowait()) is not None:
        events.append(event)
    db = await open_database(new_db(f"{game_id}-drain"))
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


def _start_postgres(wanted: bool) -> PostgresServer | None:
    if not wanted:
        return None
    try:
        return start_server(fast=False)
    except PostgresUnavailable as exc:
        print(f"PostgreSQL not measured: {exc}", file=sys.stderr)
        return None


def main() -> None:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--games", type=int, default=600, help="games per measurement")
    args_parser.add_argument("--no-postgres", action="store_true", help="measure SQLite only")
    args = args_parser.parse_args()
    register_long_games()
    results: dict[str, object] = {}
    server = _start_postgres(not args.no_postgres)
    try:
        with tempfile.TemporaryDirectory(prefix="arena-bench-") as tmp:
            backends: dict[str, NewDatabase] = {"sqlite": sqlite_databases(Path(tmp))}
            if server is not None:
                backends["postgresql"] = postgres_databases(server)
            for game_id in GAMES:
                long = game_id == "LowestUnique-v0-long"
                games = max(2, args.games // LONG_GAMES_DIVISOR) if long else args.games
                results[game_id] = _bench_game(game_id, games, args.rounds, backends)
                if long:
                    results["long_vs_tenth"] = _growth(games, backends)
    finally:
        if server is not None:
            server.stop()
    emit(results, args.json)


def _bench_game(
    game_id: str, num_games: int, rounds: int, backends: dict[str, NewDatabase]
) -> dict[str, object]:
    """Measure one game: off, events only, then recorded into each backend."""
    load_before = os.getloadavg()[0]
    samples: dict[str, list[Sample]] = {"off": [], "events": [], **{b: [] for b in backends}}
    asyncio.run(measure(game_id, 16, 0, None))  # warm-up: imports, caches
    for new_db in backends.values():
        asyncio.run(measure(game_id, 4, 0, new_db))
    freeze_heap()  # as a command that records does once it is set up
    for r in range(rounds):
        seed = 1000 * r
        samples["off"].append(asyncio.run(measure(game_id, num_games, seed, None)))
        samples["events"].append(asyncio.run(measure(game_id, num_games, seed, None, True)))
        for backend, new_db in backends.items():
            samples[backend].append(asyncio.run(measure(game_id, num_games, seed, new_db)))
    gps = {k: median([x.games_per_s for x in v]) for k, v in samples.items()}
    cpu = {k: median([x.cpu_per_game_ms for x in v]) for k, v in samples.items()}
    load = (round(load_before, 2), round(os.getloadavg()[0], 2))
    print(
        f"{game_id:<15} games/s: off {gps['off']:6.1f}  events only {gps['events']:6.1f}"
        f"  (ratio {gps['events'] / gps['off']:.2f})   load {load[0]:.2f} -> {load[1]:.2f}"
    )
    out: dict[str, object] = {
        "load": load,
        "off_games_per_s": round(gps["off"], 1),
        "events_only_games_per_s": round(gps["events"], 1),
        "events_ratio": round(gps["events"] / gps["off"], 3),
        "cpu_ms_per_game": {k: round(v, 3) for k, v in cpu.items()},
    }
    for backend, new_db in backends.items():
        turns_ps = median([x.turns_stored_per_s for x in samples[backend]])
        per_turn = median([x.bytes / max(1, x.turns) for x in samples[backend]])
        per_match = median([x.bytes / max(1, x.matches) for x in samples[backend]])
        capacity = asyncio.run(drain_capacity(game_id, 4 * num_games, new_db))
        ratio, cpu_ratio = gps[backend] / gps["off"], cpu["off"] / cpu[backend]
        print(
            f"{'':<15} {backend:<10} recorded {gps[backend]:6.1f} games/s   ratio {ratio:.2f} "
            f"(recorder {gps[backend] / gps['events']:.2f})   by CPU time {cpu_ratio:.2f}   "
            f"turns stored/s: {turns_ps:5.0f} while playing, {capacity:6.0f} when only writing   "
            f"bytes: {per_turn:.0f}/turn, {per_match:.0f}/match"
        )
        out[backend] = {
            "on_games_per_s": round(gps[backend], 1),
            "turns_stored_per_s": round(turns_ps),
            "write_only_turns_per_s": round(capacity),
            "ratio": round(ratio, 3),
            "recorder_ratio": round(gps[backend] / gps["events"], 3),
            "cpu_ratio": round(cpu_ratio, 3),
            "bytes_per_turn": round(per_turn, 1),
            "bytes_per_match": round(per_match),
        }
    if "postgresql" in out and "sqlite" in out:
        pg, lite = out["postgresql"], out["sqlite"]
        assert isinstance(pg, dict) and isinstance(lite, dict)
        vs = {
            "games_per_s": round(pg["on_games_per_s"] / lite["on_games_per_s"], 3),
            "write_only_turns_per_s": round(
                pg["write_only_turns_per_s"] / lite["write_only_turns_per_s"], 3
            ),
        }
        out["postgresql_vs_sqlite"] = vs
        print(
            f"{'':<15} PostgreSQL / SQLite: recorded games/s {vs['games_per_s']:.2f}, "
            f"turns stored/s when only writing {vs['write_only_turns_per_s']:.2f}"
        )
    return out


def _growth(num_games: int, backends: dict[str, NewDatabase]) -> dict[str, float]:
    """Bytes per match of the long game over the same game a tenth as long."""
    out = {}
    for backend, new_db in backends.items():
        long = asyncio.run(measure("LowestUnique-v0-long", num_games, 7, new_db))
        tenth = asyncio.run(measure("LowestUnique-v0-tenth", num_games, 7, new_db))
        ratio = (long.bytes / long.matches) / (tenth.bytes / tenth.matches)
        turns = (long.turns / long.matches, tenth.turns / tenth.matches)
        print(
            f"{'':<15} {backend:<10} a {turns[0]:.0f}-move match takes {ratio:.2f}x the bytes "
            f"of a {turns[1]:.0f}-move one"
        )
        out[backend] = round(ratio, 3)
    return out


if __name__ == "__main__":
    main()
