"""Recording what a command plays: every match into the database, and the live ratings.

``recording(db, bus)`` is what ``arena play``, ``arena train`` and ``arena tournament`` wrap
their work in: the recorder stores every event of ``bus`` and the rating keeper rates the
rated matches as they end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from arena.events import EventBus
from arena.runtime import freeze_heap
from matchmaking.live import RatingKeeper
from storage import Database, Recorder, open_database


class NotStored(Exception):
    """The work ran, but the database does not hold everything it played (a full disk, a
    file made read-only meanwhile): the message says what was lost."""


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
        async with Recorder(database, bus) as recorder, RatingKeeper(database, bus):
            # What is alive now lives through the work: keep the garbage collector's full
            # collections from walking it while the recorder keeps events queued.
            freeze_heap()
            yield database
        if recorder.problem:
            raise NotStored(recorder.problem)
    finally:
        await database.close()
