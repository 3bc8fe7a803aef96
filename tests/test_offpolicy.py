"""`arena train --offpolicy-from`: recorded games in RL. The pool holds the run's own
prompts and the recorded moves (as the supervised warm start reads them); each step adds
its share of them as datums whose logprobs are the learner's and whose advantage is the
centred outcome times the learner's clipped probability of the answer; draws repeat for a
seed; the share and the pool's limit hold; bad settings are one line; a short run charts
the ``offpolicy/...`` figures and finishes."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from arena.eventbus import EventBus
from arena.play import play_matches
from arena.renderers import RendererConfig, model_input
from storage import Recorder, open_database
from storage.export import ExportQuery, export_rows
from trainer.config import TrainConfig
from trainer.local import LocalModelConfig, create_local_sampling_client
from trainer.offpolicy import OffPolicyPool, answers_to_draw, clipped_weight
from trainer.scoring import answer_logprob
from trainer.sft import sft_datums
from trainer.train import Trainer

TTT = "TicTacToe-v0"
OPTIMAL = f"db:game={TTT},player=optimal"


async def _record(path: str) -> None:
    db = await open_database(path)
    bus = EventBus()
    async with Recorder(db, bus):
        await play_matches(TTT, ["optimal", "random"], 4, seed=0, bus=bus)
        await play_matches(TTT, ["random", "optimal"], 4, seed=50, bus=bus)
    await db.close()


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("offpolicy") / "arena.db")
    asyncio.run(_record(path))
    yield path


def config_for(db_path: str, **more: object) -> TrainConfig:
    """The built-in model's run (compact view) adding the perfect bot's answers."""
    settings = {"offpolicy_from": OPTIMAL, **more}
    return TrainConfig(db=db_path, **settings)  # type: ignore[arg-type]


def load(config: TrainConfig, **more: object) -> OffPolicyPool:
    pool = asyncio.run(OffPolicyPool.load(config, RendererConfig(), **more))  # type: ignore[arg-type]
    assert pool is not None
    return pool


async def _optimal_rewards(db_path: str) -> dict[tuple[str, int], float]:
    db = await open_database(db_path, read_only=True)
    try:
        query = ExportQuery(games=(TTT,), players=("optimal",), seat_player=True)
        return {(row.match_id, row.seat): row.reward async for row in export_rows(db, query)}  # type: ignore[misc]
    finally:
        await db.close()


def test_the_datums_are_the_runs_prompts_and_the_recorded_moves_weighted_by_the_learner(
    db_path: str,
) -> None:
    config = config_for(db_path, offpolicy_share=1.0, offpolicy_clip=0.3)
    pool = load(config)
    taught = asyncio.run(sft_datums(OPTIMAL, config, RendererConfig()))
    sft_examples = sorted(
        (
            tuple([*d.model_input.to_ints(), d.loss_fn_inputs["target_tokens"].data[-1]]),
            int(sum(d.loss_fn_inputs["weights"].data)),
        )
        for d in taught.datums
    )
    mine = sorted((a.prompt + a.answer, len(a.answer)) for a in pool.answers)
    assert mine == sft_examples and len(mine) == taught.answers > 8  # the same answers
    rewards = asyncio.run(_optimal_rewards(db_path))
    assert all(rewards[(a.match_id, a.seat)] == a.reward for a in pool.answers)
    assert {a.reward for a in pool.answers} <= {1.0, 0.0}  # the perfect bot never loses

    sampler = create_local_sampling_client(LocalModelConfig(seed=0))
    datums, metrics = asyncio.run(pool.step(sampler, step=0, own=8))
    drawn = pool.draw(0, 8)
    assert len(datums) == len(drawn) == metrics["offpolicy/answers"] == 8
    weights = []
    for datum, answer in zip(datums, drawn, strict=True):
        inputs = datum.loss_fn_inputs
        tokens = [*datum.model_input.to_ints(), inputs["target_tokens"].data[-1]]
        assert tokens == [*answer.prompt, *answer.answer]
        n = len(answer.answer)
        assert inputs["mask"].data == [0.0] * (len(tokens) - 1 - n) + [1.0] * n
        # By hand: the learner's probability of the answer, clipped, times the centred reward.
        logprob = asyncio.run(
            answer_logprob(sampler, model_input(list(answer.prompt)), list(answer.answer))
        )
        same = [a.reward for a in pool.answers if a.seat == answer.seat]
        weight = min(1.0, max(0.3, math.exp(logprob)))
        advantage = (answer.reward - sum(same) / len(same)) * weight
        assert inputs["advantages"].data[-n:] == pytest.approx([advantage] * n, abs=1e-6)
        assert set(inputs["advantages"].data[:-n]) == {0.0}
        assert sum(inputs["logprobs"].data[-n:]) == pytest.approx(logprob, abs=1e-4)
        weights.append(weight)
    assert metrics["offpolicy/weight_mean"] == pytest.approx(sum(weights) / 8, abs=1e-6)
    assert metrics["offpolicy/clipped"] == sum(w == 0.3 for w in weights) / 8
    assert metrics["offpolicy/advantage_mean_abs"] > 0


def test_the_share_and_the_pool_limit_hold_and_draws_repeat(db_path: str) -> None:
    assert [answers_to_draw(0.25, n) for n in (0, 1, 4, 10, 16)] == [0, 1, 1, 2, 4]
    assert answers_to_draw(0.0, 16) == 0
    assert clipped_weight(math.log(0.05), 0.2) == 0.2 and clipped_weight(-0.1, 0.2) < 1.0
    pool = load(config_for(db_path))
    small = load(config_for(db_path), max_answers=5)
    assert len(small.answers) == 5 and small.data.answers == len(pool.answers) > 5
    assert len(pool.draw(3, 16)) == 4 and len(small.draw(3, 400)) == 5
    again = load(config_for(db_path))
    assert [pool.draw(s, 16) for s in range(6)] == [again.draw(s, 16) for s in range(6)]
    assert len({tuple(a.match_id for a in pool.draw(s, 16)) for s in range(6)}) > 1
    other = load(config_for(db_path, seed=1))
    assert [pool.draw(s, 16) for s in range(6)] != [other.draw(s, 16) for s in range(6)]
    assert (
        asyncio.run(OffPolicyPool.load(config_for(db_path, offpolicy_share=0.0), RendererConfig()))
        is None
    )


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"offpolicy_share": 1.5}, "--offpolicy-share must be between 0 (off) and 1"),
        ({"offpolicy_share": -0.1}, "--offpolicy-share must be between 0 (off) and 1"),
        ({"offpolicy_clip": 2.0}, "--offpolicy-clip must be between 0 and 1"),
        ({"offpolicy_from": None, "offpolicy_seats": ("optimal",)}, "--offpolicy-seats"),
        ({"offpolicy_from": "db:gme=x"}, "--offpolicy-from 'db:gme=x': unknown key 'gme'"),
        ({"offpolicy_from": "db:game=Kuhn-v0"}, "is not a game of this run"),
        ({"offpolicy_from": "{file}"}, "an export file holds the full chat"),
    ],
)
def test_bad_settings_are_one_line(
    db_path: str, tmp_path: Path, settings: dict[str, object], says: str
) -> None:
    file = tmp_path / "rows.jsonl"
    file.write_text("")
    if settings.get("offpolicy_from") == "{file}":
        settings = {"offpolicy_from": str(file)}
    with pytest.raises(ValueError) as caught:
        config_for(db_path, **settings).validate()
    message = str(caught.value)
    assert message.startswith("--offpolicy-") and says in message and "\n" not in message


async def test_an_unknown_player_is_refused_before_the_run(db_path: str, tmp_path: Path) -> None:
    source = f"db:game={TTT},player=nobody"
    run = tmp_path / "run"
    config = TrainConfig(db=db_path, offpolicy_from=source, log_dir=str(run), eval_every=0)
    with pytest.raises(ValueError, match=r"^--offpolicy-from .*: no stored player .*nobody"):
        await Trainer(config).run()
    assert not (run / "config.json").exists()
    with pytest.raises(ValueError, match=r"^--offpolicy-from .*no answer to add"):
        await OffPolicyPool.load(
            TrainConfig(db=db_path, offpolicy_from=f"{OPTIMAL},result=loss"), RendererConfig()
        )


async def test_a_short_run_adds_recorded_answers_and_charts_them(
    db_path: str, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    config = TrainConfig(
        log_dir=str(run),
        num_batches=2,
        batch_size=4,
        group_size=2,
        eval_every=0,
        warmup_steps=0,
        db=db_path,
        offpolicy_from=OPTIMAL,
        offpolicy_share=0.5,
        drop_constant_reward_groups=False,  # every step has datums of its own
    )
    lines: list[str] = []
    records = await Trainer(config, report=lines.append).run()
    assert [r.step for r in records] == [0, 1]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        own = row["optim/datums"]
        assert own > 0 and row["offpolicy/answers"] == answers_to_draw(0.5, int(own))
        assert 0.2 <= row["offpolicy/weight_mean"] <= 1.0
        assert 0.0 <= row["offpolicy/clipped"] <= 1.0
        assert row["offpolicy/advantage_mean_abs"] >= 0.0
        assert row["train/taught"] == 1.0
    assert any(line.startswith("offpolicy: ") and " seats in 8 matches " in line for line in lines)
