"""Evaluation: the current policy against fixed opponents, half the games in each seat."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tinker_cookbook.exceptions import AllTrajectoriesFailedError

from arena.envs import MatchGroupBuilder
from arena.match import MatchSettings
from arena.renderers import ObservationFormat, RendererConfig
from arena.rollouts import GameRetry, TokenPolicy, do_group_rollout
from arena.seatview import SeatView
from arena.types import TrajectoryGroup
from games.api import MatchRecord, Probe
from games.bots import bots_for
from games.registry import game_kit, get_spec
from trainer.progress import ProgressFactory, no_bars
from trainer.scoring import exact_figures


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
    """The bots evaluation plays by default: ``random`` (where it can play), then the bots
    the game's yardstick plays (tic-tac-toe's perfect player, Connect Four's alpha-beta
    depths 1 and 2), or without those the strongest of the game's own bots (they are
    listed weakest first: Kuhn poker's Nash player), at most ``MAX_DEFAULT_EVAL_BOTS`` in
    all."""
    bots = bots_for(get_spec(game_id))
    own = yardstick_opponents(game_id) or [b for b in bots if b != "random"]
    chosen = (["random"] if "random" in bots else []) + own[-(MAX_DEFAULT_EVAL_BOTS - 1) :]
    return chosen[:MAX_DEFAULT_EVAL_BOTS]


def league_bots(game_id: str) -> list[str]:
    """Every bot that can play ``game_id`` (the league weights them by difficulty)."""
    return bots_for(get_spec(game_id))


async def evaluate(
    policy: TokenPolicy,
    settings: MatchSettings | str,
    opponents: Sequence[str],
    games: int,
    *,
    seed: int = 10_000_000,
    max_games_per_builder: int = 50,
    run_id: str | None = None,
    learner_name: str = "learner",
    sample_timeout_s: float | None = None,
    progress: ProgressFactory = no_bars,
) -> list[EvalResult]:
    """Play ``games`` games against each opponent, the learner in each seat in turn, as
    ``settings`` says (the game, its players, limits and clocks, renderer and format; a
    game id alone: its default settings).

    The opponents fill every other seat. Seeds start at ``seed`` so evaluation games differ
    from training games. A game that fails (the policy raised or timed out, the match
    aborted) counts as ``aborted`` and not in the rates. Each seat's games are played by
    builders of at most ``max_games_per_builder`` games each, all at once (an evaluation
    centres no rewards: a builder here is only a batch of games, not a training group).
    ``sample_timeout_s`` bounds each answer as in training.
    """
    settings = MatchSettings.of(settings)
    strategy = GameRetry(sample_timeout_s=sample_timeout_s)
    num_players = settings.num_players
    per_seat = max(1, games // num_players)
    bar = progress("evaluation", per_seat * num_players * len(opponents), "game")

    async def rollout(builder: MatchGroupBuilder) -> TrajectoryGroup:
        try:
            return await do_group_rollout(builder, policy, strategy=strategy)
        finally:
            bar.update(builder.group_size)

    results = []
    for opponent in opponents:
        result = EvalResult(opponent=opponent)
        builders = [
            MatchGroupBuilder(
                settings,
                learner_seats=(seat,),
                opponents=(opponent,) * (num_players - 1),
                group_size=n,
                seed=batch_seed,
                group_id=f"eval-{opponent}-s{seat}",
                run_id=run_id,
                learner_name=learner_name,
            )
            for seat, n, batch_seed in _batches(per_seat, num_players, max_games_per_builder, seed)
        ]
        groups = await asyncio.gather(*(rollout(b) for b in builders), return_exceptions=True)
        for builder, group in zip(builders, groups, strict=True):
            _tally(result, builder.group_size, group)
        results.append(result)
    bar.close()
    return results


def _batches(
    per_seat: int, num_players: int, max_games_per_builder: int, seed: int
) -> list[tuple[int, int, int]]:
    """Each builder of an opponent's games: (learner seat, games, first seed); ``per_seat``
    games in each seat, at most ``max_games_per_builder`` to a builder."""
    batches = []
    for seat in range(num_players):
        remaining = per_seat
        g = 0
        while remaining > 0:
            n = min(max_games_per_builder, remaining)
            batches.append((seat, n, seed + seat * 1_000_000 + g * max_games_per_builder))
            remaining -= n
            g += 1
    return batches


def _tally(result: EvalResult, size: int, group: TrajectoryGroup | BaseException) -> None:
    """Count one builder's ``size`` games (its group, or what its rollout raised) in
    ``result``; an exception other than all trajectories failing is raised again."""
    if isinstance(group, AllTrajectoriesFailedError):
        result.games += size
        result.aborted += size
        return
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


MEAN_SCORE_KEY = "test/mean_score"
"""The mean score (win 1, draw 1/2) over the evaluation bots: the headline of a game
without a yardstick."""


@dataclass(frozen=True)
class Headline:
    """The one figure a run is judged by at an evaluation."""

    key: str
    """Its metric name (``test/yardstick/exploitability``, ``test/mean_score``)."""
    value: float
    higher_is_better: bool = True

    def better_than(self, other: Headline | None) -> bool:
        """True when this figure beats ``other`` (None: nothing to beat)."""
        if other is None:
            return True
        return self.value > other.value if self.higher_is_better else self.value < other.value


def headline_metrics(game_id: str, metrics: Mapping[str, float]) -> dict[str, float]:
    """``test/mean_score`` from an evaluation's per-bot scores, for a game without a
    yardstick (nothing for one with a yardstick, or without bot results)."""
    if yardstick_key(game_id) is not None:
        return {}
    scores = [v for k, v in metrics.items() if k.startswith("test/") and k.endswith("/score")]
    return {MEAN_SCORE_KEY: sum(scores) / len(scores)} if scores else {}


def headline(game_id: str, metrics: Mapping[str, float]) -> Headline | None:
    """The headline figure of one evaluation's ``metrics``: the game's yardstick, else the
    mean score against the evaluation bots; None when the metrics hold neither."""
    key = yardstick_key(game_id)
    yardstick = game_kit(game_id).yardstick
    if key is not None and yardstick is not None and key in metrics:
        return Headline(key, float(metrics[key]), yardstick.higher_is_better)
    if MEAN_SCORE_KEY in metrics:
        return Headline(MEAN_SCORE_KEY, float(metrics[MEAN_SCORE_KEY]))
    return None


def run_headline(games: Sequence[str], metrics: Mapping[str, float]) -> Headline | None:
    """The headline of a run on ``games``: the game's own (``headline``) for one game; for
    several, the mean over the games of each one's mean score against its evaluation bots
    (``test/mean_score``: their yardsticks do not add up)."""
    if len(games) == 1:
        return headline(games[0], metrics)
    if MEAN_SCORE_KEY in metrics:
        return Headline(MEAN_SCORE_KEY, float(metrics[MEAN_SCORE_KEY]))
    return None


def records(results: Sequence[EvalResult]) -> dict[str, MatchRecord]:
    """Each opponent's results as the game API's ``MatchRecord`` (aborted games left out)."""
    return {r.opponent: MatchRecord(r.wins, r.draws, r.losses) for r in results}


def yardstick_opponents(game_id: str) -> list[str]:
    """The bots the game's yardstick plays (none when it has no yardstick or only asks
    positions)."""
    yardstick = game_kit(game_id).yardstick
    return list(yardstick.opponents) if yardstick is not None else []


YARDSTICK_PREFIX = "test/yardstick"
"""Metric names of the yardstick's figures: ``test/yardstick/<figure>``."""


