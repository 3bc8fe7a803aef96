"""Soak: several recording processes on one SQLite database for a long time.

Each writer process is what ``arena play`` runs (``open_database``, a ``Recorder``,
``play_matches`` of random bots), in rounds of ``--chunk`` games until its time is up, then
a clean stop: every match it played has ended and must be stored. Meanwhile this process
samples, every ``--sample-s``, each writer's resident memory (RSS), the WAL and database
sizes, and the matches stored so far. At the end it checks the database: every match a
writer reports as played (finished or truncated) must be stored so, with all its turns;
nothing may be stored aborted or left live. ``lost`` counts the differences: it must be 0.

Figures are ratios within the run: each writer's RSS at the end against its RSS at the
first sample after the warm-up (1.0 = flat), and the largest WAL against the writers'
``journal_size_limit``.

    python -m bench.soak --minutes 10 [--writers 2] [--game TicTacToe-v0] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import emit

CHUNK = 2_000
"""Games per ``play_matches`` call in a writer (the writer stops between two calls)."""
WARMUP_S = 60.0
"""Samples before this are not the RSS baseline (imports, caches and pools fill first)."""


# -- the writer process ------------------------------------------------------------------------
async def _write(db_path: str, seconds: float, seed: int, game: str, chunk: int) -> dict[str, Any]:
    from arena.eventbus import EventBus
    from arena.play import play_matches
    from storage import Recorder, open_database

    db = await open_database(db_path)
    bus = EventBus()
    played = {"games": 0, "finished": 0, "truncated": 0, "aborted": 0, "turns": 0}
    deadline = time.monotonic() + seconds
    try:
        async with Recorder(db, bus) as recorder:
            round_ = 0
            while time.monotonic() < deadline:
                stats = await play_matches(
                    game, ["random", "random"], chunk, seed=seed + round_ * chunk, bus=bus
                )
                for key in played:
                    played[key] += getattr(stats, key)
                round_ += 1
        return {
            **played,
            "recorder": recorder.stats.as_dict(),
            "problem": recorder.problem,
            "bus_waits": bus.waits,
        }
    finally:
        await db.close()


# -- sampling and checking ---------------------------------------------------------------------
def rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MiB (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def size_mb(path: Path) -> float:
    """Size of ``path`` in MiB (0 when missing)."""
    try:
        return path.stat().st_size / (1024 * 1024)
    except OSError:
        return 0.0


async def _stored(db_path: str) -> int:
    from storage import count_matches, open_database

    db = await open_database(db_path, read_only=True)
    try:
        return await count_matches(db)
    finally:
        await db.close()


async def _check(db_path: str) -> dict[str, int]:
    """Matches per status, and ended matches whose stored turns differ from ``num_turns``."""
    from sqlalchemy import func, select

    from storage import open_database
    from storage.models import Match, TurnBlock

    db = await open_database(db_path, read_only=True)
    try:
        async with db.sessions() as session:
            rows = await session.execute(select(Match.status, func.count()).group_by(Match.status))
            by_status = {status: count for status, count in rows}
            turns = (
                select(TurnBlock.match_id, func.sum(TurnBlock.count).label("n"))
                .group_by(TurnBlock.match_id)
                .subquery()
            )
            incomplete = await session.scalar(
                select(func.count())
                .select_from(Match)
                .outerjoin(turns, turns.c.match_id == Match.id)
                .where(Match.status.in_(("finished", "truncated")))
                .where(func.coalesce(turns.c.n, 0) != Match.num_turns)
            )
        counts = {str(k): int(v) for k, v in by_status.items()}
        return {**counts, "incomplete": int(incomplete or 0)}
    finally:
        await db.close()


@dataclass
class Sample:
    """One look at the run."""

    t: float
    rss_mb: list[float | None]
    wal_mb: float
    db_mb: float
    stored: int


@dataclass
class Soak:
    """The samples and the writers' reports."""

    samples: list[Sample] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)


