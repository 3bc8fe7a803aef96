"""Format warm-up: supervised steps on observations paired with random legal moves.

The local default model starts from random weights; a few hundred cross-entropy steps teach
it the answer format and the legal moves, so self-play starts from a policy that mostly
plays legal moves: the local stand-in for a pretrained base model.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Iterable, Sequence

import tinker
from tinker import types

from arena.envs import MatchGroupBuilder, PlayerEnv
from arena.match import MatchSettings
from arena.renderers import prompt_tokens
from arena.types import InitialObservationOverflow
from trainer.backend import TrainingClientLike
from trainer.data import weighted_tokens
from trainer.progress import ProgressFactory, no_bars


def answer_datum(prompt: Sequence[int], answer: Sequence[int]) -> types.Datum:
    """A cross-entropy datum that teaches ``answer`` after ``prompt``: the tokens shifted
    by one, weighted 1 on the answer's tokens and 0 on the prompt's."""
    tokens = [*prompt, *answer]
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(answer)
    return types.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData(
                data=tokens[1:], dtype="int64", shape=[len(tokens) - 1]
            ),
            "weights": types.TensorData(data=weights, dtype="float32", shape=[len(tokens) - 1]),
        },
    )


async def collect_examples(
    settings: MatchSettings | str,
    games: int,
    *,
    seed: int = 0,
    progress: ProgressFactory = no_bars,
) -> list[types.Datum]:
    """Cross-entropy datums: each turn's prompt followed by a random legal move, in
    ``games`` games played as ``settings`` says (a game id alone: its default settings in
    the compact view).

    Raises ValueError when the game does not list its legal moves.
    """
    if isinstance(settings, str):  # the compact view: what the built-in model plays in
        settings = MatchSettings(settings, observation_format="compact")
    bar = progress("warm-up data", games * settings.num_players, "seat")
    game_id = settings.game_id
    rng = random.Random(seed)
    builder = MatchGroupBuilder(
        settings,
        group_size=games,
        seed=seed,
        group_id="warmup",
        learner_name="random",  # the moves are random legal moves: recorded as the bot's
    )
    envs = [e for e in await builder.make_envs() if isinstance(e, PlayerEnv)]
    datums: list[types.Datum] = []

    async def play(env: PlayerEnv) -> None:
        initial = await env.initial_observation()
        if isinstance(initial, InitialObservationOverflow):
            return
        ob, _ = initial
        while True:
            legal = env.legal_moves
            if not legal:
                env.abort("no legal moves listed")
                raise ValueError(f"{game_id} does not list legal moves; no warm-up data")
            # the answer as the seat gives it (bare in the compact format), then its stop
            action = env.view.answer_tokens(rng.choice(legal))
            datums.append(answer_datum(prompt_tokens(ob), action))
            result = await env.step(action)
            ob = result.next_observation
            if result.episode_done:
                bar.update(1)
                return

    tasks = [asyncio.ensure_future(play(env)) for env in envs]
    try:
        await asyncio.gather(*tasks)
    finally:
        # One failure stops the others: no sibling is left running, no game left open.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await builder.cleanup()
        bar.close()
    return datums


async def warm_up(
    client: TrainingClientLike,
    examples: list[types.Datum],
    *,
    steps: int,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    seed: int = 0,
    progress: ProgressFactory = no_bars,
) -> list[float]:
    """Run ``steps`` cross-entropy steps on random mini-batches; returns the mean loss per
    action token of each step."""
    if not examples:
        raise ValueError("no warm-up examples")
    rng = random.Random(seed)
    batches = (rng.sample(examples, min(batch_size, len(examples))) for _ in range(steps))
    return await cross_entropy_steps(
        client, batches, steps=steps, learning_rate=learning_rate, progress=progress
    )


async def cross_entropy_steps(
    client: TrainingClientLike,
    batches: Iterable[list[types.Datum]],
    *,
    steps: int,
    learning_rate: float,
    progress: ProgressFactory = no_bars,
    label: str = "warm-up",
    on_step: Callable[[int, list[types.Datum], float], None] | None = None,
) -> list[float]:
    """One optimizer step (Adam at ``learning_rate``) of the ``cross_entropy`` loss on each
    of the first ``steps`` of ``batches`` (datums weighted on the tokens they teach:
    ``answer_datum``), with a bar labelled ``label``; ``on_step(i, batch, loss)`` after
    step ``i``. Returns the mean loss per weighted token of each step."""
    losses: list[float] = []
    adam = types.AdamParams(learning_rate=learning_rate)
    bar = progress(label, steps, "step")
    try:
        for i, batch in enumerate(itertools.islice(batches, steps)):
            fwd_bwd = client.forward_backward(batch, "cross_entropy")
            optim = client.optim_step(adam)
            output = await fwd_bwd
            await optim
            weight = weighted_tokens(batch)
            loss = float(output.metrics.get("loss:sum", 0.0))
            losses.append(loss / weight if weight else 0.0)
            if on_step is not None:
                on_step(i, batch, losses[-1])
            bar.update(1)
    finally:
        bar.close()
    return losses
