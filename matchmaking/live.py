"""Ratings kept live: the Bradley-Terry fit of every stored rated result, kept current as
matches end.

``RatingKeeper`` subscribes to the event bus beside the recorder. When a match ends (not
aborted, not casual: ``MatchStarted.rated``) between fixed policies (no learner seat, no
policy in two seats), it adds the result to the game's counts, refits (from the previous
strengths: a step or two of Newton's method, ``matchmaking.btfit.BTRatings``), stores
every rating the refit moved and a history row for each policy of the match
(``storage.ratings``), then publishes ``RatingsChanged`` on the bus (the web hub pushes it
to leaderboard pages and agents). Matches that end together are rated with one refit. A
failed write is logged and counted; it never stops the games.

The counts start from the database (every stored rated result of the game, read when the
keeper first rates one of its matches) and are recounted from it every ``refit_every_s``
of match time while the game is being played, so that the matches other processes record
into the same database count too and every process converges on the same fit. This
process's own matches count from their events until a recount finds them stored (the
recorder may not have written them yet; one not stored within ``lost_after_s`` is taken
as lost). Between recounts, the live ratings are the batch fit of every stored result plus
this process's newer ones: ``arena leaderboard`` (which fits the stored results) shows the
same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from arena.eventbus import EventBus, Subscription
from arena.events import MatchAborted, MatchEnded, MatchEvent, MatchStarted, RatingsChanged
from arena.identity import PolicyKind, player_kind, policy_key
from matchmaking.btfit import BTRatings
from matchmaking.paircounts import PairCounts, rated_seats
from matchmaking.ratings import Rating
from storage.db import Database
from storage.ratings import (
    RATINGS_MODEL,
    NewRating,
    clear_ratings,
    rated_games,
    ratings_model,
    store_ratings,
)
from storage.results import StoredResult, iter_results

log = logging.getLogger("arena.ratings")

KEEPER_QUEUE = 100_000
"""Events the keeper may fall behind before the bus drops it (ratings then miss matches
until the next recount; ``arena leaderboard --rebuild`` recomputes them at once)."""
REFIT_EVERY_S = 60.0
"""Match time (seconds between the ends of matches) between two recounts of a game from
the database."""
LOST_AFTER_S = 600.0
"""A match of this process that a recount still does not find stored this long after it
ended is taken as lost (the recorder failed to write it): it stops counting."""
RECOUNT_FACTOR = 20.0
"""The next recount waits at least this many times as long as the last one took, so that
recounting a large database takes at most a twentieth of the keeper's time."""
CLOCK_SLACK_S = 1.0
"""Events carry their process's wall time: a recount remembers the stored matches that
ended from this long before the newest event it has seen."""
WRITE_EPSILON = 0.005
"""A policy's stored rating is rewritten when a refit moves it (or its standard error) by
more than this many Elo points, or its games change."""


def rated_keys(players: tuple[str, ...]) -> tuple[str, ...] | None:
    """The policy keys of a match's seats (as ``MatchStarted`` names them) when the match
    is rated, else None."""
    kinds = [player_kind(p) for p in players]
    if len(players) < 2 or PolicyKind.LEARNER in kinds:
        return None
    keys = tuple(policy_key(p, k) for p, k in zip(players, kinds, strict=True))
    return keys if len(set(keys)) == len(keys) else None


def stored_keys(stored: StoredResult) -> tuple[str, ...] | None:
    """The policy keys of a stored match's seats when it is rated, else None (the same
    rule as ``rated_keys``, from the stored kinds)."""
    if PolicyKind.LEARNER.value in stored.kinds:
        return None
    keys = tuple(policy_key(n, k) for n, k in zip(stored.policies, stored.kinds, strict=True))
    return keys if rated_seats(keys, stored.rewards) else None


async def count_results(
    db: Database,
    game_id: str,
    *,
    seen: set[str] | None = None,
    after: float | None = None,
    read: set[str] | None = None,
) -> PairCounts:
    """Every stored rated result of ``game_id``, collapsed; the ids of ``seen`` that are
    stored are taken out of it, and the ids of the matches that ended after ``after`` are
    put in ``read``. Raises SQLAlchemy errors."""
    counts = PairCounts()
    async for stored in iter_results(db, game_id):
        if seen:
            seen.discard(stored.match_id)
        if read is not None and after is not None and stored.ended_at >= after:
            read.add(stored.match_id)
        keys = stored_keys(stored)
        if keys is not None:
            counts.add(keys, stored.rewards)
    return counts


