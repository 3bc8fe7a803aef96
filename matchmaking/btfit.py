"""The Bradley-Terry fit of the rated results, and the ratings kept live as that fit.

Bradley-Terry (Zermelo 1929; Bradley and Terry 1952): policy ``i`` has a strength
``exp(theta_i)`` and scores ``1 / (1 + exp(theta_j - theta_i))`` against ``j``. The
strengths are the maximum-likelihood fit (Newton's method, ``fit``) of the collapsed
results (``matchmaking.paircounts.PairCounts``) with a weak prior: each policy also plays
``prior`` virtual games, half won, against a virtual opponent of strength 1, which keeps a
policy that never lost (or never won) finite. ``elo_ratings`` puts a fit on the Elo scale
with its anchor (``matchmaking.ratings``); ``sigma`` is a rating's standard error, from the
fit's observed information (Fisher), relative to the anchor.

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from matchmaking.paircounts import PairCounts
from matchmaking.ratings import ANCHOR_POLICY, ANCHOR_RATING, ELO_SCALE, Rating

DEFAULT_PRIOR = 1.0
"""Virtual games, half won, each policy plays against a virtual opponent of strength 1."""
NEWTON_TOLERANCE = 1e-9
"""A fit stops once no log-strength moves more than this in a step."""
MAX_NEWTON_STEPS = 200
TIE_PRIOR_VARIANCE = 25.0
"""Davidson ties: a Gaussian prior on ``log nu`` (mean 0, this variance) keeps the tie
parameter finite when a game never (or always) draws."""

Ties = Literal["half", "davidson"]


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
