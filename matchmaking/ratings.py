"""Ratings: Bradley-Terry fitted to every rated result and kept live; openskill on demand.

The default rating is **Bradley-Terry** (Zermelo 1929; Bradley and Terry 1952): policy
``i`` has a strength ``exp(theta_i)`` and scores ``1 / (1 + exp(theta_j - theta_i))``
against ``j``. Every rated match is split into pairwise results (a tie counts half a win
each way, as ``games.outcome.score_against`` scores it) and identical results are
collapsed into counts (``PairCounts``), as Chatbot Arena does; the strengths are their
maximum-likelihood fit (Newton's method, ``fit``) with a weak prior: each policy also
plays ``prior`` virtual games, half won, against a virtual opponent of strength 1, which
keeps a policy that never lost (or never won) finite. Ratings are on the Elo scale (400
points per factor of 10 in odds) with a fixed anchor (the random bot at 1000), so numbers
from different runs and databases compare; ``sigma`` is a rating's standard error, from
the fit's observed information (Fisher), relative to the anchor.

Why not an online update (openskill, Elo): the rated policies are fixed (a checkpoint is
the exact weights of one step; learner seats are never rated), so their strengths do not
drift, and every result ever played is evidence about them. An online update with a
drift term forgets: on a draw-heavy game with a stream of new checkpoints (tic-tac-toe,
where the perfect bot can only win or draw), each newcomer enters at the prior, draws the
perfect bot and pulls it down. ``BTRatings`` keeps the batch fit current instead: after
each rated match it refits from the previous strengths (one or two Newton steps), so the
live view IS the batch fit of every result so far. ``python -m bench.ratings`` measures
the methods against each other.

Ties may also be modelled as Davidson (1970) ties (``ties="davidson"``: a draw has its own
probability ``nu sqrt(p_i p_j) / (p_i + p_j + nu sqrt(p_i p_j))``, ``nu`` fitted too).

``LiveRatings`` is openskill's Plackett-Luce model (any number of seats, ties), kept for
comparison (``arena leaderboard --method openskill`` replays the stored results through it)
and for tournaments' own tables.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from openskill.models import PlackettLuce

from arena.identity import PolicyRef
from games.outcome import ranks, score_against

ANCHOR_POLICY = PolicyRef.bot("random").key
"""The fixed point of Bradley-Terry ratings."""
ANCHOR_RATING = 1000.0
ELO_SCALE = 400.0 / math.log(10.0)
"""Elo points per unit of log-strength."""
DEFAULT_PRIOR = 1.0
"""Virtual games, half won, each policy plays against a virtual opponent of strength 1."""
DEFAULT_BOOTSTRAP = 0
"""Bootstrap resamples for a table's intervals (0: from the fit's standard errors)."""
NEWTON_TOLERANCE = 1e-9
"""A fit stops once no log-strength moves more than this in a step."""
MAX_NEWTON_STEPS = 200
TIE_PRIOR_VARIANCE = 25.0
"""Davidson ties: a Gaussian prior on ``log nu`` (mean 0, this variance) keeps the tie
parameter finite when a game never (or always) draws."""
UNRATED_SIGMA = 350.0
"""The uncertainty given to a policy that has no rating yet (Glicko's newcomer, 350)."""
Z95 = 1.959963984540054
"""The 97.5 % point of the standard normal: a 95 % interval is rating +- Z95 sigma."""

Ties = Literal["half", "davidson"]


@dataclass(frozen=True)
class Rating:
    """A rating: ``mu`` and its uncertainty ``sigma`` (openskill's mean and deviation, or a
    Bradley-Terry rating on the Elo scale and its standard error)."""

    mu: float
    sigma: float

    @property
    def ordinal(self) -> float:
        """The conservative estimate ``mu - 3 sigma``."""
        return self.mu - 3.0 * self.sigma

    @property
    def lower(self) -> float:
        """The low end of its 95 % interval, ``mu - 1.96 sigma``."""
        return self.mu - Z95 * self.sigma

    @property
    def upper(self) -> float:
        """The high end of its 95 % interval, ``mu + 1.96 sigma``."""
        return self.mu + Z95 * self.sigma


UNRATED = Rating(ANCHOR_RATING, UNRATED_SIGMA)
"""The rating a policy that never played a rated match is taken to have (for pairing)."""


def rated_seats(policies: Sequence[str], rewards: Sequence[float]) -> bool:
    """Whether a match with these seats can be rated: one reward per seat, at least two
    seats, no policy in two of them (a policy cannot gain on itself)."""
    return (
        len(policies) == len(rewards) and len(policies) >= 2 and len(set(policies)) == len(policies)
    )


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


# -- results, collapsed -----------------------------------------------------------------------


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


class PairCounts:
    """Every rated result so far, collapsed: for each pair of policies the games the first
    won, tied and lost against the second, and each policy's rated matches. What a
    Bradley-Terry fit reads; adding a match is O(seats^2)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.pairs: dict[tuple[int, int], list[float]] = {}
        """(i, j) with i < j -> [i's wins, ties, j's wins]."""
        self.games: Counter[str] = Counter()
        """Rated matches per policy."""
        self.matches = 0

    def _id(self, name: str) -> int:
        found = self.index.get(name)
        if found is None:
            found = self.index[name] = len(self.names)
            self.names.append(name)
        return found

    def add(self, policies: Sequence[str], rewards: Sequence[float], count: float = 1.0) -> bool:
        """Count one match (``count`` times); False (nothing counted) when it cannot be
        rated (``rated_seats``)."""
        if not rated_seats(policies, rewards):
            return False
        ids = [self._id(p) for p in policies]
        for x in range(len(ids)):
            for y in range(x + 1, len(ids)):
                i, j, ri, rj = ids[x], ids[y], rewards[x], rewards[y]
                if i > j:
                    i, j, ri, rj = j, i, rj, ri
                cell = self.pairs.setdefault((i, j), [0.0, 0.0, 0.0])
                cell[0 if ri > rj else 1 if ri == rj else 2] += count
        for p in policies:
            self.games[p] += int(count)
        self.matches += int(count)
        return True

    def add_pair(self, a: str, b: str, score: float, count: float) -> None:
        """Count ``count`` pairwise results of ``a`` against ``b`` (``score`` 1, 1/2 or 0)."""
        i, j = self._id(a), self._id(b)
        if i > j:
            i, j, score = j, i, 1.0 - score
        cell = self.pairs.setdefault((i, j), [0.0, 0.0, 0.0])
        cell[0 if score > 0.5 else 1 if score == 0.5 else 2] += count

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(i, j, counts)``: the pairs' indices and their [wins, ties, losses] rows."""
        if not self.pairs:
            empty = np.zeros(0, dtype=int)
            return empty, empty, np.zeros((0, 3))
        keys = np.array(list(self.pairs), dtype=int)
        return keys[:, 0], keys[:, 1], np.array(list(self.pairs.values()), dtype=float)

    def head_to_head(self, a: str, b: str) -> tuple[float, float]:
        """``(a's score against b, games)`` (score 0.5 when they never met)."""
        i, j = self.index.get(a), self.index.get(b)
        if i is None or j is None or i == j:
            return 0.5, 0.0
        cell = self.pairs.get((min(i, j), max(i, j)))
        if cell is None:
            return 0.5, 0.0
        wins, ties, losses = cell if i < j else (cell[2], cell[1], cell[0])
        games = wins + ties + losses
        return ((wins + ties / 2) / games if games else 0.5), games

    @classmethod
    def of(cls, results: Iterable[MatchResult]) -> PairCounts:
        """The counts of ``results`` (the matches that can be rated)."""
        counts = cls()
        for result in results:
            counts.add(result.policies, result.rewards)
        return counts


# -- the fit ----------------------------------------------------------------------------------


@dataclass
class Fit:
    """Maximum-likelihood strengths of a ``PairCounts``."""

    names: list[str]
    theta: np.ndarray
    """Log-strength per policy (``names`` order)."""
    covariance: np.ndarray | None
    """The inverse of the observed information (log-strengths), when asked for."""
    log_nu: float | None = None
    """Davidson ties: the log of the tie parameter."""
    steps: int = 0
    """Newton steps taken."""


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-_softplus(-x))


