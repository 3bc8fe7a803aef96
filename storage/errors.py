"""The errors storage raises: one hierarchy, each message saying what to do.

Every error a user can cause (a bad path or URL, a missing driver, a locked or corrupt
file, an unreachable server or a wrong password, a database from another schema version,
an unknown match id) is a ``StorageError``;
the CLI prints its message as one line and exits with code 2.
"""

from __future__ import annotations

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
