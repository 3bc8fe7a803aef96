"""Where the data lives: ``open_database`` and the ``Database`` handle.

The database is ``arena.db`` in the working directory unless ``ARENA_DB`` or the caller
says otherwise: a file path, an SQLite URL (``sqlite+aiosqlite:///runs.db``) or a
PostgreSQL one (``postgresql+asyncpg://user:password@host:5432/arena``). Those two are the
databases Arena works with (``SUPPORTED_DRIVERS``); any other URL is refused with a line
saying what to write instead.

SQLite is set up for a few writers and many readers: WAL journal, ``synchronous=NORMAL``
(a commit survives a crash of the process; a power cut may lose the last commits, never
the file), a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions. The driver's
own transaction handling is switched off and the ``begin`` listener emits the BEGIN: a
deferred transaction that reads and then writes fails with "database is locked" in WAL
mode whatever the timeout, because its snapshot may be stale; an immediate one waits for
the write lock up front. The WAL file is kept bounded: writers set ``journal_size_limit``
and the recorder checkpoints (``Database.checkpoint``) regularly.

Readers (``open_database(read_only=True)``) open the file read-only and never change its
journal mode, so they work on a read-only file, folder or disk. A writer checks the file
first (``PRAGMA quick_check``) and refuses a damaged one (``DatabaseCorrupt``) instead of
appending to it.

PostgreSQL needs a server and an existing database (Arena creates its tables in it, in the
default schema). A connection waits up to ``connect_timeout_s`` for the server and up to
the busy timeout for another transaction's lock (``lock_timeout``); readers' transactions
are read-only (``default_transaction_read_only``). Pooled connections are checked before
use, so a restarted server costs no failed write. Text is stored as on SQLite, except that
NUL characters, which PostgreSQL text cannot hold, become U+FFFD (``models.storable``).
The errors a server gives (unreachable, wrong password, no such database, no right to
create tables) are ``StorageError``s whose one line says what to do, with the URL's
password masked.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import socket
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from sqlalchemy import JSON, Table, event, func, insert, inspect, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from arena.text import REPLACEMENT, encodable
from storage.errors import (
    DEFAULT_BUSY_TIMEOUT_S,
    DatabaseCorrupt,
    DatabaseFull,
    DatabaseInUse,
    DatabaseLocked,
    DatabaseNotFound,
    DatabaseReadOnly,
    DatabaseUnavailable,
    DriverNotInstalled,
    NotAnArenaDatabase,
    SchemaOutdated,
    SchemaVersionError,
    StorageError,
    UnsupportedDatabase,
)
from storage.migrations import FIRST_VERSION, backup_path, backup_sqlite, upgrade_steps
from storage.models import (
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    Base,
    Match,
    MatchStatus,
    SafeString,
    SafeText,
    SchemaMeta,
    TurnBlock,
    Writer,
)

STORED_TURNS = (
    select(func.coalesce(func.sum(TurnBlock.count), 0))
    .where(TurnBlock.match_id == Match.id)
    .scalar_subquery()
)
"""The turns stored of the match a statement updates: what a match marked aborted after
its process died played (its ``num_turns`` was to be written at its end)."""

DEFAULT_PATH = "arena.db"
"""The database file used when neither the caller nor ``ARENA_DB`` names one."""
ENV_VAR = "ARENA_DB"
"""Environment variable holding a path or URL; overrides ``DEFAULT_PATH``."""
DEFAULT_CONNECT_TIMEOUT_S = 10.0
"""How long connecting to a PostgreSQL server may take before it counts as unreachable."""
SUPPORTED_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
"""The databases Arena works with, and the async driver each one is used through."""
RECOVERED_REASON = "process ended while the match was live"
"""The reason given to live matches whose recording process is gone, when a new process
opens the database."""
JOURNAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
"""What an SQLite writer truncates the WAL file to after a checkpoint."""

MAX_ROWS_PER_INSERT = 1000
"""Rows one multi-row INSERT statement writes on SQLite (see ``Database.insert_many``)."""
STATEMENT_SIZE_FACTOR = 8
"""Smaller INSERT statements hold 1, 8, 64, 512... rows (see ``_CompiledInsert.sizes``)."""

_WRITE_OPTION = "arena_write"
# PostgreSQL advisory lock held while a new database's tables are created.
_SCHEMA_LOCK = int.from_bytes(hashlib.sha256(b"arena:schema").digest()[:8], "big", signed=True)
# Bound parameters one SQLite statement may take (32766 since SQLite 3.32, 999 before).
_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32) else 999
_DRIVER_HINTS = {
    "asyncpg": "pip install asyncpg",
    "aiosqlite": "pip install aiosqlite",
    "psycopg": "pip install 'psycopg[binary]'",
    "aiomysql": "pip install aiomysql",
    "asyncmy": "pip install asyncmy",
    "greenlet": "pip install 'sqlalchemy[asyncio]'",
}


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
    ``async with``. Built by ``open_database``.
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
                engine.execution_options(**{_WRITE_OPTION: True}), expire_on_commit=False
            ),
            one_at_a_time=self.is_sqlite,
        )
        """Sessions for writing: use ``async with db.writes.begin() as session``."""
        self.recovered = 0
        """Matches found live and marked aborted when this database was opened."""
        self.upgraded: SchemaUpgrade | None = None
        """The schema upgrade made when this database was opened, if one was."""
        self._closed = False
        self._inserts: dict[tuple[str, tuple[str, ...]], _CompiledInsert] = {}

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
        column types would give them (``_CompiledInsert``): SQLAlchemy's per-row parameter
        processing costs several times more, and the recorder shares its event loop (and
        the GIL) with the games. Raises what the driver raises (``sqlalchemy.exc.DBAPIError``).
        """
        if not rows:
            return
        key = (table.name, tuple(columns))
        compiled = self._inserts.get(key)
        if compiled is None:
            compiled = self._inserts[key] = _CompiledInsert(table, key[1], self.engine.dialect)
        await compiled.run(conn, rows)

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


