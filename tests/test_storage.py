"""Storage: every match and turn persisted, in order, crash-safe; queries read them back.

Real databases, through SQLAlchemy, and real games: most tests run twice, on an SQLite file
in tmp_path (aiosqlite) and on a new database of a private PostgreSQL server (asyncpg); the
tests of what only SQLite has (its files, locks, pages) run on SQLite alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from arena.envs import MatchGroupBuilder
from arena.eventbus import EventBus, default_bus
from arena.events import MatchAborted, MatchEnded, MatchEvent, MatchStarted, TurnPlayed
from arena.play import play_matches
from arena.policies import RandomMovePolicy
from arena.rollouts import do_group_rollout
from storage import (
    Recorder,
    SchemaVersionError,
    count_matches,
    get_match,
    list_matches,
    list_runs,
    open_database,
    policy_results,
    save_run,
)
from storage.connect import resolve_url
from storage.db import Database
from storage.errors import AmbiguousMatchId, MatchNotFound, NotAnArenaDatabase
from storage.leases import RECOVERED_REASON
from storage.models import SCHEMA_VERSION, Match, SchemaMeta, TurnBlock
from storage.recorder import FAILED_WRITE_REASON, LOST_EVENTS_REASON
from tests.conftest import HANG_GUARD_S, postgres_connection

ROOT = Path(__file__).resolve().parents[1]


# -- helpers -------------------------------------------------------------------------------
def started(
    match_id: str, players: tuple[str, ...] = ("random", "random"), **kw: object
) -> MatchStarted:
    return MatchStarted(
        match_id=match_id,
        game_id=str(kw.pop("game_id", "Counting-v0")),
        seed=kw.pop("seed", 0),  # type: ignore[arg-type]
        num_players=len(players),
        players=players,
        **kw,  # type: ignore[arg-type]
    )


def turn(
    match_id: str, index: int, seat: int | None = None, valid: bool = True, **kw: Any
) -> TurnPlayed:
    fields: dict[str, Any] = {
        "observation": f"obs {index}",
        "action": f"[{index}]",
        "reason": None if valid else "wrong",
        **kw,
    }
    return TurnPlayed(
        match_id=match_id,
        index=index,
        seat=index % 2 if seat is None else seat,
        valid=valid,
        **fields,
    )


def ended(match_id: str, num_turns: int, rewards: tuple[float, ...] = (1.0, -1.0)) -> MatchEnded:
    return MatchEnded(
        match_id=match_id,
        status="finished",
        rewards=rewards,
        invalid_moves=(0,) * len(rewards),
        reason="seat 0 won",
        num_turns=num_turns,
        full_state="all seen",
    )


def whole_match(match_id: str, turns: int = 3) -> list[MatchEvent]:
    return [started(match_id), *(turn(match_id, i) for i in range(turns)), ended(match_id, turns)]


async def turn_counts(db: Database) -> dict[str, tuple[int, int, int]]:
    """match id -> (stored turns, lowest index, highest index), for matches with turns."""
    async with db.sessions() as session:
        rows = await session.execute(
            select(
                TurnBlock.match_id,
                func.sum(TurnBlock.count),
                func.min(TurnBlock.first),
                func.max(TurnBlock.first + TurnBlock.count - 1),
            )
            .where(TurnBlock.count > 0)
            .group_by(TurnBlock.match_id)
        )
        return {m: (int(n), lo, hi) for m, n, lo, hi in rows}


async def statuses(db: Database) -> dict[str, tuple[str, str, int]]:
    """match id -> (status, reason, num_turns)."""
    async with db.sessions() as session:
        rows = await session.execute(select(Match.id, Match.status, Match.reason, Match.num_turns))
        return {m: (s, r, n) for m, s, r, n in rows}


@contextlib.asynccontextmanager
async def write_lock_held(url: str) -> AsyncIterator[None]:
    """Another program holds the database's write lock meanwhile: SQLite's (``BEGIN
    IMMEDIATE``), or on PostgreSQL an exclusive lock on the match tables."""
    if "://" not in url:
        other = sqlite3.connect(url, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
        return
    conn = await postgres_connection(url)
    try:
        async with conn.transaction():
            await conn.execute("LOCK TABLE matches, seats, turn_blocks IN EXCLUSIVE MODE")
            yield
    finally:
        await conn.close()


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """An SQLite file, for the tests of what only SQLite does (its locks, files, pages)."""
    return str(tmp_path / "arena.db")


async def execute(url: str, statement: str) -> None:
    """Run one SQL statement on the database at ``url`` as another program would."""
    if "://" not in url:
        with sqlite3.connect(url) as conn:
            conn.execute(statement)
        return
    conn = await postgres_connection(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def sound(db: Database) -> bool:
    """SQLite's integrity check passes (PostgreSQL keeps its own files sound)."""
    return not db.is_sqlite or await db.integrity_check() == "ok"


