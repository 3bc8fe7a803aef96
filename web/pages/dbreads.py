"""What the web core reads from the database (its ``Need``s for stored data): a match, a
page of matches, the runs, a leaderboard, the stored ratings and their history.

The leaderboard is the costly one (a Bradley-Terry fit reads every stored result): each
game and method's is computed at most once per ``leaderboard_cache_s``, and callers that
ask meanwhile share it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from matchmaking.leaderboard import leaderboard
from storage import Database, get_match, list_matches, list_runs
from storage.errors import StorageError
from storage.ratings import load_ratings, rating_history
from web.limits import ServerLimits
from web.needs import Need

MAX_CACHED_LEADERBOARDS = 64
"""Leaderboards (game, method) kept for ``leaderboard_cache_s``."""


class DatabaseReads:
    """The core's database reads from ``db`` (None: there is none)."""

    def __init__(self, db: Database | None, limits: ServerLimits) -> None:
        self.db = db
        self.limits = limits
        self._leaderboards: dict[tuple[str, str], tuple[float, asyncio.Future[Any]]] = {}

    async def fulfil(self, need: Need) -> Any:
        """Read what ``need`` asks for. Without a database: no runs, and a StorageError
        (returned, not raised) for anything else. Raises what the database raises, and
        RuntimeError for a need that is not a read."""
        args = need.args
        if self.db is None:
            return [] if need.kind == "list_runs" else StorageError("no database")
        if need.kind == "get_match":
            return await get_match(self.db, args["match_id"])
        if need.kind == "list_matches":
            return await list_matches(self.db, **args)
        if need.kind == "list_runs":
            runs = await list_runs(self.db)
            return [{"id": r.id, "name": r.name, "created_at": r.created_at} for r in runs]
        if need.kind == "leaderboard":
            return await self.leaderboard(args["game"], args["method"])
        if need.kind == "stored_ratings":
            return await load_ratings(self.db, args["game"])
        if need.kind == "rating_history":
            return await rating_history(self.db, args["game"], policy_prefix=args["policy_prefix"])
        raise RuntimeError(f"the core asked for {need.kind!r}, which the hub cannot do")

    async def leaderboard(self, game_id: str, method: str) -> dict[str, Any]:
        """The game's leaderboard as JSON, computed at most once per
        ``leaderboard_cache_s`` for each game and method (a Bradley-Terry fit reads every
        stored result; it runs off the event loop)."""
        key = (game_id, method)
        now = time.monotonic()
        cached = self._leaderboards.get(key)
        if cached is not None and now - cached[0] < self.limits.leaderboard_cache_s:
            return await asyncio.shield(cached[1])
        assert self.db is not None

        async def compute() -> dict[str, Any]:
            assert self.db is not None
            board = await leaderboard(self.db, game_id, method)  # type: ignore[arg-type]
            return {"game_id": game_id, **board.as_dict()}

        task = asyncio.ensure_future(compute())
        self._leaderboards[key] = (now, task)
        if len(self._leaderboards) > MAX_CACHED_LEADERBOARDS:
            oldest = min(self._leaderboards, key=lambda k: self._leaderboards[k][0])
            self._leaderboards.pop(oldest, None)
        try:
            return await asyncio.shield(task)
        except BaseException:
            if self._leaderboards.get(key, (0.0, None))[1] is task:
                del self._leaderboards[key]  # a failure is not kept
            raise
