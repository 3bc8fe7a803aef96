"""A Bradley-Terry ratings table with 95 % intervals: what leaderboards and tournaments show.

The ratings are the fit of ``matchmaking.btfit`` on the Elo scale of
``matchmaking.ratings``; the intervals come from the fit's standard errors, or with
``bootstrap`` from that many refits on multinomial resamples of the collapsed results
(Chatbot Arena's method). Ranks read top to bottom: 1 plus the number of policies rated
strictly higher.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from matchmaking.btfit import DEFAULT_PRIOR, Ties, elo_ratings, fit
from matchmaking.paircounts import MatchResult, PairCounts
from matchmaking.ratings import ANCHOR_POLICY, ANCHOR_RATING

DEFAULT_BOOTSTRAP = 0
"""Bootstrap resamples for a table's intervals (0: from the fit's standard errors)."""


@dataclass
class BTTable:
    """A Bradley-Terry fit: Elo-scale ratings, 95% intervals, ranks, games per policy."""

    ratings: dict[str, float]
    lower: dict[str, float]
    upper: dict[str, float]
    rank: dict[str, int]
    """1 plus the number of policies rated strictly higher: it reads top to bottom."""
    games: dict[str, int]
    anchor: str | None
    bootstrap: int
    """Resamples behind the intervals (0: the fit's standard errors)."""
    sigma: dict[str, float] = field(default_factory=dict)
    """Each rating's standard error (from the fit)."""
    notes: list[str] = field(default_factory=list)

    def order(self) -> list[str]:
        """The policies, best first (ties by name)."""
        return sorted(self.ratings, key=lambda p: (-self.ratings[p], p))

    def rows(self) -> list[dict[str, object]]:
        """One dict per policy, best first (JSON-ready, unrounded)."""
        return [
            {
                "policy": p,
                "rating": self.ratings[p],
                "lower": self.lower[p],
                "upper": self.upper[p],
                "sigma": self.sigma.get(p, 0.0),
                "rank": self.rank[p],
                "games": self.games[p],
            }
            for p in self.order()
        ]


def competition_ranks(values: Mapping[str, float]) -> dict[str, int]:
    """1 plus the number of others with a strictly higher value (``1, 2, 2, 4``)."""
    ordered = sorted(values.values(), reverse=True)
    out = {}
    for name, value in values.items():
        out[name] = 1 + sum(1 for v in ordered if v > value)
    return out


def bradley_terry(
    results: Iterable[MatchResult],
    *,
    anchor: str = ANCHOR_POLICY,
    anchor_rating: float = ANCHOR_RATING,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    prior: float = DEFAULT_PRIOR,
    ties: Ties = "half",
    seed: int = 0,
) -> BTTable:
    """Fit Bradley-Terry ratings (``matchmaking.btfit``) with 95% intervals: from the
    fit's standard errors, or with ``bootstrap`` > 0 the 2.5 and 97.5 percentiles of that
    many refits on multinomial resamples of the collapsed results (Chatbot Arena's method).

    The ``anchor`` policy is pinned at ``anchor_rating`` when it played; otherwise the mean
    rating is ``anchor_rating`` (noted in ``notes``). Raises ValueError when no pairwise
    result exists (only self-play, or nothing stored)."""
    counts = PairCounts.of(results)
    if not counts.pairs:
        raise ValueError("no results between different policies to rate")
    return table_of(
        counts,
        anchor=anchor,
        anchor_rating=anchor_rating,
        bootstrap=bootstrap,
        prior=prior,
        ties=ties,
        seed=seed,
    )


def table_of(
    counts: PairCounts,
    *,
    anchor: str = ANCHOR_POLICY,
    anchor_rating: float = ANCHOR_RATING,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    prior: float = DEFAULT_PRIOR,
    ties: Ties = "half",
    seed: int = 0,
) -> BTTable:
    """``bradley_terry`` on counts already collapsed. Raises ValueError without pairs."""
    if not counts.pairs:
        raise ValueError("no results between different policies to rate")
    point = fit(counts, ties=ties, prior=prior, covariance=True)
    ratings, pinned = elo_ratings(point, anchor, anchor_rating)
    notes = []
    if not pinned:
        notes.append(f"{anchor} played no rated match: the mean rating is {anchor_rating:g}")
    names = point.names
    lower = {n: r.lower for n, r in ratings.items()}
    upper = {n: r.upper for n, r in ratings.items()}
    if bootstrap > 0:
        keys = [(i, j, k) for (i, j), cell in counts.pairs.items() for k in range(3) if cell[k]]
        weights = np.array([counts.pairs[(i, j)][k] for i, j, k in keys])
        rng = np.random.default_rng(seed)
        total = round(float(weights.sum()))
        start = {n: float(t) for n, t in zip(names, point.theta, strict=True)}
        samples = []
        for _ in range(bootstrap):
            drawn = rng.multinomial(total, weights / weights.sum())
            resampled = PairCounts()
            for name in names:
                resampled.id_of(name)
            for (i, j, k), count in zip(keys, drawn, strict=True):
                if count:
                    resampled.pairs.setdefault((i, j), [0.0, 0.0, 0.0])[k] += float(count)
            refit = fit(resampled, ties=ties, prior=prior, start=start)
            sample, _ = elo_ratings(refit, anchor, anchor_rating)
            samples.append([sample[n].mu for n in names])
        low, high = np.percentile(np.array(samples), [2.5, 97.5], axis=0)
        lower = {n: float(low[k]) for k, n in enumerate(names)}
        upper = {n: float(high[k]) for k, n in enumerate(names)}
    points = {n: r.mu for n, r in ratings.items()}
    return BTTable(
        ratings=points,
        lower=lower,
        upper=upper,
        rank=competition_ranks(points),
        games=dict(counts.games),
        anchor=anchor if pinned else None,
        bootstrap=bootstrap,
        sigma={n: r.sigma for n, r in ratings.items()},
        notes=notes,
    )
