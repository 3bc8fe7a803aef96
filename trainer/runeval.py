"""A training run's evaluations: each of its games against its evaluation opponents,
the learner recorded as the exact weights it plays with."""

from __future__ import annotations

from pathlib import Path

from arena.identity import PolicyRef
from arena.renderers import ObservationFormat, RendererConfig
from arena.rollouts import TokenPolicy
from games.session import SessionLimits
from trainer.config import TrainConfig
from trainer.evaluate import evaluate_games
from trainer.progress import ProgressFactory, no_bars


async def evaluate_run(
    config: TrainConfig,
    policy: TokenPolicy,
    renderer: RendererConfig,
    observation_format: ObservationFormat,
    limits: dict[str, SessionLimits],
    games: int,
    version: int,
    progress: ProgressFactory = no_bars,
) -> dict[str, float]:
    """A training run's evaluation: each of its games against its evaluation opponents
    (``evaluate_games``). The learner's seats are recorded as the exact weights they play
    with, ``checkpoint:<run>@<version>`` (the weights after ``version`` optimizer steps,
    which checkpoint ``version`` holds when it is saved), so evaluation matches rate each
    step's policy against the bots."""
    opponents = config.eval_opponents
    run_name = config.run_name or Path(config.log_dir).name
    return await evaluate_games(
        policy,
        config.games,
        list(opponents) if opponents else None,
        games,
        yardstick_samples=config.yardstick_samples,
        num_players=config.num_players,
        limits_by_game=limits,
        renderer=renderer,
        observation_format=observation_format,
        run_id=config.run_name,
        sample_timeout_s=config.sample_timeout_s,
        move_timeout_s=config.move_timeout_s,
        learner_name=PolicyRef.checkpoint(run_name, version).key,
        progress=progress,
    )
