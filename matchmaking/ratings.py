"""Ratings: openskill live, Bradley-Terry with bootstrap intervals on demand.

Live ratings use openskill's Plackett-Luce model (any number of seats, ties): every rated
match updates the ratings of its seats' policies at once. A rating is ``mu`` and ``sigma``;
the leaderboard sorts by the conservative ``ordinal = mu - 3 sigma``.

Reports use the Bradley-Terry model fitted to stored results, as Chatbot Arena does: each
match is split into pairwise results (a tie counts half a win each way), identical rows are
collapsed before fitting, the fit is repeated on multinomial resamples of those rows for 95%
intervals, and ranks come from interval overlap (a policy's rank is one plus the number of
policies whose lower bound is above its upper bound). Ratings are on the Elo scale (400 per
factor of 10 in odds) with a fixed anchor (the random bot at 1000 by default), so numbers
from different runs and databases can be compared.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from openskill.models import PlackettLuce

from arena.identity import PolicyRef
from games.outcome import ranks, score_against

ANCHOR_POLICY = PolicyRef.bot("random").key
"""The fixed point of Bradley-Terry ratings."""
ANCHOR_RATING = 1000.0
ELO_SCALE = 400.0 / math.log(10.0)
"""Elo points per unit of log-strength."""
DEFAULT_BOOTSTRAP = 200
"""Bootstrap resamples for the intervals (Chatbot Arena uses 1000; 200 keeps the CLI quick
and the bounds within about a point of it)."""
MAX_BT_ITERATIONS = 10_000
BT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Rating:
    """An openskill rating."""

    mu: float
    sigma: float

    @property
    def ordinal(self) -> float:
        """The conservative estimate the leaderboard sorts by: ``mu - 3 sigma``."""
        return self.mu - 3.0 * self.sigma


class LiveRatings:
    """openskill Plackett-Luce ratings per game and policy, updated match by match."""

    def __init__(self, model: PlackettLuce | None = None) -> None:
        self.model = model if model is not None else PlackettLuce()
        self._ratings: dict[tuple[str, str], Rating] = {}

    def get(self, game_id: str, policy: str) -> Rating:
        """The rating (the model's prior for a policy never rated)."""
        found = self._ratings.get((game_id, policy))
        if found is not None:
            return found
        prior = self.model.rating()
        return Rating(float(prior.mu), float(prior.sigma))

    def set(self, game_id: str, policy: str, rating: Rating) -> None:
        """Load a stored rating."""
        self._ratings[(game_id, policy)] = rating

    def update(
        self, game_id: str, policies: Sequence[str], rewards: Sequence[float]
    ) -> dict[str, Rating]:
        """Rate one finished match: seat i played ``policies[i]`` and got ``rewards[i]``.

        A policy in several seats (self-play) is not rated (it cannot gain on itself);
        returns the new rating of each rated policy. Raises ValueError when the lists
        differ in length or hold fewer than two seats."""
        if len(policies) != len(rewards):
            raise ValueError("one reward per seat")
        if len(policies) < 2:
            raise ValueError("a rated match needs at least two seats")
        if len(set(policies)) != len(policies):
            return {}
        teams = []
        for policy in policies:
            current = self.get(game_id, policy)
            teams.append([self.model.rating(mu=current.mu, sigma=current.sigma)])
        rated = self.model.rate(teams, ranks=[float(r) for r in ranks(rewards)])
        out = {}
        for policy, team in zip(policies, rated, strict=True):
            new = Rating(float(team[0].mu), float(team[0].sigma))
            self._ratings[(game_id, policy)] = new
            out[policy] = new
        return out

    def table(self, game_id: str) -> list[tuple[str, Rating]]:
        """The game's rated policies, best ordinal first."""
        rows = [(p, r) for (g, p), r in self._ratings.items() if g == game_id]
        return sorted(rows, key=lambda row: -row[1].ordinal)


# -- Bradley-Terry ------------------------------------------------------------------------


@dataclass(frozen=True)
class MatchResult:
    """One stored match, as far as ratings care: who sat where, and the rewards."""

    policies: tuple[str, ...]
    rewards: tuple[float, ...]


def pairwise(results: Iterable[MatchResult]) -> Counter[tuple[str, str, float]]:
    """Each match split into pairwise outcomes, collapsed into counts.

    Keys are ``(a, b, score)`` with ``a < b`` and ``score`` the share of the win that went
    to ``a`` (1, 0.5 or 0). Pairs of the same policy (self-play) are skipped."""
    rows: Counter[tuple[str, str, float]] = Counter()
    for result in results:
        seats = list(zip(result.policies, result.rewards, strict=True))
        for i in range(len(seats)):
            for j in range(i + 1, len(seats)):
                (a, ra), (b, rb) = seats[i], seats[j]
                if a == b:
                    continue
                score = score_against(ra, rb)
                if a > b:
                    a, b, score = b, a, 1.0 - score
                rows[(a, b, score)] += 1
    return rows


def _fit(
    index: Mapping[str, int],
    rows: Sequence[tuple[int, int, float]],
    counts: np.ndarray,
    prior: float,
) -> np.ndarray:
    """Log-strengths by the MM algorithm (Hunter 2004), ties as half wins.

    ``prior`` adds that many virtual games, half won, between each policy and a virtual
    opponent of strength 1: it keeps a policy that never won (or never lost) finite."""
    n = len(index)
    wins = np.zeros((n, n))
    for (i, j, score), count in zip(rows, counts, strict=True):
        wins[i, j] += count * score
        wins[j, i] += count * (1.0 - score)
    games = wins + wins.T
    total_wins = wins.sum(axis=1) + prior / 2.0
    strength = np.ones(n)
    for _ in range(MAX_BT_ITERATIONS):
        denominator = (games / (strength[:, None] + strength[None, :])).sum(axis=1)
        denominator += prior / (strength + 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            updated = np.where(denominator > 0, total_wins / denominator, strength)
        updated = np.maximum(updated, 1e-300)
        updated /= math.exp(np.log(updated).mean())
        if np.max(np.abs(np.log(updated) - np.log(strength))) < BT_TOLERANCE:
            strength = updated
            break
        strength = updated
    return np.log(strength)


@dataclass
class BTTable:
    """A Bradley-Terry fit: Elo-scale ratings, 95% intervals, ranks, games per policy."""

    ratings: dict[str, float]
    lower: dict[str, float]
    upper: dict[str, float]
    rank: dict[str, int]
    games: dict[str, int]
    anchor: str | None
    bootstrap: int
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, object]]:
        """One dict per policy, best first (JSON-ready)."""
        return [
            {
                "policy": p,
                "rating": round(self.ratings[p], 1),
                "lower": round(self.lower[p], 1),
                "upper": round(self.upper[p], 1),
                "rank": self.rank[p],
                "games": self.games[p],
            }
            for p in sorted(self.ratings, key=lambda p: -self.ratings[p])
        ]