# -- recording real games ------------------------------------------------------------------
async def test_recorded_match_round_trips_every_turn_in_order(db_url: str) -> None:
    bus = EventBus()
    witness = bus.subscribe(max_queue=100_000, name="witness")
    db = await open_database(db_url)
    async with Recorder(db, bus) as recorder:
        stats = await play_matches("TicTacToe-v0", ["random", "optimal"], 4, bus=bus)
    assert recorder.stats.matches_ended == 4 and recorder.stats.turns == stats.turns
    seen: dict[str, list[TurnPlayed]] = {}
    results: dict[str, MatchEnded] = {}
    while (event := witness.get_nowait()) is not None:
        if isinstance(event, TurnPlayed):
            seen.setdefault(event.match_id, []).append(event)
        elif isinstance(event, MatchEnded):
            results[event.match_id] = event
    assert len(seen) == 4
    for match_id, turns in seen.items():
        detail = await get_match(db, match_id)
        assert detail.match.status == "finished"
        assert detail.match.game_id == "TicTacToe-v0"
        assert detail.match.players == ("random", "optimal")
        assert detail.match.rewards == results[match_id].rewards
        assert detail.match.num_turns == len(turns) == len(detail.turns)
        assert [t.index for t in detail.turns] == list(range(len(turns)))
        for stored, event in zip(detail.turns, turns, strict=True):
            assert (stored.seat, stored.observation, stored.action, stored.valid) == (
                event.seat,
                event.observation,
                event.action,
                event.valid,
            )
            assert stored.public_state == event.public_state
        assert "Player" in detail.turns[0].observation  # the text the seat was shown
        assert detail.full_state == results[match_id].full_state
    await db.close()


