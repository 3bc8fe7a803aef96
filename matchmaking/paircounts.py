"""Rated results, collapsed: which matches can be rated, and every rated result as counts.

Every rated match is split into pairwise results (a tie counts half a win each way, as
``games.outcome.score_against`` scores it) and identical results are collapsed into counts
(``PairCounts``), as Chatbot Arena does: what a Bradley-Terry fit
(``matchmaking.btfit``) reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from games.outcome import score_against


def rated_seats(policies: Sequence[str], rewards: Sequence[float]) -> bool:
    """Whether a match with these seats can be rated: one reward per seat, at least two
    seats, no policy in two of them (a policy cannot gain on itself)."""
    return (
        len(policies) == len(rewards) and len(policies) >= 2 and len(set(policies)) == len(policies)
    )


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

    def id_of(self, name: str) -> int:
        """The index of ``name`` (in ``names``), added when new."""
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
        ids = [self.id_of(p) for p in policies]
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
        i, j = self.id_of(a), self.id_of(b)
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