def stored_form(ratings: dict[str, Rating], counts: PairCounts) -> dict[str, NewRating]:
    """Each rating as ``storage.ratings`` writes it."""
    return {p: NewRating(r.mu, r.sigma, counts.games.get(p, 0)) for p, r in ratings.items()}


def _moved(old: NewRating | None, new: NewRating) -> bool:
    return (
        old is None
        or old.games != new.games
        or abs(old.mu - new.mu) > WRITE_EPSILON
        or abs(old.sigma - new.sigma) > WRITE_EPSILON
    )


@dataclass
class KeeperStats:
    """What the keeper did."""

    rated: int = 0
    failed: int = 0
    recounts: int = 0
    """Full recounts of a game from the database (its first rated match included)."""


@dataclass
class _Rated:
    match_id: str
    game_id: str
    keys: tuple[str, ...]
    rewards: tuple[float, ...]
    time: float


@dataclass
class _Game:
    """One game's live state."""

    model: BTRatings
    recounted_at: float
    """Match time of the last recount."""
    pending: dict[str, _Rated] = field(default_factory=dict)
    """This process's matches that no recount has found stored yet."""
    counted: set[str] = field(default_factory=set)
    """Stored matches the last recount read that ended after it began: their events may
    come after it (they are not counted twice)."""
    every_s: float = REFIT_EVERY_S
    """Match time until the next recount (longer when a recount takes long)."""
    written: dict[str, NewRating] = field(default_factory=dict)
    """What the table holds, as far as this keeper knows."""