class _CompiledInsert:
    """An INSERT compiled from the model for one column list: on SQLite in multi-row form,
    on PostgreSQL one row, which asyncpg's executemany sends for every row in one pipeline.

    Python's sqlite3 takes the GIL back after every row of an executemany; while the games
    keep the GIL busy, each take waits for a thread switch (milliseconds), so a batch of
    thousands of rows crawls. One statement inserting ``rows_per_statement`` rows at once
    takes it back once per statement instead. The multi-row text repeats the VALUES group
    SQLAlchemy compiled (SQLAlchemy's own multi-row compilation costs ~0.2 ms a row).
    """

    def __init__(self, table: Table, columns: tuple[str, ...], dialect: Any) -> None:
        compiled = insert(table).compile(dialect=dialect, column_keys=list(columns))
        if not compiled.positional or compiled.positiontup is None:
            raise ValueError(f"{dialect.name} does not take positional parameters")
        sql = str(compiled)
        head, _, group = sql.rpartition(" VALUES ")
        placeholders = group.strip("(?, )") if dialect.name == "sqlite" else _pg_binds(group)
        if not head or placeholders:
            raise ValueError(f"unexpected INSERT form: {sql}")
        self._head, self._group = head + " VALUES ", group
        self._sql: dict[int, str] = {}
        order = list(compiled.positiontup)
        self.positions = [columns.index(name) for name in order]
        self.reorder = self.positions != list(range(len(columns)))
        self.json = [i for i, name in enumerate(order) if isinstance(table.c[name].type, JSON)]
        self.text = [
            i
            for i, name in enumerate(order)
            if isinstance(table.c[name].type, SafeText | SafeString)
        ]
        """Text columns: their values are made storable here, as ``SafeText`` would (these
        tuples bypass SQLAlchemy's bind processing)."""
        self.nul_free = dialect.name == "postgresql"
        """Text may hold no NUL character (``models.storable``)."""
        per_statement = _MAX_VARIABLES // len(order) if dialect.name == "sqlite" else 1
        self.rows_per_statement = max(1, min(MAX_ROWS_PER_INSERT, per_statement))
        self.sizes = [self.rows_per_statement]
        """The statement shapes used: the full size, then powers of 8 below it. A batch is
        cut greedily into these, so a long run uses at most a handful of statement texts
        (each one is compiled and cached by the driver; one text per leftover size would
        grow the cache by about a megabyte per size)."""
        size = 1
        while size < self.rows_per_statement:
            self.sizes.insert(1, size)
            size *= STATEMENT_SIZE_FACTOR

    def sql(self, rows: int) -> str:
        """The statement inserting ``rows`` rows (one of ``sizes``: compiled once each)."""
        text = self._sql.get(rows)
        if text is None:
            text = self._sql[rows] = self._head + ", ".join([self._group] * rows)
        return text

    def parameters(self, rows: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
        """``rows`` in the statement's column order, JSON columns serialised, text made
        encodable."""
        if self.reorder:
            rows = [tuple([row[i] for i in self.positions]) for row in rows]
        json_at, text_at, nul_free = self.json, self.text, self.nul_free
        out = []
        for row in rows:
            if json_at and any(row[i] is not None for i in json_at):
                row = tuple(_to_json(v) if i in json_at else v for i, v in enumerate(row))
            for i in text_at:
                value = row[i]
                if value is None:
                    continue
                if (not value.isascii() and encodable(value) is not value) or (
                    nul_free and "\x00" in value
                ):
                    row = tuple(
                        _storable(v, nul_free) if j in text_at and v is not None else v
                        for j, v in enumerate(row)
                    )
                    break
            out.append(row)
        return out

    async def run(self, conn: AsyncConnection, rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``rows``: for each size in ``sizes``, largest first, as many statements of
        that size as fit, in one executemany."""
        params = self.parameters(rows)
        if self.rows_per_statement == 1:
            await conn.exec_driver_sql(self.sql(1), params)
            return
        start = 0
        for size in self.sizes:
            count = (len(params) - start) // size
            if not count:
                continue
            end = start + count * size
            chunks = [
                tuple(chain.from_iterable(params[i : i + size])) for i in range(start, end, size)
            ]
            await conn.exec_driver_sql(self.sql(size), chunks)
            start = end


_PG_BIND = re.compile(r"\$\d+(::\w+)?")


def _pg_binds(group: str) -> str:
    """What a PostgreSQL VALUES group holds besides its ``$n::TYPE`` placeholders."""
    return _PG_BIND.sub("", group).strip("(, )")


def _storable(value: str, nul_free: bool) -> str:
    text = encodable(value)
    return text.replace("\x00", REPLACEMENT) if nul_free else text


def _to_json(value: Any) -> str | None:
    # Lone surrogates (a board's text from a plugin) become U+FFFD, as in text columns,
    # rather than "\\udc80" escapes that decode back to unencodable text.
    return None if value is None else encodable(json.dumps(value, ensure_ascii=False))


def resolve_url(url_or_path: str | None = None) -> URL:
    """The SQLAlchemy URL for a path, a URL, ``ARENA_DB`` or the default file.

    A plain ``sqlite://`` URL gets the aiosqlite driver. Raises DriverNotInstalled for a
    URL whose driver is not async, StorageError for a malformed URL.
    """
    spec = url_or_path or os.environ.get(ENV_VAR) or DEFAULT_PATH
    if "://" not in spec:
        return URL.create("sqlite+aiosqlite", database=spec)
    try:
        url = make_url(spec)
    except ArgumentError as exc:
        raise StorageError(f"{spec!r} is not a database URL or path: {exc}") from exc
    if url.drivername == "sqlite":
        url = url.set(drivername="sqlite+aiosqlite")
    return url


def _where(url: URL) -> str:
    if url.get_backend_name() == "sqlite":
        return url.database or ":memory:"
    return url.render_as_string(hide_password=True)


def translate_error(
    exc: BaseException, where: str, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
) -> StorageError:
    """A driver or SQLAlchemy error as a ``StorageError`` whose one-line message says what
    to do. A ``StorageError`` is returned as it is."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, ModuleNotFoundError | ImportError):
        return _driver_error(exc, where)
    detail = str(exc.orig) if isinstance(exc, DBAPIError) else str(exc)
    detail = " ".join(detail.split()) or type(exc).__name__
    if where.startswith("postgresql"):
        found = _postgres_error(exc, detail, where, busy_timeout_s)
        if found is not None:
            return found
    low = detail.lower()
    if "locked" in low or "busy" in low:
        return DatabaseLocked(
            f"{where} is locked by another program (waited {busy_timeout_s:g} s): "
            "let it finish or close it, then try again"
        )
    if "disk is full" in low or "database or disk is full" in low:
        return DatabaseFull(
            f"{where}: the disk is full ({detail}): free some space or choose another --db"
        )
    if "readonly" in low or "read-only" in low:
        return DatabaseReadOnly(
            f"{where} is read-only ({detail}): make it (and its folder) writable or choose "
            "another --db; readers (arena matches, show, results, serve) still work"
        )
    if "not a database" in low or "malformed" in low or "disk image" in low:
        return DatabaseCorrupt(
            f"{where} is not a readable database ({detail}): point --db (or ARENA_DB) at "
            "another file, or restore a backup"
        )
    if isinstance(exc, OperationalError | OSError):
        return DatabaseUnavailable(
            f"cannot use {where} ({detail}): check that its folder exists and is writable "
            "(or that the server is up), or choose another --db"
        )
    return StorageError(f"{where}: {detail}")


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE code of a PostgreSQL error (``"3D000"``), else None."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlstate", None) or getattr(exc, "sqlstate", None)
    return code if isinstance(code, str) else None


# SQLSTATE codes (or their two-character classes) of errors that may pass if the write is
# tried again: connection lost, serialization failure or deadlock, lock timeout, the server
# shutting down or starting up, out of connections.
_TRANSIENT_SQLSTATES = ("08", "40", "55P03", "57P01", "57P02", "57P03", "53300")


def is_transient(exc: BaseException) -> bool:
    """Whether a failed write may succeed when tried again: the database was locked, busy
    or out of reach for a while (SQLite's ``OperationalError``, a connection refused or
    lost, PostgreSQL's lock timeouts, deadlocks and restarts)."""
    if isinstance(exc, OperationalError | OSError):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        code = sqlstate(exc)
        return code is not None and code.startswith(_TRANSIENT_SQLSTATES)
    return False


def _postgres_error(
    exc: BaseException, detail: str, where: str, busy_timeout_s: float
) -> StorageError | None:
    """What a PostgreSQL server's error means for the user, when it is one of the usual
    ones; else None."""
    code = sqlstate(exc) or ""
    if isinstance(exc, OSError) or code.startswith("08"):
        if isinstance(exc, TimeoutError):
            detail = "no answer in time"
        return DatabaseUnavailable(
            f"cannot reach the PostgreSQL server of {where} ({detail}): check that it is "
            "running and that the host and port in the URL are right"
        )
    if code == "3D000":  # invalid_catalog_name
        url = make_url(where)
        return DatabaseNotFound(
            f"{where}: the server has no database {url.database!r}: create it (createdb "
            f"-h {url.host or 'localhost'} -p {url.port or 5432} -U {url.username or 'USER'} "
            f"{url.database}) or name an existing one in the URL"
        )
    if code in ("28P01", "28000"):  # invalid_password, invalid_authorization_specification
        return DatabaseUnavailable(
            f"cannot log in to {where} ({detail}): check the user name and password in the "
            "URL (and the server's pg_hba.conf)"
        )
    if code == "42501":  # insufficient_privilege
        return DatabaseUnavailable(
            f"{where}: permission denied ({detail}): connect as the database's owner, or "
            "have it grant this user the use of schema public and of Arena's tables"
        )
    if code == "55P03" or code == "40P01":  # lock_not_available, deadlock_detected
        return DatabaseLocked(
            f"{where} is locked by another program (waited {busy_timeout_s:g} s): "
            "let it finish or close it, then try again"
        )
    if code == "53100":  # disk_full
        return DatabaseFull(
            f"{where}: the server's disk is full ({detail}): free some space there or "
            "choose another --db"
        )
    if code == "25006":  # read_only_sql_transaction
        return DatabaseReadOnly(
            f"{where} is read-only ({detail}): point --db at the primary server, or use a "
            "user that may write; readers (arena matches, show, results, serve) still work"
        )
    if code.startswith(("53", "57")):  # out of resources; shutting down or starting up
        return DatabaseUnavailable(
            f"the PostgreSQL server of {where} does not take connections now ({detail}): "
            "try again later, or choose another --db"
        )
    return None


def _check_supported(url: URL, where: str) -> None:
    """Refuse a URL naming a database or driver that Arena does not work with."""
    backend = url.get_backend_name()
    wanted = SUPPORTED_DRIVERS.get(backend)
    if wanted is None:
        raise UnsupportedDatabase(
            f"{where}: Arena stores into SQLite or PostgreSQL, each through an async driver, "
            f"not {backend}: use a file path, sqlite+aiosqlite:///PATH or "
            "postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DATABASE"
        )
    driver = url.get_driver_name()
    if driver != wanted:
        example = url.set(drivername=f"{backend}+{wanted}").render_as_string(hide_password=True)
        raise UnsupportedDatabase(
            f"{where}: Arena uses {backend} through the async driver {wanted}, not {driver}: "
            f"write the URL as {example}"
        )


def _driver_error(exc: BaseException, where: str, url: URL | None = None) -> DriverNotInstalled:
    if url is not None and "+" not in url.drivername:
        return DriverNotInstalled(
            f"{where} names no async driver ({exc}): name one in the URL, like "
            "postgresql+asyncpg://... (pip install asyncpg), or use a plain file path for SQLite"
        )
    missing = str(getattr(exc, "name", None) or exc).split(".")[0]
    hint = _DRIVER_HINTS.get(missing, f"install the package that provides {missing!r}")
    return DriverNotInstalled(
        f"the database driver for {where} is not installed ({exc}): {hint}, "
        "or use a plain file path for SQLite"
    )


def _retry_busy(statement: Callable[[], object], timeout_s: float) -> None:
    """Run ``statement``, again while SQLite answers "database is locked", for up to
    ``timeout_s``. Setting the journal mode of a file that other processes are opening at
    the same moment can fail at once, without SQLite's busy handler (``busy_timeout``)
    waiting for it, so the wait is here."""
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        try:
            statement()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _set_up_sqlite(engine: AsyncEngine, busy_timeout_s: float, read_only: bool) -> None:
    busy_ms = max(0, int(busy_timeout_s * 1000))

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver must not open transactions itself: the begin listener does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            if not read_only:  # a reader must not touch the file's journal mode
                _retry_busy(lambda: cursor.execute("PRAGMA journal_mode = WAL"), busy_timeout_s)
                cursor.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT_BYTES}")
                cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _postgres_options(
    busy_timeout_s: float, connect_timeout_s: float, read_only: bool
) -> dict[str, Any]:
    """``create_async_engine`` options for a PostgreSQL server (see the module docstring)."""
    settings = {
        "application_name": "arena",
        # 0 would mean "wait forever" to PostgreSQL.
        "lock_timeout": str(max(1, int(busy_timeout_s * 1000))),
    }
    if read_only:
        settings["default_transaction_read_only"] = "on"
    return {
        "connect_args": {"timeout": connect_timeout_s, "server_settings": settings},
        "pool_pre_ping": True,
    }


