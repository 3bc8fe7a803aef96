"""Live ratings, stored: the current rating of each policy per game, and its history.

``apply_match`` is the one write: in one transaction it reads the current ratings of a
match's policies, lets the caller compute the new ones (openskill, in
``matchmaking.live``), and writes them with a history row each, so several recording
processes updating the same policy never lose an update: SQLite serialises the writes, and
on PostgreSQL the transaction first takes an advisory lock on the game (the ratings of one
game are updated one match at a time, those of different games side by side).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, select

from storage.db import Database
from storage.models import Rating, RatingChange

MAX_HISTORY_ROWS = 100_000
"""Most history rows one ``rating_history`` call returns."""


@dataclass(frozen=True)
class StoredRating:
    """A policy's current rating in a game."""

    policy: str
    mu: float
    sigma: float
    games: int
    updated_at: float


@dataclass(frozen=True)
class RatingPoint:
    """A rating just after one match."""

    policy: str
    match_id: str
    mu: float
    sigma: float
    time: float


def game_lock_key(game_id: str) -> int:
    """The PostgreSQL advisory lock (a signed 64-bit key) that guards ``game_id``'s
    ratings."""
    digest = hashlib.sha256(b"arena:ratings:" + game_id.encode("utf-8", "replace")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


RateFn = Callable[[Mapping[str, tuple[float, float] | None]], Mapping[str, tuple[float, float]]]
"""Current (mu, sigma) of each policy (None when never rated) -> the new ones."""


async def apply_match(
    db: Database, game_id: str, match_id: str, policies: Sequence[str], rate: RateFn
) -> dict[str, tuple[float, float]]:
    """Update the ratings of ``policies`` after match ``match_id`` with ``rate``; returns
    the new ratings. Raises SQLAlchemy errors (``db.error(exc)`` explains them)."""
    async with db.writes.begin() as session:
        if db.is_postgres:  # held until the transaction ends
            await session.execute(select(func.pg_advisory_xact_lock(game_lock_key(game_id))))
        now = time.time()
        rows = {
            r.policy: r
            for r in (
                await session.scalars(
                    select(Rating).where(Rating.game_id == game_id, Rating.policy.in_(policies))
                )
            ).all()
        }
        current = {p: ((rows[p].mu, rows[p].sigma) if p in rows else None) for p in policies}
        new = dict(rate(current))
        for policy, (mu, sigma) in new.items():
            row = rows.get(policy)
            if row is None:
                session.add(
                    Rating(
                        game_id=game_id, policy=policy, mu=mu, sigma=sigma, games=1, updated_at=now
                    )
                )
            else:
                row.mu, row.sigma, row.games, row.updated_at = mu, sigma, row.games + 1, now
            session.add(
                RatingChange(
                    match_id=match_id, game_id=game_id, policy=policy, mu=mu, sigma=sigma, time=now
                )
            )
    return new


async def load_ratings(db: Database, game_id: str) -> list[StoredRating]:
    """The game's current ratings (any order). Raises SQLAlchemy errors."""
    async with db.sessions() as session:
        rows = (await session.scalars(select(Rating).where(Rating.game_id == game_id))).all()
    return [StoredRating(r.policy, r.mu, r.sigma, r.games, r.updated_at) for r in rows]


async def rating_history(
    db: Database, game_id: str, *, policy_prefix: str = "", limit: int = MAX_HISTORY_ROWS
) -> list[RatingPoint]:
    """The game's rating changes, oldest first, for the policies whose key starts with
    ``policy_prefix`` (``checkpoint:run@`` for one run's checkpoints). Raises SQLAlchemy
    errors."""
    query = (
        select(RatingChange)
        .where(RatingChange.game_id == game_id)
        .order_by(RatingChange.time, RatingChange.id)
        .limit(min(limit, MAX_HISTORY_ROWS))
    )
    if policy_prefix:
        query = query.where(RatingChange.policy.startswith(policy_prefix, autoescape=True))
    async with db.sessions() as session:
        rows = (await session.scalars(query)).all()
    return [RatingPoint(r.policy, r.match_id, r.mu, r.sigma, r.time) for r in rows]


async def clear_ratings(db: Database, game_id: str) -> None:
    """Forget the game's ratings and history (before replaying stored results)."""
    async with db.writes.begin() as session:
        await session.execute(delete(Rating).where(Rating.game_id == game_id))
        await session.execute(delete(RatingChange).where(RatingChange.game_id == game_id))