class _Problem:
    """One Bradley-Terry (or Davidson) likelihood: value, gradient and Hessian of its
    negative log, for Newton's method."""

    def __init__(self, counts: PairCounts, ties: Ties, prior: float) -> None:
        self.n = len(counts.names)
        self.i, self.j, rows = counts.arrays()
        self.wins, self.ties, self.losses = rows[:, 0], rows[:, 1], rows[:, 2]
        self.games = rows.sum(axis=1)
        self.davidson = ties == "davidson"
        self.prior = prior
        self.size = self.n + (1 if self.davidson else 0)

    def _split(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        return (x[: self.n], float(x[self.n])) if self.davidson else (x, 0.0)

    def value(self, x: np.ndarray) -> float:
        """The negative log-likelihood (with the priors)."""
        theta, c = self._split(x)
        a, b = theta[self.i], theta[self.j]
        if self.davidson:
            u = c + (a + b) / 2.0
            log_d = np.logaddexp(np.logaddexp(a, b), u)
            ll = float(np.sum(self.wins * a + self.losses * b + self.ties * u - self.games * log_d))
            ll -= c * c / (2.0 * TIE_PRIOR_VARIANCE)
        else:
            score = self.wins + self.ties / 2.0
            d = a - b
            ll = -float(np.sum(score * _softplus(-d) + (self.games - score) * _softplus(d)))
        ll -= self.prior / 2.0 * float(np.sum(_softplus(-theta) + _softplus(theta)))
        return -ll

    def derivatives(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gradient and Hessian of ``value`` at ``x``."""
        n, i, j = self.n, self.i, self.j
        theta, c = self._split(x)
        grad = np.zeros(self.size)
        hess = np.zeros((self.size, self.size))
        a, b = theta[i], theta[j]
        if self.davidson:
            u = c + (a + b) / 2.0
            log_d = np.logaddexp(np.logaddexp(a, b), u)
            pi, pj, pt = np.exp(a - log_d), np.exp(b - log_d), np.exp(u - log_d)
            ea, eb = pi + pt / 2.0, pj + pt / 2.0
            m = self.games
            # d(-LL): expected minus observed features (i wins: (1,0,0), a tie: (1/2,1/2,1),
            # j wins: (0,1,0)); the Hessian is the features' covariance times the games.
            np.add.at(grad, i, m * ea - (self.wins + self.ties / 2.0))
            np.add.at(grad, j, m * eb - (self.losses + self.ties / 2.0))
            grad[n] = float(np.sum(m * pt - self.ties)) + c / TIE_PRIOR_VARIANCE
            caa = m * (pi + pt / 4.0 - ea * ea)
            cbb = m * (pj + pt / 4.0 - eb * eb)
            cab = m * (pt / 4.0 - ea * eb)
            cac = m * (pt / 2.0 - ea * pt)
            cbc = m * (pt / 2.0 - eb * pt)
            np.add.at(hess, (i, i), caa)
            np.add.at(hess, (j, j), cbb)
            np.add.at(hess, (i, j), cab)
            np.add.at(hess, (j, i), cab)
            column = np.zeros(n)
            np.add.at(column, i, cac)
            np.add.at(column, j, cbc)
            hess[:n, n] += column
            hess[n, :n] += column
            hess[n, n] += float(np.sum(m * (pt - pt * pt))) + 1.0 / TIE_PRIOR_VARIANCE
        else:
            p = _sigmoid(a - b)
            residual = self.games * p - (self.wins + self.ties / 2.0)
            np.add.at(grad, i, residual)
            np.add.at(grad, j, -residual)
            h = self.games * p * (1.0 - p)
            np.add.at(hess, (i, i), h)
            np.add.at(hess, (j, j), h)
            np.add.at(hess, (i, j), -h)
            np.add.at(hess, (j, i), -h)
        p0 = _sigmoid(theta)
        grad[:n] += self.prior * (p0 - 0.5)
        hess[np.arange(n), np.arange(n)] += self.prior * p0 * (1.0 - p0)
        if self.prior <= 0.0:  # no prior: the mean log-strength is free; hold it still
            hess[:n, :n] += 1.0 / n
        return grad, hess


def fit(
    counts: PairCounts,
    *,
    ties: Ties = "half",
    prior: float = DEFAULT_PRIOR,
    start: Mapping[str, float] | None = None,
    start_log_nu: float | None = None,
    covariance: bool = False,
) -> Fit:
    """The maximum-likelihood log-strengths of ``counts`` (see the module docstring), by
    Newton's method with a backtracking line search, from ``start`` (log-strengths of a
    previous fit: a few steps then suffice) or from zero. ``covariance``: also invert the
    observed information for standard errors. Raises ValueError for an unknown ``ties``."""
    if ties not in ("half", "davidson"):
        raise ValueError(f"ties must be 'half' or 'davidson', not {ties!r}")
    problem = _Problem(counts, ties, prior)
    n = problem.n
    x = np.zeros(problem.size)
    if start:
        for k, name in enumerate(counts.names):
            x[k] = start.get(name, 0.0)
    if problem.davidson and start_log_nu is not None:
        x[n] = start_log_nu
    steps = 0
    value = problem.value(x) if n else 0.0
    hess = np.eye(problem.size)
    while n and steps < MAX_NEWTON_STEPS:
        grad, hess = problem.derivatives(x)
        try:
            direction = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            direction = np.linalg.lstsq(hess, grad, rcond=None)[0]
        size = 1.0
        while True:
            candidate = x - size * direction
            new_value = problem.value(candidate)
            if new_value <= value + 1e-12 * max(1.0, abs(value)) or size < 1e-6:
                break
            size /= 2.0
        moved = float(np.max(np.abs(candidate - x))) if candidate.size else 0.0
        x, value = candidate, new_value
        steps += 1
        if moved < NEWTON_TOLERANCE:
            break
    cov = None
    if covariance and n:
        _grad, hess = problem.derivatives(x)
        try:
            full = np.linalg.inv(hess)
        except np.linalg.LinAlgError:
            full = np.linalg.pinv(hess)
        cov = full[:n, :n]
    theta = x[:n].copy()
    return Fit(
        names=list(counts.names),
        theta=theta,
        covariance=cov,
        log_nu=float(x[n]) if problem.davidson and n else None,
        steps=steps,
    )


def elo_ratings(
    result: Fit, anchor: str = ANCHOR_POLICY, anchor_rating: float = ANCHOR_RATING
) -> tuple[dict[str, Rating], bool]:
    """A fit on the Elo scale: each policy's rating and standard error (relative to the
    anchor, whose own is 0), and whether the anchor is among them (else the mean rating is
    ``anchor_rating``)."""
    names, theta = result.names, result.theta
    n = len(names)
    if not n:
        return {}, False
    pinned = anchor in names
    if pinned:
        a = names.index(anchor)
        centre = theta[a]
        weights = np.zeros(n)
        weights[a] = 1.0
    else:
        centre = float(theta.mean())
        weights = np.full(n, 1.0 / n)
    out: dict[str, Rating] = {}
    cov = result.covariance
    for k, name in enumerate(names):
        sigma = 0.0
        if cov is not None:
            contrast = -weights.copy()
            contrast[k] += 1.0
            sigma = ELO_SCALE * math.sqrt(max(0.0, float(contrast @ cov @ contrast)))
        out[name] = Rating(anchor_rating + ELO_SCALE * float(theta[k] - centre), sigma)
    return out, pinned


class BTRatings:
    """Bradley-Terry ratings kept live (see the module docstring): the counts of every
    rated result so far, and their fit, refreshed after each match from the previous
    strengths. ``ratings()`` is at every moment the batch fit of ``counts``."""

    def __init__(
        self,
        *,
        ties: Ties = "half",
        prior: float = DEFAULT_PRIOR,
        anchor: str = ANCHOR_POLICY,
        anchor_rating: float = ANCHOR_RATING,
        errors: bool = True,
    ) -> None:
        if ties not in ("half", "davidson"):
            raise ValueError(f"ties must be 'half' or 'davidson', not {ties!r}")
        self.ties: Ties = ties
        self.prior = prior
        self.anchor = anchor
        self.anchor_rating = anchor_rating
        self.errors = errors
        """Compute standard errors (an N x N inverse per refit)."""
        self.counts = PairCounts()
        self._theta: dict[str, float] = {}
        self._log_nu: float | None = None
        self._ratings: dict[str, Rating] = {}
        self._stale = False

    def add(self, policies: Sequence[str], rewards: Sequence[float]) -> bool:
        """Count one match without refitting yet; False when it cannot be rated."""
        added = self.counts.add(policies, rewards)
        self._stale = self._stale or added
        return added

    def reset(self, counts: PairCounts) -> None:
        """Replace the counts (a full recount) and refit, from the current strengths."""
        self.counts = counts
        self._stale = True
        self.refit()

    def refit(self) -> None:
        """Fit the counts again, from the previous strengths."""
        if not self._stale:
            return
        result = fit(
            self.counts,
            ties=self.ties,
            prior=self.prior,
            start=self._theta,
            start_log_nu=self._log_nu,
            covariance=self.errors,
        )
        self._theta = {n: float(t) for n, t in zip(result.names, result.theta, strict=True)}
        self._log_nu = result.log_nu
        self._ratings, _ = elo_ratings(result, self.anchor, self.anchor_rating)
        self._stale = False

    def update(self, policies: Sequence[str], rewards: Sequence[float]) -> dict[str, Rating]:
        """Count one match and refit; every policy's rating (a fit moves them all)."""
        self.add(policies, rewards)
        self.refit()
        return dict(self._ratings)

    def ratings(self) -> dict[str, Rating]:
        """Every rated policy's rating (refitted first if needed)."""
        self.refit()
        return dict(self._ratings)

    def table(self) -> list[tuple[str, Rating]]:
        """The rated policies, best rating first."""
        return sorted(self.ratings().items(), key=lambda row: (-row[1].mu, row[0]))


# -- a report: Bradley-Terry with intervals ---------------------------------------------------


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
    """Fit Bradley-Terry ratings (see the module docstring) with 95% intervals: from the
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
                resampled._id(name)
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
