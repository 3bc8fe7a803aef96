"""Evaluation: the current policy against fixed opponents, half the games in each seat."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from tinker_cookbook.exceptions import AllTrajectoriesFailedError

from arena.envs import MatchGroupBuilder
from arena.renderers import ObservationFormat, RendererConfig
from arena.rollouts import GameRetry, TokenPolicy, do_group_rollout
from arena.types import TrajectoryGroup
from games.bots import check_bot
from games.registry import get_spec
from games.session import SessionLimits
from trainer.progress import ProgressFactory, no_bars


@dataclass
class EvalResult:
    """Outcomes of the learner against one opponent."""

    opponent: str
    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    aborted: int = 0
    moves: int = 0
    invalid_moves: int = 0

    def rate(self, count: int) -> float:
        """``count`` as a fraction of the decided (non-aborted) games."""
        decided = self.games - self.aborted
        return count / decided if decided else 0.0

    def metrics(self, prefix: str = "test") -> dict[str, float]:
        """Cookbook-style metric names: ``test/<opponent>/win`` and so on."""
        p = f"{prefix}/{self.opponent}"
        return {
            f"{p}/win": self.rate(self.wins),
            f"{p}/draw": self.rate(self.draws),
            f"{p}/loss": self.rate(self.losses),
            f"{p}/invalid_move_rate": self.invalid_moves / self.moves if self.moves else 0.0,
            f"{p}/games": float(self.games),
            f"{p}/aborted": float(self.aborted),
        }


def default_opponents(game_id: str) -> list[str]:
    """Bots that can play ``game_id``: random where it can, and the perfect tic-tac-toe bot."""
    spec = get_spec(game_id)
    out = []
    for name in ("random", "optimal"):
        try:
            check_bot(name, spec)
        except ValueError:
            continue
        out.append(name)
    return out


async def evaluate(
    policy: TokenPolicy,
    game_id: str,
    opponents: Sequence[str],
    num_games: int,
    *,
    seed: int = 10_000_000,
    num_players: int = 2,
    limits: SessionLimits | None = None,
    renderer: RendererConfig | None = None,
    observation_format: ObservationFormat = "full",
    games_per_group: int = 50,
    run_id: str | None = None,
    learner_name: str = "learner",
    sample_timeout_s: float | None = None,
    progress: ProgressFactory = no_bars,
) -> list[EvalResult]:
    """Play ``num_games`` games against each opponent, the learner in each seat in turn.

    The opponents fill every other seat. Seeds start at ``seed`` so evaluation games differ
    from training games. A game that fails (the policy raised or timed out, the match
    aborted) counts as ``aborted`` and not in the rates.
    """
    strategy = GameRetry(sample_timeout_s=sample_timeout_s)
    per_seat = max(1, num_games // num_players)
    bar = progress("evaluation", per_seat * num_players * len(opponents), "game")

    async def rollout(builder: MatchGroupBuilder) -> TrajectoryGroup:
        try:
            return await do_group_rollout(builder, policy, strategy=strategy)
        finally:
            bar.update(builder.num_games)

    results = []
    for opponent in opponents:
        result = EvalResult(opponent=opponent)
        builders = []
        per_seat = max(1, num_games // num_players)
        for seat in range(num_players):
            remaining = per_seat
            g = 0
            while remaining > 0:
                n = min(games_per_group, remaining)
                builders.append(
                    MatchGroupBuilder(
                        game_id,
                        num_players=num_players,
                        learner_seats=(seat,),
                        opponents=(opponent,) * (num_players - 1),
                        num_games=n,
                        seed=seed + seat * 1_000_000 + g * games_per_group,
                        limits=limits or SessionLimits(),
                        renderer=renderer or RendererConfig(),
                        observation_format=observation_format,
                        group_id=f"eval-{opponent}-s{seat}",
                        run_id=run_id,
                        learner_name=learner_name,
                    )
                )
                remaining -= n
                g += 1
        groups = await asyncio.gather(*(rollout(b) for b in builders), return_exceptions=True)
        for builder, group in zip(builders, groups, strict=True):
            if isinstance(group, AllTrajectoriesFailedError):
                result.games += builder.num_games
                result.aborted += builder.num_games
                continue
            if isinstance(group, BaseException):
                raise group
            result.games += len(group.rollout_errors)
            result.aborted += len(group.rollout_errors)
            for trajectory, reward, metrics in zip(
                group.trajectories_G, group.final_rewards_G, group.metrics_G, strict=True
            ):
                result.games += 1
                result.moves += sum(1 for t in trajectory.transitions if t.ac.tokens)
                result.invalid_moves += int(metrics.get("invalid_moves", 0))
                if metrics.get("aborted"):
                    result.aborted += 1
                elif reward > 0:
                    result.wins += 1
                elif reward < 0:
                    result.losses += 1
                else:
                    result.draws += 1
        results.append(result)
    bar.close()
    return results
