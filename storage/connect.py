"""Opening the database: ``open_database`` sets up the engine and returns the ``Database``.

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
password masked (``storage.errors.translate_error``).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from storage.db import WRITE_OPTION, Database
from storage.errors import (
    DEFAULT_BUSY_TIMEOUT_S,
    DatabaseCorrupt,
    DatabaseNotFound,
    DatabaseUnavailable,
    SchemaOutdated,
    StorageError,
    UnsupportedDatabase,
    driver_error,
)
from storage.leases import recover_orphaned_matches
from storage.migrations import check_schema, prepare_schema, upgrade_schema
from storage.models import SCHEMA_VERSION, storable_json

DEFAULT_PATH = "arena.db"
"""The database file used when neither the caller nor ``ARENA_DB`` names one."""
ENV_VAR = "ARENA_DB"
"""Environment variable holding a path or URL; overrides ``DEFAULT_PATH``."""
DEFAULT_CONNECT_TIMEOUT_S = 10.0
"""How long connecting to a PostgreSQL server may take before it counts as unreachable."""
SUPPORTED_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
"""The databases Arena works with, and the async driver each one is used through."""
JOURNAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
"""What an SQLite writer truncates the WAL file to after a checkpoint."""


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
        write = conn.get_execution_options().get(WRITE_OPTION, False)
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
    ``storage.leases.RECOVERED_REASON``) the live matches whose recording process is gone
    (see ``storage.leases.recover_orphaned_matches``); matches that another running process
    records are left alone. ``read_only``: open an existing database for reading only
    (works on a read-only file, folder or disk; never creates, checks or recovers
    anything). ``must_exist``: refuse to create a new SQLite file. ``check_integrity``: a
    writer runs ``PRAGMA quick_check`` on an SQLite file first and refuses a damaged one.
    ``upgrade``: a writer upgrades a database of an older schema version in place
    (``storage.migrations.upgrade_schema``: an SQLite file is copied first), saying so in
    one line to ``notice``; ``Database.upgraded`` then says what was done. Readers never
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
    options: dict[str, Any] = {"json_serializer": storable_json}
    if read_only and path is not None:
        options["async_creator"] = _read_only_connector(path)
    elif not is_sqlite:
        options.update(_postgres_options(busy_timeout_s, connect_timeout_s, read_only))
    try:
        engine = create_async_engine(url, **options)
    except ImportError as exc:
        raise driver_error(exc, where, url) from exc
    except ArgumentError as exc:
        raise StorageError(f"{where} is not a usable database URL: {exc}") from exc
    if is_sqlite:
        _set_up_sqlite(engine, busy_timeout_s, read_only)
    db = Database(engine, where, busy_timeout_s, read_only=read_only, path=path)
    try:
        if read_only:
            await check_schema(db)
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
    found = await prepare_schema(db)
    if found is not None:
        if not upgrade:
            raise SchemaOutdated(found, SCHEMA_VERSION, db.where)
        db.upgraded = await upgrade_schema(db, notice)
    if recover:
        db.recovered = await recover_orphaned_matches(db)