def _read_only_connector(path: Path) -> Callable[[], Awaitable[Any]]:
    """Opens ``path`` read-only. A WAL database needs its ``-shm`` file to be read; when the
    folder is not writable and it does not exist, no process can write the database either
    (its WAL cannot be created), so it is opened as immutable."""
    import aiosqlite

    target = quote(str(path.absolute()))

    async def connect() -> Any:
        conn = await aiosqlite.connect(f"file:{target}?mode=ro", uri=True)
        try:
            await conn.execute("PRAGMA schema_version")  # SQLite opens the WAL index lazily
        except BaseException as exc:
            await conn.close()  # (its worker thread would keep the process alive)
            if not isinstance(exc, sqlite3.OperationalError):
                raise
            if os.access(path.absolute().parent, os.W_OK):
                raise
            conn = await aiosqlite.connect(f"file:{target}?mode=ro&immutable=1", uri=True)
        return conn

    return connect


def notice_on_stderr(line: str) -> None:
    """``open_database``'s default ``notice``: the line on standard error."""
    print(line, file=sys.stderr, flush=True)


async def open_database(
    url_or_path: str | None = None,
    *,
    recover: bool = True,
    read_only: bool = False,
    must_exist: bool = False,
    check_integrity: bool = True,
    upgrade: bool = True,
    notice: Callable[[str], None] | None = notice_on_stderr,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> Database:
    """Open (creating it if new) the Arena database at ``url_or_path``.

    ``url_or_path``: a file path, an SQLite URL or a PostgreSQL URL (``SUPPORTED_DRIVERS``;
    on PostgreSQL the database must exist, its tables are created if new); None means
    ``ARENA_DB`` or ``arena.db``. ``recover``: mark ``aborted`` (reason
    ``RECOVERED_REASON``) the live matches whose recording process is gone (see
    ``recover_orphaned_matches``); matches that another running process records are left
    alone. ``read_only``: open an existing
    database for reading only (works on a read-only file, folder or disk; never creates,
    checks or recovers anything). ``must_exist``: refuse to create a new SQLite file.
    ``check_integrity``: a writer runs ``PRAGMA quick_check`` on an SQLite file first and
    refuses a damaged one. ``upgrade``: a writer upgrades a database of an older schema
    version in place (``upgrade_schema``: an SQLite file is copied first), saying so in one
    line to ``notice``; ``Database.upgraded`` then says what was done. Readers never
    upgrade: they raise ``SchemaOutdated``, which says to run ``arena db upgrade``, and so
    does a writer with ``upgrade=False``. ``busy_timeout_s``: how long to wait for another
    connection's lock. ``connect_timeout_s``: how long to wait for a PostgreSQL server to
    answer.

    Raises DatabaseNotFound, DatabaseUnavailable (DatabaseReadOnly, DatabaseFull),
    DatabaseLocked, DatabaseCorrupt, DatabaseInUse, DriverNotInstalled,
    UnsupportedDatabase, NotAnArenaDatabase, SchemaOutdated or SchemaVersionError (all
    ``StorageError``).
    """
    url = resolve_url(url_or_path)
    where = _where(url)
    _check_supported(url, where)
    is_sqlite = url.get_backend_name() == "sqlite"
    file_db = is_sqlite and url.database not in (None, "", ":memory:")
    path = Path(str(url.database)) if file_db else None
    if path is not None:
        _check_file(path, where, must_exist=must_exist or read_only)
    options: dict[str, Any] = {"json_serializer": _to_json}
    if read_only and path is not None:
        options["async_creator"] = _read_only_connector(path)
    elif not is_sqlite:
        options.update(_postgres_options(busy_timeout_s, connect_timeout_s, read_only))
    try:
        engine = create_async_engine(url, **options)
    except ImportError as exc:
        raise _driver_error(exc, where, url) from exc
    except ArgumentError as exc:
        raise StorageError(f"{where} is not a usable database URL: {exc}") from exc
    if is_sqlite:
        _set_up_sqlite(engine, busy_timeout_s, read_only)
    db = Database(engine, where, busy_timeout_s, read_only=read_only, path=path)
    try:
        if read_only:
            await _check_schema(db)
        else:
            await _prepare_for_writing(
                db, check_integrity=check_integrity, upgrade=upgrade, recover=recover, notice=notice
            )
    except BaseException as exc:
        await db.close()
        # aiosqlite stops a connection that failed to open from its worker thread, which
        # then reports to this loop: give it a moment, so that it never finds it closed.
        await asyncio.sleep(0.02)
        if isinstance(exc, SQLAlchemyError | OSError | ImportError):
            raise db.error(exc) from exc
        raise
    return db


def _check_file(path: Path, where: str, *, must_exist: bool) -> None:
    """Refuse an SQLite file that is missing (where it ``must_exist``) or cannot be created.

    Raises DatabaseNotFound or DatabaseUnavailable.
    """
    if must_exist and not path.is_file():
        raise DatabaseNotFound(
            f"no database at {where}: nothing has been recorded there yet "
            "(pass --db PATH or set ARENA_DB to use another one)"
        )
    if path.is_dir() or not path.absolute().parent.is_dir():
        raise DatabaseUnavailable(
            f"cannot create a database at {where}: "
            + ("it is a folder" if path.is_dir() else "its folder does not exist")
            + "; choose another --db (or ARENA_DB)"
        )


async def _prepare_for_writing(
    db: Database,
    *,
    check_integrity: bool,
    upgrade: bool,
    recover: bool,
    notice: Callable[[str], None] | None,
) -> None:
    """A writer's start (see ``open_database``): check an existing SQLite file's integrity,
    create or upgrade the schema, and recover the orphaned matches.

    Raises DatabaseCorrupt, SchemaOutdated or what the schema's checks raise.
    """
    path = db.path
    existed = path is not None and path.is_file() and path.stat().st_size > 0
    if existed and check_integrity and db.is_sqlite:
        verdict = await db.integrity_check(quick=True)
        if verdict != "ok":
            first = verdict.splitlines()[0][:200]
            raise DatabaseCorrupt(
                f"{db.where} is damaged (integrity check: {first}): nothing more is "
                "written to it; restore a backup, or point --db (or ARENA_DB) at "
                "another file (`sqlite3 FILE .recover` may save its data)"
            )
    found = await _prepare_schema(db)
    if found is not None:
        if not upgrade:
            raise SchemaOutdated(found, SCHEMA_VERSION, db.where)
        db.upgraded = await upgrade_schema(db, notice)
    if recover:
        db.recovered = await recover_orphaned_matches(db)


async def _check_schema(db: Database) -> None:
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


async def _prepare_schema(db: Database) -> int | None:
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
    async with db.engine.execution_options(**{_WRITE_OPTION: True}).begin() as conn:
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


@dataclass(frozen=True)
class SchemaUpgrade:
    """What ``upgrade_schema`` did."""

    found: int
    """The schema version the database had."""
    version: int
    """The version it has now (``SCHEMA_VERSION``)."""
    backup: Path | None
    """The copy of the SQLite file as it was (None on PostgreSQL: no copy is made)."""


async def upgrade_schema(
    db: Database, notice: Callable[[str], None] | None = None
) -> SchemaUpgrade | None:
    """Upgrade ``db`` in place to this code's schema version (``storage.migrations``), in
    one write transaction: either every step is applied or none. An SQLite file is first
    copied beside it (``NAME.v<N>-backup``, ``migrations.backup_path``), inside the same
    write lock, so the copy is the database as it was just before the upgrade. ``notice``
    gets one line as the work starts. Returns None when there was nothing to upgrade (the
    version is current, or another process upgraded it first).

    Refuses (DatabaseInUse) while another process that is not gone (``writer_gone``) still
    holds a lease on the database: an older Arena recording into it would fail on the new
    schema. Raises StorageError (DatabaseInUse, DatabaseReadOnly, DatabaseFull,
    SchemaVersionError...).
    """
    backup: Path | None = None
    try:
        async with db.engine.execution_options(**{_WRITE_OPTION: True}).begin() as conn:
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


def process_alive(pid: int) -> bool:
    """True when a process with id ``pid`` exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    except OSError:
        return False
    return True


def writer_gone(host: str, pid: int, lease_until: float, now: float) -> bool:
    """Whether a recording process has gone: its lease expired, or it ran on this host and
    its process no longer exists."""
    if lease_until < now:
        return True
    return host == socket.gethostname() and not process_alive(pid)


async def recover_orphaned_matches(db: Database, reason: str = RECOVERED_REASON) -> int:
    """Mark ``aborted`` with ``reason`` every live match whose writer is gone (see
    ``writer_gone``; a match without a writer counts as orphaned); return how many.

    Run by ``open_database(recover=True)``. Matches that another running process records
    are left alone: their writer's lease is fresh and its process alive. Raises SQLAlchemy
    errors (``open_database`` translates them).
    """
    now = time.time()
    async with db.writes.begin() as session:
        owners = (
            await session.execute(
                select(Writer.id, Writer.host, Writer.pid, Writer.lease_until).where(
                    Writer.id.in_(
                        select(Match.writer_id)
                        .where(Match.status == MatchStatus.LIVE, Match.writer_id.is_not(None))
                        .distinct()
                    )
                )
            )
        ).all()
        gone = [w for w, host, pid, lease in owners if writer_gone(host, pid, lease, now)]
        orphaned = (Match.writer_id.is_(None)) | (Match.writer_id.in_(gone))
        result = await session.execute(
            update(Match)
            .where(Match.status == MatchStatus.LIVE, orphaned)
            .values(
                status=MatchStatus.ABORTED, reason=reason, ended_at=None, num_turns=STORED_TURNS
            )
        )
    return max(0, getattr(result, "rowcount", 0) or 0)


async def register_writer(db: Database, name: str, lease_s: float) -> int:
    """Record this process as a writer holding a lease of ``lease_s`` seconds; return its
    id. This is a real write: it fails at once on a read-only or full database.

    Raises SQLAlchemy errors.
    """
    now = time.time()
    async with db.writes.begin() as session:
        writer = Writer(
            host=socket.gethostname(),
            pid=os.getpid(),
            name=name[:64],
            started_at=now,
            lease_until=now + lease_s,
        )
        session.add(writer)
        await session.flush()
        return writer.id


async def renew_lease(db: Database, writer_id: int, lease_until: float) -> None:
    """Set the writer's lease to ``lease_until`` (its heartbeat; the past: it is gone).

    Raises SQLAlchemy errors.
    """
    async with db.writes.begin() as session:
        await session.execute(
            update(Writer).where(Writer.id == writer_id).values(lease_until=lease_until)
        )