def yardstick_key(game_id: str) -> str | None:
    """The metric name of the game's headline yardstick figure, or None without one."""
    yardstick = game_kit(game_id).yardstick
    return f"{YARDSTICK_PREFIX}/{yardstick.figure}" if yardstick is not None else None


async def measure_yardstick(
    policy: TokenPolicy,
    settings: MatchSettings | str,
    results: Sequence[EvalResult],
    *,
    samples: int | None = None,
) -> dict[str, float]:
    """The game's yardstick figures for ``policy`` (``test/yardstick/<figure>``), from the
    evaluation ``results`` (which must include the yardstick's opponents) and, for a
    yardstick that asks positions, the policy's answers there, asked with the prompt the
    seat sees in play: exact where the policy's answers can be scored and the yardstick
    reads probabilities (``trainer.scoring.exact_figures``: a model's probability of each
    move), else ``samples`` answers at each (None: the game's number). Empty when the game
    has no yardstick.

    Raises ValueError when a result the yardstick reads is missing."""
    settings = MatchSettings.of(settings)
    game_id, renderer, observation_format = (
        settings.game_id,
        settings.renderer,
        settings.observation_format,
    )
    yardstick = game_kit(game_id).yardstick
    if yardstick is None:
        return {}
    figures: dict[str, float] = {}
    if yardstick.from_matches is not None:
        played = records(results)
        missing = [o for o in yardstick.opponents if o not in played]
        if missing:
            raise ValueError(f"the {game_id} yardstick needs games against {', '.join(missing)}")
        figures.update(yardstick.from_matches(played))
    if yardstick.from_answers is not None and yardstick.probes is not None:
        exact = await exact_figures(policy, game_id, yardstick, renderer, observation_format)
        if exact is not None:
            figures.update(exact)
        else:
            answers = await ask_probes(
                policy,
                game_id,
                yardstick.probes(game_id),
                samples or yardstick.samples,
                renderer,
                observation_format,
            )
            figures.update(yardstick.from_answers(answers))
    return {f"{YARDSTICK_PREFIX}/{name}": float(value) for name, value in figures.items()}


