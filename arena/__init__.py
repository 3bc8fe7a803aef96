"""Arena: self-play RL on multiplayer text games.

The RL env protocol (the Tinker cookbook's own types), the async game coordinator,
per-seat envs, the group builder, rollouts and the event bus. Names are imported on first
use, so the ``arena`` command starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BotAgent": "arena.coordinator",
    "GameCoordinator": "arena.coordinator",
    "MatchAbortedError": "arena.coordinator",
    "SeatAgent": "arena.coordinator",
    "SeatTurn": "arena.coordinator",
    "MatchGroupBuilder": "arena.envs",
    "PlayerEnv": "arena.envs",
    "EventBus": "arena.eventbus",
    "default_bus": "arena.eventbus",
    "ByteRenderer": "arena.renderers",
    "ByteTokenizer": "arena.renderers",
    "Renderer": "arena.renderers",
    "RendererConfig": "arena.renderers",
    "GameRetry": "arena.rollouts",
    "TokenPolicy": "arena.rollouts",
    "do_group_rollout": "arena.rollouts",
    "do_single_rollout": "arena.rollouts",
    "Env": "arena.types",
    "EnvGroupBuilder": "arena.types",
    "GameOverBeforeFirstMove": "arena.types",
    "RLDataset": "arena.types",
    "RLDatasetBuilder": "arena.types",
    "StepResult": "arena.types",
    "TokensWithLogprobs": "arena.types",
    "Trajectory": "arena.types",
    "TrajectoryGroup": "arena.types",
    "Transition": "arena.types",
}

__all__ = [
    "BotAgent",
    "ByteRenderer",
    "ByteTokenizer",
    "Env",
    "EnvGroupBuilder",
    "EventBus",
    "GameCoordinator",
    "GameOverBeforeFirstMove",
    "GameRetry",
    "MatchAbortedError",
    "MatchGroupBuilder",
    "PlayerEnv",
    "RLDataset",
    "RLDatasetBuilder",
    "Renderer",
    "RendererConfig",
    "SeatAgent",
    "SeatTurn",
    "StepResult",
    "TokenPolicy",
    "TokensWithLogprobs",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
    "default_bus",
    "do_group_rollout",
    "do_single_rollout",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'arena' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from arena.coordinator import GameCoordinator, MatchAbortedError
    from arena.envs import MatchGroupBuilder, PlayerEnv
    from arena.eventbus import EventBus, default_bus
    from arena.renderers import ByteRenderer, ByteTokenizer, Renderer, RendererConfig
    from arena.rollouts import GameRetry, TokenPolicy, do_group_rollout, do_single_rollout
    from arena.seats import BotAgent, SeatAgent, SeatTurn
    from arena.types import (
        Env,
        EnvGroupBuilder,
        GameOverBeforeFirstMove,
        RLDataset,
        RLDatasetBuilder,
        StepResult,
        TokensWithLogprobs,
        Trajectory,
        TrajectoryGroup,
        Transition,
    )
