"""Migrations: a database of every earlier schema version is upgraded in place and reads
back what it held.

The fixtures (``tests/fixtures/schema``) were recorded by each version's own code, checked
out from git (``python -m tools.schema_fixtures``): SQLite files for every version, and
PostgreSQL dumps from version 4 on (the versions before it could not use PostgreSQL). Each
test reads the old rows directly (SQL on the old tables), upgrades, and compares them with
what the current code reads back.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import SAWarning

from storage import Recorder, get_match, list_matches, open_database
from storage.cli import db_upgrade_command, matches_command
from storage.db import Database, SchemaUpgrade
from storage.errors import DatabaseFull, DatabaseInUse, DatabaseUnavailable, SchemaOutdated
from storage.migrations import FIRST_VERSION, STEPS
from storage.models import SCHEMA_VERSION
from tests.conftest import (
    new_postgres_database,
    postgres_connection,
    read_only_copy,
    small_disk,
)
from tools.pgserver import PostgresServer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "schema"
OLD_VERSIONS = list(range(FIRST_VERSION, SCHEMA_VERSION))
POSTGRES_VERSIONS = [v for v in OLD_VERSIONS if (FIXTURES / f"v{v}.pg.sql.gz").is_file()]


def test_every_earlier_version_has_a_step_and_a_fixture() -> None:
    assert sorted(STEPS) == OLD_VERSIONS
    assert all((FIXTURES / f"v{v}.db").is_file() for v in OLD_VERSIONS)
    assert [v for v in OLD_VERSIONS if v >= 4] == POSTGRES_VERSIONS


# -- the old rows, read with plain SQL ---------------------------------------------------------
def _columns(version: int) -> dict[str, list[str]]:
    """The columns each table had at ``version`` (those the comparison reads)."""
    matches = [
        "id",
        "game_id",
        "seed",
        "num_players",
        "status",
        "reason",
        "started_at",
        "ended_at",
        "run_id",
        "group_id",
        "num_turns",
        "start_state",
        "full_state",
    ]
    turns = ["match_id", "index", "seat", "observation", "action", "tokens", "logprobs",
             "valid", "reason", "truncated", "elapsed_s", "time", "public_state"]  # fmt: skip
    if version >= 2:
        turns.append("move")
    if version >= 4:
        matches += ["start_board", "start_full_board"]
        turns += ["board", "full_board"]
    if version >= 6:
        matches.append("rated")
    return {"matches": matches, "turns": turns}


_JSON = {"tokens", "logprobs", "board", "full_board", "start_board", "start_full_board"}
_SEATS = (
    "SELECT s.match_id, s.seat, p.name, p.kind, s.reward, s.moves, s.invalid_moves, "
    "s.forfeited FROM seats s JOIN policies p ON p.id = s.policy_id"
)


def _value(column: str, value: Any) -> Any:
    if column in _JSON and isinstance(value, str):
        return json.loads(value)
    if column in ("valid", "truncated", "forfeited", "rated") and value is not None:
        return bool(value)
    return value


def _expected(
    version: int,
    matches: list[dict[str, Any]],
    seats: list[tuple[Any, ...]],
    turns: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """match id -> what ``get_match`` must read back, from the old rows."""
    out: dict[str, dict[str, Any]] = {}
    for m in matches:
        out[m["id"]] = {
            "match": {k: _value(k, m[k]) for k in m},
            "seats": [],
            "turns": [],
        }
        out[m["id"]]["match"].setdefault("rated", True)
        out[m["id"]]["match"].setdefault("start_board", None)
        out[m["id"]]["match"].setdefault("start_full_board", None)
    for match_id, seat, name, kind, reward, moves, invalid, forfeited in sorted(seats):
        out[match_id]["seats"].append((seat, name, kind, reward, moves, invalid, bool(forfeited)))
    for t in sorted(turns, key=lambda t: (t["match_id"], t["index"])):
        row = {k: _value(k, v) for k, v in t.items() if k != "match_id"}
        row.setdefault("move", None)
        row.setdefault("board", None)
        row.setdefault("full_board", None)
        out[t["match_id"]]["turns"].append(row)
    assert out, "the fixture holds no matches"
    return out


def old_sqlite_rows(path: Path, version: int) -> dict[str, dict[str, Any]]:
    """What the SQLite fixture at ``path`` holds, read with plain SQL."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        cols = _columns(version)
        q = {t: ", ".join(f'"{c}"' for c in c_) for t, c_ in cols.items()}
        matches = [dict(r) for r in conn.execute(f"SELECT {q['matches']} FROM matches")]
        turns = [dict(r) for r in conn.execute(f"SELECT {q['turns']} FROM turns")]
        seats = [tuple(r) for r in conn.execute(_SEATS)]
    finally:
        conn.close()
    return _expected(version, matches, seats, turns)


