"""Storage: every match and turn, persisted and crash-safe, and the queries over them.

``open_database()`` opens (or creates) the database, a ``Recorder`` writes what the event
bus reports, and the query functions read it back as typed dataclasses.

    db = await open_database()            # arena.db, $ARENA_DB, a path or an async URL
    async with Recorder(db, bus):
        ...                               # play: every match and turn is stored
    page = await list_matches(db, game="TicTacToe-v0", limit=20)
"""

from storage.db import Database, open_database
from storage.errors import MatchNotFound, SchemaVersionError, StorageError
from storage.queries import (
    MatchDetail,
    MatchSummary,
    PolicyResults,
    StoredTurn,
    count_matches,
    get_match,
    list_matches,
    policy_results,
)
from storage.recorder import Recorder
from storage.runs import RunInfo, list_runs, save_run

__all__ = [
    "Database",
    "MatchDetail",
    "MatchNotFound",
    "MatchSummary",
    "PolicyResults",
    "Recorder",
    "RunInfo",
    "SchemaVersionError",
    "StorageError",
    "StoredTurn",
    "count_matches",
    "get_match",
    "list_matches",
    "list_runs",
    "open_database",
    "policy_results",
    "save_run",
]
