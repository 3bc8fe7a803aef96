"""Where the data lives: ``open_database`` and the ``Database`` handle.

The database is ``arena.db`` in the working directory unless ``ARENA_DB`` or the caller
says otherwise: a file path, or any SQLAlchemy async URL (``sqlite+aiosqlite:///runs.db``,
``postgresql+asyncpg://user@host/arena``).

SQLite is set up for one writer and many readers: WAL journal, ``synchronous=NORMAL``
(a commit survives a crash of the process; a power cut may lose the last commits, never
the file), a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions. The driver's
own transaction handling is switched off and the ``begin`` listener emits the BEGIN: a
deferred transaction that reads and then writes fails with "database is locked" in WAL
mode whatever the timeout, because its snapshot may be stale; an immediate one waits for
the write lock up front.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import JSON, Table, event, func, insert, inspect, select, update
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    InvalidRequestError,
    NoSuchModuleError,
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

from arena.text import encodable
from storage.errors import (
    DatabaseCorrupt,
    DatabaseLocked,
    DatabaseNotFound,
    DatabaseUnavailable,
    DriverNotInstalled,
    NotAnArenaDatabase,
    SchemaVersionError,
    StorageError,
)
from storage.models import (
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    Base,
    Match,
    MatchStatus,
    SafeString,
    SafeText,
    SchemaMeta,
)

DEFAULT_PATH = "arena.db"
"""The database file used when neither the caller nor ``ARENA_DB`` names one."""
ENV_VAR = "ARENA_DB"
"""Environment variable holding a path or URL; overrides ``DEFAULT_PATH``."""
DEFAULT_BUSY_TIMEOUT_S = 10.0
"""How long an SQLite connection waits for another connection's lock before failing."""
RECOVERED_REASON = "process ended while the match was live"
"""The reason given to matches found live when a new process opens the database."""

MAX_ROWS_PER_INSERT = 1000
"""Rows one multi-row INSERT statement writes on SQLite (see ``Database.insert_many``)."""
STATEMENT_SIZE_FACTOR = 8
"""Smaller INSERT statements hold 1, 8, 64, 512... rows (see ``_CompiledInsert.sizes``)."""

_WRITE_OPTION = "arena_write"
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


class Database:
    """An open Arena database: an async engine and two session factories.

    Use ``sessions`` for reads and ``writes`` for anything that writes (on SQLite its
    transactions start with ``BEGIN IMMEDIATE``). Close it with ``await db.close()`` or
    ``async with``. Built by ``open_database``.
    """

    def __init__(self, engine: AsyncEngine, where: str, busy_timeout_s: float) -> None:
        self.engine = engine
        self.where = where
        """The file path, or the URL with any password hidden: for messages."""
        self.busy_timeout_s = busy_timeout_s
        self.is_sqlite = engine.dialect.name == "sqlite"
        self.sessions: async_sessionmaker[AsyncSession] = async_sessionmaker(
            engine, expire_on_commit=False
        )
        """Sessions for reading."""
        self.writes: async_sessionmaker[AsyncSession] = async_sessionmaker(
            engine.execution_options(**{_WRITE_OPTION: True}), expire_on_commit=False
        )
        """Sessions for writing: use ``async with db.writes.begin() as session``."""
        self.recovered = 0
        """Matches found live and marked aborted when this database was opened."""
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

        On SQLite the statement is compiled from the model once per column list, in a
        multi-row form, and the tuples go to the driver as they are: SQLAlchemy's per-row
        parameter processing costs several times more, and the recorder shares its event
        loop (and the GIL) with the games. Elsewhere this is a plain Core insert. Raises
        what the driver raises (``sqlalchemy.exc.DBAPIError``).
        """
        if not rows:
            return
        if not self.is_sqlite:
            await conn.execute(insert(table), [dict(zip(columns, r, strict=True)) for r in rows])
            return
        key = (table.name, tuple(columns))
        compiled = self._inserts.get(key)
        if compiled is None:
            compiled = self._inserts[key] = _CompiledInsert(table, key[1], self.engine.dialect)
        await compiled.run(conn, rows)

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

    async def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check``: "ok" for a sound file.

        Raises StorageError on other databases or when the file cannot be read.
        """
        if not self.is_sqlite:
            raise StorageError("integrity_check is an SQLite check; this database is not SQLite")
        try:
            async with self.engine.connect() as conn:
                rows = (await conn.exec_driver_sql("PRAGMA integrity_check")).scalars().all()
        except (SQLAlchemyError, OSError) as exc:
            raise self.error(exc) from exc
        return "\n".join(str(r) for r in rows)


