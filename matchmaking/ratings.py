"""A rating, and the scale ratings are on.

A ``Rating`` is a value and its uncertainty: by default a Bradley-Terry rating on the Elo
scale (400 points per factor of 10 in odds) with a fixed anchor (the random bot at 1000),
so numbers from different runs and databases compare, and its standard error relative to
the anchor; or openskill's mean and deviation.

Where the rest lives:

- ``matchmaking.paircounts``: which matches can be rated, and every rated result
  collapsed into pairwise counts (``PairCounts``);
- ``matchmaking.btfit``: the Bradley-Terry fit of those counts (``fit``), and the ratings
  kept live as the batch fit of every result so far (``BTRatings``);
- ``matchmaking.bttable``: a report of the fit with 95 % intervals (``BTTable``), from the
  fit's standard errors or bootstrapped;
- ``matchmaking.openskill_ratings``: openskill's Plackett-Luce model (``LiveRatings``),
  kept for comparison and for tournaments' own tables;
- ``matchmaking.live``: the live ratings kept from the event bus and stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from arena.identity import PolicyRef

ANCHOR_POLICY = PolicyRef.bot("random").key
"""The fixed point of Bradley-Terry ratings."""
ANCHOR_RATING = 1000.0
ELO_SCALE = 400.0 / math.log(10.0)
"""Elo points per unit of log-strength."""
UNRATED_SIGMA = 350.0
"""The uncertainty given to a policy that has no rating yet (Glicko's newcomer, 350)."""
Z95 = 1.959963984540054
"""The 97.5 % point of the standard normal: a 95 % interval is rating +- Z95 sigma."""


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