def bradley_terry(
    results: Iterable[MatchResult],
    *,
    anchor: str = ANCHOR_POLICY,
    anchor_rating: float = ANCHOR_RATING,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    prior: float = 1.0,
    seed: int = 0,
) -> BTTable:
    """Fit Bradley-Terry ratings with bootstrap intervals (see the module docstring).

    The ``anchor`` policy is pinned at ``anchor_rating`` when it played; otherwise the mean
    rating is ``anchor_rating`` (noted in ``notes``). Raises ValueError when no pairwise
    result exists (only self-play, or nothing stored)."""
    counted = pairwise(results)
    if not counted:
        raise ValueError("no results between different policies to rate")
    names = sorted({p for a, b, _ in counted for p in (a, b)})
    index = {name: i for i, name in enumerate(names)}
    rows = [(index[a], index[b], score) for a, b, score in counted]
    counts = np.array([counted[key] for key in counted], dtype=float)
    games = Counter[str]()
    for (a, b, _), count in counted.items():
        games[a] += count
        games[b] += count
    notes = []
    pinned = anchor in index

    def elo(log_strength: np.ndarray) -> np.ndarray:
        centre = log_strength[index[anchor]] if pinned else log_strength.mean()
        return anchor_rating + ELO_SCALE * (log_strength - centre)

    point = elo(_fit(index, rows, counts, prior))
    if not pinned:
        notes.append(f"{anchor} played no rated match: the mean rating is {anchor_rating:g}")
    rng = np.random.default_rng(seed)
    total = int(counts.sum())
    samples = []
    probabilities = counts / counts.sum()
    for _ in range(bootstrap):
        resampled = rng.multinomial(total, probabilities).astype(float)
        samples.append(elo(_fit(index, rows, resampled, prior)))
    if samples:
        stacked = np.stack(samples)
        low, high = np.percentile(stacked, [2.5, 97.5], axis=0)
    else:
        low = high = point
    lower = {n: float(low[i]) for n, i in index.items()}
    upper = {n: float(high[i]) for n, i in index.items()}
    rank = {n: 1 + sum(1 for m in names if lower[m] > upper[n]) for n in names}
    return BTTable(
        ratings={n: float(point[i]) for n, i in index.items()},
        lower=lower,
        upper=upper,
        rank=rank,
        games=dict(games),
        anchor=anchor if pinned else None,
        bootstrap=bootstrap,
        notes=notes,
    )


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
