"""The RL env protocol: the Tinker cookbook's own types, re-exported.

Arena's envs, builders and datasets ARE the cookbook's (``tinker_cookbook.rl.types``), so
the cookbook's drivers (``do_group_rollout``, its rollout strategies, ``rollout_executor``,
``rl.train``) and data code (``compute_advantages``, ``assemble_training_data``,
``compute_trajectory_metrics``) run arena's builders unchanged. Dimension suffixes: ``_P``
problems, ``_G`` group members, ``_T`` tokens, ``_D`` datums.

One thing multiplayer games need that single-agent envs do not: a seat can lose before it
ever moves (an opponent's first move ends the game, or the match is aborted). Its env's
``initial_observation()`` returns ``GameOverBeforeFirstMove``, a subclass of the
cookbook's ``InitialObservationOverflow`` sentinel: every cookbook driver then ends the
rollout at once without sampling, with one empty transition that yields no training
tokens, and the seat's outcome comes from ``compute_group_rewards``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.types import (
    STOP_METRIC_PREFIX,
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    InitialObservationOverflow,
    Logprobs,
    Logs,
    Metrics,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    RolloutError,
    StepResult,
    StopReason,
    Trajectory,
    TrajectoryGroup,
    Transition,
)


class ArenaActionExtra(ActionExtra, total=False):
    """What arena's own driver passes to ``Env.step(action, extra=...)`` besides the
    cookbook's ``stop_reason``: the sampler's logprobs, recorded with the move."""

    logprobs: list[float] | None
    """The sampler's logprob of each action token, or None when unknown."""


@dataclass(frozen=True)
class GameOverBeforeFirstMove(InitialObservationOverflow):
    """Returned by ``initial_observation()`` of a seat whose game ended before its first
    move (or was aborted). Drivers treat it as the cookbook's sentinel: no sampling, one
    empty transition, ``Trajectory.stop_reason`` = ``completed`` (or ``aborted``)."""

    reward: float = 0.0
    metrics: Metrics = field(default_factory=lambda: {f"{STOP_METRIC_PREFIX}completed": 1.0})


def metrics_mean(metrics_list: Sequence[Metrics]) -> dict[str, float]:
    """Mean of each key over the dicts that have it."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for m in metrics_list:
        for k, v in m.items():
            sums[k] = sums.get(k, 0.0) + float(v)
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


__all__ = [
    "STOP_METRIC_PREFIX",
    "Action",
    "ActionExtra",
    "ArenaActionExtra",
    "Env",
    "EnvGroupBuilder",
    "GameOverBeforeFirstMove",
    "InitialObservationOverflow",
    "Logprobs",
    "Logs",
    "Metrics",
    "Observation",
    "RLDataset",
    "RLDatasetBuilder",
    "RolloutError",
    "StepResult",
    "StopCondition",
    "StopReason",
    "TokenCompleter",
    "TokensWithLogprobs",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
    "metrics_mean",
]
