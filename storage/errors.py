"""The errors storage raises: one hierarchy, each message saying what to do.

Every error a user can cause (a bad path or URL, a missing driver, a locked or corrupt
file, an unreachable server or a wrong password, a database from another schema version,
an unknown match id) is a ``StorageError``;
the CLI prints its message as one line and exits with code 2. ``translate_error`` turns
what a driver or SQLAlchemy raises into the ``StorageError`` that explains it, and
``is_transient`` says whether a failed write may pass when tried again.

Importing this module loads no SQLAlchemy (the commands' help and ``storage.rundir``'s
users need none): the functions that look at its errors import it when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

DEFAULT_BUSY_TIMEOUT_S = 10.0
"""How long a connection waits for another connection's lock before failing
(``DatabaseLocked``)."""


class StorageError(Exception):
    """Base of every storage error. ``str(error)`` is one line that says what to do."""


class DatabaseUnavailable(StorageError):
    """The database cannot be opened or reached (bad path, no permission, server down)."""


class DatabaseReadOnly(DatabaseUnavailable):
    """The database cannot be written (a read-only file, folder or disk); readers still
    work."""


class DatabaseFull(DatabaseUnavailable):
    """The disk (or the database's size limit) is full: nothing more can be stored."""


class DatabaseNotFound(DatabaseUnavailable):
    """A read-only command was pointed at a database file that does not exist."""


class DatabaseLocked(StorageError):
    """Another program held the database's lock for longer than the busy timeout."""


class DatabaseCorrupt(StorageError):
    """The file is not a database, or is damaged (its integrity check fails)."""


class DriverNotInstalled(StorageError):
    """The database URL names a driver that is not installed (or is not async)."""


class UnsupportedDatabase(StorageError):
    """The database URL names a kind of database, or a driver, that Arena does not work
    with (it works with SQLite through aiosqlite and PostgreSQL through asyncpg)."""


class NotAnArenaDatabase(StorageError):
    """The database has some of Arena's tables but no schema version: written by
    something else."""


class SchemaVersionError(StorageError):
    """The database has a schema version this Arena cannot read: a newer one (or not one
    Arena ever wrote)."""

    def __init__(self, found: int | str, expected: int, where: str) -> None:
        self.found = found
        self.expected = expected
        self.where = where
        super().__init__(self._message())

    def _message(self) -> str:
        return (
            f"{self.where} has schema version {self.found}, this Arena reads and writes "
            f"version {self.expected}: open it with the Arena release that wrote it (a newer "
            "one), or record into another database (--db PATH or ARENA_DB)"
        )


class SchemaOutdated(SchemaVersionError):
    """The database has an older schema version: ``arena db upgrade`` (or any command that
    records) upgrades it in place; readers never do."""

    def _message(self) -> str:
        return (
            f"{self.where} has schema version {self.found}, older than this Arena's "
            f"{self.expected}: run `arena db upgrade --db {self.where}` to upgrade it in place "
            "(an SQLite file is copied first), or read it with the Arena release that wrote it"
        )


class DatabaseInUse(StorageError):
    """Another process still records into the database, which blocks its upgrade."""


class MatchNotFound(StorageError):
    """No stored match has this id (or id prefix)."""


class AmbiguousMatchId(StorageError):
    """An id prefix matches more than one stored match."""


# How to install each module a driver needs (the name its ImportError gives).
_DRIVER_HINTS = {
    "asyncpg": "pip install asyncpg",
    "aiosqlite": "pip install aiosqlite",
    "psycopg": "pip install 'psycopg[binary]'",
    "aiomysql": "pip install aiomysql",
    "asyncmy": "pip install asyncmy",
    "greenlet": "pip install 'sqlalchemy[asyncio]'",
}


def translate_error(
    exc: BaseException, where: str, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
) -> StorageError:
    """A driver or SQLAlchemy error as a ``StorageError`` whose one-line message says what
    to do. A ``StorageError`` is returned as it is."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, ModuleNotFoundError | ImportError):
        return driver_error(exc, where)
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
    from sqlalchemy.exc import DBAPIError

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
    from sqlalchemy.exc import DBAPIError, OperationalError

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
        from sqlalchemy.engine import make_url

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


def driver_error(exc: BaseException, where: str, url: URL | None = None) -> DriverNotInstalled:
    """A missing driver (``exc``, an ImportError) as the error that says what to install;
    with the ``url`` being opened, a URL that names no async driver says to name one."""
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