async def test_three_plus_player_match_is_stored_with_every_seat(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    async with Recorder(db, bus):
        stats = await play_matches("LowestUnique-v0", ["random"] * 5, 3, bus=bus)
    assert stats.finished == 3
    matches = await list_matches(db, game="LowestUnique-v0")
    assert len(matches) == 3
    for summary in matches:
        assert summary.num_players == 5 and len(summary.seats) == 5
        assert all(s.reward is not None for s in summary.seats)
        detail = await get_match(db, summary.id)
        assert {t.seat for t in detail.turns} == set(range(5))
        assert len(detail.turns) == summary.num_turns
        assert sum(s.moves for s in summary.seats) == summary.num_turns
    await db.close()


async def test_many_concurrent_matches_record_at_once_while_a_reader_reads(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    reader = await open_database(db_url, recover=False)
    recorder = Recorder(db, bus, batch_size=64)
    recorder.start()
    games = asyncio.gather(
        play_matches("TicTacToe-v0", ["random", "random"], 150, bus=bus, concurrency=50),
        play_matches("LowestUnique-v0", ["random"] * 3, 50, bus=bus, concurrency=25, seed=7),
    )
    while not games.done():  # read while it writes (WAL: readers never block the writer)
        await list_matches(reader, limit=20)
        await asyncio.sleep(0.01)
    tic, low = await games
    await recorder.close()
    assert recorder.stats.batches > 1 and recorder.stats.drops == 0
    assert await count_matches(reader) == 200
    assert await count_matches(reader, status="finished") == tic.finished + low.finished
    counts = await turn_counts(reader)
    for match_id, (status, _reason, num_turns) in (await statuses(reader)).items():
        assert status == "finished"
        assert counts[match_id] == (num_turns, 0, num_turns - 1)
    results = {r.policy: r for r in await policy_results(reader, game="TicTacToe-v0")}
    assert results["random"].games == 300  # two seats per match
    r = results["random"]
    assert r.wins + r.draws + r.losses == 300 and r.wins == r.losses
    await reader.close()
    await db.close()


async def test_learner_seats_are_stored_as_the_runs_learner_with_tokens(db_url: str) -> None:
    db = await open_database(db_url)
    builder = MatchGroupBuilder(
        "TicTacToe-v0",
        group_size=2,
        learner_seats=(0,),
        opponents=("random",),
        seed=3,
        run_id="run-7",
        group_id="group-1",
    )
    async with Recorder(db, default_bus()):
        await do_group_rollout(builder, RandomMovePolicy(seed=1))
    matches = await list_matches(db, run="run-7")
    assert len(matches) == 2
    for summary in matches:
        assert summary.group_id == "group-1"
        assert [(s.policy, s.kind) for s in summary.seats] == [
            ("learner", "learner"),
            ("random", "bot"),
        ]
        detail = await get_match(db, summary.id)
        learner_turns = [t for t in detail.turns if t.seat == 0]
        assert learner_turns and all(t.tokens for t in learner_turns)
        assert all(t.tokens is None for t in detail.turns if t.seat == 1)
    results = await policy_results(db, run="run-7")
    assert {(r.policy, r.kind, r.run_id) for r in results} == {
        ("learner", "learner", "run-7"),
        ("random", "bot", None),
    }
    assert await count_matches(db, policy="learner") == 2
    (run,) = await list_runs(db)  # created by the recorder, by id
    assert (run.id, run.name, run.config) == ("run-7", "run-7", None)
    await save_run(db, "run-7", name="tic-tac-toe self-play", config={"lr": 1e-5})
    (run,) = await list_runs(db)
    assert (run.name, run.config) == ("tic-tac-toe self-play", {"lr": 1e-5})
    await db.close()


# -- shutdown, cancellation, falling behind, failures --------------------------------------
async def test_close_right_after_the_last_publish_stores_everything(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    recorder = Recorder(db, bus, batch_size=100)
    recorder.start()
    for i in range(300):
        for event in whole_match(f"m{i:04d}"):
            bus.publish(event)
    assert recorder._sub is not None and recorder._sub.pending() == 1500  # nothing written yet
    await recorder.close()
    assert await count_matches(db, status="finished") == 300
    assert all(n == (3, 0, 2) for n in (await turn_counts(db)).values())
    await db.close()


async def test_cancelling_the_recording_task_still_drains_the_queue(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    published = asyncio.Event()

    async def record() -> None:
        async with Recorder(db, bus, batch_size=50):
            for i in range(100):
                for event in whole_match(f"c{i:03d}"):
                    bus.publish(event)
            published.set()
            await asyncio.sleep(3600)  # like a run interrupted by Ctrl-C

    task = asyncio.create_task(record())
    await published.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await count_matches(db, status="finished") == 100
    await db.close()


async def test_dropped_recorder_resubscribes_and_marks_lost_matches_aborted(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    recorder = Recorder(db, bus, max_queue=5)
    recorder.start()
    for event in whole_match("done", 1):  # 3 events: fits
        bus.publish(event)
    bus.publish(started("cut"))
    for i in range(6):  # overflows the queue: the bus drops the recorder
        bus.publish(turn("cut", i))
    assert not bus.has_subscribers
    await recorder.flush()
    assert bus.has_subscribers  # it came back
    bus.publish(ended("cut", 6))  # the end of a match whose events were lost: ignored
    for event in whole_match("after", 1):  # 4 events with the one above: fits
        bus.publish(event)
    await recorder.close()
    assert recorder.stats.drops == 1 and recorder.stats.lost_matches == 1
    stored = await statuses(db)
    assert stored["done"][0] == "finished"
    assert stored["cut"][:2] == ("aborted", LOST_EVENTS_REASON)
    assert stored["after"][0] == "finished"
    assert "dropped the recorder" in caplog.text
    await db.close()


async def test_an_event_that_cannot_be_stored_aborts_only_its_match(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    recorder = Recorder(db, bus)
    recorder.start()
    bad: list[MatchEvent] = [started("bad"), turn("bad", 0), turn("bad", 0), ended("bad", 2)]
    for event in [*bad, *whole_match("good")]:  # one batch: it fails, then event by event
        bus.publish(event)
    await recorder.close()
    stored = await statuses(db)
    assert stored["good"][0] == "finished"
    assert stored["bad"][:2] == ("aborted", FAILED_WRITE_REASON)
    assert recorder.stats.write_errors >= 2
    await db.close()


async def test_a_database_locked_past_the_retries_costs_only_the_matches_it_held(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    bus = EventBus()
    db = await open_database(db_url, busy_timeout_s=0.05)
    recorder = Recorder(db, bus, retry_s=0.2)
    recorder.start()
    bus.publish(started("held"))
    await recorder.flush()
    async with write_lock_held(db_url):  # another program takes the write lock and keeps it
        bus.publish(turn("held", 0))
        bus.publish(ended("held", 1))
        await recorder.flush()  # retried, then given up: the games never noticed
    for event in whole_match("next"):
        bus.publish(event)
    await recorder.close()
    stored = await statuses(db)
    assert stored["held"][:2] == ("aborted", FAILED_WRITE_REASON)
    assert stored["next"][0] == "finished"
    assert recorder.stats.write_errors >= 2
    assert "locked by another program" in caplog.text
    await db.close()


# -- crash safety --------------------------------------------------------------------------
async def test_live_matches_are_marked_aborted_when_a_new_process_opens(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    async with Recorder(db, bus):
        for event in [started("left-live"), turn("left-live", 0), *whole_match("over")]:
            bus.publish(event)
    await db.close()
    reader = await open_database(db_url, recover=False)  # readers leave them alone
    assert (await statuses(reader))["left-live"][0] == "live"
    await reader.close()
    db = await open_database(db_url)
    assert db.recovered == 1
    stored = await statuses(db)
    assert stored["left-live"][:2] == ("aborted", RECOVERED_REASON)
    assert stored["over"][0] == "finished"
    detail = await get_match(db, "left-live")
    assert len(detail.turns) == 1  # what was stored stays
    await db.close()


CRASH_SCRIPT = """
import asyncio, sys

from arena.eventbus import EventBus
from arena.play import play_matches
from games.limits import SessionLimits
from storage import Recorder, open_database


class Stuck:  # a seat that never answers: its match stays live
    name = "stuck"

    async def act(self, turn):
        await asyncio.Event().wait()


async def main(path):
    db = await open_database(path)
    bus = EventBus()
    Recorder(db, bus).start()
    print("ready", flush=True)
    stuck = asyncio.ensure_future(play_matches(
        "LowestUnique-v0", ["random", "random", "random"], 1, bus=bus,
        limits=SessionLimits(move_timeout_s=None),
        agent_wrapper=lambda seat, agent: Stuck() if seat == 2 else agent))
    for i in range(10_000):
        await play_matches("LowestUnique-v0", ["random"] * 4, 16, seed=16 * i, bus=bus)


asyncio.run(main(sys.argv[1]))
"""


async def test_sigkill_mid_run_leaves_a_sound_database(db_url: str, tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent(CRASH_SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), db_url], stdout=subprocess.PIPE, env=env, cwd=tmp_path
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n", "the recording process failed to start"
        watcher = await open_database(db_url, recover=False)  # a second process reads
        deadline = time.monotonic() + 3 * HANG_GUARD_S  # a hang guard, however busy
        while await count_matches(watcher, status="finished") < 100:
            assert proc.poll() is None, "the recording process died"
            assert time.monotonic() < deadline, "nothing was recorded"
            await asyncio.sleep(0.05)
        await watcher.close()
        await asyncio.sleep(0.1)  # land somewhere in the middle of a batch
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    reader = await open_database(db_url, recover=False)
    assert await sound(reader)
    live = {m for m, (s, _r, _n) in (await statuses(reader)).items() if s == "live"}
    assert live  # at least the stuck match
    await reader.close()

    db = await open_database(db_url)
    assert db.recovered == len(live)
    stored = await statuses(db)
    counts = await turn_counts(db)
    finished = [m for m, (s, _r, _n) in stored.items() if s == "finished"]
    assert len(finished) >= 100
    for match_id in finished:  # finished implies every turn is there
        num_turns = stored[match_id][2]
        assert counts[match_id] == (num_turns, 0, num_turns - 1)
    for match_id in live:
        assert stored[match_id][:2] == ("aborted", RECOVERED_REASON)
    assert not [m for m, (s, _r, _n) in stored.items() if s == "live"]
    assert await sound(db)
    await db.close()


CTRL_C_SCRIPT = """
import asyncio, signal, sys

# Ctrl-C raises KeyboardInterrupt even when this was started with SIGINT ignored (a
# non-interactive shell starts background jobs so, and children inherit it).
signal.signal(signal.SIGINT, signal.default_int_handler)

from arena.eventbus import EventBus
from arena.play import play_matches
from storage import Recorder, open_database

done = 0


def count(coordinator):
    global done
    done += 1
    print(done, flush=True)


async def main(path):
    db = await open_database(path)
    bus = EventBus()
    async with Recorder(db, bus):
        for i in range(10_000):
            await play_matches(
                "TicTacToe-v0", ["random", "random"], 32, seed=32 * i, bus=bus,
                on_match_done=count,
            )


asyncio.run(main(sys.argv[1]))
"""


async def test_ctrl_c_stores_every_match_that_ended(db_url: str, tmp_path: Path) -> None:
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), db_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        while int(proc.stdout.readline() or b"-1") < 200:
            assert proc.poll() is None, "the recording process died"
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=120)[0].split()  # a hang guard only
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended_before_exit = int(rest[-1]) if rest else 200
    db = await open_database(db_url, recover=False)
    assert await sound(db)
    stored = await statuses(db)
    counts = await turn_counts(db)
    finished = [m for m, (s, _r, _n) in stored.items() if s == "finished"]
    assert len(finished) >= ended_before_exit  # nothing that ended was lost on the way out
    for match_id in finished:
        num_turns = stored[match_id][2]
        assert counts[match_id] == (num_turns, 0, num_turns - 1)
    await db.close()


# -- schema versions -----------------------------------------------------------------------
async def test_database_of_another_schema_version_is_refused_not_rewritten(db_url: str) -> None:
    db = await open_database(db_url)
    async with db.writes.begin() as session:
        await session.execute(update(SchemaMeta).values(value=str(SCHEMA_VERSION + 98)))
    await db.close()
    for _ in range(2):  # and it stays refused: nothing was rewritten
        with pytest.raises(SchemaVersionError) as raised:
            await open_database(db_url)
        message = str(raised.value)
        assert f"version {SCHEMA_VERSION + 98}" in message
        assert f"version {SCHEMA_VERSION}" in message
        assert raised.value.found == SCHEMA_VERSION + 98


async def test_a_foreign_database_with_arena_table_names_is_refused(db_url: str) -> None:
    await execute(db_url, "CREATE TABLE matches (id TEXT)")
    with pytest.raises(NotAnArenaDatabase, match="matches"):
        await open_database(db_url)


async def test_a_new_database_gets_the_current_schema_where_arena_db_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARENA_DB", raising=False)
    assert resolve_url(None).database == "arena.db"
    monkeypatch.setenv("ARENA_DB", str(tmp_path / "from-env.db"))
    db = await open_database()
    assert (tmp_path / "from-env.db").is_file()
    async with db.sessions() as session:
        version = await session.scalar(select(SchemaMeta.value))
    assert version == str(SCHEMA_VERSION)
    await db.close()
    url = f"sqlite+aiosqlite:///{tmp_path / 'by-url.db'}"
    db = await open_database(url)
    assert db.is_sqlite and (tmp_path / "by-url.db").is_file()
    await db.close()


# -- queries -------------------------------------------------------------------------------
async def test_list_matches_filters_pages_and_orders_newest_first(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    base = time.time()
    events: list[MatchEvent] = []
    for i in range(6):
        game = "A-v0" if i % 2 else "B-v0"
        players = ("learner", "random") if i < 3 else ("optimal", "random")
        events.append(
            MatchStarted(
                match_id=f"match-{i}",
                game_id=game,
                seed=i,
                num_players=2,
                players=players,
                run_id="r1" if i < 3 else None,
                time=base + i,
            )
        )
        if i != 5:
            events.append(ended(f"match-{i}", 0))
    async with Recorder(db, bus):
        for event in events:
            bus.publish(event)
    assert [m.id for m in await list_matches(db)] == [f"match-{i}" for i in range(5, -1, -1)]
    assert [m.id for m in await list_matches(db, limit=2, offset=1)] == ["match-4", "match-3"]
    assert {m.id for m in await list_matches(db, game="A-v0")} == {"match-1", "match-3", "match-5"}
    assert {m.id for m in await list_matches(db, run="r1")} == {"match-0", "match-1", "match-2"}
    assert {m.id for m in await list_matches(db, policy="optimal")} == {
        "match-3",
        "match-4",
        "match-5",
    }
    assert [m.id for m in await list_matches(db, status="live")] == ["match-5"]
    assert await count_matches(db, game="B-v0", policy="learner") == 2
    assert await list_matches(db, policy="nobody") == []
    with pytest.raises(ValueError, match="choose from"):
        await list_matches(db, status="done")
    with pytest.raises(ValueError, match="limit"):
        await list_matches(db, limit=0)
    await db.close()


async def test_match_ids_resolve_by_prefix(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    async with Recorder(db, bus):
        for match_id in ("abcdef0123", "abcdef0199", "fedcba9876"):
            for event in whole_match(match_id, 1):
                bus.publish(event)
    assert (await get_match(db, "fedcba98")).match.id == "fedcba9876"
    assert (await get_match(db, "abcdef0123")).match.id == "abcdef0123"
    with pytest.raises(AmbiguousMatchId, match="more characters"):
        await get_match(db, "abcdef01")
    with pytest.raises(MatchNotFound, match="at least 8"):
        await get_match(db, "fedc")
    with pytest.raises(MatchNotFound):
        await get_match(db, "00000000")
    await db.close()


async def test_model_tokens_and_logprobs_round_trip(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    move = TurnPlayed(
        match_id="model",
        index=0,
        seat=0,
        observation="Your move.",
        action="[4]" * 1000,
        valid=True,
        truncated=True,
        tokens=(91, 52, 93, 0),
        logprobs=(-0.25, -1.5, -0.125, -3.0),
        elapsed_s=0.5,
    )
    async with Recorder(db, bus):
        bus.publish(started("model", ("learner", "random")))
        bus.publish(move)
        bus.publish(ended("model", 1))
    (stored,) = (await get_match(db, "model")).turns
    assert stored.tokens == move.tokens and stored.logprobs == move.logprobs
    assert stored.action == move.action and stored.truncated and stored.elapsed_s == 0.5
    await db.close()


async def test_aborted_matches_carry_no_result(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    async with Recorder(db, bus):
        for event in [
            started("x"),
            turn("x", 0, valid=False),
            MatchAborted(match_id="x", reason="seat 1 timed out", num_turns=1),
            *whole_match("y", 2),
        ]:
            bus.publish(event)
    detail = await get_match(db, "x")
    assert detail.match.status == "aborted" and detail.match.reason == "seat 1 timed out"
    assert detail.match.rewards == (None, None)
    assert detail.match.seats[0].invalid_moves == 1 and not detail.turns[0].valid
    results = {r.policy: r for r in await policy_results(db)}
    assert results["random"].games == 2  # only "y" counts
    await db.close()


# -- encodable text --------------------------------------------------------------------------
async def test_a_move_with_a_lone_surrogate_is_stored_with_its_whole_match(db_url: str) -> None:
    from arena.coordinator import GameCoordinator
    from tests.conftest import ScriptedAgent, counting_session

    bus = EventBus()
    db = await open_database(db_url)
    async with Recorder(db, bus) as recorder:
        session = counting_session(2)
        # The game accepts it: "[0]" is there; "\udc80" cannot be encoded as UTF-8.
        agent = ScriptedAgent(lambda t: t.legal_moves[0] + " \udc80", "surrogates")
        coordinator = GameCoordinator(session, {0: agent, 1: agent}, bus=bus)
        outcome = await coordinator.wait_done()
        await recorder.flush()
    assert outcome.status.value == "finished"
    detail = await get_match(db, coordinator.match_id)
    assert detail.match.status == "finished" and len(detail.turns) == 4
    assert detail.turns[0].action == "[0] \ufffd"
    assert "\ufffd" in detail.turns[1].observation  # the echo of seat 0's move
    assert recorder.stats.lost_matches == 0 and recorder.stats.write_errors == 0
    await db.close()


async def test_boards_are_stored_and_read_back_with_text_made_encodable(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    board = {"kind": "grid", "grid": [["X", "\udc80"]], "marks": {"X": 0}}
    full = {"kind": "grid", "grid": [["X", "\udc80"]], "cards": {"seat 0": ["K"]}}
    async with Recorder(db, bus) as recorder:
        bus.publish(started("bd", board=board, full_board=full))
        bus.publish(turn("bd", 0, board=board, full_board=full))
        bus.publish(turn("bd", 1, board=board))
        bus.publish(ended("bd", 2))
        await recorder.flush()
    detail = await get_match(db, "bd")
    clean = {"kind": "grid", "grid": [["X", "\ufffd"]], "marks": {"X": 0}}
    assert detail.start_board == clean and detail.turns[0].board == clean
    assert detail.start_full_board is not None and detail.start_full_board["cards"] == {
        "seat 0": ["K"]
    }
    assert detail.turns[0].full_board == {**full, "grid": [["X", "\ufffd"]]}
    assert detail.turns[1].full_board is None  # none sent: stored as null
    assert recorder.stats.write_errors == 0
    await db.close()


# -- bounded memory ------------------------------------------------------------------------------
async def test_batches_of_any_size_use_a_few_insert_statement_shapes(db_url: str) -> None:
    """Each distinct INSERT text is compiled and cached by the driver (about a megabyte for
    the largest): batch sizes must not each get their own."""
    from sqlalchemy import event

    from storage.recordwrite import BLOCK_COLUMNS, BLOCKS
    from storage.turnlog import Block

    db = await open_database(db_url)
    texts: set[str] = set()

    def seen(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.startswith("INSERT INTO turn_blocks"):
            texts.add(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", seen)
    bus = EventBus()
    async with Recorder(db, bus) as recorder:
        bus.publish(started("m1"))
        await recorder.flush()
    total = 0
    sizes = [1, 2, 3, 7, 9, 63, 65, 100, 511, 513, 999, 1000, 1001, 2345, 77, 5]
    block = Block("m1", 0, 0)
    block.add_turn(TurnPlayed("m1", 0, 0, None, "[0]", True, time=0.0, move="[0]", messages=()))
    one = block.data()
    for n in sizes:
        rows = [("m1", 1 + total + i, total + i, 1, one, None) for i in range(n)]
        async with db.writes.begin() as session:
            await db.insert_many(await session.connection(), BLOCKS, BLOCK_COLUMNS, rows)
        total += n
    assert (await turn_counts(db))["m1"] == (total, 0, total - 1)
    assert 0 < len(texts) <= 5  # 1000, 512, 64, 8 and 1 rows: not one per batch size
    await db.close()


# -- owners of live matches ----------------------------------------------------------------------
async def test_starting_a_process_leaves_another_running_processs_live_matches_alone(
    db_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent(CRASH_SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), db_url], stdout=subprocess.PIPE, env=env, cwd=tmp_path
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n", "the recording process failed to start"
        reader = await open_database(db_url, read_only=True)
        deadline = time.monotonic() + 3 * HANG_GUARD_S  # a hang guard, however busy
        while not await count_matches(reader, status="live", game="LowestUnique-v0"):
            assert time.monotonic() < deadline, "the stuck match was never stored"
            await asyncio.sleep(0.05)
        await reader.close()
        # A second writer starts (arena play, arena train): the other's matches live on.
        db = await open_database(db_url)
        assert db.recovered == 0
        live = {m for m, (s, _r, _n) in (await statuses(db)).items() if s == "live"}
        assert live
        await db.close()
        assert proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Its process is gone (same host, dead pid): now they are orphans.
    db = await open_database(db_url)
    stored = await statuses(db)
    assert db.recovered >= len(live)
    assert all(stored[m][:2] == ("aborted", RECOVERED_REASON) for m in live)
    await db.close()


async def test_matches_of_a_writer_on_another_host_wait_for_its_lease_to_expire(
    db_url: str,
) -> None:
    from storage.models import Writer

    db = await open_database(db_url)
    now = time.time()
    async with db.writes.begin() as session:
        session.add_all(
            [
                Writer(
                    id=100,
                    host="elsewhere",
                    pid=1,
                    name="r",
                    started_at=now,
                    lease_until=now + 3600,
                ),
                Writer(
                    id=101, host="elsewhere", pid=1, name="r", started_at=now, lease_until=now - 1
                ),
            ]
        )
    bus = EventBus()
    async with Recorder(db, bus) as recorder:
        for match_id in ("fresh", "expired"):
            bus.publish(started(match_id))
        await recorder.flush()
    async with db.writes.begin() as session:
        await session.execute(update(Match).where(Match.id == "fresh").values(writer_id=100))
        await session.execute(update(Match).where(Match.id == "expired").values(writer_id=101))
    await db.close()
    db = await open_database(db_url)
    stored = await statuses(db)
    assert stored["fresh"][0] == "live"  # its writer's lease runs: it may still be recording
    assert stored["expired"][:2] == ("aborted", RECOVERED_REASON)
    assert db.recovered == 1
    await db.close()


# -- back-pressure ---------------------------------------------------------------------------------
class _SlowRecorder(Recorder):
    """A recorder on a database much slower than the games (each batch takes 50 ms more)."""

    async def _write(self, batch: list) -> None:  # type: ignore[type-arg]
        await asyncio.sleep(0.05)
        await super()._write(batch)


async def test_a_recorder_slower_than_the_games_slows_them_and_loses_nothing(
    db_url: str,
) -> None:
    db = await open_database(db_url)
    bus = EventBus()
    web = bus.subscribe(max_queue=50, name="web")  # a subscriber that may be dropped
    async with _SlowRecorder(db, bus, batch_size=100, pressure=100, max_queue=400) as recorder:
        stats = await play_matches("TicTacToe-v0", ["random", "random"], 300, bus=bus)
    assert stats.finished == 300
    assert bus.waits > 0  # the games waited for the recorder...
    assert recorder.stats.drops == 0 and recorder.stats.lost_matches == 0  # ...so it kept up
    assert recorder.stats.max_pending <= 400 and recorder.problem is None
    assert web.dropped  # publishing still never waits for the others
    assert await count_matches(db, status="finished") == 300
    counts, stored = await turn_counts(db), await statuses(db)
    assert all(counts[m][0] == stored[m][2] for m in stored)  # every turn of every match
    await db.close()


async def test_a_recorder_that_cannot_store_says_so(db_path: str) -> None:
    """A full disk, simulated by SQLite's own page limit (the same SQLITE_FULL error): the
    losses are counted and ``problem`` names them (``arena play`` then fails)."""
    from sqlalchemy import event

    db = await open_database(db_path)
    bus = EventBus()
    async with Recorder(db, bus) as recorder:
        await play_matches("TicTacToe-v0", ["random", "random"], 5, bus=bus)
        await recorder.flush()
        assert recorder.problem is None

        def full(dbapi_connection: object, _record: object) -> None:
            cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
            cursor.execute("PRAGMA page_count")
            pages = cursor.fetchone()[0]
            cursor.execute(f"PRAGMA max_page_count = {pages}")
            cursor.close()

        event.listen(db.engine.sync_engine, "connect", full)
        await db.engine.dispose()  # every new connection gets the limit
        await play_matches("TicTacToe-v0", ["random", "random"], 300, bus=bus)
    assert recorder.stats.lost_matches == 300
    assert recorder.problem is not None and "300 match(es) could not be stored" in recorder.problem
    assert "disk is full" in recorder.problem
    await db.close()


# -- the same data on every database -------------------------------------------------------------
async def test_nul_characters_never_cost_a_match_and_are_kept_where_the_database_can(
    db_url: str,
) -> None:
    """PostgreSQL text cannot hold NUL: in text columns (names, reasons) it becomes U+FFFD
    there (SQLite keeps it); what the game and the seats exchanged is in the turn blocks,
    which keep it on both."""
    from dataclasses import replace

    bus = EventBus()
    db = await open_database(db_url)
    nul = "a\x00b"
    board = {"kind": "grid", "grid": [[nul]]}
    async with Recorder(db, bus) as recorder:
        bus.publish(started("nul", ("random", f"bot{nul}"), public_state=nul, board=board))
        bus.publish(turn("nul", 0, observation=nul, action=nul, move=nul, board=board))
        bus.publish(turn("nul", 1, valid=False, reason=nul, public_state=nul))
        bus.publish(replace(ended("nul", 2), reason=nul, full_state=nul))
        await recorder.flush()
    await save_run(db, f"run{nul}", name=nul, config={"note": nul})
    kept = nul if db.is_sqlite else "a\ufffdb"
    detail = await get_match(db, "nul")
    assert detail.match.status == "finished" and detail.match.reason == kept
    assert detail.match.players == ("random", f"bot{kept}")
    first, second = detail.turns
    assert (first.observation, first.action, first.move) == (nul, nul, nul)
    assert (second.reason, second.public_state) == (nul, nul)
    assert detail.start_state == nul and detail.full_state == nul
    assert detail.start_board == board and first.board == board  # JSON escapes it: kept
    assert await list_matches(db, policy=f"bot{nul}") != []  # the filter is made storable too
    (run,) = await list_runs(db)
    assert (run.id, run.name, run.config) == (f"run{kept}", kept, {"note": nul})
    assert recorder.stats.write_errors == 0 and recorder.stats.lost_matches == 0
    await db.close()


async def test_times_rewards_logprobs_and_64_bit_seeds_round_trip_exactly(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    moment = 1_760_000_000.123456789
    rewards = (1 / 3, -0.1)
    async with Recorder(db, bus):
        bus.publish(started("exact", seed=2**40 + 7, time=moment))
        bus.publish(
            TurnPlayed(
                "exact", 0, 0, "obs", "[0]", True, logprobs=(-1 / 7,), tokens=(1,),
                elapsed_s=0.1 + 0.2, time=moment + 1e-6,
            )
        )  # fmt: skip
        bus.publish(
            MatchEnded("exact", "finished", rewards, (0, 0), (), "over", 1, time=moment + 2.5)
        )
    detail = await get_match(db, "exact")
    assert detail.match.seed == 2**40 + 7
    assert detail.match.started_at == moment and detail.match.ended_at == moment + 2.5
    assert detail.match.rewards == rewards
    (stored,) = detail.turns
    assert stored.time == moment + 1e-6 and stored.elapsed_s == 0.1 + 0.2
    assert stored.logprobs == (-1 / 7,)
    await db.close()


async def test_names_longer_than_their_columns_are_stored_whole(db_url: str) -> None:
    bus = EventBus()
    db = await open_database(db_url)
    run, player, game = "r" * 300, "p" * 500, "G" * 150 + "-v0"
    async with Recorder(db, bus) as recorder:
        bus.publish(started("long", ("random", player), game_id=game, run_id=run))
        bus.publish(ended("long", 0))
    assert recorder.stats.lost_matches == 0
    (summary,) = await list_matches(db, run=run, policy=player, game=game)
    assert summary.players == ("random", player)
    await db.close()


async def test_processes_storing_ratings_at_once_keep_whole_rows(db_url: str) -> None:
    """Two processes write ratings of the same game (new policies each time) and of
    another game at once: no write fails, each row is one writer's whole row, every
    history row is kept, and the model is recorded once."""
    from storage.ratings import (
        RATINGS_MODEL,
        NewRating,
        load_ratings,
        rating_history,
        ratings_model,
        store_ratings,
    )

    dbs = [await open_database(db_url), await open_database(db_url)]  # two "processes"
    assert await load_ratings(dbs[0], "G-v0") == [] and await ratings_model(dbs[0]) is None
    per_db = 15

    async def write(index: int) -> None:
        for i in range(per_db):
            value = NewRating(1000.0 + 100 * index + i, 10.0 + index, i + 1)
            game = "G-v0" if i % 3 else f"H{index}-v0"
            ratings = {"a": value, "b": value, f"new-{index}-{i}": value}
            await store_ratings(dbs[index], game, ratings, [(f"m{index}-{i}", "a")])

    await asyncio.gather(*(write(i) for i in range(len(dbs))))
    assert await ratings_model(dbs[1]) == RATINGS_MODEL
    ratings = {r.policy: r for r in await load_ratings(dbs[0], "G-v0")}
    a, b = ratings["a"], ratings["b"]
    assert (a.mu, a.sigma, a.games) == (b.mu, b.sigma, b.games)  # one writer's whole row
    assert (a.mu - 1000.0) % 100 + 1 == a.games and a.sigma == 10.0 + (a.mu - 1000.0) // 100
    assert sum(1 for p in ratings if p.startswith("new-")) == 2 * 10
    history = await rating_history(dbs[0], "G-v0", policy_prefix="a")
    assert len(history) == 2 * 10
    for db in dbs:
        await db.close()


async def test_processes_recording_the_same_new_players_at_once_store_every_match(
    db_url: str,
) -> None:
    """Two recorders (two processes) meet the same new policies and run in the same
    batch: each creates them if new, neither fails on the other's row."""
    dbs = [await open_database(db_url), await open_database(db_url)]
    buses = [EventBus(), EventBus()]
    recorders = [Recorder(db, bus) for db, bus in zip(dbs, buses, strict=True)]
    for recorder in recorders:
        await recorder.register()
        recorder.start()
    for round_ in range(5):
        for side, bus in enumerate(buses):
            players = (f"new-{round_}", f"checkpoint:run-{round_}@1")
            bus.publish(started(f"m{side}-{round_}", players, run_id=f"run-{round_}"))
            bus.publish(ended(f"m{side}-{round_}", 0))
        await asyncio.gather(*(r.flush() for r in recorders))
    for recorder in recorders:
        await recorder.close()
        assert recorder.stats.lost_matches == 0 and recorder.stats.write_errors == 0
    assert await count_matches(dbs[0], status="finished") == 10
    assert len(await list_runs(dbs[0])) == 5
    assert len(await list_matches(dbs[0], policy="new-3")) == 2
    for db in dbs:
        await db.close()


async def test_processes_opening_a_new_database_at_once_all_get_its_schema(
    db_url: str,
) -> None:
    dbs = await asyncio.gather(*(open_database(db_url) for _ in range(4)))
    for db in dbs:
        async with db.sessions() as session:
            versions = (await session.scalars(select(SchemaMeta.value))).all()
        assert versions == [str(SCHEMA_VERSION)]
        await db.close()
