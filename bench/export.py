"""What exporting costs: stored turns written as a dataset per second, and the exporting
process's peak memory, for JSON Lines and Parquet (``arena export``).

The database: random-vs-random tic-tac-toe on SQLite, ``--turns`` turns (1,000,000 by
default: about 130,000 matches, 260,000 rows). ``--unique`` matches (2,000) are played
for real (``arena.play.play_matches``) with their events captured; then the recorder
(``storage.Recorder``: its one batching writer, blocks compressed against the game's
dictionary as in any recording) stores copies of them under new match ids and start
times until the database holds ``--turns`` turns. Copies, because playing stores about
6,000 turns a second here and storing copies several times that; what the export reads
is the same. ``--db PATH`` keeps the database (and reuses one that holds enough turns).

Each export runs in a child process that only opens the database and writes the file
(``storage.export.export_rows`` into ``storage.exportwrite.write_dataset``, what the
command runs, without its progress bar); the child reports its time and its peak resident
memory (Linux's ``VmHWM``; ``ru_maxrss`` elsewhere), and the memory it held once its
modules were loaded, before it read anything. Goal: under 500 MB at its peak, at least
20,000 turns a second on 2 cores. Writes ``bench-results/export.json``.

    python -m bench.export [--turns 1000000] [--unique 2000] [--db PATH] [--json]
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import emit, parser

if TYPE_CHECKING:  # the child that exports loads only what an export needs
    from arena.events import MatchEvent

GAME = "TicTacToe-v0"
FORMATS = ("jsonl", "parquet")
RESULTS = Path("bench-results") / "export.json"
CAPTURE_QUEUE = 10_000_000
"""Events the capturing subscriber may hold (all the unique matches' events)."""
WAIT_S = 60.0
"""Longest wait for the recorder to catch up before the next copies are published."""


async def _capture(unique: int) -> list[list[MatchEvent]]:
    """Play ``unique`` matches and return each one's events, in order."""
    from arena.eventbus import EventBus
    from arena.events import MatchEnded
    from arena.play import play_matches

    bus = EventBus()
    sub = bus.subscribe(max_queue=CAPTURE_QUEUE, name="capture")
    await play_matches(GAME, ["random", "random"], unique, bus=bus)
    by_match: dict[str, list[MatchEvent]] = {}
    while (event := sub.get_nowait()) is not None:
        by_match.setdefault(event.match_id, []).append(event)
    return [events for events in by_match.values() if isinstance(events[-1], MatchEnded)]


def _renamed(event: MatchEvent, match_id: str, shift: float) -> MatchEvent:
    """``event`` of a copy: its match id and times moved."""
    from arena.events import MatchEnded, MatchStarted, TurnPlayed

    if isinstance(event, TurnPlayed):
        turn = copy.copy(event)
        turn.match_id = match_id
        turn.time = event.time + shift
        return turn
    if isinstance(event, MatchStarted | MatchEnded):
        return dataclasses.replace(event, match_id=match_id, time=event.time + shift)
    return event


async def stored_turns(path: str) -> int:
    """Turns stored in the database at ``path`` (0 when there is none)."""
    from sqlalchemy import func, select

    from storage import open_database
    from storage.models import Match

    if not Path(path).exists():
        return 0
    db = await open_database(path, read_only=True)
    try:
        async with db.sessions() as session:
            return int(await session.scalar(select(func.sum(Match.num_turns))) or 0)
    finally:
        await db.close()


async def build(path: str, turns: int, unique: int) -> dict[str, float]:
    """Fill the database at ``path`` with at least ``turns`` turns (see the module's
    docstring); return what it took."""
    from arena.eventbus import EventBus
    from arena.events import TurnPlayed
    from storage import Recorder, open_database

    started = time.perf_counter()
    matches = await _capture(unique)
    played_s = time.perf_counter() - started
    lengths = [sum(isinstance(e, TurnPlayed) for e in events) for events in matches]
    bus = EventBus()
    db = await open_database(path)
    stored = copies = 0
    try:
        async with Recorder(db, bus):
            while stored < turns:
                for events, length in zip(matches, lengths, strict=True):
                    match_id, shift = uuid.uuid4().hex, copies * 1e-3
                    for event in events:
                        bus.publish(_renamed(event, match_id, shift))
                    copies += 1
                    stored += length
                    if bus.congested:
                        await bus.wait_for_room(WAIT_S)
                    if stored >= turns:
                        break
                await asyncio.sleep(0)
    finally:
        await db.close()
    return {
        "played_matches": len(matches),
        "played_s": round(played_s, 1),
        "stored_matches": copies,
        "stored_turns": stored,
        "build_s": round(time.perf_counter() - started, 1),
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory, MB: ``VmHWM`` where Linux gives it (its
    ``ru_maxrss`` keeps the parent's peak across ``exec``), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(db_path: str, output: str) -> None:
    """Export the whole database to ``output`` and print one JSON line of figures."""
    from storage import open_database
    from storage.export import ExportQuery, export_rows
    from storage.exportwrite import write_dataset

    base_mb = peak_rss_mb()
    turns = matches = 0

    def count(n: int) -> None:
        nonlocal turns, matches
        turns += n
        matches += 1

    async def run() -> int:
        db = await open_database(db_path, read_only=True)
        try:
            rows = export_rows(db, ExportQuery(games=(GAME,)), on_match=count)
            return (await write_dataset(rows, output)).rows
        finally:
            await db.close()

    started = time.perf_counter()
    rows = asyncio.run(run())
    seconds = time.perf_counter() - started
    peak_mb = peak_rss_mb()
    print(
        json.dumps(
            {
                "rows": rows,
                "turns": turns,
                "matches": matches,
                "seconds": seconds,
                "peak_mb": peak_mb,
                "base_mb": base_mb,
            }
        )
    )


def export_in_child(db_path: str, output: str) -> dict[str, float]:
    """Run one export in a fresh process; its figures."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.export", "--child", db_path, output],
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
        return
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--turns", type=int, default=1_000_000, help="turns to export")
    args_parser.add_argument("--unique", type=int, default=2_000, help="matches played")
    args_parser.add_argument("--db", help="keep the database here (reused if big enough)")
    args = args_parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="arena-bench-export-") as tmp:
        db_path = args.db or os.path.join(tmp, "export.db")
        results: dict[str, object] = {"game": GAME, "cores": os.cpu_count()}
        if asyncio.run(stored_turns(db_path)) < args.turns:
            results["build"] = built = asyncio.run(build(db_path, args.turns, args.unique))
            print(
                f"database: {built['stored_turns']:,} turns in {built['stored_matches']:,} "
                f"matches ({built['played_matches']:,} played in {built['played_s']} s, the "
                f"rest copies), built in {built['build_s']} s"
            )
        results["db_mb"] = round(os.path.getsize(db_path) / 2**20, 1)
        print(
            f"\n{'format':<8} {'rows':>9} {'turns':>10} {'turns/s':>9} {'peak MB':>8} "
            f"{'at start':>8} {'file MB':>8}"
        )
        for fmt in FORMATS:
            output = os.path.join(tmp, f"export.{fmt}")
            f = export_in_child(db_path, output)
            size_mb = os.path.getsize(output) / 2**20
            turns_per_s = f["turns"] / f["seconds"]
            print(
                f"{fmt:<8} {f['rows']:>9,} {f['turns']:>10,} {turns_per_s:>9,.0f} "
                f"{f['peak_mb']:>8.0f} {f['base_mb']:>8.0f} {size_mb:>8.1f}"
            )
            results[fmt] = {
                "rows": f["rows"],
                "turns": f["turns"],
                "matches": f["matches"],
                "seconds": round(f["seconds"], 2),
                "turns_per_s": round(turns_per_s),
                "peak_mb": round(f["peak_mb"], 1),
                "base_mb": round(f["base_mb"], 1),
                "file_mb": round(size_mb, 1),
            }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten to {RESULTS}")
    emit(results, args.json)


if __name__ == "__main__":
    main()
