"""Ratings kept live: every rated match updates its policies' ratings as it ends.

``RatingKeeper`` subscribes to the event bus beside the recorder. When a match ends (not
aborted, not casual: ``MatchStarted.rated``) between fixed policies (no learner seat, no
policy in two seats), it rates it with
openskill's Plackett-Luce model and stores the new ratings and their history
(``storage.ratings``), then publishes ``RatingsChanged`` on the bus (the web hub pushes it
to leaderboard pages). A failed write is logged and counted; it never stops the games.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from arena.events import (
    EventBus,
    MatchAborted,
    MatchEnded,
    MatchStarted,
    RatingsChanged,
    Subscription,
)
from arena.identity import PolicyKind, player_kind, policy_key
from matchmaking.ratings import LiveRatings, Rating
from storage.db import Database
from storage.ratings import RateFn, apply_match, clear_ratings
from storage.results import iter_results

log = logging.getLogger("arena.ratings")

KEEPER_QUEUE = 100_000
"""Events the keeper may fall behind before the bus drops it (ratings then miss matches;
``arena leaderboard --rebuild`` recomputes them from the stored results)."""


def rated_keys(players: tuple[str, ...]) -> tuple[str, ...] | None:
    """The policy keys of a match's seats when the match is rated, else None."""
    kinds = [player_kind(p) for p in players]
    if len(players) < 2 or PolicyKind.LEARNER in kinds:
        return None
    keys = tuple(policy_key(p, k) for p, k in zip(players, kinds, strict=True))
    return keys if len(set(keys)) == len(keys) else None


def rate_with(
    model: LiveRatings, game_id: str, keys: tuple[str, ...], rewards: tuple[float, ...]
) -> RateFn:
    """A ``storage.ratings.RateFn`` for one match."""

    def rate(current: Mapping[str, tuple[float, float] | None]) -> dict[str, tuple[float, float]]:
        for key in keys:
            found = current.get(key)
            if found is not None:
                model.set(game_id, key, Rating(*found))
        updated = model.update(game_id, list(keys), list(rewards))
        return {k: (r.mu, r.sigma) for k, r in updated.items()}

    return rate


@dataclass
class KeeperStats:
    """What the keeper did."""

    rated: int = 0
    failed: int = 0


class RatingKeeper:
    """Keeps ``db``'s ratings from ``bus`` (see the module docstring). Use as an async
    context manager, or ``start()`` / ``close()``."""

    def __init__(self, db: Database, bus: EventBus) -> None:
        self.db = db
        self.bus = bus
        self.stats = KeeperStats()
        self._model = LiveRatings()
        self._started: dict[str, MatchStarted] = {}
        self._task: asyncio.Task[None] | None = None
        self._rating = False
        """A match's ratings are being stored now (taken off the queue, not yet written)."""
        self._sub: Subscription | None = None

    def start(self) -> None:
        """Subscribe and start (idempotent; needs a running loop)."""
        if self._task is None:
            self._sub = self.bus.subscribe(max_queue=KEEPER_QUEUE, name="ratings")
            self._task = asyncio.get_running_loop().create_task(self._run(), name="arena-ratings")

    async def _run(self) -> None:
        assert self._sub is not None
        async for event in self._sub:
            if isinstance(event, MatchStarted):
                if event.rated and rated_keys(event.players) is not None:
                    self._started[event.match_id] = event
            elif isinstance(event, MatchEnded):
                started = self._started.pop(event.match_id, None)
                if started is not None:
                    self._rating = True
                    try:
                        await self._rate(started, event)
                    finally:
                        self._rating = False
            elif isinstance(event, MatchAborted):
                self._started.pop(event.match_id, None)

    async def _rate(self, started: MatchStarted, ended: MatchEnded) -> None:
        keys = rated_keys(started.players)
        if keys is None or len(ended.rewards) != len(keys):
            return
        rate = rate_with(self._model, started.game_id, keys, tuple(ended.rewards))
        try:
            new = await apply_match(self.db, started.game_id, ended.match_id, keys, rate)
        except Exception as exc:  # a write error never stops the games
            self.stats.failed += 1
            log.error("could not store the ratings of match %s: %s", ended.match_id, exc)
            return
        self.stats.rated += 1
        self.bus.publish(
            RatingsChanged(
                game_id=started.game_id,
                match_id=ended.match_id,
                ratings=tuple(
                    (k, mu, sigma, mu - 3.0 * sigma) for k, (mu, sigma) in sorted(new.items())
                ),
            )
        )

    async def flush(self) -> None:
        """Wait until every event published so far has been handled (its ratings
        stored)."""
        while self._sub is not None and (self._sub.pending() or self._rating):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)

    async def close(self) -> None:
        """Handle what is queued, then stop."""
        if self._sub is not None:
            self._sub.close()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task

    async def __aenter__(self) -> RatingKeeper:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def rebuild_ratings(db: Database, game_id: str) -> int:
    """Recompute ``game_id``'s ratings from its stored results, in the order the matches
    ended (for a database recorded before ratings were kept); returns the rated matches."""
    await clear_ratings(db, game_id)
    model = LiveRatings()
    rated = 0
    async for stored in iter_results(db, game_id):
        keys = rated_keys(stored.policies)
        if keys is None or len(stored.rewards) != len(keys):
            continue
        rate = rate_with(model, game_id, keys, stored.rewards)
        await apply_match(db, game_id, stored.match_id, keys, rate)
        rated += 1
    return rated


__all__ = ["KeeperStats", "RatingKeeper", "rated_keys", "rebuild_ratings"]
