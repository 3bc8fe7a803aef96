"""Who won: each seat's result and score from a match's final rewards.

This is the one definition; play, evaluation, results, tournaments, ratings, the league,
the agent protocol and the browser all ask it.

- **Result.** A seat *wins* when its final reward is above every other seat's, *draws*
  when it equals the best reward among the others, and *loses* when it is below it. With
  one seat (a puzzle) the sign of its reward decides: above 0 wins, 0 draws, below 0 loses.
- **Score.** The share of the other seats a seat beats, ties counting half:
  ``(beaten + tied / 2) / (N - 1)``, in [0, 1] (one seat: 1, 1/2 or 0 by its result). With
  two seats it is 1 for a win, 1/2 for a draw and 0 for a loss; with more it grades the
  places (first of three alone: 1; second: 1/2; last: 0).
- **Rank.** Competition ranks, 1 best, equal rewards sharing a rank (``1, 1, 3``).

For rewards (0.5, 0.5, -1) seats 0 and 1 both *draw* (they share the top), each with score
0.75, rank 1; seat 2 loses with score 0, rank 3.

A match that was aborted has no result (its rewards say nothing); a truncated match (cut at
the move cap) is scored from its rewards like any other, and its status tells it apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Result(StrEnum):
    """A seat's result in one match."""

    WIN = "win"
    DRAW = "draw"
    LOSS = "loss"


@dataclass(frozen=True)
class SeatOutcome:
    """One seat's result in one match (see the module docstring)."""

    result: Result
    score: float
    """The share of the other seats beaten, ties half: in [0, 1]."""
    rank: int
    """1 is best; equal rewards share a rank."""
    reward: float


def as_list(
    rewards: Sequence[float] | Mapping[int, float], seats: int | None = None
) -> list[float]:
    """Rewards by seat as a list (a mapping's missing seats count 0.0)."""
    if isinstance(rewards, Mapping):
        count = seats if seats is not None else (max(rewards, default=-1) + 1)
        return [float(rewards.get(seat, 0.0)) for seat in range(count)]
    return [float(r) for r in rewards]


def score_against(mine: float, theirs: float) -> float:
    """The score of a reward against one other: 1 above, 1/2 equal, 0 below."""
    return 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0


def result_of(seat: int, rewards: Sequence[float] | Mapping[int, float]) -> Result:
    """``seat``'s result (see the module docstring). Raises IndexError for a seat the
    rewards do not cover."""
    values = as_list(rewards)
    mine = values[seat]
    others = [r for i, r in enumerate(values) if i != seat]
    best = max(others) if others else 0.0
    if mine > best:
        return Result.WIN
    return Result.DRAW if mine == best else Result.LOSS


def score_of(seat: int, rewards: Sequence[float] | Mapping[int, float]) -> float:
    """``seat``'s score (see the module docstring)."""
    values = as_list(rewards)
    mine = values[seat]
    others = [r for i, r in enumerate(values) if i != seat]
    if not others:
        return score_against(mine, 0.0)
    return sum(score_against(mine, r) for r in others) / len(others)


def ranks(rewards: Sequence[float] | Mapping[int, float]) -> list[int]:
    """Competition ranks by seat (1 best; equal rewards tie: ``1, 1, 3``)."""
    values = as_list(rewards)
    return [1 + sum(1 for other in values if other > r) for r in values]


def seat_outcomes(rewards: Sequence[float] | Mapping[int, float]) -> list[SeatOutcome]:
    """Every seat's outcome, by seat."""
    values = as_list(rewards)
    places = ranks(values)
    return [
        SeatOutcome(result_of(s, values), score_of(s, values), places[s], values[s])
        for s in range(len(values))
    ]
