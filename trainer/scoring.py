"""A model's exact policy at a yardstick's positions, read from its logprobs.

At each probe position the probability the model gives a legal move is the probability of
that move's answer: the tokens the seat would sample for it (``SeatView.answer_tokens``:
the move's text, bare in the compact format, and the renderer's stop), scored by the
sampling client's ``compute_logprobs`` on the prompt followed by the answer,
``P(move) = exp(sum of the answer tokens' logprobs)``. The moves' probabilities at a
position sum to at most 1; the rest is the probability of every other answer (invalid
text, and also a move written with other words around it, which the game would still
read: only the move's own answer is scored). The yardstick normalises them over the legal
moves and reads its figures off that policy (``Yardstick.from_probabilities``) instead
of off sampled answers: the same figures without sampling noise.

A policy can be scored when it is a ``SamplerPolicy`` over a client with
``compute_logprobs`` (the local backend's, Tinker's) sampling at temperature 1, the
distribution ``compute_logprobs`` gives, or 0 (greedy: the argmax of the same
probabilities). Any other policy (a bot, an ``openai:`` seat, a script, another
temperature) keeps the sampled figures.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

from tinker import types

from arena.policies import SamplerPolicy
from arena.renderers import ObservationFormat, RendererConfig, model_input, prompt_tokens
from arena.rollouts import TokenPolicy
from arena.seatview import SeatView
from games.api import Probe, Yardstick

logger = logging.getLogger("arena.scoring")


class ScoringClient(Protocol):
    """What scoring needs of a sampling client (``tinker.SamplingClient``, the local
    backend's): each prompt token's logprob given the tokens before it."""

    def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> Awaitable[list[float | None]]:
        """A future of the logprobs (None where not computed: the first token, and the
        tokens before the last ``prompt_logprobs_last_n``)."""
        ...


@dataclass(frozen=True)
class Scoring:
    """How to score a policy's answers."""

    client: ScoringClient
    max_tokens: int
    """The policy's answer length limit: an answer cut there is what it samples."""
    greedy: bool
    """The policy samples at temperature 0: it plays the likeliest move."""


def scoring_of(policy: TokenPolicy) -> Scoring | None:
    """How ``policy``'s answers are scored, or None when they cannot be (see the module
    docstring)."""
    if not isinstance(policy, SamplerPolicy):
        return None
    client = policy.client
    if not callable(getattr(client, "compute_logprobs", None)):
        return None
    if policy.temperature not in (0.0, 1.0):
        return None
    return Scoring(cast(ScoringClient, client), policy.max_tokens, policy.temperature == 0.0)


async def answer_logprob(
    client: ScoringClient, prompt: types.ModelInput, answer: list[int]
) -> float:
    """The sum of the logprobs of ``answer``'s tokens after ``prompt``.

    Raises ValueError when the client leaves one of them unscored, and what the client
    raises (a prompt longer than the model's context, say)."""
    tokens = [*prompt_tokens(prompt), *answer]
    logprobs = await client.compute_logprobs(
        model_input(tokens), prompt_logprobs_last_n=len(answer)
    )
    scored = list(logprobs)[len(tokens) - len(answer) :]
    if len(scored) != len(answer) or any(value is None for value in scored):
        raise ValueError(f"compute_logprobs left answer tokens unscored: {scored}")
    return float(sum(value for value in scored if value is not None))


async def move_probabilities(
    scoring: Scoring,
    game_id: str,
    probes: Mapping[str, Probe],
    renderer: RendererConfig,
    observation_format: ObservationFormat,
) -> dict[str, dict[str, float]]:
    """At each probe (by key), the probability the model gives each of its legal moves
    (by move text), asked with the prompt its seat sees in play; every answer is scored at
    once (a batching client serves them in shared passes). An answer longer than the
    policy's ``max_tokens`` is cut there, as sampling cuts it: it still gives the move when
    only its stop was cut, else the move has probability 0.

    Raises what ``answer_logprob`` raises."""
    built = renderer.build()

    async def one(probe: Probe, move: str) -> float:
        view = SeatView(probe.seat, game_id, built, observation_format)
        prompt = view.prompt(probe.messages, 0, list(probe.legal_moves))
        answer = view.answer_tokens(move)
        if len(answer) > scoring.max_tokens:
            cut = answer[: scoring.max_tokens]
            if view.move(cut) != view.move(answer):
                return 0.0
            answer = cut
        return math.exp(await answer_logprob(scoring.client, prompt, answer))

    asked = [(key, move) for key, probe in probes.items() for move in probe.legal_moves]
    values = await asyncio.gather(*(one(probes[key], move) for key, move in asked))
    out: dict[str, dict[str, float]] = {key: {} for key in probes}
    for (key, move), value in zip(asked, values, strict=True):
        out[key][move] = value
    return out


def argmax_policy(probabilities: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """The greedy policy of ``probabilities``: at each position all its legal probability
    on its likeliest move (the first listed of equals), so the legal mass stays the
    model's."""
    out: dict[str, dict[str, float]] = {}
    for key, moves in probabilities.items():
        best = max(moves, key=lambda move: moves[move], default=None)
        out[key] = {move: (sum(moves.values()) if move == best else 0.0) for move in moves}
    return out


async def exact_figures(
    policy: TokenPolicy,
    game_id: str,
    yardstick: Yardstick,
    renderer: RendererConfig,
    observation_format: ObservationFormat,
) -> dict[str, float] | None:
    """The yardstick's answer figures for ``policy`` from its exact probabilities at the
    probe positions (``Yardstick.from_probabilities``; the argmax policy's for a greedy
    one), or None when the policy or the yardstick cannot be scored, or scoring failed
    (logged): the caller then samples answers."""
    scoring = scoring_of(policy)
    if scoring is None or yardstick.from_probabilities is None or yardstick.probes is None:
        return None
    try:
        probabilities = await move_probabilities(
            scoring, game_id, yardstick.probes(game_id), renderer, observation_format
        )
    except Exception as exc:  # the sampled figure still measures the policy
        logger.warning(
            "%s: scoring the yardstick's answers failed (%s); sampling them", game_id, exc
        )
        return None
    if scoring.greedy:
        probabilities = argmax_policy(probabilities)
    return {
        name: float(value) for name, value in yardstick.from_probabilities(probabilities).items()
    }
