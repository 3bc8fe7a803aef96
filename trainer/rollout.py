"""One step's games: the groups played concurrently, in-process or on an executor.

``rollout_batch`` plays every group of a batch; a group whose games all failed, or whose
worker died, is left out and counted. ``groups_of_step`` deals a step's groups to the games
of a multi-game run; ``batch_metrics`` gives the cookbook's ``env/...`` metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from tinker_cookbook.exceptions import AllTrajectoriesFailedError

from arena.eventbus import default_bus
from arena.rollouts import GameRetry, TokenPolicy, do_group_rollout
from arena.types import EnvGroupBuilder, TrajectoryGroup, metrics_mean
from matchmaking.league import GroupPlan
from trainer.workers import WorkerResult, is_lost_worker, play_in_worker


def groups_of_step(games: Sequence[str], step: int, batch_size: int) -> dict[str, int]:
    """How many of step ``step``'s ``batch_size`` groups each game plays: the slots
    are dealt to the games in turn, going on where the last step stopped, so that over
    the steps every game gets the same share (one game: all of them). Games with no
    slot this step are left out."""
    counts = dict.fromkeys(games, 0)
    for slot in range(batch_size):
        counts[games[(step * batch_size + slot) % len(games)]] += 1
    return {game: n for game, n in counts.items() if n}


@dataclass
class Collected:
    """One step's games, as the trainer gets them back."""

    step: int
    plans: list[GroupPlan] | None
    builders: list[Any]
    batch: BatchRollout
    seconds: float
    """How long the games took to play."""
    stale: int = 0
    """Optimizer steps taken between the sampler's weights and the training step."""
    sampler_counts: dict[str, float] = field(default_factory=dict)
    """The sampler's prompt tokens computed and reused while the games played
    (``sampler/tokens_computed``, ``sampler/tokens_reused``), where it counts them."""


def sampler_counts(sampler: Any) -> tuple[int, int] | None:
    """A sampling client's prompt tokens computed and reused so far (the local sampler's
    ``stats``), or None for one that does not count them."""
    stats = getattr(sampler, "stats", None)
    computed = getattr(stats, "tokens_computed", None)
    reused = getattr(stats, "tokens_reused", None)
    if not isinstance(computed, int) or not isinstance(reused, int):
        return None
    return computed, reused


def counts_between(
    before: tuple[int, int] | None, after: tuple[int, int] | None
) -> dict[str, float]:
    """``sampler/tokens_computed`` and ``sampler/tokens_reused`` between two readings of
    ``sampler_counts`` (empty where the sampler does not count)."""
    if before is None or after is None:
        return {}
    return {
        "sampler/tokens_computed": float(after[0] - before[0]),
        "sampler/tokens_reused": float(after[1] - before[1]),
    }


@dataclass
class BatchRollout:
    """The groups of one batch that produced trajectories, and what was lost."""

    groups: list[TrajectoryGroup]
    builders: list[Any]
    failed_groups: int = 0
    """Groups in which every game failed (nothing to train on), workers lost included."""
    workers_lost: int = 0
    """Groups whose worker process or machine went away."""
    errors: list[str] = field(default_factory=list)


@dataclass
class _Lost:
    error: BaseException


async def _play_on(
    executor: Executor,
    builders: Sequence[EnvGroupBuilder],
    policy: TokenPolicy,
    strategy: GameRetry,
) -> list[Any]:
    """Each group played on ``executor``: its group (its events republished here), an
    AllTrajectoriesFailedError, another exception, or ``_Lost`` when the worker died."""
    loop = asyncio.get_running_loop()
    futures = [
        loop.run_in_executor(executor, play_in_worker, b, policy, strategy) for b in builders
    ]
    results: list[Any] = list(await asyncio.gather(*futures, return_exceptions=True))
    bus = default_bus()
    for i, result in enumerate(results):
        if isinstance(result, WorkerResult):
            for event in result.events:
                bus.publish(event)
            results[i] = (
                result.group
                if result.group is not None
                else AllTrajectoriesFailedError(result.failure or "no game survived")
            )
        elif isinstance(result, BaseException) and is_lost_worker(result):
            results[i] = _Lost(result)
    return results


