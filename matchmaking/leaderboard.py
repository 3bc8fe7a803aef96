"""The leaderboard of a game, from the stored results.

Every decided match between fixed policies counts: bots, checkpoints, people, remote
agents. Seats played by a run's learner are left out (its weights change while it plays;
evaluation matches record the exact weights as ``checkpoint:<run>@<step>`` instead), and so
is self-play (a policy cannot gain on itself). ``openskill`` shows the live ratings, kept
as matches end (``matchmaking.live``; ``rebuild_ratings`` recomputes them from the stored
results); ``bt`` fits Bradley-Terry with bootstrap intervals to the stored results. The
first-mover advantage is measured over every two-seat match, self-play included.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

from arena.identity import PolicyKind, PolicyRef, policy_key
from matchmaking.ratings import (
    BTTable,
    MatchResult,
    SeatAdvantage,
    bradley_terry,
    seat_advantage,
)
from storage.db import Database
from storage.ratings import load_ratings
from storage.results import iter_results

Method = Literal["openskill", "bt"]


@dataclass
class Leaderboard:
    """One game's ratings."""

    game_id: str
    method: Method
    rows: list[dict[str, object]] = field(default_factory=list)
    """Best first: policy, label, rating figures, games."""
    matches: int = 0
    """Rated matches."""
    seat_advantage: SeatAdvantage | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready."""
        adv = self.seat_advantage
        return {
            "game": self.game_id,
            "method": self.method,
            "matches": self.matches,
            "rows": self.rows,
            "seat0_score": None
            if adv is None
            else {
                "games": adv.games,
                "score": round(adv.seat0_score, 4),
                "lower": round(adv.lower, 4),
                "upper": round(adv.upper, 4),
            },
            "notes": self.notes,
        }


def _label(key: str) -> str:
    try:
        return PolicyRef.parse(key).label
    except ValueError:
        return key


async def leaderboard(
    db: Database,
    game_id: str,
    method: Method = "openskill",
    *,
    bootstrap: int = 200,
    seed: int = 0,
) -> Leaderboard:
    """The game's leaderboard (see the module docstring). Raises ValueError for an
    unknown method, and SQLAlchemy errors."""
    if method not in ("openskill", "bt"):
        raise ValueError(f"unknown method {method!r}; choose openskill or bt")
    rated: list[MatchResult] = []
    two_seat: list[MatchResult] = []
    async for stored in iter_results(db, game_id):
        keys = tuple(policy_key(n, k) for n, k in zip(stored.policies, stored.kinds, strict=True))
        result = MatchResult(keys, stored.rewards)
        if len(keys) == 2:
            two_seat.append(result)
        if PolicyKind.LEARNER in stored.kinds or len(set(keys)) < len(keys):
            continue
        rated.append(result)
    board = Leaderboard(game_id=game_id, method=method, matches=len(rated))
    board.seat_advantage = seat_advantage(two_seat)
    if not rated:
        board.notes.append("no rated matches yet (bots, checkpoints, people or agents)")
        return board
    games: dict[str, int] = {}
    for r in rated:
        for p in r.policies:
            games[p] = games.get(p, 0) + 1
    if method == "openskill":
        stored_ratings = await load_ratings(db, game_id)
        if not stored_ratings:
            board.notes.append(
                "no live ratings stored yet for these matches (recorded before ratings were "
                "kept): `arena leaderboard --rebuild` computes them from the stored results"
            )
        rows = sorted(stored_ratings, key=lambda r: -(r.mu - 3.0 * r.sigma))
        board.rows = [
            {
                "policy": r.policy,
                "label": _label(r.policy),
                "mu": round(r.mu, 3),
                "sigma": round(r.sigma, 3),
                "ordinal": round(r.mu - 3.0 * r.sigma, 3),
                "games": r.games,
            }
            for r in rows
        ]
    else:
        # The bootstrap refits the table hundreds of times: off the event loop, where a
        # server's matches run.
        table: BTTable = await asyncio.to_thread(
            bradley_terry, rated, bootstrap=bootstrap, seed=seed
        )
        board.rows = [{**row, "label": _label(str(row["policy"]))} for row in table.rows()]
        board.notes += table.notes
    return board
