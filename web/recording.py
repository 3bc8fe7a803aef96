"""What a server runs beside its hub: the recorder of every match on the hub's bus and the
live ratings of its rated matches (casual ones say so in ``MatchStarted.rated`` and are
stored unrated).

    recording = await HubRecording.start(db, hub)   # StorageError: a read-only database
    ...
    await recording.close()
"""

from __future__ import annotations

from matchmaking.live import RatingKeeper
from storage import Database, Recorder
from web.hub import WebHub


class HubRecording:
    """A ``Recorder`` and a ``RatingKeeper`` on ``hub``'s bus (see the module docstring)."""

    def __init__(self, recorder: Recorder, keeper: RatingKeeper) -> None:
        self.recorder = recorder
        self.keeper = keeper

    @classmethod
    async def start(cls, db: Database, hub: WebHub) -> HubRecording:
        """Register the recorder (a first write: raises StorageError on a database that
        cannot be written, before anything else starts), then start both."""
        recorder = Recorder(db, hub.bus, name="web-recorder")
        await recorder.register()
        recorder.start()
        keeper = RatingKeeper(db, hub.bus)
        keeper.start()
        return cls(recorder, keeper)

    async def flush(self) -> None:
        """Wait until every match event published so far is stored and rated."""
        await self.recorder.flush()
        await self.keeper.flush()

    async def close(self) -> None:
        """Drain and stop both (the recorder first: the keeper rates what it stored)."""
        await self.recorder.close()
        await self.keeper.close()
