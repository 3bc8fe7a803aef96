"""Recorded games in RL (``arena train --offpolicy-from SOURCE``): answers of players the
learner is not (people, agents, served models, bots), recorded in the database or in an
``arena export`` file, join each step's batch as off-policy data.

The pool is read once as the run starts (``OffPolicyPool.load``): each valid answer of the
chosen seats (``offpolicy_seats``) in a finished match, its prompt rebuilt as a learner
seat of this run would be shown it (``trainer.sft.read_answers``, the supervised warm
start's code), with the seat's final reward; at most ``OFFPOLICY_MAX_ANSWERS`` of them
(a uniform sample beyond, seeded by the run's seed).

Each step (``OffPolicyPool.step``) draws ``offpolicy_share`` times the step's own datums
from the pool (seeded by the run's seed and the step), scores each answer with the
current sampler (``compute_logprobs`` on prompt + answer) and makes one datum of it, laid
out as the on-policy datums are (``trainer.data.token_datum``):

- its ``logprobs`` are the learner's own, so the loss's importance ratio starts at 1;
- its advantage is ``(reward - baseline) * weight``: the baseline is the mean reward of
  the pool's answers of the same game and seat, and the weight is the learner's
  probability of the answer, ``exp(sum of the answer tokens' logprobs)``, clipped to
  ``[offpolicy_clip, 1]``.

No behaviour probability is known for a person or a bot, so the true importance ratio
``pi(answer) / mu(answer)`` cannot be formed; ``mu <= 1`` makes ``pi(answer)`` its lower
bound (exact for a player that answers deterministically). The lower clip keeps an
answer the learner has all but ruled out teaching at that scale instead of nothing.

    pool = await OffPolicyPool.load(config, renderer, database=db)
    datums, metrics = await pool.step(sampler, step=3, own=len(on_policy_datums))
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tinker import types

from arena.renderers import Renderer, RendererConfig, model_input
from storage.db import Database
from storage.exportschema import ExportRow
from trainer.config import TrainConfig
from trainer.data import token_datum
from trainer.progress import ProgressFactory, no_bars
from trainer.sft import AnswerSample, SftData, picks, read_answers
from trainer.sftsource import check_offpolicy

OFFPOLICY_MAX_ANSWERS = 20_000
"""Most recorded answers held in the pool: a source with more gives a uniform sample of
this many (reservoir sampling, seeded by the run's seed), so memory stays bounded."""


@dataclass(frozen=True)
class RecordedAnswer:
    """One answer of the pool: the prompt as this run renders it, the answer's tokens, and
    how its seat's game ended."""

    prompt: tuple[int, ...]
    answer: tuple[int, ...]
    game_id: str
    seat: int
    reward: float
    """The seat's final reward in its match."""
    match_id: str


def _recorded(prompt: list[int], answer: list[int], row: ExportRow) -> RecordedAnswer:
    reward = float(row.reward) if row.reward is not None else 0.0  # finished: never None
    return RecordedAnswer(tuple(prompt), tuple(answer), row.game_id, row.seat, reward, row.match_id)


def answers_to_draw(share: float, own: int) -> int:
    """Recorded answers added to a step of ``own`` datums: ``share`` of them, rounded,
    at least 1 when the share and the step's datums are not 0."""
    if share <= 0 or own <= 0:
        return 0
    return max(1, round(share * own))


def clipped_weight(logprob: float, clip: float) -> float:
    """The learner's probability of an answer, ``exp(logprob)``, clipped to ``[clip, 1]``."""
    return min(1.0, max(clip, math.exp(logprob)))


class OffPolicyPool:
    """The recorded answers a run adds to its steps, and how they are drawn and weighted."""

    def __init__(
        self, answers: Sequence[RecordedAnswer], config: TrainConfig, data: SftData | None = None
    ) -> None:
        self.answers = list(answers)
        self.share = config.offpolicy_share
        self.clip = config.offpolicy_clip
        self.seed = config.seed
        self.data = data or SftData(answers=len(self.answers))
        """What the source held (answers, seats, matches, turns left out)."""
        rewards: dict[tuple[str, int], list[float]] = {}
        for answer in self.answers:
            rewards.setdefault((answer.game_id, answer.seat), []).append(answer.reward)
        self.baselines = {key: sum(v) / len(v) for key, v in rewards.items()}
        """The mean reward of the pool's answers of each game and seat."""

    @classmethod
    async def load(
        cls,
        config: TrainConfig,
        renderer: RendererConfig | Renderer,
        *,
        database: Database | None = None,
        progress: ProgressFactory = no_bars,
        report: Callable[[str], None] = lambda line: None,
        max_answers: int = OFFPOLICY_MAX_ANSWERS,
    ) -> OffPolicyPool | None:
        """The pool of ``config.offpolicy_from`` (None without one, or with a share of 0),
        its prompts rendered by ``renderer`` (the run's), reported in a line. Raises
        ValueError (one line starting with ``--offpolicy-from``: a bad source, no answer in
        it), StorageError, OSError."""
        source = check_offpolicy(config)
        if source is None:
            return None
        built = renderer.build() if isinstance(renderer, RendererConfig) else renderer
        sample = AnswerSample(max_answers, config.seed, _recorded)
        pick = picks(config)[1]
        await read_answers(
            source, config, built, sample, pick, database=database, progress=progress
        )
        if not sample.kept:
            raise ValueError(
                f"--offpolicy-from {source.text!r}: no answer to add (no valid move of a "
                "chosen seat in a finished match of this run's games); check --offpolicy-seats"
            )
        data = sample.data
        sampled = f", a sample of {len(sample.kept):,}" if len(sample.kept) < data.answers else ""
        report(
            f"offpolicy: {data.answers:,} answers of {data.seats:,} seats in {data.matches:,} "
            f"matches from {source.text}{sampled}; {config.offpolicy_share:g} of each step's "
            f"datums, weights clipped at {config.offpolicy_clip:g}"
        )
        return cls(sample.kept, config, data)

    def draw(self, step: int, own: int) -> list[RecordedAnswer]:
        """Step ``step``'s answers for a step of ``own`` datums (``answers_to_draw``),
        without replacement; the same for the same seed and step."""
        count = min(answers_to_draw(self.share, own), len(self.answers))
        rng = random.Random(f"offpolicy/{self.seed}/{step}")
        return rng.sample(self.answers, count)

    def advantage(self, answer: RecordedAnswer, weight: float) -> float:
        """``answer``'s advantage: its reward minus its game and seat's baseline, times
        ``weight``."""
        return (answer.reward - self.baselines[(answer.game_id, answer.seat)]) * weight

    async def step(
        self, sampler: Any, step: int, own: int
    ) -> tuple[list[types.Datum], dict[str, float]]:
        """Step ``step``'s off-policy datums (see the module's docstring), scored by
        ``sampler`` (the current policy's: anything with ``compute_logprobs``), and their
        metrics (``offpolicy/...``). Raises what the sampler raises."""
        drawn = self.draw(step, own)
        scored = await asyncio.gather(*(_answer_logprobs(sampler, a) for a in drawn))
        datums: list[types.Datum] = []
        weights: list[float] = []
        advantages: list[float] = []
        for answer, logprobs in zip(drawn, scored, strict=True):
            weight = clipped_weight(sum(logprobs), self.clip)
            advantage = self.advantage(answer, weight)
            datums.append(answer_datum(answer, logprobs, advantage))
            weights.append(weight)
            advantages.append(advantage)
        metrics = {"offpolicy/answers": float(len(datums))}
        if datums:
            n = len(datums)
            metrics["offpolicy/weight_mean"] = sum(weights) / n
            metrics["offpolicy/clipped"] = sum(w <= self.clip for w in weights) / n
            metrics["offpolicy/advantage_mean_abs"] = sum(abs(a) for a in advantages) / n
        return datums, metrics


async def _answer_logprobs(sampler: Any, answer: RecordedAnswer) -> list[float]:
    """The learner's logprob of each of ``answer``'s tokens after its prompt."""
    tokens = [*answer.prompt, *answer.answer]
    n = len(answer.answer)
    logprobs = await sampler.compute_logprobs(model_input(tokens), prompt_logprobs_last_n=n)
    scored = list(logprobs)[len(tokens) - n :]
    if len(scored) != n or any(v is None for v in scored):
        raise ValueError(f"compute_logprobs left answer tokens unscored: {scored}")
    return [float(v) for v in scored]


def answer_datum(
    answer: RecordedAnswer, logprobs: Sequence[float], advantage: float
) -> types.Datum:
    """The datum of a recorded answer: the prompt masked, each answer token with the
    learner's logprob and ``advantage``, as ``trainer.data.trajectory_to_datums`` lays out
    an on-policy turn."""
    prompt, tokens = list(answer.prompt), list(answer.answer)
    return token_datum(
        prompt + tokens,
        [0.0] * len(prompt) + list(logprobs),
        [0.0] * len(prompt) + [advantage] * len(tokens),
        [0.0] * len(prompt) + [1.0] * len(tokens),
    )


Prepared = tuple[list[types.Datum], dict[str, float]]
"""A step's datums and metrics (``trainer.step.prepare_batch``'s)."""


async def with_offpolicy(
    pool: OffPolicyPool | None, sampler: Any, step: int, prepared: Prepared
) -> Prepared:
    """``prepared`` (step ``step``'s own datums and metrics) with the pool's answers for
    the step added (``OffPolicyPool.step``), scored by ``sampler``; unchanged without a
    pool."""
    if pool is None:
        return prepared
    datums, metrics = prepared
    extra, figures = await pool.step(sampler, step, len(datums))
    return [*datums, *extra], {**metrics, **figures}
