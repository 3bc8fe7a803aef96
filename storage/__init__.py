"""Storage: every match and turn, persisted and crash-safe, and the queries over them.

``open_database()`` opens (or creates) the database, a ``Recorder`` writes what the event
bus reports, and the query functions read it back as typed dataclasses.

    db = await open_database()            # arena.db, $ARENA_DB, a path or an async URL
    async with Recorder(db, bus):
        ...                               # play: every match and turn is stored
    page = await list_matches(db, game="TicTacToe-v0", limit=20)
    await write_parquet(export_rows(db, ExportQuery(games=("TicTacToe-v0",))), "ttt.parquet")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Database": "storage.db",
    "open_database": "storage.connect",
    "MatchNotFound": "storage.errors",
    "SchemaVersionError": "storage.errors",
    "StorageError": "storage.errors",
    "ExportQuery": "storage.export",
    "export_rows": "storage.export",
    "ExportRow": "storage.exportschema",
    "write_jsonl": "storage.exportwrite",
    "write_parquet": "storage.exportwrite",
    "MatchDetail": "storage.queries",
    "MatchSummary": "storage.queries",
    "PolicyResults": "storage.queries",
    "count_matches": "storage.queries",
    "get_match": "storage.queries",
    "list_matches": "storage.queries",
    "policy_results": "storage.queries",
    "Recorder": "storage.recorder",
    "RunInfo": "storage.runs",
    "list_runs": "storage.runs",
    "save_run": "storage.runs",
}
"""Where each exported name lives: loaded on first use, so that a module of this package
that needs no database (``storage.rundir``, ``storage.errors``) does not load SQLAlchemy."""

__all__ = [
    "Database",
    "ExportQuery",
    "ExportRow",
    "MatchDetail",
    "MatchNotFound",
    "MatchSummary",
    "PolicyResults",
    "Recorder",
    "RunInfo",
    "SchemaVersionError",
    "StorageError",
    "count_matches",
    "export_rows",
    "get_match",
    "list_matches",
    "list_runs",
    "open_database",
    "policy_results",
    "save_run",
    "write_jsonl",
    "write_parquet",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from storage.connect import open_database
    from storage.db import Database
    from storage.errors import MatchNotFound, SchemaVersionError, StorageError
    from storage.export import ExportQuery, export_rows
    from storage.exportschema import ExportRow
    from storage.exportwrite import write_jsonl, write_parquet
    from storage.queries import (
        MatchDetail,
        MatchSummary,
        PolicyResults,
        count_matches,
        get_match,
        list_matches,
        policy_results,
    )
    from storage.recorder import Recorder
    from storage.runs import RunInfo, list_runs, save_run
