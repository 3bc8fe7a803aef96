"""The open database: the ``Database`` handle that queries and writers are given.

It holds the async engine and two session factories: ``sessions`` for reading, and
``writes`` for writing (on SQLite, the write transactions of one process take turns, and
each starts with ``BEGIN IMMEDIATE``). It also runs the recorder's bulk inserts
(``insert_many``), turns a driver's error into the ``StorageError`` that explains it
(``error``), and keeps an SQLite file (``integrity_check``, ``checkpoint``).
``storage.connect.open_database`` builds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
)

from storage.bulkinsert import CompiledInsert
from storage.errors import StorageError, translate_error

WRITE_OPTION = "arena_write"
"""The execution option that marks a connection's transactions as writes: on SQLite they
start with ``BEGIN IMMEDIATE`` (the begin listener ``storage.connect`` sets up)."""


class WriteSessions:
    """``Database.writes``: ``begin()`` opens a write transaction. On SQLite the
    transactions of one process take turns, first come first served (an asyncio lock per
    event loop): SQLite's own busy handler is not fair, and a writer that commits back to
    back (the recorder under load) kept another writer of the same process (the live
    ratings) waiting past the busy timeout. Other processes still wait on SQLite's lock.
    A write transaction opened inside another one of the same task raises RuntimeError
    (it would wait for itself)."""

    def __init__(self, maker: async_sessionmaker[AsyncSession], *, one_at_a_time: bool) -> None:
        self._maker = maker
        self._one_at_a_time = one_at_a_time
        self._locks: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        self._holders: set[asyncio.Task[Any]] = set()

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        found = self._locks.get(id(loop))
        if found is None or found[0] is not loop:
            self._locks = {k: v for k, v in self._locks.items() if not v[0].is_closed()}
            found = self._locks[id(loop)] = (loop, asyncio.Lock())
        return found[1]

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncSession]:
        """A session in a transaction, committed when the block ends (rolled back when it
        raises)."""
        if not self._one_at_a_time:
            async with self._maker.begin() as session:
                yield session
            return
        task = asyncio.current_task()
        if task is not None and task in self._holders:
            raise RuntimeError("a write transaction inside another one of the same task")
        async with self._lock():
            if task is not None:
                self._holders.add(task)
            try:
                async with self._maker.begin() as session:
                    yield session
            finally:
                self._holders.discard(task)


class Database:
    """An open Arena database: an async engine and two session factories.

    Use ``sessions`` for reads and ``writes`` for anything that writes (on SQLite its
    transactions start with ``BEGIN IMMEDIATE``). Close it with ``await db.close()`` or
    ``async with``. Built by ``storage.connect.open_database``.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        where: str,
        busy_timeout_s: float,
        *,
        read_only: bool = False,
        path: Path | None = None,
    ) -> None:
        self.engine = engine
        self.where = where
        """The file path, or the URL with any password hidden: for messages."""
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        """True when opened for reading only (nothing can be written through it)."""
        self.path = path
        """The SQLite file, when it is one."""
        self.is_sqlite = engine.dialect.name == "sqlite"
        self.is_postgres = engine.dialect.name == "postgresql"
        self.sessions: async_sessionmaker[AsyncSession] = async_sessionmaker(
            engine, expire_on_commit=False
        )
        """Sessions for reading."""
        self.writes = WriteSessions(
            async_sessionmaker(
                engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False
            ),
            one_at_a_time=self.is_sqlite,
        )
        """Sessions for writing: use ``async with db.writes.begin() as session``."""
        self.recovered = 0
        """Matches found live and marked aborted when this database was opened."""
        self.upgraded: SchemaUpgrade | None = None
        """The schema upgrade made when this database was opened, if one was."""
        self._closed = False
        self._inserts: dict[tuple[str, tuple[str, ...]], CompiledInsert] = {}

    async def insert_many(
        self,
        conn: AsyncConnection,
        table: Table,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
    ) -> None:
        """Insert ``rows`` (tuples of values for ``columns``, in that order) into
        ``table`` in one executemany. Values are plain (str, int, float, bool, None) except
        in JSON columns, which take JSON-ready values.

        The statement is compiled from the model once per column list (on SQLite in a
        multi-row form) and the tuples go to the driver with only the processing the
        column types would give them (``storage.bulkinsert.CompiledInsert``): SQLAlchemy's
        per-row parameter processing costs several times more, and the recorder shares its
        event loop (and the GIL) with the games. Raises what the driver raises
        (``sqlalchemy.exc.DBAPIError``).
        """
        if not rows:
            return
        key = (table.name, tuple(columns))
        compiled = self._inserts.get(key)
        if compiled is None:
            compiled = self._inserts[key] = CompiledInsert(table, key[1], self.engine.dialect)
        await compiled.run(conn, rows)

    def write_transaction(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection in a write transaction (on SQLite ``BEGIN IMMEDIATE``), committed
        when the block ends (rolled back when it raises): for creating and upgrading the
        schema. It does not take turns with ``writes``' transactions."""
        return self.engine.execution_options(**{WRITE_OPTION: True}).begin()

    def insert_new(self, table: Any) -> Any:
        """An INSERT into ``table`` (a Table or mapped class) that skips a row whose key is
        stored already (``ON CONFLICT DO NOTHING``, in this database's dialect): two
        processes that create the same run or policy at once both succeed."""
        dialect_insert = postgresql.insert if self.is_postgres else sqlite.insert
        return dialect_insert(table).on_conflict_do_nothing()

    async def close(self) -> None:
        """Close every pooled connection (idempotent)."""
        if not self._closed:
            self._closed = True
            await self.engine.dispose()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def error(self, exc: BaseException) -> StorageError:
        """``exc`` (a driver or SQLAlchemy error) as the ``StorageError`` that explains it."""
        return translate_error(exc, self.where, self.busy_timeout_s)

    async def integrity_check(self, quick: bool = False) -> str:
        """SQLite's ``PRAGMA integrity_check`` (``quick_check`` with ``quick``: it skips
        the index contents, and is several times faster): "ok" for a sound file.

        Raises StorageError on other databases or when the file cannot be read.
        """
        if not self.is_sqlite:
            raise StorageError("integrity_check is an SQLite check; this database is not SQLite")
        pragma = "PRAGMA quick_check" if quick else "PRAGMA integrity_check"
        try:
            async with self.engine.connect() as conn:
                rows = (await conn.exec_driver_sql(pragma)).scalars().all()
        except (SQLAlchemyError, OSError) as exc:
            raise self.error(exc) from exc
        return "\n".join(str(r) for r in rows)

    def wal_bytes(self) -> int:
        """Size of the SQLite WAL file now (0 when there is none, or not SQLite)."""
        if self.path is None:
            return 0
        try:
            return self.path.with_name(self.path.name + "-wal").stat().st_size
        except OSError:
            return 0

    async def checkpoint(self) -> bool:
        """Copy the WAL into the database and truncate it (``wal_checkpoint(TRUNCATE)``),
        waiting up to the busy timeout for readers and other writers; True when it was
        complete. Does nothing (True) on other databases and read-only ones.

        Raises StorageError.
        """
        if not self.is_sqlite or self.read_only:
            return True
        try:
            async with self.engine.connect() as conn:
                # On the driver's connection: SQLAlchemy would open a transaction first,
                # and a checkpoint cannot run inside one.
                raw = await conn.get_raw_connection()
                driver: Any = raw.driver_connection
                cursor = await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                row = await cursor.fetchone()
                await cursor.close()
        except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
            raise self.error(exc) from exc
        return row is not None and int(row[0]) == 0


@dataclass(frozen=True)
class SchemaUpgrade:
    """What upgrading the schema did (``storage.migrations.upgrade_schema``): a database's
    ``Database.upgraded``."""

    found: int
    """The schema version the database had."""
    version: int
    """The version it has now (``SCHEMA_VERSION``)."""
    backup: Path | None
    """The copy of the SQLite file as it was (None on PostgreSQL: no copy is made)."""
