"""Following the database: how ``arena serve`` shows matches that another process plays.

When training runs in another process, the server polls the database every
``poll_interval_s`` (0.5 s by default) for matches started, moved and ended, and feeds them
to the same match streams as the in-process event bus. Why the database, and not a second
live channel from the trainer: the trainer's recorder already writes every match and turn
there, crash-safe and in order, so the server needs nothing more from the trainer; there is
no second port or socket to open, secure and keep in step, and a server started, stopped or
restarted at any time catches up from the same source. The cost is up to one poll interval
(plus the recorder's batching) of delay, and a few cheap indexed queries per poll.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError

from arena.events import Turn
from storage import Database, MatchDetail, MatchSummary, get_match, list_matches
from storage.errors import MatchNotFound, StorageError
from storage.queries import MAX_PAGE, public_turns_after

log = logging.getLogger("web.follow")

DEFAULT_POLL_INTERVAL_S = 0.5
"""How often the database is polled for new and updated matches."""


class FollowTarget(Protocol):
    """What the follower feeds (the hub)."""

    def followed_live(self) -> dict[str, int]:
        """Live matches followed from the database: match id -> turns known."""
        ...

    def is_known(self, match_id: str) -> bool:
        """True when the hub already has this match (from any source)."""
        ...

    def db_started(self, summary: MatchSummary) -> None:
        """A live match the hub did not know."""
        ...

    def db_turns(self, match_id: str, turns: list[Turn]) -> None:
        """New turns of a followed match, in order."""
        ...

    def db_ended(self, detail: MatchDetail) -> None:
        """A followed match ended (with every turn, observations included)."""
        ...

    def db_gone(self, match_id: str) -> None:
        """A followed match was deleted from the database."""
        ...

    def db_recent(self, summaries: list[MatchSummary]) -> None:
        """The newest stored matches (ended ones the hub never saw go to the lobby)."""
        ...


async def turns_after(db: Database, after: Mapping[str, int]) -> dict[str, list[Turn]]:
    """The stored turns of each match in ``after`` whose index is at least its value, in
    order, without observations or the seats' text (spectators of a live match see only
    the parsed move).

    Raises SQLAlchemy errors.
    """
    stored = await public_turns_after(db, after)
    return {
        match_id: [replace(t, observation=None) for t in turns]
        for match_id, turns in stored.items()
    }


class DatabaseFollower:
    """Polls ``db`` and feeds what changed to ``target``. ``poll_once`` never raises on
    database errors: they are logged (once until the database answers again)."""

    def __init__(
        self,
        db: Database,
        target: FollowTarget,
        *,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        recent_limit: int = 50,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError("poll_interval_s must be positive")
        self.db = db
        self.target = target
        self.poll_interval_s = poll_interval_s
        self.recent_limit = recent_limit
        self.polls = 0
        self.errors = 0
        self._failing = False

    async def poll_once(self) -> None:
        """One poll: new live matches, their new turns, and their ends."""
        try:
            await self._poll()
        except (SQLAlchemyError, StorageError, OSError) as exc:
            self.errors += 1
            if not self._failing:
                log.warning("cannot follow the database: %s", self.db.error(exc))
            self._failing = True
            return
        if self._failing:
            log.warning("following the database again")
        self._failing = False
        self.polls += 1

    async def _poll(self) -> None:
        target = self.target
        live = await list_matches(self.db, status="live", limit=MAX_PAGE)
        live_ids = {m.id for m in live}
        for summary in reversed(live):  # oldest first
            if not target.is_known(summary.id):
                target.db_started(summary)
        followed = target.followed_live()
        still = {m: k for m, k in followed.items() if m in live_ids}
        if still:
            for match_id, turns in (await turns_after(self.db, still)).items():
                target.db_turns(match_id, turns)
        for match_id in followed:
            if match_id in live_ids:
                continue
            try:
                detail = await get_match(self.db, match_id)
            except MatchNotFound:
                target.db_gone(match_id)
                continue
            if detail.match.status == "live":  # it became live again between queries
                continue
            target.db_ended(detail)
        target.db_recent(await list_matches(self.db, limit=self.recent_limit))
