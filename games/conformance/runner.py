"""The kit on many games at once: each game checked in its own spawned worker process, a
game that kills its worker reported as failed while the others go on."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from games.conformance.kit import check_game
from games.conformance.report import (
    CHECKS,
    DEFAULT_EPISODES,
    DEFAULT_TIME_BUDGET_S,
    CheckResult,
    CheckStatus,
    Report,
    skipped_after,
)


def candidates() -> list[str]:
    """Built-in game ids the kit runs on: every game available here, and those marked
    unavailable only for a failed conformance check."""
    from games.registry import BUILTIN_PACKAGE, CONFORMANCE_REASON, catalogue

    return [
        s.game_id
        for s in catalogue()
        if s.package in (BUILTIN_PACKAGE, "textarena")
        and (s.available or (s.reason or "").startswith(CONFORMANCE_REASON))
    ]


def _check_quietly(args: tuple[str, int, float]) -> Report:
    game_id, episodes, budget = args
    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        return check_game(game_id, episodes=episodes, time_budget_s=budget)


def _crashed(game_id: str, episodes: int, error: BaseException) -> Report:
    """The report of a game whose check killed its worker process."""
    report = Report(game_id=game_id, num_players=0, episodes=episodes)
    why = f"the check crashed its worker: {type(error).__name__}: {error}"
    report.results = skipped_after(CheckResult(CHECKS[0], CheckStatus.FAIL, why), "not run")
    return report


def check_all(
    game_ids: Sequence[str],
    *,
    jobs: int = 2,
    episodes: int = DEFAULT_EPISODES,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
    progress: Callable[[Report], None] | None = None,
) -> list[Report]:
    """Check many games on ``jobs`` worker processes (spawned); reports in id order. A game
    whose check kills its worker fails ``builds`` with the error; the others go on."""
    reports: list[Report] = []

    def done(report: Report) -> None:
        reports.append(report)
        if progress:
            progress(report)

    if jobs <= 1:
        for game_id in game_ids:
            done(_check_quietly((game_id, episodes, time_budget_s)))
        return sorted(reports, key=lambda r: r.game_id.lower())
    remaining = list(game_ids)
    while remaining:
        remaining = _check_in_pool(remaining, jobs, episodes, time_budget_s, done)
    return sorted(reports, key=lambda r: r.game_id.lower())


def _check_in_pool(
    game_ids: list[str],
    jobs: int,
    episodes: int,
    time_budget_s: float,
    done: Callable[[Report], None],
) -> list[str]:
    """Check ``game_ids`` on one pool of ``jobs`` workers; return the games to run again
    (lost with a pool that a neighbour killed)."""
    context = multiprocessing.get_context("spawn")
    remaining: list[str] = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {
            pool.submit(_check_quietly, (game_id, episodes, time_budget_s)): game_id
            for game_id in game_ids
        }
        for future in as_completed(futures):
            game_id = futures[future]
            try:
                done(future.result())
            except BrokenProcessPool:
                remaining.append(game_id)  # a neighbour killed the pool: run it again
            except Exception as exc:
                done(_crashed(game_id, episodes, exc))
    if remaining and len(remaining) == len(futures):
        # Every game was lost with the pool: run them one by one to find the culprit.
        for game_id in remaining:
            try:
                with ProcessPoolExecutor(1, mp_context=context) as single:
                    done(single.submit(_check_quietly, (game_id, episodes, time_budget_s)).result())
            except Exception as exc:
                done(_crashed(game_id, episodes, exc))
        remaining = []
    return remaining
