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
from games.bots import bots_for
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
    score_total: float = 0.0
    """Sum of the learner's ``games.outcome`` scores over the decided games."""
    reward_total: float = 0.0
    """Sum of its final rewards (chips, points) over the decided games."""

    def rate(self, count: float) -> float:
        """``count`` per decided (non-aborted) game."""
        decided = self.games - self.aborted
        return count / decided if decided else 0.0

    def metrics(self, prefix: str = "test") -> dict[str, float]:
        """Cookbook-style metric names: ``test/<opponent>/win`` and so on."""
        p = f"{prefix}/{self.opponent}"
        return {
            f"{p}/win": self.rate(self.wins),
            f"{p}/draw": self.rate(self.draws),
            f"{p}/loss": self.rate(self.losses),
            f"{p}/score": self.rate(self.score_total),
            f"{p}/reward": self.rate(self.reward_total),
            f"{p}/invalid_move_rate": self.invalid_moves / self.moves if self.moves else 0.0,
            f"{p}/games": float(self.games),
            f"{p}/aborted": float(self.aborted),
        }


MAX_DEFAULT_EVAL_BOTS = 3
"""Evaluation plays at most this many bots by default: random and the strongest others."""


def default_opponents(game_id: str) -> list[str]:
    """The bots evaluation plays by default: ``random`` (where it can play) and the
    strongest of the game's own bots (they are listed weakest first), at most
    ``MAX_DEFAULT_EVAL_BOTS`` in all: tic-tac-toe's perfect player, Kuhn poker's Nash
    player, Connect Four's deepest alpha-beta bots."""
    bots = bots_for(get_spec(game_id))
    own = [b for b in bots if b != "random"]
    chosen = (["random"] if "random" in bots else []) + own[-(MAX_DEFAULT_EVAL_BOTS - 1) :]
    return chosen[:MAX_DEFAULT_EVAL_BOTS]


def league_bots(game_id: str) -> list[str]:
    """Every bot that can play ``game_id`` (the league weights them by difficulty)."""
    return bots_for(get_spec(game_id))


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
                    continue
                # win/draw/loss and score as games.outcome defines them (PlayerEnv's metrics)
                result.wins += int(metrics["win"])
                result.draws += int(metrics["draw"])
                result.losses += int(metrics["loss"])
                result.score_total += float(metrics["score"])
                result.reward_total += float(reward)
        results.append(result)
    bar.close()
    return results


KUHN_SAMPLES = 32
"""Samples per information set when measuring a policy's Kuhn poker strategy."""


async def kuhn_exploitability(
    policy: TokenPolicy,
    renderer: RendererConfig,
    observation_format: ObservationFormat,
    game_id: str = "KuhnPoker-v0",
    samples: int = KUHN_SAMPLES,
) -> dict[str, float]:
    """The policy's exact exploitability in Kuhn poker (0 at a Nash equilibrium; the
    first player's game value is -1/18), from its action frequencies at the 12
    information sets of real hands, each asked ``samples`` times with the prompt the
    seat sees in play. Answers that are no legal action count in ``invalid_rate``."""
    from arena.seatview import SeatView
    from games.textarena_games import kuhn_poker

    views = kuhn_poker.infoset_views(game_id)
    built = renderer.build()
    probabilities: dict[str, dict[str, float]] = {}
    bad = 0

    async def ask(view: kuhn_poker.InfosetView) -> str | None:
        seat_view = SeatView(view.seat, game_id, built, observation_format)
        prompt = seat_view.prompt(view.messages, 0, list(view.legal_moves))
        sample = await policy(prompt, seat_view.stop_condition)
        return kuhn_poker.read_action(seat_view.move(sample.tokens), view.infoset)

    for infoset in kuhn_poker.INFOSETS:
        answers = await asyncio.gather(*(ask(views[infoset]) for _ in range(samples)))
        counts = {a: answers.count(a) for a in kuhn_poker.ACTIONS}
        valid = sum(counts.values())
        bad += samples - valid
        probabilities[infoset] = (
            {a: counts[a] / valid for a in kuhn_poker.ACTIONS}
            if valid
            else {a: 1.0 / len(kuhn_poker.ACTIONS) for a in kuhn_poker.ACTIONS}
        )
    return {
        "test/kuhn/exploitability": kuhn_poker.exploitability(probabilities),
        "test/kuhn/invalid_rate": bad / (samples * len(kuhn_poker.INFOSETS)),
    }