async def ask_probes(
    policy: TokenPolicy,
    game_id: str,
    probes: Mapping[str, Probe],
    samples: int,
    renderer: RendererConfig,
    observation_format: ObservationFormat,
) -> dict[str, list[str]]:
    """``samples`` move texts from ``policy`` at each probe position, asked with the prompt
    its seat sees in play (answers that fail to sample count as empty text)."""
    built = renderer.build()

    async def ask(probe: Probe) -> str:
        view = SeatView(probe.seat, game_id, built, observation_format)
        prompt = view.prompt(probe.messages, 0, list(probe.legal_moves))
        try:
            sample = await policy(prompt, view.stop_condition)
        except Exception:  # a failed sample is an answer that is no move
            return ""
        return view.move(sample.tokens)

    out: dict[str, list[str]] = {}
    for key, probe in probes.items():
        out[key] = list(await asyncio.gather(*(ask(probe) for _ in range(samples))))
    return out


async def evaluate_policy(
    policy: TokenPolicy,
    settings: MatchSettings | str,
    opponents: Sequence[str],
    games: int,
    *,
    yardstick_samples: int | None = None,
    **play: Any,
) -> dict[str, float]:
    """Every figure of one evaluation: ``evaluate`` against ``opponents`` (plus the bots the
    game's yardstick plays), then the yardstick (``measure_yardstick``) and, for a game
    without one, ``test/mean_score``. ``play`` goes to ``evaluate`` (``seed``, ``run_id``,
    ``learner_name``, ``sample_timeout_s``, ``progress``, ...)."""
    settings = MatchSettings.of(settings)
    game_id = settings.game_id
    opponents = list(opponents)
    opponents += [o for o in yardstick_opponents(game_id) if o not in opponents]
    results = await evaluate(policy, settings, opponents, games, **play)
    out: dict[str, float] = {}
    for result in results:
        out.update(result.metrics())
    out.update(await measure_yardstick(policy, settings, results, samples=yardstick_samples))
    out.update(headline_metrics(game_id, out))
    return out


def game_prefix(game_id: str) -> str:
    """Where a multi-game run's figures of ``game_id`` go: ``test/<game>/...`` (the
    opponents' ``test/<game>/<opponent>/win``, the yardstick's
    ``test/<game>/yardstick/<figure>``, ``test/<game>/mean_score``)."""
    return f"test/{game_id}"


async def evaluate_games(
    policy: TokenPolicy,
    settings: Sequence[MatchSettings],
    opponents: Sequence[str] | None,
    games: int,
    *,
    yardstick_samples: int | None = None,
    **play: Any,
) -> dict[str, float]:
    """``evaluate_policy`` on each game of ``settings`` with ``opponents`` (None: each
    game's ``default_opponents``). One game: its figures as ``evaluate_policy`` names them.
    Several: each game's under ``game_prefix(game)``, its mean score against its bots
    ``test/<game>/mean_score``, and their mean ``test/mean_score`` (the run's headline)."""

    async def one(match: MatchSettings) -> dict[str, float]:
        game_id = match.game_id
        chosen = list(opponents) if opponents is not None else default_opponents(game_id)
        return await evaluate_policy(
            policy, match, chosen, games, yardstick_samples=yardstick_samples, **play
        )

    if len(settings) == 1:
        return await one(settings[0])
    out: dict[str, float] = {}
    means = []
    for match in settings:
        game_id = match.game_id
        figures = await one(match)
        prefix = game_prefix(game_id)
        for key, value in figures.items():
            out[prefix + key.removeprefix("test")] = value
        scores = [v for k, v in figures.items() if k.endswith("/score")]
        if scores:
            means.append(sum(scores) / len(scores))
            out[f"{prefix}/mean_score"] = means[-1]
    if means:
        out[MEAN_SCORE_KEY] = sum(means) / len(means)
    return out