async def old_postgres_rows(url: str, version: int) -> dict[str, dict[str, Any]]:
    """What the PostgreSQL database at ``url`` holds, read with plain SQL."""
    conn = await postgres_connection(url)
    try:
        cols = _columns(version)
        q = {t: ", ".join(f'"{c}"' for c in c_) for t, c_ in cols.items()}
        matches = [dict(r) for r in await conn.fetch(f"SELECT {q['matches']} FROM matches")]
        turns = [dict(r) for r in await conn.fetch(f"SELECT {q['turns']} FROM turns")]
        seats = [tuple(r) for r in await conn.fetch(_SEATS)]
    finally:
        await conn.close()
    return _expected(version, matches, seats, turns)


async def read_back(db: Database) -> dict[str, dict[str, Any]]:
    """Every stored match as the current code reads it, in ``_expected``'s shape."""
    out: dict[str, dict[str, Any]] = {}
    for summary in await list_matches(db, limit=1000):
        detail = await get_match(db, summary.id)
        async with db.sessions() as session:
            rated = (
                await session.execute(
                    text("SELECT rated FROM matches WHERE id = :id"), {"id": summary.id}
                )
            ).scalar_one()
        m = detail.match
        out[m.id] = {
            "match": {
                "id": m.id, "game_id": m.game_id, "seed": m.seed, "num_players": m.num_players,
                "status": m.status, "reason": m.reason, "started_at": m.started_at,
                "ended_at": m.ended_at, "run_id": m.run_id, "group_id": m.group_id,
                "num_turns": m.num_turns, "start_state": detail.start_state,
                "full_state": detail.full_state, "start_board": detail.start_board,
                "start_full_board": detail.start_full_board, "rated": bool(rated),
            },
            "seats": [
                (s.seat, s.policy, s.kind, s.reward, s.moves, s.invalid_moves, s.forfeited)
                for s in m.seats
            ],
            "turns": [
                {
                    "index": t.index, "seat": t.seat, "observation": t.observation,
                    "action": t.action,
                    "tokens": list(t.tokens) if t.tokens is not None else None,
                    "logprobs": list(t.logprobs) if t.logprobs is not None else None,
                    "valid": t.valid, "reason": t.reason, "truncated": t.truncated,
                    "elapsed_s": t.elapsed_s, "time": t.time, "public_state": t.public_state,
                    "move": t.move, "board": t.board, "full_board": t.full_board,
                }
                for t in detail.turns
            ],
        }  # fmt: skip
    return out


def assert_same(found: dict[str, dict[str, Any]], expected: dict[str, dict[str, Any]]) -> None:
    assert sorted(found) == sorted(expected)
    for match_id, want in expected.items():
        got = found[match_id]
        assert got["match"] == {k: got["match"][k] for k in want["match"]}
        assert {k: got["match"][k] for k in want["match"]} == want["match"], match_id
        assert got["seats"] == want["seats"], match_id
        assert got["turns"] == want["turns"], match_id


async def schema_of(db: Database) -> dict[str, Any]:
    """Tables, columns (name, type, nullable), keys and indexes, as the database reports
    them (column order aside: a column added later comes last)."""

    def read(conn: Any) -> dict[str, Any]:
        found = inspect(conn)
        out: dict[str, Any] = {}
        for table in sorted(found.get_table_names()):
            columns = {
                c["name"]: (_type_name(str(c["type"]), conn.dialect.name), c["nullable"])
                for c in found.get_columns(table)
            }
            out[table] = {
                "columns": columns,
                "pk": sorted(found.get_pk_constraint(table)["constrained_columns"]),
                "fks": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"])
                    for f in found.get_foreign_keys(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(str(c) for c in i["column_names"]), bool(i["unique"]))
                    for i in found.get_indexes(table)
                ),
                "unique": sorted(
                    tuple(u["column_names"]) for u in found.get_unique_constraints(table)
                ),
            }
        return out

    async with db.engine.connect() as conn:
        with warnings.catch_warnings():  # the expression index on policies is not reflected
            warnings.simplefilter("ignore", SAWarning)
            return await conn.run_sync(read)


