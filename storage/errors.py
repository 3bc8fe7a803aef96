"""The errors storage raises: one hierarchy, each message saying what to do.

Every error a user can cause (a bad path or URL, a missing driver, a locked or corrupt
file, an unreachable server or a wrong password, a database from another schema version,
an unknown match id) is a ``StorageError``;
the CLI prints its message as one line and exits with code 2.
"""

from __future__ import annotations


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
    """The database was written with another, incompatible schema version."""

    def __init__(self, found: int | str, expected: int, where: str) -> None:
        self.found = found
        self.expected = expected
        self.where = where
        super().__init__(
            f"{where} has schema version {found}, this Arena reads and writes version "
            f"{expected}: open it with the Arena release that wrote it, or record into a "
            "new database (--db PATH or ARENA_DB)"
        )


class MatchNotFound(StorageError):
    """No stored match has this id (or id prefix)."""


class AmbiguousMatchId(StorageError):
    """An id prefix matches more than one stored match."""
