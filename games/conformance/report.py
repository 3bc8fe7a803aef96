"""What the conformance kit reports: the checks, their outcomes and one game's report."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

CHECKS = (
    "builds",
    "seeded",
    "interleaved",
    "hidden",
    "views",
    "legal_moves",
    "invalid_moves",
    "ends",
    "rewards",
    "pickles",
)
"""Every check, in the order they are reported (cheap ones run first)."""

DEFAULT_EPISODES = 2
"""Random episodes per game (seeds ``seed``, ``seed + 1``, ...)."""
DEFAULT_TIME_BUDGET_S = 60.0
"""CPU time (this process's) one game's checks may take; checks not finished in time fail."""

UNCHECKED = "not checked within the"
"""How the reason of a check the time budget cut short begins."""


class CheckStatus(StrEnum):
    """The outcome of one check."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome, and why."""

    name: str
    status: CheckStatus
    detail: str = ""


@dataclass
class Report:
    """Every check of one game."""

    game_id: str
    num_players: int
    episodes: int
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    legal_moves: bool = False
    """The random bot can play it: moves were listed on every turn of the random
    episodes, and every listed move tried was accepted."""
    bots: list[str] = field(default_factory=list)
    """Bots that can play it (``random`` when ``legal_moves``, then the game's own)."""

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return all(r.status is not CheckStatus.FAIL for r in self.results)

    def failures(self) -> dict[str, str]:
        """Failed check -> why."""
        return {r.name: r.detail for r in self.results if r.status is CheckStatus.FAIL}

    def score(self) -> str:
        """``7/9`` (checks passed / checks run), with skips noted."""
        run = [r for r in self.results if r.status is not CheckStatus.SKIP]
        passed = sum(r.status is CheckStatus.PASS for r in run)
        skipped = len(self.results) - len(run)
        return f"{passed}/{len(run)}" + (f" ({skipped} n/a)" if skipped else "")

    def summary(self) -> str:
        """A readable report, one line per check."""
        head = (
            f"{self.game_id} ({self.num_players} players, {self.episodes} episodes, "
            f"{self.seconds:.1f} s): {'PASS' if self.passed else 'FAIL'} {self.score()}"
        )
        lines = [head]
        for r in self.results:
            lines.append(f"  {r.status.value:<4} {r.name:<13} {r.detail}".rstrip())
        return "\n".join(lines)

    def as_record(self) -> dict[str, Any]:
        """The stored form (``conformance_results.json``); no timings, so it is stable."""
        return {
            "players": self.num_players,
            "episodes": self.episodes,
            "checks": {r.name: r.status.value for r in self.results},
            "failed": self.failures(),
            "legal_moves": self.legal_moves,
            "bots": self.bots,
        }


def skipped_after(first: CheckResult, why: str) -> list[CheckResult]:
    """``first`` (the ``builds`` check), then every other check skipped for ``why``."""
    return [first] + [CheckResult(name, CheckStatus.SKIP, why) for name in CHECKS[1:]]