def _type_name(name: str, dialect: str) -> str:
    # SQLite stores any integer in an INTEGER column: BIGINT (seeds since version 4) and
    # INTEGER name the same affinity there.
    return "INTEGER" if dialect == "sqlite" and name == "BIGINT" else name


async def fresh_schema(url: str) -> dict[str, Any]:
    db = await open_database(url)
    try:
        return await schema_of(db)
    finally:
        await db.close()


async def record_more(db: Database) -> None:
    """Play and record two more matches into ``db``: the upgraded database takes writes."""
    from arena.eventbus import EventBus
    from arena.play import play_matches

    bus = EventBus()
    async with Recorder(db, bus) as recorder:
        await play_matches("TicTacToe-v0", ["random", "random"], 2, seed=5, bus=bus)
    assert recorder.problem is None and recorder.stats.matches_ended == 2


# -- SQLite ------------------------------------------------------------------------------------
def fixture_copy(version: int, folder: Path) -> Path:
    path = folder / "arena.db"
    shutil.copy(FIXTURES / f"v{version}.db", path)
    return path


@pytest.mark.parametrize("version", OLD_VERSIONS)
async def test_a_writer_upgrades_every_earlier_sqlite_version_and_reads_it_back(
    version: int, tmp_path: Path
) -> None:
    path = fixture_copy(version, tmp_path)
    before = old_sqlite_rows(path, version)
    notices: list[str] = []
    db = await open_database(str(path), notice=notices.append)
    try:
        backup = tmp_path / f"arena.db.v{version}-backup"
        assert db.upgraded == SchemaUpgrade(version, SCHEMA_VERSION, backup)
        assert len(notices) == 1 and f"version {version} to {SCHEMA_VERSION}" in notices[0]
        assert f"the old file is kept as {backup}" in notices[0]
        assert_same(await read_back(db), before)
        upgraded = await schema_of(db)
        await record_more(db)
        assert len(await list_matches(db, limit=1000)) == len(before) + 2
    finally:
        await db.close()
    assert upgraded == await fresh_schema(str(tmp_path / "fresh.db"))
    assert old_sqlite_rows(backup, version) == before  # the copy is the database as it was
    again = await open_database(str(path), notice=notices.append)
    assert again.upgraded is None and len(notices) == 1  # once only
    await again.close()


async def test_readers_never_upgrade_they_say_to_run_arena_db_upgrade(tmp_path: Path) -> None:
    path = fixture_copy(3, tmp_path)
    original = path.read_bytes()
    with pytest.raises(SchemaOutdated) as raised:
        await open_database(str(path), read_only=True)
    message = str(raised.value)
    assert "schema version 3" in message and f"arena db upgrade --db {path}" in message
    with pytest.raises(SchemaOutdated):
        await open_database(str(path), upgrade=False)  # a writer told not to
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arena.db"]


def test_read_commands_on_an_old_database_say_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [FIXTURES / "v2.db"]
    with read_only_copy(files, tmp_path / "ro") as folder:
        path = folder / "v2.db"
        assert matches_command(str(path), None, None, None, None, 20, 0, False) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "arena db upgrade" in err[0] and "version 2" in err[0]
        assert db_upgrade_command(str(path)) == 2  # cannot write there: says so, changes nothing
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "writable" in err[0]
        assert sorted(p.name for p in folder.iterdir()) == ["v2.db"]
        assert path.read_bytes() == files[0].read_bytes()


def test_arena_db_upgrade_upgrades_then_has_nothing_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = fixture_copy(1, tmp_path)
    assert db_upgrade_command(str(path)) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"upgraded {path} from schema version 1 to {SCHEMA_VERSION}; the old file is kept as "
        f"{path}.v1-backup"
    ]
    assert db_upgrade_command(str(path)) == 0
    assert capsys.readouterr().out.strip() == (
        f"{path} has schema version {SCHEMA_VERSION} already: nothing to do"
    )
    assert matches_command(str(path), None, None, None, None, 20, 0, False) == 0
    assert db_upgrade_command(str(tmp_path / "missing.db")) == 2  # creates nothing
    assert "no database" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()


