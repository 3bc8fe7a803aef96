"""Prioritized fictitious self-play: whom the learner should play next.

AlphaStar's PFSP weights each opponent in a pool by how hard it is for the learner:
``f_hard(x) = (1 - x)^p`` (mostly the opponents it still loses to) or
``f_var(x) = x (1 - x)`` (the ones it beats about half the time), where ``x`` is the
learner's score against that opponent (win 1, draw 1/2, loss 0). Scores are tracked per
opponent as an exponential moving average of results, starting from a prior.

``CollapseDetector`` watches training for the signs that the policy has collapsed: its
entropy falling to a small share of where it started, or its invalid-move rate rising well
above its earlier level for several steps.
"""

from __future__ import annotations

import random
import statistics
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
    """Flags the collapse of the learner's policy from each step's figures.

    Two signs, each judged over the last ``window`` steps, so that one step's blip (a few
    invalid moves among 64 games) is not taken for a trend:

    - entropy: the sampled policy's entropy per action token (``optim/entropy``) has fallen
      below ``entropy_fraction`` of its mean over the run's first ``window`` steps: the
      policy has turned (nearly) deterministic, and self-play no longer explores;
    - invalid moves: the window's median invalid-move rate per game is above
      ``min_invalid`` and above ``spike_factor`` times its mean over the steps before.

    One seat winning nearly every self-play game is no sign of collapse: in a game with a
    first-mover edge (tic-tac-toe) a policy that learns to attack wins most of its games
    against itself from the first seat (``league/self_play_seat0_score`` shows it).
    """

    window: int = 10
    entropy_fraction: float = 0.25
    spike_factor: float = 3.0
    min_invalid: float = 0.1
    entropy: deque[float] = field(default_factory=lambda: deque(maxlen=200))
    invalid: deque[float] = field(default_factory=lambda: deque(maxlen=200))
    entropy_start: float | None = None
    """The mean entropy of the run's first ``window`` steps (None until then)."""

    def update(self, entropy: float | None, invalid_per_game: float | None) -> str | None:
        """Add one step's entropy per action token and invalid moves per game (None: not
        measured at this step); the reason when the window shows collapse, else None."""
        reason = None
        if invalid_per_game is not None:
            self.invalid.append(invalid_per_game)
            history = list(self.invalid)
            recent, before = history[-self.window :], history[: -self.window]
            if len(recent) == self.window and len(before) >= self.window:
                level, base = statistics.median(recent), sum(before) / len(before)
                if level > self.min_invalid and level > self.spike_factor * base:
                    reason = f"invalid moves rose to {level:.2f}/game (from {base:.2f})"
        if entropy is not None:
            self.entropy.append(entropy)
            recent = list(self.entropy)[-self.window :]
            if self.entropy_start is None:
                if len(self.entropy) == self.window:
                    self.entropy_start = sum(recent) / len(recent)
            else:
                level = sum(recent) / len(recent)
                if level < self.entropy_fraction * self.entropy_start:
                    reason = reason or (
                        f"the policy's entropy fell to {level:.3f} per token "
                        f"(from {self.entropy_start:.3f})"
                    )
        return reason


def seat0_win_rate(rewards_by_seat: Sequence[Sequence[float]]) -> float | None:
    """Seat 0's win share (draws half) over self-play games given as per-game rewards."""
    decided = [r for r in rewards_by_seat if len(r) == 2]
    if not decided:
        return None
    score = sum(score_against(r[0], r[1]) for r in decided)
    return score / len(decided)
