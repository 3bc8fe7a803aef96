"""Recording what is played: every match on a bus into the database, and the live ratings.

``Recording`` runs both on one bus and an open database: a ``Recorder`` that stores every
event, and a ``RatingKeeper`` that rates the rated matches as they end (casual ones say so
in ``MatchStarted.rated`` and are stored unrated). A server runs one beside its hub for as
long as it serves::

    recording = await Recording.start(db, hub.bus)   # StorageError: a read-only database
    ...
    await recording.close()

``recording(db, bus)`` is what ``arena play``, ``arena train`` and ``arena tournament`` wrap
their work in: it opens the database, records while the body runs, and closes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from arena.eventbus import EventBus
from arena.runtime import freeze_heap
from matchmaking.live import RatingKeeper
from storage import Database, Recorder, open_database


class NotStored(Exception):
    """The work ran, but the database does not hold everything it played (a full disk, a
    file made read-only meanwhile): the message says what was lost."""


class Recording:
    """A ``Recorder`` and a ``RatingKeeper`` on one bus (see the module docstring)."""

    def __init__(self, recorder: Recorder, keeper: RatingKeeper) -> None:
        self.recorder = recorder
        self.keeper = keeper

    @classmethod
    async def start(cls, db: Database, bus: EventBus, *, name: str = "recorder") -> Recording:
        """Register the recorder as a writer named ``name`` (a first write: raises
        StorageError on a database that cannot be written, before anything else starts),
        then start both."""
        recorder = Recorder(db, bus, name=name)
        await recorder.register()
        recorder.start()
        keeper = RatingKeeper(db, bus)
        keeper.start()
        return cls(recorder, keeper)

    async def flush(self) -> None:
        """Wait until every match event published so far is stored and rated."""
        await self.recorder.flush()
        await self.keeper.flush()

    async def close(self) -> None:
        """Drain and stop both (the recorder first: the keeper rates what it stored); the
        keeper stops even when the recorder's close raises (a cancellation it re-raises)."""
        try:
            await self.recorder.close()
        finally:
            await self.keeper.close()


@contextlib.asynccontextmanager
async def recording(db: str | None, bus: EventBus) -> AsyncIterator[Database | None]:
    """Record ``bus`` into ``db`` (a path or URL; None: ``$ARENA_DB`` or ``./arena.db``;
    ``""``: not recorded, yields None) with live ratings, while the body runs.

    Raises StorageError when the database cannot be opened or written at the start (before
    anything is played: registering is a first write), and NotStored after the body when
    the recorder could not store everything."""
    if db == "":
        yield None
        return
    database = await open_database(db)
    try:
        started = await Recording.start(database, bus)
        try:
            # What is alive now lives through the work: keep the garbage collector's full
            # collections from walking it while the recorder keeps events queued.
            freeze_heap()
            yield database
        finally:
            await started.close()
        if started.recorder.problem:
            raise NotStored(started.recorder.problem)
    finally:
        await database.close()
