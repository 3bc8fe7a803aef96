"""The leaderboard of a game, from the stored results.

Every decided match between fixed policies counts: bots, checkpoints, people, remote
agents. Seats played by a run's learner are left out (its weights change while it plays;
evaluation matches record the exact weights as ``checkpoint:<run>@<step>`` instead), and so
is self-play (a policy cannot gain on itself). ``bt`` (the default) fits Bradley-Terry to
the stored results (``matchmaking.btfit``): the same fit that the live ratings
(``matchmaking.live``) keep current, so the two agree; the intervals come from the fit's
standard errors, or with ``bootstrap`` from that many resampled refits. ``openskill``
replays the stored results, in the order the matches ended, through openskill's
Plackett-Luce model, for comparison (it is not kept live any more). The first-mover
advantage is measured over every two-seat match, self-play included.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from arena.identity import PolicyRef, policy_key
from games.outcome import score_against

if TYPE_CHECKING:  # numpy, openskill and SQLAlchemy load when a leaderboard is made
    from matchmaking.bttable import BTTable
    from matchmaking.paircounts import MatchResult
    from storage.db import Database

Method = Literal["bt", "openskill"]
METHODS: tuple[Method, ...] = ("bt", "openskill")
"""The leaderboard's methods; the first is the default."""


@dataclass(frozen=True)
class SeatAdvantage:
    """How much moving first is worth in a game: seat 0's score (win 1, draw 1/2) over
    its two-seat matches (self-play included: there only the seat differs), with a 95%
    Wilson interval."""

    games: int
    seat0_score: float
    lower: float
    upper: float


def seat_advantage(results: Iterable[MatchResult], z: float = 1.96) -> SeatAdvantage | None:
    """Seat 0's average score against seat 1 (Wilson interval); None without games."""
    total = 0
    score = 0.0
    for result in results:
        if len(result.rewards) != 2:
            continue
        r0, r1 = result.rewards
        total += 1
        score += score_against(r0, r1)
    if not total:
        return None
    p = score / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return SeatAdvantage(total, p, max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class Leaderboard:
    """One game's ratings."""

    game_id: str
    method: Method
    rows: list[dict[str, object]] = field(default_factory=list)
    """Best first: policy, label, rating figures, rank, games."""
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


def label(key: str) -> str:
    """How a policy key is shown (``random``, ``run@200``, ``agent:alice``)."""
    try:
        return PolicyRef.parse(key).label
    except ValueError:
        return key


def openskill_rows(results: list[MatchResult], game_id: str) -> list[dict[str, object]]:
    """openskill Plackett-Luce from ``results`` in order: best ordinal first."""
    from matchmaking.bttable import competition_ranks
    from matchmaking.openskill_ratings import LiveRatings

    model = LiveRatings()
    games: dict[str, int] = {}
    for r in results:
        model.update(game_id, r.policies, r.rewards)
        for p in r.policies:
            games[p] = games.get(p, 0) + 1
    table = model.table(game_id)
    rank = competition_ranks({p: rating.ordinal for p, rating in table})
    return [
        {
            "policy": p,
            "label": label(p),
            "mu": rating.mu,
            "sigma": rating.sigma,
            "ordinal": rating.ordinal,
            "rank": rank[p],
            "games": games[p],
        }
        for p, rating in table
    ]


async def leaderboard(
    db: Database,
    game_id: str,
    method: Method = "bt",
    *,
    bootstrap: int = 0,
    seed: int = 0,
) -> Leaderboard:
    """The game's leaderboard (see the module docstring). Raises ValueError for an
    unknown method, and SQLAlchemy errors."""
    from matchmaking.bttable import table_of
    from matchmaking.live import stored_keys
    from matchmaking.paircounts import MatchResult, PairCounts
    from storage.results import iter_results

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose {' or '.join(METHODS)}")
    rated: list[MatchResult] = []
    two_seat: list[MatchResult] = []
    async for stored in iter_results(db, game_id):
        if len(stored.policies) == 2:
            keys = tuple(
                policy_key(n, k) for n, k in zip(stored.policies, stored.kinds, strict=True)
            )
            two_seat.append(MatchResult(keys, stored.rewards))
        rated_keys = stored_keys(stored)
        if rated_keys is not None:
            rated.append(MatchResult(rated_keys, stored.rewards))
    board = Leaderboard(game_id=game_id, method=method, matches=len(rated))
    board.seat_advantage = seat_advantage(two_seat)
    if not rated:
        board.notes.append("no rated matches yet (bots, checkpoints, people or agents)")
        return board
    if method == "openskill":
        board.rows = await asyncio.to_thread(openskill_rows, rated, game_id)
        board.notes.append(
            "openskill (Plackett-Luce) replayed over the stored results in the order they "
            "ended; the live ratings are Bradley-Terry (method bt)"
        )
        return board
    # A fit (and a bootstrap) reads every result: off the event loop, where a server's
    # matches run.
    table: BTTable = await asyncio.to_thread(
        lambda: table_of(PairCounts.of(rated), bootstrap=bootstrap, seed=seed)
    )
    board.rows = [{**row, "label": label(str(row["policy"]))} for row in table.rows()]
    board.notes += table.notes
    if bootstrap:
        board.notes.append(f"95% intervals from {bootstrap} bootstrap refits")
    return board
