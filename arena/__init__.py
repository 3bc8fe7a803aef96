"""Arena: self-play RL on multiplayer text games.

The RL env protocol (cookbook names), the async game coordinator, per-seat envs, the group
builder, rollouts and the event bus.
"""

from arena.coordinator import BotAgent, GameCoordinator, MatchAbortedError, SeatAgent, SeatTurn
from arena.envs import MatchGroupBuilder, PlayerEnv
from arena.events import EventBus, default_bus
from arena.renderers import ByteRenderer, ByteTokenizer, Renderer, RendererConfig
from arena.rollouts import TokenPolicy, do_group_rollout, do_single_rollout
from arena.types import (
    Env,
    EnvGroupBuilder,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)

__all__ = [
    "BotAgent",
    "ByteRenderer",
    "ByteTokenizer",
    "Env",
    "EnvGroupBuilder",
    "EventBus",
    "GameCoordinator",
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
