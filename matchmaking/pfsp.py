"""Prioritized fictitious self-play: whom the learner should play next.

AlphaStar's PFSP weights each opponent in a pool by how hard it is for the learner:
``f_hard(x) = (1 - x)^p`` (mostly the opponents it still loses to) or
``f_var(x) = x (1 - x)`` (the ones it beats about half the time), where ``x`` is the
learner's score against that opponent (win 1, draw 1/2, loss 0). Scores are tracked per
opponent as an exponential moving average of results, starting from a prior.

``CollapseDetector`` watches self-play for the failure modes that show it has turned on
itself: one seat winning (nearly) every game, or the invalid-move rate jumping well above
its recent level.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from games.outcome import score_against

Weighting = Literal["hard", "var", "uniform"]


def pfsp_weight(score: float, weighting: Weighting = "hard", p: float = 2.0) -> float:
    """PFSP's weight of an opponent the learner scores ``score`` against (in [0, 1]).

    Raises ValueError for a score outside [0, 1] or an unknown weighting."""
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"score must be in [0, 1], got {score}")
    if weighting == "hard":
        return (1.0 - score) ** p
    if weighting == "var":
        return score * (1.0 - score)
    if weighting == "uniform":
        return 1.0
    raise ValueError(f"unknown weighting {weighting!r}; choose hard, var or uniform")


def pfsp_probabilities(
    scores: Mapping[str, float],
    weighting: Weighting = "hard",
    p: float = 2.0,
    floor: float = 0.02,
) -> dict[str, float]:
    """Sampling probabilities over opponents from the learner's scores against them.

    Each weight is at least ``floor`` (relative to the largest), so an opponent the learner
    beats every time is still revisited now and then (forgetting is what PFSP guards
    against). Uniform when every weight is zero."""
    if not scores:
        return {}
    weights = {k: pfsp_weight(v, weighting, p) for k, v in scores.items()}
    top = max(weights.values())
    if top <= 0:
        return {k: 1.0 / len(weights) for k in weights}
    weights = {k: max(w, floor * top) for k, w in weights.items()}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


@dataclass
class ScoreTracker:
    """The learner's score against each opponent: an EMA of results (1, 1/2, 0)."""

    decay: float = 0.9
    """Weight the old average keeps at each new result."""
    prior: float = 0.5
    """The score of an opponent not yet played."""
    scores: dict[str, float] = field(default_factory=dict)
    games: dict[str, int] = field(default_factory=dict)

    def record(self, opponent: str, score: float) -> None:
        """Add one result against ``opponent``."""
        old = self.scores.get(opponent, self.prior)
        self.scores[opponent] = self.decay * old + (1.0 - self.decay) * score
        self.games[opponent] = self.games.get(opponent, 0) + 1

    def score(self, opponent: str) -> float:
        """The current estimate (the prior before any game)."""
        return self.scores.get(opponent, self.prior)


def sample_opponents(
    probabilities: Mapping[str, float], count: int, rng: random.Random
) -> list[str]:
    """``count`` opponents drawn from ``probabilities`` (with replacement)."""
    if count <= 0 or not probabilities:
        return []
    names = list(probabilities)
    return rng.choices(names, weights=[probabilities[n] for n in names], k=count)


@dataclass
class CollapseDetector:
    """Flags self-play collapse from each step's self-play figures.

    Collapse is declared when, over the last ``window`` steps, the first seat's win rate is
    pinned near 0 or 1 (above ``pinned`` or below ``1 - pinned``: one side wins every
    game), or when a step's invalid-move rate per game is above ``spike_factor`` times the
    average of the steps before it and above ``min_invalid``.
    """

    window: int = 5
    pinned: float = 0.95
    spike_factor: float = 3.0
    min_invalid: float = 0.1
    seat0_wins: deque[float] = field(default_factory=lambda: deque(maxlen=50))
    invalid: deque[float] = field(default_factory=lambda: deque(maxlen=50))

    def update(self, seat0_win_rate: float | None, invalid_per_game: float | None) -> str | None:
        """Add one step; the reason when this step shows collapse, else None."""
        reason = None
        if invalid_per_game is not None:
            recent = list(self.invalid)[-self.window :]
            if len(recent) >= self.window:
                base = sum(recent) / len(recent)
                spike = invalid_per_game > self.min_invalid
                if spike and invalid_per_game > self.spike_factor * max(base, 1e-9):
                    reason = f"invalid moves jumped to {invalid_per_game:.2f}/game ({base:.2f})"
            self.invalid.append(invalid_per_game)
        if seat0_win_rate is not None:
            self.seat0_wins.append(seat0_win_rate)
            recent = list(self.seat0_wins)[-self.window :]
            if len(recent) >= self.window:
                mean = sum(recent) / len(recent)
                if mean >= self.pinned or mean <= 1.0 - self.pinned:
                    reason = reason or f"one seat wins every self-play game ({mean:.2f})"
        return reason


def seat0_win_rate(rewards_by_seat: Sequence[Sequence[float]]) -> float | None:
    """Seat 0's win share (draws half) over self-play games given as per-game rewards."""
    decided = [r for r in rewards_by_seat if len(r) == 2]
    if not decided:
        return None
    score = sum(score_against(r[0], r[1]) for r in decided)
    return score / len(decided)