class _CompiledInsert:
    """An SQLite INSERT compiled from the model for one column list, in multi-row form.

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
        if not head or group.strip("(?, )"):
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
        """Text columns: their values are made encodable here, as ``SafeText`` would (these
        tuples bypass SQLAlchemy's bind processing)."""
        self.rows_per_statement = max(1, min(MAX_ROWS_PER_INSERT, _MAX_VARIABLES // len(order)))
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
        json_at, text_at = self.json, self.text
        out = []
        for row in rows:
            if json_at and any(row[i] is not None for i in json_at):
                row = tuple(_to_json(v) if i in json_at else v for i, v in enumerate(row))
            for i in text_at:
                value = row[i]
                if value is not None and not value.isascii() and encodable(value) is not value:
                    row = tuple(
                        encodable(v) if j in text_at and v is not None else v
                        for j, v in enumerate(row)
                    )
                    break
            out.append(row)
        return out

    async def run(self, conn: AsyncConnection, rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``rows``: for each size in ``sizes``, largest first, as many statements of
        that size as fit, in one executemany."""
        params = self.parameters(rows)
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


def _to_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


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
    low = detail.lower()
    if "locked" in low or "busy" in low:
        return DatabaseLocked(
            f"{where} is locked by another program (waited {busy_timeout_s:g} s): "
            "let it finish or close it, then try again"
        )
    if "not a database" in low or "malformed" in low or "disk image" in low:
        return DatabaseCorrupt(
            f"{where} is not a readable database ({detail}): point --db (or ARENA_DB) at "
            "another file, or restore a backup"
        )
    if isinstance(exc, OperationalError | OSError) or "readonly" in low or "read-only" in low:
        return DatabaseUnavailable(
            f"cannot use {where} ({detail}): check that its folder exists and is writable "
            "(or that the server is up), or choose another --db"
        )
    return StorageError(f"{where}: {detail}")


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


def _set_up_sqlite(engine: AsyncEngine, busy_timeout_s: float) -> None:
    busy_ms = max(0, int(busy_timeout_s * 1000))

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver must not open transactions itself: the begin listener does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


async def open_database(
    url_or_path: str | None = None,
    *,
    recover: bool = True,
    must_exist: bool = False,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
) -> Database:
    """Open (creating it if new) the Arena database at ``url_or_path``.

    ``url_or_path``: a file path or SQLAlchemy async URL; None means ``ARENA_DB`` or
    ``arena.db``. ``recover``: mark every match still ``live`` as ``aborted`` (reason
    ``RECOVERED_REASON``), which is right for the one process that records into this
    database when it starts; readers pass False. ``must_exist``: refuse to create a new
    SQLite file (read-only commands). ``busy_timeout_s``: how long to wait for another
    connection's lock.

    Raises DatabaseNotFound, DatabaseUnavailable, DatabaseLocked, DatabaseCorrupt,
    DriverNotInstalled, NotAnArenaDatabase or SchemaVersionError (all ``StorageError``).
    """
    url = resolve_url(url_or_path)
    where = _where(url)
    is_sqlite = url.get_backend_name() == "sqlite"
    file_db = is_sqlite and url.database not in (None, "", ":memory:")
    if file_db:
        path = Path(str(url.database))
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
    try:
        engine = create_async_engine(url)
    except NoSuchModuleError as exc:
        raise DriverNotInstalled(
            f"{where}: SQLAlchemy knows no database kind {url.drivername!r} ({exc}); "
            "use a path, sqlite+aiosqlite:///PATH or postgresql+asyncpg://..."
        ) from exc
    except ImportError as exc:
        raise _driver_error(exc, where, url) from exc
    except InvalidRequestError as exc:  # a sync driver in the URL
        raise DriverNotInstalled(
            f"{where} names a driver that is not async ({exc}): use an async one, "
            "like sqlite+aiosqlite:// or postgresql+asyncpg://"
        ) from exc
    except ArgumentError as exc:
        raise StorageError(f"{where} is not a usable database URL: {exc}") from exc
    if is_sqlite:
        _set_up_sqlite(engine, busy_timeout_s)
    db = Database(engine, where, busy_timeout_s)
    try:
        await _prepare_schema(db)
        if recover:
            db.recovered = await mark_live_matches_aborted(db)
    except BaseException as exc:
        await db.close()
        # aiosqlite stops a connection that failed to open from its worker thread, which
        # then reports to this loop: give it a moment, so that it never finds it closed.
        await asyncio.sleep(0.02)
        if isinstance(exc, SQLAlchemyError | OSError | ImportError):
            raise db.error(exc) from exc
        raise
    return db


async def _read_version(conn: AsyncConnection) -> str | None:
    result = await conn.execute(
        select(SchemaMeta.value).where(SchemaMeta.key == SCHEMA_VERSION_KEY)
    )
    return result.scalar_one_or_none()


def _check_version(found: str | None, where: str) -> None:
    if found is None:
        raise NotAnArenaDatabase(
            f"{where} has a schema_meta table without a schema version: it was not written "
            "by Arena; choose another --db"
        )
    try:
        version = int(found)
    except ValueError:
        raise SchemaVersionError(found, SCHEMA_VERSION, where) from None
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(version, SCHEMA_VERSION, where)


def _table_names(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


async def _prepare_schema(db: Database) -> None:
    ours = set(Base.metadata.tables)
    async with db.engine.connect() as conn:
        names = await conn.run_sync(_table_names)
        if SchemaMeta.__tablename__ in names:
            _check_version(await _read_version(conn), db.where)
            return
    if names & ours:
        raise NotAnArenaDatabase(
            f"{db.where} has tables named like Arena's ({', '.join(sorted(names & ours))}) "
            "but no schema version: it was not written by Arena; choose another --db"
        )
    # New database: create it in one write transaction; if another process got there
    # first (it held the write lock), check its version instead.
    async with db.engine.execution_options(**{_WRITE_OPTION: True}).begin() as conn:
        names = await conn.run_sync(_table_names)
        if SchemaMeta.__tablename__ in names:
            _check_version(await _read_version(conn), db.where)
            return
        await conn.run_sync(Base.metadata.create_all)
        await conn.execute(
            insert(SchemaMeta).values(key=SCHEMA_VERSION_KEY, value=str(SCHEMA_VERSION))
        )


async def mark_live_matches_aborted(db: Database, reason: str = RECOVERED_REASON) -> int:
    """Mark every ``live`` match ``aborted`` with ``reason``; return how many there were.

    Run by ``open_database(recover=True)``: a match still live when a new process starts
    lost its process. Raises SQLAlchemy errors (``open_database`` translates them).
    """
    async with db.writes.begin() as session:
        live = await session.scalar(
            select(func.count()).select_from(Match).where(Match.status == MatchStatus.LIVE)
        )
        if not live:
            return 0
        await session.execute(
            update(Match)
            .where(Match.status == MatchStatus.LIVE)
            .values(status=MatchStatus.ABORTED, reason=reason, ended_at=None)
        )
    return int(live)
