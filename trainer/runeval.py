"""A training run's evaluations: each of its games against its evaluation opponents,
the learner recorded as the exact weights it plays with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arena.identity import PolicyRef
from arena.match import MatchSettings
from arena.policies import SamplerPolicy
from arena.rollouts import TokenPolicy
from trainer.config import TrainConfig
from trainer.evaluate import evaluate_games, evaluate_policy, yardstick_key, yardstick_opponents
from trainer.progress import ProgressFactory, no_bars


async def evaluate_run(
    config: TrainConfig,
    policy: TokenPolicy,
    settings: Mapping[str, MatchSettings],
    games: int,
    version: int,
    progress: ProgressFactory = no_bars,
) -> dict[str, float]:
    """A training run's evaluation: each of its games against its evaluation opponents
    (``evaluate_games``). The learner's seats are recorded as the exact weights they play
    with, ``checkpoint:<run>@<version>`` (the weights after ``version`` optimizer steps,
    which checkpoint ``version`` holds when it is saved), so evaluation matches rate each
    step's policy against the bots. ``settings``: each game's match settings."""
    opponents = config.eval_opponents
    run_name = config.run_name or Path(config.log_dir).name
    play: dict[str, Any] = {
        "run_id": config.run_name,
        "sample_timeout_s": config.sample_timeout_s,
        "learner_name": PolicyRef.checkpoint(run_name, version).key,
    }
    out = await evaluate_games(
        policy,
        [settings[g] for g in config.games],
        list(opponents) if opponents else None,
        games,
        yardstick_samples=config.yardstick_samples,
        progress=progress,
        **play,
    )
    if config.greedy_eval and isinstance(policy, SamplerPolicy):
        out.update(await greedy_yardsticks(config, policy.at(0.0), settings, games, play))
    return out


GREEDY_PREFIX = "test/greedy"
"""Where the greedy evaluation's figures go: ``test/greedy/<opponent>/win``,
``test/greedy/yardstick/<figure>``."""


async def greedy_yardsticks(
    config: TrainConfig,
    greedy: SamplerPolicy,
    settings: Mapping[str, MatchSettings],
    games: int,
    play: dict[str, Any],
) -> dict[str, float]:
    """The yardsticks played greedily (temperature 0): each game's yardstick opponents
    (half the games: the learner's side is deterministic) and its positions asked once
    (a greedy answer is always the same), or where the answers can be scored the argmax
    policy of the model's exact probabilities there (``trainer.scoring``), under
    ``test/greedy/...``. Games without a yardstick add nothing."""
    out: dict[str, float] = {}
    for game_id in config.games:
        if yardstick_key(game_id) is None:
            continue
        figures = await evaluate_policy(
            greedy,
            settings[game_id],
            yardstick_opponents(game_id),
            max(2, games // 2),
            yardstick_samples=1,
            **play,
        )
        inner = f"/{game_id}" if config.multi_game else ""
        for key, value in figures.items():
            out[GREEDY_PREFIX + inner + key.removeprefix("test")] = value
    return out