def run_soak(
    db_path: Path, minutes: float, writers: int, game: str, sample_s: float, chunk: int
) -> Soak:
    """Start ``writers`` writer processes for ``minutes`` and sample them; return it all."""
    asyncio.run(_stored_or_create(str(db_path)))
    seconds = minutes * 60
    procs = [
        subprocess.Popen(
            [
                sys.executable, "-m", "bench.soak", "--writer", "--db", str(db_path),
                "--seconds", str(seconds), "--seed", str(10_000_000 * (i + 1)),
                "--game", game, "--chunk", str(chunk),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]  # fmt: skip
    soak = Soak()
    started = time.monotonic()
    wal = db_path.with_name(db_path.name + "-wal")
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(min(sample_s, 1.0) if not soak.samples else sample_s)
            sample = Sample(
                t=time.monotonic() - started,
                rss_mb=[rss_mb(p.pid) for p in procs],
                wal_mb=size_mb(wal),
                db_mb=size_mb(db_path),
                stored=asyncio.run(_stored(str(db_path))),
            )
            soak.samples.append(sample)
            rss = " ".join(f"{r:7.1f}" if r is not None else "      -" for r in sample.rss_mb)
            print(
                f"{sample.t:7.0f} s  RSS MiB {rss}   WAL {sample.wal_mb:8.1f} MiB   "
                f"DB {sample.db_mb:8.1f} MiB   stored {sample.stored}",
                flush=True,
            )
        for p in procs:
            out, _ = p.communicate()
            lines = out.strip().splitlines()
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"a writer failed (exit {p.returncode})")
            soak.reports.append(json.loads(lines[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return soak


async def _stored_or_create(db_path: str) -> None:
    from storage import open_database

    db = await open_database(db_path)  # created once, before the writers race for it
    await db.close()


def summarize(soak: Soak, db_path: Path) -> dict[str, Any]:
    """The figures: RSS ratios, WAL bound, and matches lost."""
    from storage.connect import JOURNAL_SIZE_LIMIT_BYTES

    checked = asyncio.run(_check(str(db_path)))
    played_ok = sum(r["finished"] + r["truncated"] for r in soak.reports)
    played_aborted = sum(r["aborted"] for r in soak.reports)
    stored_ok = checked.get("finished", 0) + checked.get("truncated", 0)
    lost = (
        abs(played_ok - stored_ok)
        + checked.get("aborted", 0)
        + checked.get("live", 0)
        + checked["incomplete"]
    )
    total = soak.samples[-1].t if soak.samples else 0.0
    late = [s for s in soak.samples if s.t >= min(WARMUP_S, total / 2)]
    ratios: list[float | None] = []
    start_end: list[list[float]] = []
    for i in range(len(soak.reports)):
        seen = [r for s in late if (r := s.rss_mb[i]) is not None]
        ratios.append(round(seen[-1] / seen[0], 3) if len(seen) >= 2 else None)
        start_end.append([round(seen[0], 1), round(seen[-1], 1)] if seen else [])
    max_wal = max((s.wal_mb for s in soak.samples), default=0.0)
    minutes = total / 60
    return {
        "minutes": round(minutes, 1),
        "games_played": played_ok + played_aborted,
        "matches_stored": stored_ok,
        "matches_lost": lost,
        "aborted_by_play": played_aborted,
        "rss_end_over_start": ratios,
        "rss_mb_start_end": start_end,
        "max_wal_mb": round(max_wal, 1),
        "max_wal_over_limit": round(max_wal / (JOURNAL_SIZE_LIMIT_BYTES / 2**20), 3),
        "db_mb": round(soak.samples[-1].db_mb, 1) if soak.samples else 0.0,
        "recorder_drops": sum(r["recorder"]["drops"] for r in soak.reports),
        "recorder_max_pending": max(r["recorder"]["max_pending"] for r in soak.reports),
        "bus_waits": sum(r["bus_waits"] for r in soak.reports),
        "problems": [r["problem"] for r in soak.reports if r["problem"]],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long the writers run")
    p.add_argument("--writers", type=int, default=2, help="recording processes (default: 2)")
    p.add_argument("--game", default="TicTacToe-v0", help="game the random bots play")
    p.add_argument("--sample-s", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--chunk", type=int, default=CHUNK, help="games per play_matches call")
    p.add_argument("--db", help="database file (default: a fresh one in a temporary folder)")
    p.add_argument("--json", action="store_true", help="end with one JSON line of results")
    p.add_argument("--writer", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=60.0, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.writer:
        report = asyncio.run(_write(args.db, args.seconds, args.seed, args.game, args.chunk))
        print(json.dumps(report), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="arena-soak-") as tmp:
        db_path = Path(args.db) if args.db else Path(tmp) / "soak.db"
        soak = run_soak(db_path, args.minutes, args.writers, args.game, args.sample_s, args.chunk)
        results = summarize(soak, db_path)
    print(
        f"{results['minutes']} min, {args.writers} writers: {results['games_played']} games, "
        f"{results['matches_stored']} stored, lost {results['matches_lost']}; "
        f"RSS end/start {results['rss_end_over_start']}; "
        f"largest WAL {results['max_wal_mb']} MiB ({results['max_wal_over_limit']} of the limit)"
    )
    emit(results, args.json)
    if results["matches_lost"]:
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
