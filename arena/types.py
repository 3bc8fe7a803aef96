"""The RL env protocol, with the Tinker cookbook's names and fields.

A cookbook user should feel at home: ``Env.initial_observation()``, ``Env.step()``,
``EnvGroupBuilder.make_envs()``, ``compute_group_rewards()``, ``Trajectory``,
``TrajectoryGroup`` and ``RLDataset`` keep the cookbook's signatures. Dimension suffixes:
``_G`` group members, ``_T`` tokens, ``_D`` datums.

Arena adds one thing the cookbook's single-agent envs never need: in a multiplayer game a
seat can lose before it ever moves (an opponent's first move ends the game, or the match is
aborted). Such an env reports ``episode_done_at_start()`` after ``initial_observation()``,
and its trajectory has no transitions; its outcome comes from ``compute_group_rewards``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import tinker

Action: TypeAlias = list[int]
"""Sampled token ids."""
Observation: TypeAlias = tinker.ModelInput
"""What the policy is prompted with."""
Logprobs: TypeAlias = list[float]
StopCondition: TypeAlias = list[str] | list[int]
"""Stop strings or stop token ids for the sampler."""
Metrics: TypeAlias = dict[str, float | int]
Logs: TypeAlias = dict[str, str | int | float]


@dataclass
class TokensWithLogprobs:
    """An action: the sampled tokens and, when the sampler returned them, their logprobs."""

    tokens: list[int]
    """Sampled token ids, stop token included when the sampler emitted one."""
    maybe_logprobs: list[float] | None
    """The sampler's logprob of each token, or None when unknown."""

    @property
    def logprobs(self) -> list[float]:
        """The logprobs; raises ValueError when the sampler did not return them."""
        if self.maybe_logprobs is None:
            raise ValueError("these tokens were sampled without logprobs")
        return self.maybe_logprobs


@dataclass
class StepResult:
    """What ``Env.step`` returns."""

    reward: float
    """Immediate reward of this step (arena's game envs put the outcome in
    ``compute_group_rewards`` instead, so this is 0.0 for them)."""
    episode_done: bool
    """True when this seat will not act again."""
    next_observation: Observation
    """The seat's next prompt (its final view when the episode is done)."""
    next_stop_condition: StopCondition
    """Stop sequences for the next sample."""
    metrics: Metrics = field(default_factory=dict)
    """Numbers to aggregate across the batch."""
    logs: Logs = field(default_factory=dict)
    """Text for humans reading a rollout (not aggregated)."""


@dataclass
class Transition:
    """One step of one seat: what it saw, what it did, what it got."""

    ob: Observation
    """The prompt the action was sampled from."""
    ac: TokensWithLogprobs
    """The sampled action."""
    reward: float
    """Immediate reward."""
    episode_done: bool
    """Whether this was the seat's last step."""
    metrics: Metrics = field(default_factory=dict)
    """Per-step metrics reported by the env."""


@dataclass
class Trajectory:
    """All transitions of one seat in one episode, and what it saw last."""

    transitions: list[Transition]
    """In order; empty when the seat never had to move."""
    final_ob: Observation
    """The observation after the last step."""


class Env(ABC):
    """A single-use RL environment for one seat; it is discarded after its episode."""

    @abstractmethod
    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        """Wait until the seat must act; return its prompt and stop condition."""

    @abstractmethod
    async def step(self, action: Action) -> StepResult:
        """Apply the seat's sampled tokens and wait until it must act again or is done."""

    def episode_done_at_start(self) -> bool:
        """True when the episode ended before the seat's first move.

        Valid after ``initial_observation()`` returned. Cookbook envs never end that early,
        so the default is False.
        """
        return False


@dataclass
class TrajectoryGroup:
    """The trajectories of one env group, with the group's final rewards and metrics."""

    trajectories_G: list[Trajectory]
    """One per env, in ``make_envs()`` order."""
    final_rewards_G: list[float]
    """Reward added at the end of each trajectory (the game outcome for arena's envs)."""
    metrics_G: list[Metrics]
    """Per-trajectory metrics from ``compute_group_rewards``."""

    def get_total_rewards(self) -> list[float]:
        """Sum of step rewards plus the final reward, per trajectory."""
        return [
            sum(t.reward for t in traj.transitions) + final
            for traj, final in zip(self.trajectories_G, self.final_rewards_G, strict=True)
        ]


class EnvGroupBuilder(ABC):
    """Plain, picklable configuration that builds a group of envs sharing games.

    Builders hold no live clients, locks, loops or games: those are created in
    ``make_envs()``, so builders can be sent to other processes.
    """

    @abstractmethod
    async def make_envs(self) -> Sequence[Env]:
        """Build the group's envs (and the games and coordinators behind them)."""

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        """Final reward and metrics per trajectory; zero by default."""
        return [(0.0, {}) for _ in trajectory_group]

    def logging_tags(self) -> list[str]:
        """Tags under which this group's metrics are also aggregated (e.g. the game id)."""
        return []


class RLDataset(ABC):
    """A sequence of batches, each a list of env group builders."""

    @abstractmethod
    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        """The builders of batch ``index``."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of batches."""


class RLDatasetBuilder(ABC):
    """Picklable configuration that builds the train dataset and an optional test one."""

    @abstractmethod
    def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        """Build ``(train, test_or_None)``."""


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
    "Action",
    "Env",
    "EnvGroupBuilder",
    "Logprobs",
    "Logs",
    "Metrics",
    "Observation",
    "RLDataset",
    "RLDatasetBuilder",
    "StepResult",
    "StopCondition",
    "TokensWithLogprobs",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
    "metrics_mean",
]