async def rollout_batch(
    builders: Sequence[EnvGroupBuilder],
    policy: TokenPolicy,
    executor: Executor | None = None,
    strategy: GameRetry | None = None,
    replace_executor: Callable[[], Executor] | None = None,
) -> BatchRollout:
    """Roll out every group of a batch concurrently (in-process, or on ``executor``).

    On an executor each group plays in a worker, which sends back the match events its
    games published; they are republished here, on this process's bus, so the matches are
    recorded and shown as if played here. A group whose games all failed, or whose worker
    died, is left out and counted; with ``replace_executor`` the groups a dead worker took
    down are played once more on the executor it returns. RuntimeError when every group
    of the batch failed (the message has the first error)."""
    strategy = strategy or GameRetry()
    out = BatchRollout(groups=[], builders=[])
    if executor is None:
        results: list[Any] = await asyncio.gather(
            *(do_group_rollout(b, policy, strategy=strategy) for b in builders),
            return_exceptions=True,
        )
    else:
        results = await _play_on(executor, builders, policy, strategy)
        lost = [i for i, r in enumerate(results) if isinstance(r, _Lost)]
        out.workers_lost = len(lost)
        if lost and replace_executor is not None:
            # A dead worker breaks a process pool for every group in flight on it: play
            # those groups again, once, on a fresh pool.
            retried = await _play_on(
                replace_executor(), [builders[i] for i in lost], policy, strategy
            )
            for i, result in zip(lost, retried, strict=True):
                results[i] = result
        for i, result in enumerate(results):
            if isinstance(result, _Lost):
                results[i] = AllTrajectoriesFailedError(f"worker lost: {result.error!r}")
    for builder, result in zip(builders, results, strict=True):
        if isinstance(result, AllTrajectoriesFailedError):
            out.failed_groups += 1
            out.errors.append(str(result))
        elif isinstance(result, BaseException):
            raise result
        else:
            out.groups.append(result)
            out.builders.append(builder)
    if not out.groups and builders:
        raise RuntimeError(f"every group of the batch failed; first: {out.errors[0]}")
    return out


def batch_metrics(groups: list[TrajectoryGroup], tags: list[list[str]]) -> dict[str, float]:
    """Cookbook-style env metrics: ``env/all/reward/total``, win/draw/loss, per-tag too;
    and ``env/<tag>/invalid_per_answer``: the learner's invalid moves per answer it gave
    (each of its seats' transitions is an answer), where it gave any."""
    out: dict[str, float] = {}
    buckets: dict[str, list[dict[str, float | int]]] = {"all": []}
    rewards: dict[str, list[float]] = {"all": []}
    invalid: dict[str, int] = {}
    answers: dict[str, int] = {}
    for group, group_tags in zip(groups, tags, strict=True):
        totals = group.get_total_rewards()
        for trajectory, metrics, total in zip(
            group.trajectories_G, group.metrics_G, totals, strict=True
        ):
            for tag in ["all", *group_tags]:
                buckets.setdefault(tag, []).append(metrics)
                if not metrics.get("aborted"):
                    rewards.setdefault(tag, []).append(total)
                invalid[tag] = invalid.get(tag, 0) + int(metrics.get("invalid_moves", 0))
                answers[tag] = answers.get(tag, 0) + len(trajectory.transitions)
    for tag, metric_list in buckets.items():
        for key, value in metrics_mean(metric_list).items():
            if key != "seat":
                out[f"env/{tag}/{key}"] = value
        values = rewards.get(tag, [])
        out[f"env/{tag}/reward/total"] = sum(values) / len(values) if values else 0.0
        if answers.get(tag):
            out[f"env/{tag}/invalid_per_answer"] = invalid[tag] / answers[tag]
    return out
