"""The schema's version: checked when a database is opened, upgraded when it is older.

This module's one job is that a database has this code's ``SCHEMA_VERSION``. A reader
checks it (``check_schema``: an older version raises ``SchemaOutdated``, readers never
upgrade); a writer creates the tables of a new database or finds an older version
(``prepare_schema``) and upgrades it in place (``upgrade_schema``).

``STEPS[n]`` takes a database at version ``n`` to ``n + 1``; ``upgrade_steps`` runs every
step from the version found to ``SCHEMA_VERSION`` on one connection, inside the caller's
write transaction, and writes the new version, so an upgrade either happens whole or not
at all (SQLite and PostgreSQL both run DDL in transactions). ``upgrade_schema`` calls it
(it takes the write lock, refuses while an older process still records into the database,
and copies an SQLite file first: ``backup_sqlite``).

Why steps written here rather than Alembic: the schema already carries its version (one
integer in ``schema_meta``, which every Arena release reads); the steps are small (tables
and columns added) and run in Python on both databases through SQLAlchemy Core; and a
stepwise upgrade needs no migration environment, script folder or second version table
shipped with the package. Each step builds the tables it creates from a copy of their
definition as of its version (``_tables_v*``), never from ``storage.models``, which moves
on: the step must create what that version's ``create_all`` created.

A new schema version adds a step here, bumps ``SCHEMA_VERSION``, and adds a fixture
(``python -m tools.schema_fixtures``) that ``tests/test_migrations.py`` upgrades.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    bindparam,
    func,
    insert,
    inspect,
    select,
    text,
    true,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.schema import CreateColumn

from arena.eventformat import board_json
from arena.events import TurnPlayed
from storage.db import Database, SchemaUpgrade
from storage.errors import (
    DatabaseInUse,
    NotAnArenaDatabase,
    SchemaOutdated,
    SchemaVersionError,
)
from storage.leases import writer_gone
from storage.models import (
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    Base,
    SafeString,
    SchemaMeta,
    Writer,
)
from storage.turnlog import MAX_BLOCK_TURNS, Block

FIRST_VERSION = 1
"""The oldest schema version that can be upgraded (the first Arena release's)."""


def _quote(conn: Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote(name)


def _add_column(conn: Connection, table: str, column: Column[object], references: str = "") -> None:
    """``ALTER TABLE table ADD COLUMN``, the column rendered as ``create_all`` renders it
    (plus ``REFERENCES`` for a foreign key: both databases take it inline)."""
    Table(table, MetaData(), column)  # CreateColumn needs the column on a table
    spec = str(CreateColumn(column).compile(dialect=conn.dialect))
    if references:
        spec += f" REFERENCES {references}"
    conn.exec_driver_sql(f"ALTER TABLE {_quote(conn, table)} ADD COLUMN {spec}")


def _writers_v2(metadata: MetaData) -> Table:
    return Table(
        "writers",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("host", SafeString(255), nullable=False),
        Column("pid", Integer, nullable=False),
        Column("name", SafeString(64), nullable=False),
        Column("started_at", Double, nullable=False),
        Column("lease_until", Double, nullable=False),
    )


def _to_v2(conn: Connection) -> None:
    """2: ``writers`` (who owns each live match, with a lease), ``matches.writer_id`` and
    ``turns.move`` (the parsed move spectators see live)."""
    _writers_v2(MetaData()).create(conn)
    writers = _quote(conn, "writers")
    _add_column(conn, "matches", Column("writer_id", Integer), references=f"{writers} (id)")
    _add_column(conn, "turns", Column("move", Text))


def _ratings_v3(metadata: MetaData) -> tuple[Table, Table]:
    ratings = Table(
        "ratings",
        metadata,
        Column("game_id", SafeString(100), primary_key=True),
        Column("policy", SafeString(200), primary_key=True),
        Column("mu", Double, nullable=False),
        Column("sigma", Double, nullable=False),
        Column("games", Integer, nullable=False),
        Column("updated_at", Double, nullable=False),
    )
    history = Table(
        "rating_history",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("match_id", SafeString(64), nullable=False, index=True),
        Column("game_id", SafeString(100), nullable=False),
        Column("policy", SafeString(200), nullable=False),
        Column("mu", Double, nullable=False),
        Column("sigma", Double, nullable=False),
        Column("time", Double, nullable=False),
    )
    Index("ix_rating_history_game_policy", history.c.game_id, history.c.policy, history.c.time)
    return ratings, history


def _to_v3(conn: Connection) -> None:
    """3: the live ratings (``ratings``, ``rating_history``)."""
    metadata = MetaData()
    _ratings_v3(metadata)
    metadata.create_all(conn)


def _to_v4(conn: Connection) -> None:
    """4: the structured boards (``matches.start_board``, ``matches.start_full_board``,
    ``turns.board``, ``turns.full_board``)."""
    _add_column(conn, "matches", Column("start_board", JSON))
    _add_column(conn, "matches", Column("start_full_board", JSON))
    _add_column(conn, "turns", Column("board", JSON))
    _add_column(conn, "turns", Column("full_board", JSON))


def _agent_accounts_v5(metadata: MetaData) -> Table:
    return Table(
        "agent_accounts",
        metadata,
        Column("name", SafeString(64), primary_key=True),
        Column("key_id", SafeString(32), nullable=False, unique=True),
        Column("token_hash", SafeString(128), nullable=False),
        Column("created_at", Double, nullable=False),
        Column("revoked_at", Double),
        Column("last_seen_at", Double),
    )


def _to_v5(conn: Connection) -> None:
    """5: ``agent_accounts`` (remote agents and their hashed tokens)."""
    _agent_accounts_v5(MetaData()).create(conn)


def _to_v6(conn: Connection) -> None:
    """6: ``matches.rated`` (casual matches are stored unrated; every older match was
    rated)."""
    _add_column(conn, "matches", Column("rated", Boolean, nullable=False, server_default=true()))


def _turn_blocks_v7(metadata: MetaData) -> Table:
    Table(
        "block_dictionaries",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("game_id", SafeString(100), nullable=False, index=True),
        Column("created_at", Double, nullable=False),
        Column("data", LargeBinary, nullable=False),
    )
    return Table(
        "turn_blocks",
        metadata,
        Column(
            "match_id",
            SafeString(64),
            ForeignKey("matches.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        Column("seq", Integer, primary_key=True),
        Column("first", Integer, nullable=False),
        Column("count", Integer, nullable=False),
        Column("data", LargeBinary, nullable=False),
        Column("dictionary_id", Integer, ForeignKey("block_dictionaries.id")),
    )


MIGRATION_PAGE = 500
"""Matches whose turns step 7 reads and rewrites at a time."""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _board_text(value: Any) -> str | None:
    return board_json(_json(value))


def _to_v7(conn: Connection) -> None:
    """7: ``turn_blocks`` (and the ``block_dictionaries`` they are compressed against)
    instead of ``turns`` and of the matches' ``start_state``,
    ``start_board``, ``start_full_board`` and ``full_state`` (``storage.turnlog``). An
    older turn kept its seat's observation as text, not the messages it was made of, so
    that text is what its block keeps (``Turn.observation``): it reads back as it was."""
    metadata = MetaData()
    Table("matches", metadata, Column("id", SafeString(64), primary_key=True))
    blocks = _turn_blocks_v7(metadata)
    metadata.tables["block_dictionaries"].create(conn)
    blocks.create(conn)
    q = conn.dialect.identifier_preparer.quote
    turn_columns = ", ".join(q(c) for c in _V6_TURN_COLUMNS)
    after = ""
    while True:
        page = conn.execute(
            text(
                "SELECT id, start_state, start_board, start_full_board, full_state "
                "FROM matches WHERE id > :after ORDER BY id LIMIT :n"
            ),
            {"after": after, "n": MIGRATION_PAGE},
        ).all()
        if not page:
            break
        after = page[-1][0]
        turns: dict[str, list[Any]] = {row[0]: [] for row in page}
        rows = conn.execute(
            text(
                f"SELECT {turn_columns} FROM turns WHERE match_id IN :ids "
                f"ORDER BY match_id, {q('index')}"
            ).bindparams(bindparam("ids", expanding=True)),
            {"ids": list(turns)},
        )
        for row in rows:
            turns[row[0]].append(row)
        out = []
        for match_id, state, board, full, final in page:
            out += _blocks_v7(match_id, (state, board, full), turns[match_id], final)
        if out:
            conn.execute(insert(blocks), out)
    conn.exec_driver_sql(f"DROP TABLE {q('turns')}")
    for column in ("start_state", "start_board", "start_full_board", "full_state"):
        conn.exec_driver_sql(f"ALTER TABLE {q('matches')} DROP COLUMN {q(column)}")


_V6_TURN_COLUMNS = (
    "match_id", "index", "seat", "action", "move", "valid", "reason", "truncated",
    "elapsed_s", "time", "tokens", "logprobs", "observation", "public_state", "board",
    "full_board",
)  # fmt: skip


def _blocks_v7(
    match_id: str, start: tuple[Any, Any, Any], turns: list[Any], full_state: str | None
) -> list[dict[str, Any]]:
    """The turn blocks holding one version-6 match."""
    state, board, full = start
    made: list[Block] = [Block(match_id, 0, 0)]
    made[0].set_start(None, state, _board_text(board), _board_text(full))
    for row in turns:
        (_, index, seat, action, move, valid, reason, truncated, elapsed, at, tokens,
         logprobs, observation, public_state, board, full) = row  # fmt: skip
        block = made[-1]
        if block.first + len(block.turns) != index or len(block.turns) >= MAX_BLOCK_TURNS:
            block = Block(match_id, len(made), index)
            made.append(block)
        block.add_turn(
            TurnPlayed(
                match_id, index, seat, observation or "", action, bool(valid), reason,
                bool(truncated), _json(tokens), _json(logprobs), elapsed, public_state, at,
                move, board_text=_board_text(board), full_board_text=_board_text(full),
            )
        )  # fmt: skip
    if full_state is not None:
        made[-1].end = (full_state,)
    return [
        {"match_id": b.match_id, "seq": b.seq, "first": b.first, "count": len(b.turns),
         "data": b.data(), "dictionary_id": None}
        for b in made
    ]  # fmt: skip


STEPS: dict[int, Callable[[Connection], None]] = {
    1: _to_v2,
    2: _to_v3,
    3: _to_v4,
    4: _to_v5,
    5: _to_v6,
    6: _to_v7,
}
"""``STEPS[n]`` upgrades a database at schema version ``n`` to ``n + 1`` (in the caller's
transaction)."""

if sorted(STEPS) != list(range(FIRST_VERSION, SCHEMA_VERSION)):  # pragma: no cover
    raise RuntimeError(f"storage.migrations has no step for every version to {SCHEMA_VERSION}")


def upgrade_steps(conn: Connection, found: int) -> None:
    """Upgrade the database on ``conn`` from schema version ``found`` to
    ``SCHEMA_VERSION``, inside the caller's transaction, and record the new version.
    Raises ValueError for a version no step starts from, what the database raises."""
    if not FIRST_VERSION <= found <= SCHEMA_VERSION:
        raise ValueError(f"no upgrade from schema version {found}")
    for version in range(found, SCHEMA_VERSION):
        STEPS[version](conn)
    conn.execute(
        update(SchemaMeta)
        .where(SchemaMeta.key == SCHEMA_VERSION_KEY)
        .values(value=str(SCHEMA_VERSION))
    )


def backup_path(path: Path, version: int) -> Path:
    """Where the copy of ``path`` made before upgrading it from ``version`` goes:
    ``NAME.v<version>-backup`` beside it (``-2``, ``-3``... when that is taken)."""
    target = path.with_name(f"{path.name}.v{version}-backup")
    n = 2
    while target.exists():
        target = path.with_name(f"{path.name}.v{version}-backup-{n}")
        n += 1
    return target


def backup_sqlite(source: Path, target: Path) -> None:
    """Copy the SQLite database ``source`` (its WAL included) into the new file
    ``target`` with SQLite's online backup, as one consistent snapshot; a partial copy is
    removed. Raises sqlite3.Error, OSError."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    finally:
        src.close()


# -- checking the version, and upgrading -------------------------------------------------
# PostgreSQL advisory lock held while a new database's tables are created.
_SCHEMA_LOCK = int.from_bytes(hashlib.sha256(b"arena:schema").digest()[:8], "big", signed=True)


async def check_schema(db: Database) -> None:
    """A reader's check: the tables exist with this code's schema version (an older one
    raises SchemaOutdated: readers never upgrade)."""
    async with db.engine.connect() as conn:
        names = await conn.run_sync(_table_names)
        if SchemaMeta.__tablename__ not in names:
            raise NotAnArenaDatabase(
                f"{db.where} has no Arena schema (no schema_meta table): it was not written "
                "by Arena, or nothing was recorded yet; choose another --db"
            )
        found = _check_version(await _read_version(conn), db.where)
    if found is not None:
        raise SchemaOutdated(found, SCHEMA_VERSION, db.where)


async def _read_version(conn: AsyncConnection) -> str | None:
    result = await conn.execute(
        select(SchemaMeta.value).where(SchemaMeta.key == SCHEMA_VERSION_KEY)
    )
    return result.scalar_one_or_none()


def _check_version(found: str | None, where: str) -> int | None:
    """None when ``found`` is this code's schema version, the version when it is an older
    one that can be upgraded; raises SchemaVersionError for any other (a newer version, or
    one Arena never wrote), NotAnArenaDatabase when there is none."""
    if found is None:
        raise NotAnArenaDatabase(
            f"{where} has a schema_meta table without a schema version: it was not written "
            "by Arena; choose another --db"
        )
    try:
        version = int(found)
    except ValueError:
        raise SchemaVersionError(found, SCHEMA_VERSION, where) from None
    if version == SCHEMA_VERSION:
        return None
    if FIRST_VERSION <= version < SCHEMA_VERSION:
        return version
    raise SchemaVersionError(version, SCHEMA_VERSION, where)


def _table_names(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


async def prepare_schema(db: Database) -> int | None:
    """Create the tables of a new database; for an existing one, return its schema version
    when it is older than this code's (None when it is this code's). Raises
    SchemaVersionError, NotAnArenaDatabase."""
    ours = set(Base.metadata.tables)
    async with db.engine.connect() as conn:
        names = await conn.run_sync(_table_names)
        if SchemaMeta.__tablename__ in names:
            return _check_version(await _read_version(conn), db.where)
    if names & ours:
        raise NotAnArenaDatabase(
            f"{db.where} has tables named like Arena's ({', '.join(sorted(names & ours))}) "
            "but no schema version: it was not written by Arena; choose another --db"
        )
    # New database: create it in one write transaction; if another process got there
    # first (it held the write lock), check its version instead.
    async with db.write_transaction() as conn:
        if db.is_postgres:  # the write lock SQLite's BEGIN IMMEDIATE takes, for DDL
            await conn.execute(select(func.pg_advisory_xact_lock(_SCHEMA_LOCK)))
        names = await conn.run_sync(_table_names)
        if SchemaMeta.__tablename__ in names:
            return _check_version(await _read_version(conn), db.where)
        await conn.run_sync(Base.metadata.create_all)
        await conn.execute(
            insert(SchemaMeta).values(key=SCHEMA_VERSION_KEY, value=str(SCHEMA_VERSION))
        )
    return None


async def upgrade_schema(
    db: Database, notice: Callable[[str], None] | None = None
) -> SchemaUpgrade | None:
    """Upgrade ``db`` in place to this code's schema version (``upgrade_steps``), in one
    write transaction: either every step is applied or none. An SQLite file is first
    copied beside it (``NAME.v<N>-backup``, ``backup_path``), inside the same write lock,
    so the copy is the database as it was just before the upgrade. ``notice`` gets one
    line as the work starts. Returns None when there was nothing to upgrade (the
    version is current, or another process upgraded it first).

    Refuses (DatabaseInUse) while another process that is not gone (``writer_gone``) still
    holds a lease on the database: an older Arena recording into it would fail on the new
    schema. Raises StorageError (DatabaseInUse, DatabaseReadOnly, DatabaseFull,
    SchemaVersionError...).
    """
    backup: Path | None = None
    try:
        async with db.write_transaction() as conn:
            if db.is_postgres:  # one upgrade (or creation) at a time
                await conn.execute(select(func.pg_advisory_xact_lock(_SCHEMA_LOCK)))
            found = _check_version(await _read_version(conn), db.where)
            if found is None:
                return None
            names = await conn.run_sync(_table_names)
            if Writer.__tablename__ in names:
                await _refuse_live_writers(conn, db.where)
            if db.path is not None:
                backup = backup_path(db.path, found)
            if notice is not None:
                kept = (
                    f"the old file is kept as {backup}"
                    if backup is not None
                    else "in one transaction; no copy is made on PostgreSQL"
                )
                notice(
                    f"arena: upgrading {db.where} from schema version {found} to "
                    f"{SCHEMA_VERSION} ({kept})"
                )
            if db.path is not None and backup is not None:
                try:
                    await asyncio.to_thread(backup_sqlite, db.path, backup)
                except (sqlite3.Error, OSError) as exc:
                    error = db.error(exc)
                    raise type(error)(
                        f"{db.where} was not upgraded: copying it to {backup} first failed "
                        f"({error})"
                    ) from exc
            await conn.run_sync(upgrade_steps, found)
    except BaseException as exc:
        if backup is not None:
            backup.unlink(missing_ok=True)  # nothing was changed: the copy is not needed
        if isinstance(exc, SQLAlchemyError | OSError | sqlite3.Error):
            raise db.error(exc) from exc
        raise
    return SchemaUpgrade(found, SCHEMA_VERSION, backup)


async def _refuse_live_writers(conn: AsyncConnection, where: str) -> None:
    now = time.time()
    rows = (
        await conn.execute(
            select(Writer.host, Writer.pid, Writer.lease_until).where(Writer.lease_until >= now)
        )
    ).all()
    live = [(host, pid) for host, pid, lease in rows if not writer_gone(host, pid, lease, now)]
    if live:
        host, pid = live[0]
        raise DatabaseInUse(
            f"{where} is being recorded into by another process (process {pid} on {host}"
            + (f", and {len(live) - 1} more" if len(live) > 1 else "")
            + "), an older Arena: stop it, then run this again (its schema is upgraded then)"
        )