class RatingKeeper:
    """Keeps ``db``'s ratings from ``bus`` (see the module docstring). Use as an async
    context manager, or ``start()`` / ``close()``."""

    def __init__(
        self,
        db: Database,
        bus: EventBus,
        *,
        refit_every_s: float = REFIT_EVERY_S,
        lost_after_s: float = LOST_AFTER_S,
        recount_factor: float = RECOUNT_FACTOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self.bus = bus
        self.refit_every_s = refit_every_s
        self.lost_after_s = lost_after_s
        self.recount_factor = recount_factor
        self.clock = clock
        """Measures how long a recount takes (monotonic seconds)."""
        self.stats = KeeperStats()
        self._games: dict[str, _Game] = {}
        self._started: dict[str, MatchStarted] = {}
        self._task: asyncio.Task[None] | None = None
        self._rating = False
        """Matches are being rated now (taken off the queue, not yet stored)."""
        self._checked_model = False
        self._sub: Subscription | None = None

    def start(self) -> None:
        """Subscribe and start (idempotent; needs a running loop)."""
        if self._task is None:
            self._sub = self.bus.subscribe(max_queue=KEEPER_QUEUE, name="ratings")
            self._task = asyncio.get_running_loop().create_task(self._run(), name="arena-ratings")

    async def _run(self) -> None:
        sub = self._sub
        assert sub is not None
        async for first in sub:
            batch: list[MatchEvent] = [first]
            while (more := sub.get_nowait()) is not None:
                batch.append(more)
            ended: list[_Rated] = []
            for event in batch:
                rated = self._take(event)
                if rated is not None:
                    ended.append(rated)
            if not ended:
                continue
            self._rating = True
            try:
                await self._rate(ended)
            except Exception:  # a bug: log it, keep rating the next matches
                log.exception("rating %d matches failed", len(ended))
                self.stats.failed += len(ended)
            finally:
                self._rating = False

    def _take(self, event: MatchEvent) -> _Rated | None:
        if isinstance(event, MatchStarted):
            if event.rated and rated_keys(event.players) is not None:
                self._started[event.match_id] = event
        elif isinstance(event, MatchEnded):
            started = self._started.pop(event.match_id, None)
            if started is None:
                return None
            keys = rated_keys(started.players)
            if keys is None or len(event.rewards) != len(keys):
                return None
            return _Rated(event.match_id, started.game_id, keys, tuple(event.rewards), event.time)
        elif isinstance(event, MatchAborted):
            self._started.pop(event.match_id, None)
        return None

    async def _rate(self, ended: list[_Rated]) -> None:
        by_game: dict[str, list[_Rated]] = {}
        for rated in ended:
            by_game.setdefault(rated.game_id, []).append(rated)
        for game_id, matches in by_game.items():
            try:
                await self._rate_game(game_id, matches)
            except Exception as exc:  # a read or write error never stops the games
                self.stats.failed += len(matches)
                log.error("could not store the ratings of %d %s matches: %s",
                          len(matches), game_id, exc)  # fmt: skip

    async def _recount(self, game_id: str, state: _Game, now: float) -> None:
        """Count the game's stored results afresh, with this process's matches that are not
        stored yet. The matches that end meanwhile may be read now and rated later: those
        the recount read are remembered, not counted again. A recount that takes long
        makes the next one wait longer (``recount_factor`` times as long as it took, at
        least ``refit_every_s``)."""
        started = self.clock()
        before = set(state.pending)
        unseen = set(before)
        read: set[str] = set()
        counts = await count_results(
            self.db, game_id, seen=unseen, after=now - CLOCK_SLACK_S, read=read
        )
        state.pending = {
            m: r
            for m, r in state.pending.items()
            if m in unseen and now - r.time < self.lost_after_s
        }
        for match in state.pending.values():
            counts.add(match.keys, match.rewards)
        state.model.reset(counts)
        state.counted = read - before  # (this process's own were rated already)
        state.recounted_at = now
        took = self.clock() - started
        state.every_s = max(self.refit_every_s, self.recount_factor * took)
        self.stats.recounts += 1

    async def _refresh_other_model(self) -> None:
        """Rows an older Arena wrote (another model's) are recomputed once, game by game."""
        if await ratings_model(self.db) != RATINGS_MODEL:
            for game_id in await rated_games(self.db):
                log.info("recomputing the %s ratings an older Arena stored", game_id)
                await rebuild_ratings(self.db, game_id)
        self._checked_model = True

    async def _rate_game(self, game_id: str, matches: Sequence[_Rated]) -> None:
        now = max(m.time for m in matches)
        if not self._checked_model:
            await self._refresh_other_model()
        state = self._games.get(game_id)
        fresh = state is None
        if state is None:
            state = self._games[game_id] = _Game(BTRatings(), now)
        for match in matches:
            if match.match_id in state.counted:  # the last recount read it stored
                state.counted.discard(match.match_id)
                continue
            state.pending[match.match_id] = match
            state.model.add(match.keys, match.rewards)
        replace = fresh or now - state.recounted_at >= state.every_s
        if replace:
            await self._recount(game_id, state, now)
        new = stored_form(state.model.ratings(), state.model.counts)
        changed = {p: r for p, r in new.items() if _moved(state.written.get(p), r)}
        for match in matches:
            for key in match.keys:
                changed[key] = new[key]
        history = [(m.match_id, key) for m in matches for key in m.keys]
        # A recount rewrites the whole table (other processes' rows, policies gone).
        await store_ratings(self.db, game_id, new if replace else changed, history, replace=replace)
        if replace:
            state.written = dict(new)
        else:
            state.written.update(changed)
        self.stats.rated += len(matches)
        for k, match in enumerate(matches):
            keys = list(match.keys)
            if k == len(matches) - 1:
                keys += sorted(p for p in changed if p not in match.keys)
            self.bus.publish(
                RatingsChanged(
                    game_id=game_id,
                    match_id=match.match_id,
                    ratings=tuple(
                        (p, new[p].mu, new[p].sigma, new[p].mu - 3.0 * new[p].sigma) for p in keys
                    ),
                    games=tuple(new[p].games for p in keys),
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
    """Recompute ``game_id``'s ratings from its stored results (its history starts
    afresh); returns the rated matches. Raises SQLAlchemy errors."""
    counts = await count_results(db, game_id)
    await clear_ratings(db, game_id)
    model = BTRatings()
    model.reset(counts)
    if counts.matches:
        await store_ratings(db, game_id, stored_form(model.ratings(), counts), replace=True)
    return counts.matches


__all__ = [
    "KeeperStats",
    "RatingKeeper",
    "count_results",
    "rated_keys",
    "rebuild_ratings",
    "stored_keys",
]
