"""Results for ratings: every decided match of a game as (seat policies, seat rewards).

Ratings (``matchmaking.ratings``) are fitted to these rows. A row holds each seat's policy
name and kind and its final reward, in seat order; only ``finished`` and ``truncated``
matches count (aborted ones carry no result).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlalchemy import select

from storage.db import Database
from storage.models import Match, MatchStatus, Policy, Seat

RESULT_BATCH = 5_000
"""Matches read per query while streaming results (memory stays bounded)."""


@dataclass(frozen=True)
class StoredResult:
    """One decided match."""

    match_id: str
    game_id: str
    ended_at: float
    policies: tuple[str, ...]
    kinds: tuple[str, ...]
    rewards: tuple[float, ...]
    run_id: str | None
    group_id: str | None


async def iter_results(
    db: Database, game_id: str, *, since: float | None = None
) -> AsyncIterator[StoredResult]:
    """The game's decided rated matches, oldest first (``since``: ended after that time);
    casual matches (``Match.rated`` false) are left out.

    Raises SQLAlchemy errors (``db.error(exc)`` explains them)."""
    after: tuple[float, str] | None = (since, "") if since is not None else None
    while True:
        query = (
            select(Match.id, Match.ended_at, Match.run_id, Match.group_id)
            .where(Match.game_id == game_id)
            .where(Match.status.in_([MatchStatus.FINISHED, MatchStatus.TRUNCATED]))
            .where(Match.rated.is_(True))
            .order_by(Match.ended_at, Match.id)
            .limit(RESULT_BATCH)
        )
        if after is not None:
            ended, last = after
            query = query.where(
                (Match.ended_at > ended) | ((Match.ended_at == ended) & (Match.id > last))
            )
        async with db.sessions() as session:
            matches = (await session.execute(query)).all()
            if not matches:
                return
            ids = [m.id for m in matches]
            seats = (
                await session.execute(
                    select(Seat.match_id, Seat.seat, Seat.reward, Policy.name, Policy.kind)
                    .join(Policy, Policy.id == Seat.policy_id)
                    .where(Seat.match_id.in_(ids))
                    .order_by(Seat.match_id, Seat.seat)
                )
            ).all()
        by_match: dict[str, list[tuple[str, str, float]]] = {}
        for row in seats:
            by_match.setdefault(row.match_id, []).append(
                (row.name, row.kind, float(row.reward if row.reward is not None else 0.0))
            )
        for m in matches:
            seated = by_match.get(m.id, [])
            yield StoredResult(
                match_id=m.id,
                game_id=game_id,
                ended_at=float(m.ended_at or 0.0),
                policies=tuple(s[0] for s in seated),
                kinds=tuple(s[1] for s in seated),
                rewards=tuple(s[2] for s in seated),
                run_id=m.run_id,
                group_id=m.group_id,
            )
        last_match = matches[-1]
        after = (float(last_match.ended_at or 0.0), last_match.id)
        if len(matches) < RESULT_BATCH:
            return