def test_arena_db_upgrade_is_a_command(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = fixture_copy(4, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "arena_cli", "db", "upgrade", "--db", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "from schema version 4" in result.stdout
    help_text = subprocess.run(
        [sys.executable, "-m", "arena_cli", "db", "upgrade", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert help_text.returncode == 0 and "usage: arena db upgrade" in help_text.stdout


async def test_no_upgrade_while_an_older_arena_records_into_the_database(tmp_path: Path) -> None:
    import os
    import socket

    path = fixture_copy(5, tmp_path)
    conn = sqlite3.connect(path)
    with conn:  # a v5 process that is alive (this one) holding a fresh lease
        conn.execute(
            "INSERT INTO writers (host, pid, name, started_at, lease_until) VALUES (?, ?, ?, ?, ?)",
            (socket.gethostname(), os.getpid(), "recorder", time.time(), time.time() + 60),
        )
    conn.close()
    original = old_sqlite_rows(path, 5)
    with pytest.raises(DatabaseInUse, match=f"process {os.getpid()}"):
        await open_database(str(path))
    assert old_sqlite_rows(path, 5) == original
    assert not (tmp_path / "arena.db.v5-backup").exists()


async def test_a_copy_that_does_not_fit_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    size = (FIXTURES / "v3.db").stat().st_size
    with small_disk(tmp_path / "disk", f"{(size * 3) // 2 // 1024}k") as disk:
        path = fixture_copy(3, disk)
        original = path.read_bytes()
        with pytest.raises(DatabaseFull, match="was not upgraded"):
            await open_database(str(path))
        assert path.read_bytes() == original
        assert not (disk / "arena.db.v3-backup").exists()


async def test_two_processes_opening_an_old_database_at_once_upgrade_it_once(
    tmp_path: Path,
) -> None:
    path = fixture_copy(2, tmp_path)
    before = old_sqlite_rows(path, 2)
    notices: list[str] = []
    dbs = await asyncio.gather(*(open_database(str(path), notice=notices.append) for _ in range(3)))
    try:
        assert sum(d.upgraded is not None for d in dbs) == 1 and len(notices) == 1
        assert_same(await read_back(dbs[0]), before)
    finally:
        for d in dbs:
            await d.close()
    assert [p.name for p in tmp_path.iterdir() if "backup" in p.name] == ["arena.db.v2-backup"]


def test_serve_on_a_read_only_old_file_says_to_run_arena_db_upgrade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from web.cli import serve_command

    with read_only_copy([FIXTURES / "v4.db"], tmp_path / "ro") as folder:
        with pytest.raises(DatabaseUnavailable):  # a writer cannot upgrade it there
            asyncio.run(open_database(str(folder / "v4.db")))
        assert serve_command(str(folder / "v4.db"), "127.0.0.1", 0) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "arena db upgrade" in err[0], err
        assert sorted(p.name for p in folder.iterdir()) == ["v4.db"]


# -- PostgreSQL --------------------------------------------------------------------------------
async def restore(server: PostgresServer, version: int) -> str:
    """A new database on ``server`` holding the version's dump; its URL."""
    url = new_postgres_database(server)
    conn = await postgres_connection(url)
    try:
        dump = gzip.decompress((FIXTURES / f"v{version}.pg.sql.gz").read_bytes()).decode()
        # Plain SQL, but for psql's own \restrict lines (pg_dump 15.14+), which guard a
        # restore through psql: the statements go to the server directly here.
        sql = "\n".join(line for line in dump.splitlines() if not line.startswith("\\"))
        await conn.execute(sql)
    finally:
        await conn.close()
    return url


@pytest.mark.parametrize("version", POSTGRES_VERSIONS)
async def test_a_writer_upgrades_every_earlier_postgres_version_and_reads_it_back(
    version: int, postgres_server: PostgresServer
) -> None:
    url = await restore(postgres_server, version)
    before = await old_postgres_rows(url, version)
    notices: list[str] = []
    db = await open_database(url, notice=notices.append)
    try:
        assert db.upgraded == SchemaUpgrade(version, SCHEMA_VERSION, None)
        assert len(notices) == 1 and "no copy is made on PostgreSQL" in notices[0]
        assert_same(await read_back(db), before)
        upgraded = await schema_of(db)
        await record_more(db)
    finally:
        await db.close()
    assert upgraded == await fresh_schema(new_postgres_database(postgres_server))


async def test_postgres_readers_never_upgrade(postgres_server: PostgresServer) -> None:
    url = await restore(postgres_server, 5)
    with pytest.raises(SchemaOutdated, match="arena db upgrade"):
        await open_database(url, read_only=True)
    db = await open_database(url, notice=None)  # still version 5 until now
    assert db.upgraded is not None and db.upgraded.found == 5
    await db.close()
