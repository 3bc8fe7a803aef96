"""Live ratings, stored: the current rating of each policy per game, and its history.

The rows hold ``matchmaking.ratings``' default ratings, Bradley-Terry on the Elo scale:
``mu`` is a policy's rating, ``sigma`` its standard error, ``games`` its rated matches.
``store_ratings`` is the one write: in one transaction it writes the new ratings of a
game's policies and a history row for each policy of the matches just rated, so that the
table always holds one fit; on PostgreSQL the transaction first takes an advisory lock on
the game (the ratings of one game are written one refit at a time, those of different
games side by side).

Which model wrote the rows is recorded (``schema_meta``, key ``ratings_model``): rows of
another model (an older Arena kept openskill ratings here) are not returned by
``load_ratings`` until they are recomputed (``matchmaking.live`` does it when it first
rates a match; ``arena leaderboard --rebuild`` does it on demand).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from storage.db import Database
from storage.models import Match, Rating, RatingChange, SchemaMeta

MAX_HISTORY_ROWS = 100_000
"""Most history rows one ``rating_history`` call returns."""
RATINGS_MODEL_KEY = "ratings_model"
"""The ``schema_meta`` key naming the model whose ratings the table holds."""
RATINGS_MODEL = "bradley-terry-elo/1"
"""Bradley-Terry (ties half a win), Elo scale, the random bot at 1000: ``mu`` the rating,
``sigma`` its standard error."""


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


@dataclass(frozen=True)
class NewRating:
    """What ``store_ratings`` writes for one policy."""

    mu: float
    sigma: float
    games: int


def game_lock_key(game_id: str) -> int:
    """The PostgreSQL advisory lock (a signed 64-bit key) that guards ``game_id``'s
    ratings."""
    digest = hashlib.sha256(b"arena:ratings:" + game_id.encode("utf-8", "replace")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def store_ratings(
    db: Database,
    game_id: str,
    ratings: Mapping[str, NewRating],
    history: Sequence[tuple[str, str]] = (),
    *,
    replace: bool = False,
) -> None:
    """Write the new ratings of ``game_id``'s policies, and a history row for each
    ``(match id, policy)`` in ``history`` (that policy's new rating). ``replace``: the
    game's other stored ratings go (a full recount). Raises SQLAlchemy errors
    (``db.error(exc)`` explains them)."""
    now = time.time()
    async with db.writes.begin() as session:
        if db.is_postgres:  # held until the transaction ends
            await session.execute(select(func.pg_advisory_xact_lock(game_lock_key(game_id))))
        rows = {
            r.policy: r
            for r in (
                await session.scalars(
                    select(Rating).where(
                        Rating.game_id == game_id, Rating.policy.in_(list(ratings))
                    )
                )
            ).all()
        }
        if replace:
            await session.execute(
                delete(Rating).where(Rating.game_id == game_id, Rating.policy.not_in(list(ratings)))
            )
        for policy, new in ratings.items():
            row = rows.get(policy)
            if row is None:
                session.add(
                    Rating(
                        game_id=game_id,
                        policy=policy,
                        mu=new.mu,
                        sigma=new.sigma,
                        games=new.games,
                        updated_at=now,
                    )
                )
            else:
                row.mu, row.sigma, row.games, row.updated_at = new.mu, new.sigma, new.games, now
        for match_id, policy in history:
            new = ratings[policy]
            session.add(
                RatingChange(
                    match_id=match_id,
                    game_id=game_id,
                    policy=policy,
                    mu=new.mu,
                    sigma=new.sigma,
                    time=now,
                )
            )
        meta = await session.get(SchemaMeta, RATINGS_MODEL_KEY)
        if meta is None or meta.value != RATINGS_MODEL:
            # Another process may record it at the same moment (another game's ratings).
            insert = pg_insert if db.is_postgres else sqlite_insert
            await session.execute(
                insert(SchemaMeta)
                .values(key=RATINGS_MODEL_KEY, value=RATINGS_MODEL)
                .on_conflict_do_update(
                    index_elements=[SchemaMeta.key], set_={"value": RATINGS_MODEL}
                )
            )


async def ratings_model(db: Database) -> str | None:
    """The model whose ratings the table holds (None: not recorded, as an older Arena left
    it). Raises SQLAlchemy errors."""
    async with db.sessions() as session:
        meta = await session.get(SchemaMeta, RATINGS_MODEL_KEY)
    return meta.value if meta is not None else None


async def load_ratings(db: Database, game_id: str) -> list[StoredRating]:
    """The game's current ratings (any order); none while the table holds another model's
    (see the module docstring). Raises SQLAlchemy errors."""
    async with db.sessions() as session:
        meta = await session.get(SchemaMeta, RATINGS_MODEL_KEY)
        if meta is None or meta.value != RATINGS_MODEL:
            return []
        rows = (await session.scalars(select(Rating).where(Rating.game_id == game_id))).all()
    return [StoredRating(r.policy, r.mu, r.sigma, r.games, r.updated_at) for r in rows]


async def rated_flags(db: Database, match_ids: Sequence[str]) -> dict[str, bool]:
    """Whether each stored match of ``match_ids`` was played rated (``matches.rated``);
    matches not stored are left out. Raises SQLAlchemy errors."""
    if not match_ids:
        return {}
    async with db.sessions() as session:
        rows = (
            await session.execute(select(Match.id, Match.rated).where(Match.id.in_(match_ids)))
        ).all()
    return {row.id: bool(row.rated) for row in rows}


async def rated_games(db: Database) -> list[str]:
    """The games that have stored ratings (of any model). Raises SQLAlchemy errors."""
    async with db.sessions() as session:
        found = (await session.scalars(select(Rating.game_id).distinct())).all()
    return sorted(found)


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
